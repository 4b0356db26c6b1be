// Ids typed by role (cpp/index.hpp): a role's id indexes only its own
// arrays (checked by the compiler, see the static_asserts), and an id out
// of range is caught in debug builds.
#include "index.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <type_traits>

namespace perseus {
namespace {

// Whether vec[key] compiles.
template <class Vec, class Key, class = void>
struct Subscriptable : std::false_type {};
template <class Vec, class Key>
struct Subscriptable<Vec, Key, std::void_t<decltype(std::declval<Vec&>()[std::declval<Key>()])>>
    : std::true_type {};

static_assert(Subscriptable<IdVector<ComputationId, int>, ComputationId>::value);
static_assert(!Subscriptable<IdVector<ComputationId, int>, Position>::value,
              "a position must not index a computation-keyed array");
static_assert(!Subscriptable<IdVector<Position, int>, ComputationId>::value);
static_assert(!Subscriptable<IdVector<FlowNode, int>, FlowArc>::value);
static_assert(!Subscriptable<IdVector<ComputationId, int>, Index>::value,
              "a raw int must not index a keyed array");
static_assert(!std::is_convertible_v<Index, ComputationId>, "construction from int is explicit");
static_assert(!std::is_convertible_v<ComputationId, Position>);
static_assert(sizeof(ComputationId) == sizeof(Index) && std::is_trivially_copyable_v<ComputationId>,
              "an id is a plain int32");

TEST(Index, IdsCompareAndIndexTheirOwnArrays) {
  IdVector<ComputationId, double> duration(3, 0.0);
  duration[ComputationId(2)] = 1.5;
  EXPECT_EQ(duration.raw()[2], 1.5);
  EXPECT_EQ(duration.next_key(), ComputationId(3));
  ComputationId i(1);
  ++i;
  EXPECT_EQ(i, ComputationId(2));
  EXPECT_LT(ComputationId(0), i);
  EXPECT_FALSE(ComputationId::none().valid());
  EXPECT_TRUE(ComputationId(0).valid());
}

TEST(Index, OutOfRangeIdsThrowInDebugBuilds) {
  if (!kPreconditionsChecked) GTEST_SKIP() << "an NDEBUG build: preconditions compile away";
  IdVector<Position, int> at(4, 0);
  EXPECT_THROW(at[Position(4)], std::logic_error);
  EXPECT_THROW(at[Position::none()], std::logic_error);
  EXPECT_THROW((void)ComputationId::none().index(), std::logic_error);
  try {
    at[Position(9)] = 1;
    FAIL() << "no throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace perseus
