// cpp/exhaustive.hpp: how many plans a pipeline has and when that is too
// many, and that the plans recorded are exactly the Pareto plans of all of
// them (against a pairwise-dominance check over every plan, written here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "exhaustive.hpp"
#include "plan_log.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

struct Tiny {
  Pipeline pipeline;
  Dag dag{pipeline};
  OptionTable table;
  Tiny(ScheduleKind kind, Index stages, Index microbatches, int clocks, unsigned seed)
      : pipeline(kind, stages, 1, microbatches), table([&] {
          std::mt19937 rng(seed);
          return test_support::table_from_raw(stages, test_support::random_sweeps(stages, clocks, rng),
                                              40.0);
        }()) {}
  double per_replay() const { return static_cast<double>(dag.num_nodes() + dag.num_edges()); }
};

TEST(AffordablePlanCount, CountsEveryPlanOrSaysTooMany) {
  Tiny t(ScheduleKind::OneFOneB, 2, 2, 3, 1);
  double plans = 1;
  for (Index i = 0; i < t.pipeline.size(); ++i)
    plans *= t.table.num_options(group_of(t.pipeline.computation(i)));
  const double work = plans * t.per_replay();
  EXPECT_EQ(affordable_plan_count(t.pipeline, t.dag, t.table, work), static_cast<std::int64_t>(plans));
  EXPECT_EQ(affordable_plan_count(t.pipeline, t.dag, t.table, work - 1), -1);
  EXPECT_EQ(affordable_plan_count(t.pipeline, t.dag, t.table, 0.0), -1);
  // A product far beyond 64 bits stops early, never overflows.
  Tiny big(ScheduleKind::OneFOneB, 8, 64, 6, 2);
  EXPECT_EQ(affordable_plan_count(big.pipeline, big.dag, big.table, 1e300), -1);
}

TEST(RecordEveryParetoPlan, KeepsExactlyThePlansNoOtherDominates) {
  for (const auto kind : {ScheduleKind::OneFOneB, ScheduleKind::GPipe}) {
    for (unsigned seed = 0; seed < 4; ++seed) {
      Tiny t(kind, 2, 2, 3 + static_cast<int>(seed % 2), seed);
      const std::int64_t count = affordable_plan_count(t.pipeline, t.dag, t.table, 1e12);
      ASSERT_GT(count, 0);
      PlanLog log(t.pipeline.size());
      std::vector<std::int64_t> ticks;
      record_every_pareto_plan(t.pipeline, t.dag, t.table, count, log,
                               [&](std::int64_t done, std::int64_t total) {
                                 EXPECT_EQ(total, count);
                                 ticks.push_back(done);
                               });
      ASSERT_FALSE(ticks.empty());
      EXPECT_EQ(ticks.front(), 0);
      // Every plan, enumerated here by its own odometer, replayed.
      Evaluator evaluator(t.pipeline, t.dag, t.table);
      const double blocking_w = evaluator.pipeline_blocking_w();
      const Index n = t.pipeline.size();
      std::vector<double> time_s, effective_j;
      std::vector<OptionIndex> choice(ix(n), 0);
      for (std::int64_t k = 0; k < count; ++k) {
        const Evaluation e = evaluator.evaluate(choice.data());
        time_s.push_back(e.iteration_time_s);
        effective_j.push_back(e.energy_j - blocking_w * e.iteration_time_s);
        for (Index i = n - 1; i >= 0; --i) {  // the other way round from the code's
          if (++choice[ix(i)] < t.table.num_options(group_of(t.pipeline.computation(i)))) break;
          choice[ix(i)] = 0;
        }
      }
      // Pareto (time, effective energy) points, with equal points counted once.
      std::vector<std::pair<double, double>> expected;
      for (std::size_t a = 0; a < time_s.size(); ++a) {
        bool dominated = false;
        for (std::size_t b = 0; b < time_s.size() && !dominated; ++b)
          dominated = time_s[b] <= time_s[a] && effective_j[b] <= effective_j[a] &&
                      (time_s[b] < time_s[a] || effective_j[b] < effective_j[a] || b < a);
        if (!dominated) expected.emplace_back(time_s[a], effective_j[a]);
      }
      std::sort(expected.begin(), expected.end());
      ASSERT_EQ(log.size(), expected.size()) << "seed " << seed;
      for (std::size_t k = 0; k < log.size(); ++k) {
        EXPECT_EQ(log.time_s(k), expected[k].first);
        EXPECT_NEAR(log.energy_j(k) - blocking_w * log.time_s(k), expected[k].second,
                    1e-12 * std::abs(expected[k].second));
      }
    }
  }
}

}  // namespace
}  // namespace perseus
