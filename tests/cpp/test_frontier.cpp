// solve_frontier (cpp/frontier.hpp) end to end on small pipelines: the
// frontier's shape, its fastest plan, replays of every plan, the outcome
// fields, argument checks, and cancellation from the hooks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "frontier.hpp"
#include "pacer.hpp"
#include "precondition.hpp"
#include "solve_parts.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

struct Case {
  Pipeline pipeline;
  Dag dag;
  OptionTable table;
  Case(const Pipeline& p, int clocks, unsigned seed)
      : pipeline(p), dag(pipeline), table([&] {
          std::mt19937 rng(seed);
          return test_support::table_from_raw(
              p.num_stages(), test_support::random_sweeps(p.num_stages(), clocks, rng), 70.0);
        }()) {}
};

SolverOptions fast_options() {
  SolverOptions options;
  options.unit_time_s = 0.01;
  // Small budgets: the test checks the frontier's shape, not its quality.
  options.budgets.local_search_work_floor = 2e5;
  options.budgets.local_search_work_cap = 2e5;
  return options;
}

void expect_valid_frontier(const Case& c, const FrontierResult& result) {
  const Index n = c.pipeline.size();
  ASSERT_EQ(result.num_computations, n);
  ASSERT_GE(result.num_plans(), 1);
  ASSERT_EQ(result.choices.size(), ix(result.num_plans()));
  ASSERT_EQ(result.choices.num_computations(), n);
  const std::vector<OptionIndex> rows = result.choices.dense();
  ASSERT_EQ(result.iteration_time_s.size(), ix(result.num_plans()));
  ASSERT_EQ(result.energy_j.size(), ix(result.num_plans()));
  ASSERT_EQ(result.energy_before_reclaim_j.size(), ix(result.num_plans()));
  Evaluator evaluator(c.pipeline, c.dag, c.table);
  const double blocking_w = evaluator.pipeline_blocking_w();
  for (Index k = 0; k < result.num_plans(); ++k) {
    const OptionIndex* plan = rows.data() + ix(k) * ix(n);
    for (Index i = 0; i < n; ++i) ASSERT_LT(plan[i], c.table.num_options(evaluator.group(i)));
    // Reported times and energies are the plan's replay.
    const Evaluation replayed = evaluator.evaluate(plan);
    EXPECT_DOUBLE_EQ(result.iteration_time_s[ix(k)], replayed.iteration_time_s) << "plan " << k;
    EXPECT_DOUBLE_EQ(result.energy_j[ix(k)], replayed.energy_j) << "plan " << k;
    if (k == 0) continue;
    // Strictly slower, and strictly cheaper in effective energy.
    EXPECT_GT(result.iteration_time_s[ix(k)], result.iteration_time_s[ix(k - 1)]) << "plan " << k;
    EXPECT_LT(result.energy_j[ix(k)] - blocking_w * result.iteration_time_s[ix(k)],
              result.energy_j[ix(k - 1)] - blocking_w * result.iteration_time_s[ix(k - 1)])
        << "plan " << k;
  }
  // The fastest plan runs at the all-fastest time, with no more energy.
  const std::vector<OptionIndex> fastest(ix(n), 0);
  const Evaluation baseline = evaluator.evaluate(fastest.data());
  EXPECT_DOUBLE_EQ(result.baseline.iteration_time_s, baseline.iteration_time_s);
  EXPECT_DOUBLE_EQ(result.baseline.energy_j, baseline.energy_j);
  EXPECT_DOUBLE_EQ(result.iteration_time_s.front(), baseline.iteration_time_s);
  EXPECT_LE(result.energy_j.front(), baseline.energy_j);
  // The slowest plan is at most the all-slowest plan's time.
  std::vector<OptionIndex> slowest(ix(n));
  for (Index i = 0; i < n; ++i)
    slowest[ix(i)] = static_cast<OptionIndex>(c.table.num_options(evaluator.group(i)) - 1);
  EXPECT_LE(result.iteration_time_s.back(),
            evaluator.evaluate(slowest.data()).iteration_time_s * (1 + 1e-12));
}

TEST(SolveFrontier, OneFOneBFrontierIsMonotoneAndStartsAtTheFastestTime) {
  const Case c(Pipeline(ScheduleKind::OneFOneB, 3, 1, 4), 6, 1);
  const FrontierResult result = solve_frontier(c.pipeline, c.dag, c.table, fast_options());
  expect_valid_frontier(c, result);
  EXPECT_GT(result.num_plans(), 2);
  EXPECT_EQ(result.stop_reason, StopReason::kMinimumTime);
  EXPECT_GT(result.steps, 0);
  EXPECT_GT(result.cuts, 0);
  EXPECT_LE(result.cuts, result.steps);
  EXPECT_GT(result.unit_time_s, 0.0);
  EXPECT_LE(result.unit_time_s, 0.01);
  EXPECT_GT(result.max_time_units, result.min_time_units);
  EXPECT_GE(result.candidates, result.num_plans());
}

TEST(SolveFrontier, OtherSchedulesAndPlainPhillipsDessouky) {
  for (const auto& [pipeline, refine] :
       {std::pair{Pipeline(ScheduleKind::GPipe, 2, 1, 3), true},
        std::pair{Pipeline(ScheduleKind::Interleaved1F1B, 2, 2, 4), true},
        std::pair{Pipeline(ScheduleKind::OneFOneB, 3, 1, 4), false}}) {
    const Case c(pipeline, 5, 2);
    SolverOptions options = fast_options();
    options.refine = refine;
    const FrontierResult result = solve_frontier(c.pipeline, c.dag, c.table, options);
    SCOPED_TRACE(schedule_name(pipeline.kind()));
    expect_valid_frontier(c, result);
  }
}

TEST(SolveFrontier, PlansDoNotDependOnTheThreadCount) {
  // 1: every job in turn on the caller's thread; 2, 3: the chains get
  // threads one by one; 4: the plain walk too (the refining quantum is finer
  // than the unit here, so that walk exists). Under TSan this is also the
  // run with every job on a thread of its own.
  const Case c(Pipeline(ScheduleKind::OneFOneB, 3, 1, 6), 6, 5);
  SolverOptions options = fast_options();
  options.threads = 1;
  const FrontierResult reference = solve_frontier(c.pipeline, c.dag, c.table, options);
  ASSERT_LT(reference.unit_time_s, options.unit_time_s);
  for (const int threads : {2, 3, 4}) {
    options.threads = threads;
    const FrontierResult other = solve_frontier(c.pipeline, c.dag, c.table, options);
    SCOPED_TRACE(threads);
    EXPECT_EQ(other.steps, reference.steps);
    EXPECT_EQ(other.cuts, reference.cuts);
    EXPECT_EQ(other.candidates, reference.candidates);
    EXPECT_EQ(other.choices.dense(), reference.choices.dense());
    EXPECT_EQ(other.iteration_time_s, reference.iteration_time_s);
    EXPECT_EQ(other.energy_j, reference.energy_j);
  }
  for (const int threads : {-1, 1025}) {
    options.threads = threads;
    EXPECT_THROW(check_options(options), std::invalid_argument) << threads;
  }
  options.threads = 0;
  EXPECT_EQ(solver_threads(options), SolverOptions::kDefaultThreads);
}

TEST(SolveFrontier, NothingToTradeIsRejected) {
  // One option per group: no computation has two durations.
  const Pipeline p(ScheduleKind::OneFOneB, 2, 1, 2);
  const Dag dag(p);
  const OptionTable table(2, {0, 1, 2, 3, 4}, {1, 2, 1, 2}, {10, 20, 30, 40}, 5.0);
  SolverOptions options = fast_options();
  EXPECT_THROW(solve_frontier(p, dag, table, options), std::invalid_argument);
}

TEST(SolveFrontier, RejectsBadArguments) {
  const Case c(Pipeline(ScheduleKind::OneFOneB, 2, 1, 2), 4, 3);
  for (const double unit :
       {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    SolverOptions options = fast_options();
    options.unit_time_s = unit;
    EXPECT_THROW(solve_frontier(c.pipeline, c.dag, c.table, options), std::invalid_argument) << unit;
  }
  // A profile of 2 stages for a pipeline of 3.
  const Pipeline three(ScheduleKind::OneFOneB, 3, 1, 2);
  const Dag dag(three);
  EXPECT_THROW(solve_frontier(three, dag, c.table, fast_options()), std::invalid_argument);
}

TEST(SolveFrontier, ProgressHookReturningFalseCancels) {
  const Case c(Pipeline(ScheduleKind::OneFOneB, 3, 1, 4), 6, 4);
  SolverOptions options = fast_options();
  options.progress_period_s = 0.0;  // report at every tick
  std::int64_t calls = 0;
  options.progress = [&](Phase, std::int64_t, std::int64_t, double) { return ++calls < 3; };
  EXPECT_THROW(solve_frontier(c.pipeline, c.dag, c.table, options), SolveCancelled);
  EXPECT_EQ(calls, 3);
}

class ProgressAtThreads : public ::testing::TestWithParam<int> {};

TEST_P(ProgressAtThreads, PhasesAndTheFractionNeverGoBack) {
  const Case c(Pipeline(ScheduleKind::OneFOneB, 3, 1, 4), 6, 5);
  SolverOptions options = fast_options();
  options.threads = GetParam();
  options.progress_period_s = 0.0;
  std::vector<Phase> phases;
  std::vector<double> fractions;
  options.progress = [&](Phase phase, std::int64_t done, std::int64_t, double fraction) {
    EXPECT_GE(done, 0);
    phases.push_back(phase);
    fractions.push_back(fraction);
    return true;
  };
  expect_valid_frontier(c, solve_frontier(c.pipeline, c.dag, c.table, options));
  ASSERT_FALSE(phases.empty());
  for (std::size_t k = 1; k < phases.size(); ++k) {
    EXPECT_LE(phases[k - 1], phases[k]);
    EXPECT_LE(fractions[k - 1], fractions[k]);
  }
  EXPECT_GE(fractions.front(), 0.0);
  EXPECT_LE(fractions.back(), 1.0);
  // The last reports come from the local search's last deadlines.
  EXPECT_GT(fractions.back(), 0.9);
}

INSTANTIATE_TEST_SUITE_P(OneToFour, ProgressAtThreads, ::testing::Values(1, 2, 3, 4));

TEST(SolveParts, EveryPartAdvancesTheFractionAndTheLastEndsIt) {
  for (int threads = 1; threads <= 4; ++threads) {
    SolveParts parts(true, threads);
    double last = 0.0;
    for (const SolvePart part :
         {SolvePart::kPlainWalk, SolvePart::kFineWalk, SolvePart::kPlainWalkRest,
          SolvePart::kReclaimedChain, SolvePart::kTightChain, SolvePart::kFastEnd,
          SolvePart::kPlainPlans, SolvePart::kSelection, SolvePart::kLocalSearch}) {
      parts.enter(part);
      EXPECT_NEAR(parts.fraction(0, 10), last, 1e-12) << threads;
      const double end = parts.fraction(10, 10);
      EXPECT_GE(end, last) << threads;
      last = end;
    }
    EXPECT_NEAR(last, 1.0, 1e-12) << threads;
  }
}

TEST(SolveParts, APredictedSearchTakesItsShareOfTheSolve) {
  for (const double search_s : {0.0, 0.1, 1.0, 9.0, 1e6}) {
    SolveParts parts(true, 1);
    parts.predict_search(search_s, 1.0);
    parts.enter(SolvePart::kLocalSearch);
    const double expected = std::clamp(search_s / (search_s + 1.0), 1e-3, 1 - 1e-3);
    EXPECT_NEAR(1.0 - parts.fraction(0, 1), expected, 1e-12) << search_s;
    EXPECT_NEAR(parts.fraction(1, 1), 1.0, 1e-12);
  }
}

TEST(SolveParts, APredictedSearchShareHoldsAfterASkippedPart) {
  SolveParts parts(true, 1);
  parts.predict_search(1.0, 1.0);
  parts.skip(SolvePart::kPlainWalk);
  parts.enter(SolvePart::kLocalSearch);
  EXPECT_NEAR(parts.fraction(0, 1), 0.5, 1e-12);
}

TEST(SolveParts, PartsOutOfOrderAreABugInDebugBuilds) {
  if (!kPreconditionsChecked) GTEST_SKIP() << "preconditions are checked in debug builds only";
  SolveParts parts(true, 4);
  parts.enter(SolvePart::kTightChain);
  EXPECT_THROW(parts.enter(SolvePart::kFineWalk), std::logic_error);
  EXPECT_THROW(parts.skip(SolvePart::kTightChain), std::logic_error);
}

TEST(SolveParts, AWalksEarlyUnitsCountForLittleTime) {
  SolveParts parts(false, 1);
  parts.enter(SolvePart::kUnrefinedWalk);
  const double walk = parts.fraction(1, 1);
  // Half the units: a fifth of the walk's time (kWalkTimeCurve).
  EXPECT_NEAR(parts.fraction(5, 10), 0.19 * walk, 1e-12);
  parts.enter(SolvePart::kUnrefinedPlans);
  const double plans = parts.fraction(1, 1) - walk;
  EXPECT_NEAR(parts.fraction(5, 10), walk + 0.5 * plans, 1e-12);
  parts.enter(SolvePart::kSelection);
  EXPECT_NEAR(parts.fraction(1, 1), 1.0, 1e-12);
}

TEST(SolveParts, ASkippedPartsShareGoesToTheOthers) {
  SolveParts parts(true, 1);
  parts.skip(SolvePart::kPlainWalk);
  parts.enter(SolvePart::kFineWalk);
  EXPECT_EQ(parts.fraction(0, 1), 0.0);
  parts.enter(SolvePart::kLocalSearch);
  EXPECT_NEAR(parts.fraction(1, 1), 1.0, 1e-12);
}

TEST(SolveFrontier, InterruptHookCancels) {
  const Case c(Pipeline(ScheduleKind::OneFOneB, 3, 1, 4), 6, 6);
  SolverOptions options = fast_options();
  options.interrupt_poll_s = 0.0;
  options.interrupted = [] { return true; };
  EXPECT_THROW(solve_frontier(c.pipeline, c.dag, c.table, options), SolveCancelled);
}

TEST(SolveFrontier, SameInputSamePlans) {
  const Case c(Pipeline(ScheduleKind::Interleaved1F1B, 2, 2, 4), 5, 7);
  const FrontierResult a = solve_frontier(c.pipeline, c.dag, c.table, fast_options());
  const FrontierResult b = solve_frontier(c.pipeline, c.dag, c.table, fast_options());
  EXPECT_EQ(a.choices.dense(), b.choices.dense());
  EXPECT_EQ(a.iteration_time_s, b.iteration_time_s);
  EXPECT_EQ(a.energy_j, b.energy_j);
}

}  // namespace
}  // namespace perseus
