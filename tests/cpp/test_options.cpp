// Options (cpp/options.hpp): the effective-energy filter, the option table's
// checks, and the quantised convex hull the min-cut loop works with.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "options.hpp"
#include "problem.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

using test_support::table_from_raw;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxDouble = std::numeric_limits<double>::max();

std::vector<Index> useful(const std::vector<double>& t, const std::vector<double>& e, double p) {
  return useful_options(t.data(), e.data(), static_cast<Index>(t.size()), p);
}

// --- useful_options ---------------------------------------------------------------------

TEST(UsefulOptions, WithoutBlockingPowerARawlyDominatedOptionGoes) {
  EXPECT_EQ(useful({1, 2, 3}, {10, 9, 9.5}, 0.0), (std::vector<Index>{0, 1}));
}

TEST(UsefulOptions, BlockingPowerKeepsSlowerOptionsThatUseALittleMoreEnergy) {
  // e - 1 W * t: 9, 7, 6.5 J: the slowest is cheaper than idling at 1 W.
  EXPECT_EQ(useful({1, 2, 3}, {10, 9, 9.5}, 1.0), (std::vector<Index>{0, 1, 2}));
  // At 0.4 W: 9.6, 8.2, 8.3 J: now it is not.
  EXPECT_EQ(useful({1, 2, 3}, {10, 9, 9.5}, 0.4), (std::vector<Index>{0, 1}));
}

TEST(UsefulOptions, ReturnsPositionsFastestFirstWhateverTheInputOrder) {
  EXPECT_EQ(useful({3, 1, 2}, {9.5, 10, 9}, 1.0), (std::vector<Index>{1, 2, 0}));
}

TEST(UsefulOptions, Ties) {
  // Equal in both: the one listed first stays.
  EXPECT_EQ(useful({1, 1, 2}, {5, 5, 4}, 0.0), (std::vector<Index>{0, 2}));
  EXPECT_EQ(useful({2, 1, 1}, {4, 5, 5}, 0.0), (std::vector<Index>{1, 0}));
  // Equal time: the cheaper one.
  EXPECT_EQ(useful({1, 1}, {6, 5}, 0.0), (std::vector<Index>{1}));
  // Slower at equal effective energy (2 J each at 1 W): not useful.
  EXPECT_EQ(useful({1, 2}, {3, 4}, 1.0), (std::vector<Index>{0}));
}

TEST(UsefulOptions, KeptOptionsAreStrictlyFasterAndStrictlyCostlierInTurn) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.1, 2.0), energy(1.0, 100.0), power(0.0, 80.0);
  for (int trial = 0; trial < 500; ++trial) {
    const auto count = static_cast<Index>(1 + rng() % 12);
    std::vector<double> t, e;
    for (Index k = 0; k < count; ++k) {
      // Few distinct values, so ties happen.
      t.push_back(std::round(time(rng) * 4) / 4 + 0.25);
      e.push_back(std::round(energy(rng) / 10) * 10 + 1);
    }
    const double p = power(rng);
    const auto kept = useful(t, e, p);
    ASSERT_FALSE(kept.empty());
    for (std::size_t k = 1; k < kept.size(); ++k) {
      EXPECT_LT(t[ix(kept[k - 1])], t[ix(kept[k])]);
      EXPECT_GT(e[ix(kept[k - 1])] - p * t[ix(kept[k - 1])], e[ix(kept[k])] - p * t[ix(kept[k])]);
    }
    // Every dropped option is matched by a kept one that is no slower and no costlier.
    for (Index j = 0; j < count; ++j) {
      bool covered = false;
      for (const Index k : kept)
        covered =
            covered || (t[ix(k)] <= t[ix(j)] && e[ix(k)] - p * t[ix(k)] <= e[ix(j)] - p * t[ix(j)]);
      EXPECT_TRUE(covered) << "option " << j << " of trial " << trial;
    }
  }
}

TEST(UsefulOptions, RejectsNonFiniteAndNonPositiveValues) {
  for (const double bad : {kNaN, kInf, -kInf, 0.0, -1.0}) {
    EXPECT_THROW(useful({1, bad}, {1, 1}, 0.0), std::invalid_argument) << bad;
    EXPECT_THROW(useful({1, 2}, {bad, 1}, 0.0), std::invalid_argument) << bad;
  }
}

// --- OptionTable ------------------------------------------------------------------------

// One stage, forward options t/e, backward a single (1 s, 1 J).
OptionTable one_stage(std::vector<double> t, std::vector<double> e, double p = 0.0) {
  const auto n = static_cast<Index>(t.size());
  t.push_back(1.0);
  e.push_back(1.0);
  return OptionTable(1, {0, n, n + 1}, t, e, p);
}

// A group id and an option index do not swap: groups are GroupIds.
static_assert(std::is_invocable_v<decltype(&OptionTable::time_s), const OptionTable&, GroupId, Index>);
static_assert(!std::is_invocable_v<decltype(&OptionTable::time_s), const OptionTable&, Index, Index>);
static_assert(!std::is_invocable_v<decltype(&OptionTable::num_options), const OptionTable&, Index>);

TEST(OptionTable, KeepsTimesEnergiesAndEffectiveEnergies) {
  const OptionTable table = one_stage({1, 2}, {10, 9}, 2.0);
  EXPECT_EQ(table.num_stages(), 1);
  EXPECT_EQ(table.num_groups(), 2);
  EXPECT_EQ(table.num_options(GroupId(0)), 2);
  EXPECT_EQ(table.num_options(GroupId(1)), 1);
  EXPECT_EQ(table.time_s(GroupId(0), 1), 2.0);
  EXPECT_EQ(table.energy_j(GroupId(0), 1), 9.0);
  EXPECT_EQ(table.effective_j(GroupId(0), 0), 8.0);
  EXPECT_EQ(table.effective_j(GroupId(0), 1), 5.0);
  if (kPreconditionsChecked) {  // an option past its group's last: caught in debug builds
    EXPECT_THROW((void)table.time_s(GroupId(1), 1), std::logic_error);
    EXPECT_THROW((void)table.time_s(GroupId(2), 0), std::logic_error);
  }
  EXPECT_EQ(table.blocking_power_w(), 2.0);
}

TEST(OptionTable, RejectsBadShapes) {
  EXPECT_THROW(OptionTable(0, {0}, {}, {}, 0.0), std::invalid_argument);
  EXPECT_THROW(OptionTable(1, {0, 1}, {1}, {1}, 0.0), std::invalid_argument);           // 2 groups
  EXPECT_THROW(OptionTable(1, {1, 1, 2}, {1, 1}, {1, 1}, 0.0), std::invalid_argument);  // front
  EXPECT_THROW(OptionTable(1, {0, 1, 3}, {1, 1}, {1, 1}, 0.0), std::invalid_argument);  // back
  EXPECT_THROW(OptionTable(1, {0, 1, 2}, {1, 1}, {1}, 0.0), std::invalid_argument);     // sizes
  EXPECT_THROW(OptionTable(1, {0, 0, 1}, {1}, {1}, 0.0), std::invalid_argument);        // empty group
}

TEST(OptionTable, RejectsOptionsThatAreNotTheUsefulOnesFastestFirst) {
  EXPECT_THROW(one_stage({2, 1}, {9, 10}), std::invalid_argument);  // slower first
  EXPECT_THROW(one_stage({1, 1}, {10, 9}), std::invalid_argument);  // equal times
  EXPECT_THROW(one_stage({1, 2}, {9, 9}), std::invalid_argument);   // not cheaper
  EXPECT_THROW(one_stage({1, 2}, {9, 10}), std::invalid_argument);  // costlier
  EXPECT_NO_THROW(one_stage({1, 2}, {9, 10}, 2.0));                 // 7 J, then 6 J at 2 W
}

TEST(OptionTable, RejectsNonFiniteAndNonPositiveValues) {
  for (const double bad : {kNaN, kInf, -kInf, 0.0, -1.0}) {
    EXPECT_THROW(one_stage({1, bad}, {10, 9}), std::invalid_argument) << bad;
    EXPECT_THROW(one_stage({1, 2}, {10, bad}), std::invalid_argument) << bad;
  }
  for (const double bad : {kNaN, kInf, -1.0})
    EXPECT_THROW(one_stage({1, 2}, {10, 9}, bad), std::invalid_argument) << bad;
}

TEST(OptionTable, RejectsMoreOptionsThanAnOptionIndexHolds) {
  std::vector<double> t, e;
  for (int k = 0; k < 65536; ++k) {
    t.push_back(1.0 + k);
    e.push_back(1e6 - k);
  }
  EXPECT_THROW(one_stage(t, e), std::invalid_argument);
  t.pop_back();
  e.pop_back();
  EXPECT_NO_THROW(one_stage(t, e));
}

TEST(OptionTable, RejectsAnEffectiveEnergyThatOverflows) {
  // 1.79e308 W * 2 s does not fit a double.
  EXPECT_THROW(one_stage({1, 2}, {10, 9}, kMaxDouble), std::invalid_argument);
  EXPECT_THROW(one_stage({1, 2}, {10, 9}, 1e308), std::invalid_argument);
}

// Values each finite on their own whose sums overflow: whatever stage
// rejects them, it throws std::invalid_argument and never crashes or returns
// a frontier of infinities or no plan at all.
struct OverflowCase {
  const char* name;
  double energy_j, blocking_power_w, time_s;
};

void expect_rejected_before_any_result(const OverflowCase& c) {
  {
    const Pipeline pipeline(ScheduleKind::OneFOneB, 2, 1, 2);
    std::vector<double> t, e;
    for (int k = 0; k < 4; ++k) {  // two options per group: fast, and slow and cheaper
      t.insert(t.end(), {c.time_s, 2 * c.time_s});
      e.insert(e.end(), {c.energy_j, c.energy_j * 0.75});
    }
    SolverOptions options;
    options.unit_time_s = c.time_s / 10;
    const auto build_and_solve = [&] {
      Problem problem(pipeline, {0, 2, 4, 6, 8}, t, e, c.blocking_power_w);
      const FrontierResult result = problem.solve(options);
      // Not reached when the core rejects the profile; if it is, say what came back.
      ADD_FAILURE() << c.name << ": " << result.num_plans() << " plans, first "
                    << (result.num_plans() > 0 ? result.energy_j[0] : kNaN) << " J";
    };
    EXPECT_THROW(build_and_solve(), std::invalid_argument) << c.name;
  }
}

TEST(OptionTable, OverflowingEnergiesThrowBeforeAnyResult) {
  expect_rejected_before_any_result({"energies near DBL_MAX", kMaxDouble, 0.0, 0.01});
  expect_rejected_before_any_result({"energies of 1e308 J", 1e308, 70.0, 0.01});
}

// Issue 11, Required 1 ("the core itself checks the overflow cases and
// throws"): a finite but huge blocking power passes the option table (each
// effective energy fits a double), so Problem must refuse it as a whole.
TEST(OptionTable, OverflowingBlockingPowerThrowsBeforeAnyResult) {
  expect_rejected_before_any_result({"blocking power of DBL_MAX", 2.0, kMaxDouble, 0.01});
  expect_rejected_before_any_result({"blocking power of 1e308 W", 2.0, 1e308, 0.01});
}

// --- QuantisedGroup ---------------------------------------------------------------------

// Forward: 1, 2, 3, 4 s at effective 10, 9, 2, 1.5 J (no blocking power).
// The point (2, 9) lies above the chord from (1, 10) to (3, 2): the hull is
// (1, 10), (3, 2), (4, 1.5).
OptionTable hull_table() { return one_stage({1, 2, 3, 4}, {10, 9, 2, 1.5}); }

TEST(QuantisedGroup, HullPointsAndCost) {
  const OptionTable table = hull_table();
  const QuantisedGroup q(table, GroupId(0), 1.0);
  EXPECT_EQ(q.min_duration(), 1);
  EXPECT_EQ(q.max_duration(), 4);
  EXPECT_DOUBLE_EQ(q.cost(1), 10.0);
  EXPECT_DOUBLE_EQ(q.cost(2), 6.0);  // on the chord, below the option's 9 J
  EXPECT_DOUBLE_EQ(q.cost(3), 2.0);
  EXPECT_DOUBLE_EQ(q.cost(4), 1.5);
  // cost(d) is defined on [min_duration, max_duration] only (the table has
  // no entries outside it).
}

// Beyond a range of 2^17 units the cost is not tabulated but found
// by bisection over the hull; it must agree with the same hull tabulated.
TEST(QuantisedGroup, BisectedCostMatchesTheTable) {
  const OptionTable table = hull_table();
  const QuantisedGroup small(table, GroupId(0), 1.0);
  const double unit = 1e-7;  // 1e7 .. 4e7 units: too wide to tabulate
  const QuantisedGroup wide(table, GroupId(0), unit);
  ASSERT_EQ(wide.min_duration(), 10000000);
  ASSERT_EQ(wide.max_duration(), 40000000);
  for (std::int64_t d = 1; d <= 4; ++d) {
    EXPECT_NEAR(wide.cost(d * 10000000), small.cost(d), 1e-9) << "d = " << d;
  }
  // Halfway between the hull points (1, 10) and (3, 2): 6 J, linear.
  EXPECT_NEAR(wide.cost(20000000), 6.0, 1e-9);
  EXPECT_NEAR(wide.cost(15000000), 8.0, 1e-9);
  EXPECT_NEAR(wide.cost(35000000), 1.75, 1e-9);
}

TEST(QuantisedGroup, OptionForAndOptionAtLeast) {
  const OptionTable table = hull_table();
  const QuantisedGroup q(table, GroupId(0), 1.0);
  // The slowest option that fits d ...
  EXPECT_EQ(q.option_for(0), 0);  // none fits: the fastest
  EXPECT_EQ(q.option_for(1), 0);
  EXPECT_EQ(q.option_for(2), 1);
  EXPECT_EQ(q.option_for(4), 3);
  EXPECT_EQ(q.option_for(100), 3);
  // ... and the fastest that takes at least d.
  EXPECT_EQ(q.option_at_least(0), 0);
  EXPECT_EQ(q.option_at_least(2), 1);
  EXPECT_EQ(q.option_at_least(4), 3);
  EXPECT_EQ(q.option_at_least(5), 3);  // none: the slowest
}

TEST(QuantisedGroup, Breakpoints) {
  const OptionTable table = hull_table();
  const QuantisedGroup q(table, GroupId(0), 1.0);
  EXPECT_EQ(q.breakpoint_below(1), 1);  // none below: min_duration
  EXPECT_EQ(q.breakpoint_below(2), 1);
  EXPECT_EQ(q.breakpoint_below(3), 1);  // strictly below
  EXPECT_EQ(q.breakpoint_below(4), 3);
  EXPECT_EQ(q.breakpoint_above(1), 3);  // 2 is not a breakpoint
  EXPECT_EQ(q.breakpoint_above(2), 3);
  EXPECT_EQ(q.breakpoint_above(3), 4);
  EXPECT_EQ(q.breakpoint_above(4), 4);  // none above: max_duration
}

TEST(QuantisedGroup, RoundsToTheNearestUnitHalvesUp) {
  const OptionTable table = hull_table();
  const QuantisedGroup q(table, GroupId(0), 2.0);  // 0.5, 1, 1.5, 2 units: 1, 1, 2, 2
  EXPECT_EQ(q.min_duration(), 1);
  EXPECT_EQ(q.max_duration(), 2);
  EXPECT_EQ(q.option_for(1), 1);  // the slowest of those that round to 1
  EXPECT_EQ(q.option_for(2), 3);
  EXPECT_EQ(q.option_at_least(2), 2);
  EXPECT_DOUBLE_EQ(q.cost(1), 9.0);  // one point per duration: its slowest option's
  EXPECT_DOUBLE_EQ(q.cost(2), 1.5);
  // A unit coarser than every option: one duration, never 0.
  const QuantisedGroup coarse(table, GroupId(0), 10.0);
  EXPECT_EQ(coarse.min_duration(), 1);
  EXPECT_EQ(coarse.max_duration(), 1);
  EXPECT_DOUBLE_EQ(coarse.cost(1), 1.5);
  EXPECT_EQ(coarse.option_for(1), 3);
  EXPECT_EQ(coarse.option_at_least(1), 0);
}

TEST(QuantisedGroup, RejectsMoreUnitsThanTheLoopCountsIn) {
  const OptionTable table = hull_table();
  EXPECT_THROW(QuantisedGroup(table, GroupId(0), 1e-16), std::invalid_argument);  // 4e16 > 2^52 units
  EXPECT_NO_THROW(QuantisedGroup(table, GroupId(0), 1e-15));                      // 4e15 < 2^52
}

TEST(QuantisedGroup, RandomHullsAreConvexAndBelowEveryOption) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 100; ++trial) {
    const OptionTable table =
        table_from_raw(1, test_support::random_sweeps(1, 2 + static_cast<int>(rng() % 10), rng), 40.0);
    const double unit = std::uniform_real_distribution<double>(0.005, 0.2)(rng);
    for (GroupId g(0); g.value() < table.num_groups(); ++g) {
      const QuantisedGroup q(table, g, unit);
      for (Index k = 0; k < table.num_options(g); ++k) {
        const auto d =
            static_cast<std::int64_t>(std::max(1.0, std::floor(table.time_s(g, k) / unit + 0.5)));
        EXPECT_LE(q.cost(d), table.effective_j(g, k) + 1e-9) << "trial " << trial;
        EXPECT_LE(table.time_s(g, q.option_for(d)) / unit, static_cast<double>(d) + 0.5 + 1e-9);
      }
      double previous_slope = -kInf;
      for (std::int64_t d = q.min_duration(); d < q.max_duration(); ++d) {
        const double slope = q.cost(d + 1) - q.cost(d);
        EXPECT_LE(slope, 1e-9) << "cost rises at " << d << " in trial " << trial;
        EXPECT_GE(slope, previous_slope - 1e-9) << "not convex at " << d << " in trial " << trial;
        previous_slope = slope;
        // Linear between the breakpoints around d.
        const std::int64_t lo = q.breakpoint_below(d + 1), hi = q.breakpoint_above(d);
        ASSERT_LE(lo, d);
        ASSERT_GE(hi, d + 1);
        const double chord = q.cost(lo) + (q.cost(hi) - q.cost(lo)) * static_cast<double>(d - lo) /
                                              static_cast<double>(hi - lo);
        EXPECT_NEAR(q.cost(d), chord, 1e-9 * (1 + std::abs(chord)));
      }
      // The ends are options' own costs.
      EXPECT_DOUBLE_EQ(q.cost(q.min_duration()), table.effective_j(g, q.option_for(q.min_duration())));
      EXPECT_DOUBLE_EQ(q.cost(q.max_duration()), table.effective_j(g, table.num_options(g) - 1));
    }
  }
}

}  // namespace
}  // namespace perseus
