// SolverBudgets' local-search budget: the floor's shape around its peak, the
// per-element share and its cap.
#include <gtest/gtest.h>

#include "solver_options.hpp"

namespace perseus {
namespace {

// Elements of a 1F1B pipeline are about three per computation; these tests
// pass few enough that the floor decides, or many enough that the share does.
constexpr double kFewElements = 1.0;
// A clock table with this many useful options per group is not coarse.
constexpr double kFine = 50.0;

TEST(LocalSearchBudget, FloorPeaksAtItsComputationCount) {
  const SolverBudgets b;
  const double peak = local_search_budget(b.local_search_floor_computations, kFewElements, kFine, b);
  EXPECT_DOUBLE_EQ(peak, b.local_search_work_floor);
  // Above the peak, the power local_search_floor_exponent of the ratio.
  EXPECT_DOUBLE_EQ(local_search_budget(128, kFewElements, kFine, b), b.local_search_work_floor / 8);
  EXPECT_NEAR(local_search_budget(192, kFewElements, kFine, b), b.local_search_work_floor / 27, 1e-6);
  // Below it, linearly (local_search_floor_exponent_below = 1).
  EXPECT_DOUBLE_EQ(local_search_budget(32, kFewElements, kFine, b), b.local_search_work_floor / 2);
  EXPECT_DOUBLE_EQ(local_search_budget(16, kFewElements, kFine, b), b.local_search_work_floor / 4);
  // The floor may exceed the cap, which bounds the per-element share only.
  EXPECT_GT(peak, b.local_search_work_cap);
}

TEST(LocalSearchBudget, LargePipelinesGetTheirPerElementShareUpToTheCap) {
  const SolverBudgets b;
  EXPECT_DOUBLE_EQ(local_search_budget(4096, 12000, kFine, b), b.local_search_work_per_element * 12000);
  EXPECT_DOUBLE_EQ(local_search_budget(32768, 1e5, kFine, b), b.local_search_work_cap);
}

TEST(LocalSearchBudget, ExponentsAreKnobs) {
  SolverBudgets b;
  b.local_search_floor_exponent = 2.0;
  b.local_search_floor_exponent_below = 0.0;
  EXPECT_DOUBLE_EQ(local_search_budget(128, kFewElements, kFine, b), b.local_search_work_floor / 4);
  EXPECT_DOUBLE_EQ(local_search_budget(8, kFewElements, kFine, b), b.local_search_work_floor);
  EXPECT_DOUBLE_EQ(local_search_budget(0, kFewElements, kFine, b),
                   b.local_search_work_floor);  // no DAG
}

TEST(LocalSearchBudget, CoarseTablesGetMorePerElement) {
  const SolverBudgets b;
  const double elements = 750.0;  // with 512 computations the floor is below the share
  const double fine = local_search_budget(512, elements, kFine, b);
  EXPECT_DOUBLE_EQ(fine, b.local_search_work_per_element * elements);
  // At the threshold and above nothing changes; 8 options: (24 / 8)^3 = 27 times.
  EXPECT_DOUBLE_EQ(local_search_budget(512, elements, b.local_search_coarse_options, b), fine);
  EXPECT_DOUBLE_EQ(local_search_budget(512, elements, 8, b), 27 * fine);
  // Still bounded by the cap.
  EXPECT_DOUBLE_EQ(local_search_budget(16384, 50000, 4, b), b.local_search_work_cap);
}

}  // namespace
}  // namespace perseus
