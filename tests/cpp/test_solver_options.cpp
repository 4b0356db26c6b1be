// SolverBudgets' local-search budget: the floor's shape around its peak, the
// per-element share and its cap.
#include <gtest/gtest.h>

#include "solver_options.hpp"

namespace perseus {
namespace {

// Elements of a 1F1B pipeline are about three per computation; these tests
// pass few enough that the floor decides, or many enough that the share does.
constexpr double kFewElements = 1.0;

TEST(LocalSearchBudget, FloorPeaksAtItsComputationCount) {
  const SolverBudgets b;
  const double peak = local_search_budget(b.local_search_floor_computations, kFewElements, b);
  EXPECT_DOUBLE_EQ(peak, b.local_search_work_floor);
  // Above the peak, the power local_search_floor_exponent of the ratio.
  EXPECT_DOUBLE_EQ(local_search_budget(128, kFewElements, b), b.local_search_work_floor / 8);
  EXPECT_NEAR(local_search_budget(192, kFewElements, b), b.local_search_work_floor / 27, 1e-6);
  // Below it, linearly (local_search_floor_exponent_below = 1).
  EXPECT_DOUBLE_EQ(local_search_budget(32, kFewElements, b), b.local_search_work_floor / 2);
  EXPECT_DOUBLE_EQ(local_search_budget(16, kFewElements, b), b.local_search_work_floor / 4);
  // The floor may exceed the cap, which bounds the per-element share only.
  EXPECT_GT(peak, b.local_search_work_cap);
}

TEST(LocalSearchBudget, LargePipelinesGetTheirPerElementShareUpToTheCap) {
  const SolverBudgets b;
  EXPECT_DOUBLE_EQ(local_search_budget(4096, 12000, b), b.local_search_work_per_element * 12000);
  EXPECT_DOUBLE_EQ(local_search_budget(32768, 1e5, b), b.local_search_work_cap);
}

TEST(LocalSearchBudget, ExponentsAreKnobs) {
  SolverBudgets b;
  b.local_search_floor_exponent = 2.0;
  b.local_search_floor_exponent_below = 0.0;
  EXPECT_DOUBLE_EQ(local_search_budget(128, kFewElements, b), b.local_search_work_floor / 4);
  EXPECT_DOUBLE_EQ(local_search_budget(8, kFewElements, b), b.local_search_work_floor);
  EXPECT_DOUBLE_EQ(local_search_budget(0, kFewElements, b), b.local_search_work_floor);  // no DAG
}

}  // namespace
}  // namespace perseus
