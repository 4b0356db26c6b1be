// One step of Phillips-Dessouky (cpp/phillips_dessouky.hpp) at a time, on
// networks small enough to work out by hand: which computations a cut
// shortens, by how many units a multi-unit step goes, the model cost after
// it, and how the loop ends. A brute-force oracle then checks every unit's
// plan on random small pipelines against the cheapest durations that meet
// that time, found by enumerating every duration vector (it knows nothing of
// cuts or flows). Only the public interface is used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "dag.hpp"
#include "options.hpp"
#include "pacer.hpp"
#include "phillips_dessouky.hpp"
#include "pipeline.hpp"
#include "solver_options.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

using test_support::RawOption;
using Units = PhillipsDessouky::Units;

struct Net {
  Pipeline pipeline;
  Dag dag;
  OptionTable table;
  // raw[g] holds group g = 2 * stage + instruction; no blocking power unless
  // given, so a duration's cost is its option's energy.
  Net(const Pipeline& p, const std::vector<std::vector<RawOption>>& raw, double blocking_w = 0.0)
      : pipeline(p),
        dag(pipeline),
        table(test_support::table_from_raw(p.num_stages(), raw, blocking_w)) {}
};

// Follows the loop's plans through the public cursor: after each step, the
// durations of the newest plan. Single-threaded, so it only advances over
// units the loop has already taken (has_next would wait for more).
class Walk {
 public:
  explicit Walk(const PhillipsDessouky& pd) : pd_(pd) { pd_.first_plan(durations_, cursor_); }
  // Plans after every unit taken since the last call, oldest first.
  std::vector<std::vector<Units>> catch_up() {
    std::vector<std::vector<Units>> plans;
    for (; seen_ < pd_.units_done(); ++seen_) {
      pd_.advance(cursor_, durations_, changed_);
      plans.push_back(durations_);
    }
    return plans;
  }
  const std::vector<Units>& durations() const { return durations_; }

 private:
  const PhillipsDessouky& pd_;
  PhillipsDessouky::Cursor cursor_;
  std::vector<Units> durations_;
  std::vector<Index> changed_;
  Units seen_ = 0;
};

double model_cost(const PhillipsDessouky& pd, const std::vector<Units>& durations) {
  double sum = 0.0;
  for (Index i = 0; i < pd.num_computations(); ++i) sum += pd.model_cost(i, durations[ix(i)]);
  return sum;
}

// Longest path through the DAG with these durations, computed here.
Units makespan(const Dag& dag, const std::vector<Units>& durations) {
  std::vector<Units> finish(ix(dag.num_nodes()), 0);
  Units longest = 0;
  for (const ComputationId v : dag.topological_order()) {
    Units start = 0;
    for (const ComputationId* p = dag.predecessors_begin(v); p != dag.predecessors_end(v); ++p)
      start = std::max(start, finish[p->index()]);
    finish[v.index()] = start + durations[v.index()];
    longest = std::max(longest, finish[v.index()]);
  }
  return longest;
}

SolverBudgets budgets_with(bool multi_unit) {
  SolverBudgets budgets;
  budgets.multi_unit_steps = multi_unit;
  return budgets;
}

// Two computations in series, F -> B (one GPU, one microbatch), unit 1 s:
//   F: durations 2, 3, 4 costing 10, 7, 6 (convex: 3 J then 1 J per unit saved);
//   B: durations 1 and 3 costing 20 and 10 (the hull makes 2 cost 15: 5 J per unit).
// Start F=4, B=3 (T=7, 16 J). The cheapest unit is always F's while F has
// range (1 J, then 3 J), then B's two units at 5 J in one multi-unit step.
Net series_net() {
  return Net(Pipeline(ScheduleKind::GPipe, 1, 1, 1),
             {{{2.0, 10.0}, {3.0, 7.0}, {4.0, 6.0}}, {{1.0, 20.0}, {3.0, 10.0}}});
}

TEST(PhillipsDessouky, SeriesStepsTakeTheCheapestUnitFirst) {
  const Net net = series_net();
  const SolverBudgets budgets = budgets_with(true);
  PhillipsDessouky pd(net.pipeline, net.dag, net.table, 1.0, budgets);
  const Index f = net.pipeline.id_of(0, 0, Instruction::Forward);
  const Index b = net.pipeline.id_of(0, 0, Instruction::Backward);
  ASSERT_EQ(pd.num_computations(), 2);
  EXPECT_EQ(pd.max_units(), 7);
  EXPECT_EQ(pd.min_units(), 3);
  Walk walk(pd);
  EXPECT_EQ(walk.durations()[ix(f)], 4);
  EXPECT_EQ(walk.durations()[ix(b)], 3);
  EXPECT_DOUBLE_EQ(model_cost(pd, walk.durations()), 16.0);

  // Cut 1: F 4 -> 3 at 1 J. F's cost bends at 3, so the step stops there.
  ASSERT_EQ(pd.step(), StepStatus::kShortened);
  EXPECT_EQ(pd.units_done(), 1);
  EXPECT_EQ(pd.num_cuts(), 1);
  walk.catch_up();
  EXPECT_EQ(walk.durations()[ix(f)], 3);
  EXPECT_EQ(walk.durations()[ix(b)], 3);
  EXPECT_DOUBLE_EQ(model_cost(pd, walk.durations()), 17.0);

  // Cut 2: F 3 -> 2 at 3 J, cheaper than B's 5 J.
  ASSERT_EQ(pd.step(), StepStatus::kShortened);
  EXPECT_EQ(pd.units_done(), 2);
  walk.catch_up();
  EXPECT_EQ(walk.durations()[ix(f)], 2);
  EXPECT_EQ(walk.durations()[ix(b)], 3);
  EXPECT_DOUBLE_EQ(model_cost(pd, walk.durations()), 20.0);

  // Cut 3: F is at its shortest; B takes both units of its linear piece at once.
  ASSERT_EQ(pd.step(), StepStatus::kShortened);
  EXPECT_EQ(pd.units_done(), 4);
  EXPECT_EQ(pd.num_cuts(), 3);
  const auto plans = walk.catch_up();
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0][ix(b)], 2);  // the unit in between is a plan of its own
  EXPECT_DOUBLE_EQ(model_cost(pd, plans[0]), 25.0);
  EXPECT_EQ(walk.durations()[ix(f)], 2);
  EXPECT_EQ(walk.durations()[ix(b)], 1);
  EXPECT_DOUBLE_EQ(model_cost(pd, walk.durations()), 30.0);

  // Every computation is at its shortest: the cut is infinite, and stays so.
  EXPECT_EQ(pd.step(), StepStatus::kMinimumTime);
  EXPECT_EQ(pd.step(), StepStatus::kMinimumTime);
  EXPECT_EQ(pd.units_done(), 4);
  EXPECT_EQ(pd.num_cuts(), 3);
}

TEST(PhillipsDessouky, SingleUnitStepsVisitTheSamePlans) {
  const Net net = series_net();
  const SolverBudgets budgets = budgets_with(false);
  PhillipsDessouky pd(net.pipeline, net.dag, net.table, 1.0, budgets);
  const Index b = net.pipeline.id_of(0, 0, Instruction::Backward);
  Walk walk(pd);
  const std::vector<double> costs{17.0, 20.0, 25.0, 30.0};
  for (std::size_t k = 0; k < costs.size(); ++k) {
    ASSERT_EQ(pd.step(), StepStatus::kShortened) << "step " << k;
    EXPECT_EQ(pd.units_done(), static_cast<Units>(k + 1));
    EXPECT_EQ(pd.num_cuts(), static_cast<std::int64_t>(k + 1));  // one cut per unit
    ASSERT_EQ(walk.catch_up().size(), 1u);
    EXPECT_DOUBLE_EQ(model_cost(pd, walk.durations()), costs[k]) << "step " << k;
  }
  EXPECT_EQ(walk.durations()[ix(b)], 1);
  EXPECT_EQ(pd.step(), StepStatus::kMinimumTime);
}

// Two GPUs, two microbatches, GPipe. Forwards have one option (1 s), so only
// the backwards move. Their DAG is a diamond:
//   B(1,0) -> { B(1,1), B(0,0) } -> B(0,1)
// (B(1,0) precedes B(1,1) on GPU 1 and B(0,0) by data; both precede B(0,1)).
// Stage 1's backward costs 1 J per unit saved, stage 0's 2 J, each from 3 s
// down to 1 s. The cheapest cuts, in order: {B(1,0)} at 1 J (two units),
// {B(0,1)} at 2 J (two units), then the parallel pair {B(1,1), B(0,0)} at
// 3 J together (two units): shortening only one of them shortens nothing.
TEST(PhillipsDessouky, ParallelPathsAreCutTogether) {
  const Net net(Pipeline(ScheduleKind::GPipe, 2, 1, 2),
                {{{1.0, 5.0}}, {{1.0, 10.0}, {3.0, 6.0}}, {{1.0, 5.0}}, {{1.0, 10.0}, {3.0, 8.0}}});
  const SolverBudgets budgets = budgets_with(true);
  PhillipsDessouky pd(net.pipeline, net.dag, net.table, 1.0, budgets);
  const Pipeline& p = net.pipeline;
  const Index b10 = p.id_of(1, 0, Instruction::Backward), b11 = p.id_of(1, 1, Instruction::Backward);
  const Index b00 = p.id_of(0, 0, Instruction::Backward), b01 = p.id_of(0, 1, Instruction::Backward);
  // Forwards: F(0,0) -> {F(0,1), F(1,0)} -> F(1,1), 3 s; backwards 3 x 3 s.
  EXPECT_EQ(pd.max_units(), 12);
  EXPECT_EQ(pd.min_units(), 6);
  Walk walk(pd);
  const double start_j = model_cost(pd, walk.durations());

  struct Expected {
    std::vector<Index> moved;  // now at 1 s
    double extra_j;            // over the start
  };
  const std::vector<Expected> cuts{{{b10}, 2.0}, {{b10, b01}, 6.0}, {{b10, b01, b11, b00}, 12.0}};
  for (std::size_t k = 0; k < cuts.size(); ++k) {
    ASSERT_EQ(pd.step(), StepStatus::kShortened) << "cut " << k;
    EXPECT_EQ(pd.num_cuts(), static_cast<std::int64_t>(k + 1));
    EXPECT_EQ(pd.units_done(), static_cast<Units>(2 * (k + 1)));  // each cut takes two units
    const auto plans = walk.catch_up();
    ASSERT_EQ(plans.size(), 2u) << "cut " << k;
    for (const Index i : {b10, b11, b00, b01}) {
      const bool moved =
          std::find(cuts[k].moved.begin(), cuts[k].moved.end(), i) != cuts[k].moved.end();
      EXPECT_EQ(walk.durations()[ix(i)], moved ? 1 : 3) << "cut " << k << ", computation " << i;
    }
    EXPECT_DOUBLE_EQ(model_cost(pd, walk.durations()) - start_j, cuts[k].extra_j) << "cut " << k;
    EXPECT_EQ(makespan(net.dag, walk.durations()), pd.max_units() - pd.units_done());
  }
  EXPECT_EQ(pd.step(), StepStatus::kMinimumTime);
}

TEST(PhillipsDessouky, RunClosesTheLogAndReportsTheStop) {
  const Net net = series_net();
  const SolverBudgets budgets = budgets_with(true);
  PhillipsDessouky pd(net.pipeline, net.dag, net.table, 1.0, budgets);
  SolverOptions options;
  Pacer pacer(options);
  EXPECT_EQ(pd.run(pacer), StopReason::kMinimumTime);
  EXPECT_EQ(pd.units_done(), pd.max_units() - pd.min_units());
  // The log is closed: a reader sees exactly the units taken, then the end
  // (has_next would wait forever on an open log).
  std::vector<Units> durations;
  std::vector<Index> changed;
  PhillipsDessouky::Cursor cursor;
  pd.first_plan(durations, cursor);
  Units plans = 0;
  while (pd.has_next(cursor)) {
    pd.advance(cursor, durations, changed);
    ++plans;
  }
  EXPECT_EQ(plans, pd.units_done());
  EXPECT_THROW(pd.advance(cursor, durations, changed), std::logic_error);
}

TEST(PhillipsDessouky, CancellingTheRunClosesTheLog) {
  const Net net = series_net();
  const SolverBudgets budgets = budgets_with(true);
  PhillipsDessouky pd(net.pipeline, net.dag, net.table, 1.0, budgets);
  SolverOptions options;
  options.interrupted = [] { return true; };  // polled before the first step
  Pacer pacer(options);
  EXPECT_THROW(pd.run(pacer), SolveCancelled);
  EXPECT_EQ(pd.units_done(), 0);
  std::vector<Units> durations;
  PhillipsDessouky::Cursor cursor;
  pd.first_plan(durations, cursor);
  EXPECT_FALSE(pd.has_next(cursor));  // returns at once: the log is closed
}

TEST(PhillipsDessouky, RejectsAUnitThatLeavesNothingToChoose) {
  const Net net = series_net();
  const SolverBudgets budgets;
  // At 100 s every option rounds to one unit.
  EXPECT_THROW(PhillipsDessouky(net.pipeline, net.dag, net.table, 100.0, budgets),
               std::invalid_argument);
  const Net single(Pipeline(ScheduleKind::GPipe, 1, 1, 1), {{{1.0, 5.0}}, {{2.0, 5.0}}});
  EXPECT_THROW(PhillipsDessouky(single.pipeline, single.dag, single.table, 1.0, budgets),
               std::invalid_argument);
}

// Every duration vector of a small problem, by brute force: the least model
// cost of any vector whose makespan is at most T, for every T.
std::vector<double> cheapest_per_makespan(const PhillipsDessouky& pd, const Dag& dag,
                                          const std::vector<Units>& shortest,
                                          const std::vector<Units>& longest) {
  const std::size_t n = shortest.size();
  std::vector<double> best(ix(pd.max_units() + 1), std::numeric_limits<double>::infinity());
  std::vector<Units> d(shortest);
  while (true) {
    const Units t = makespan(dag, d);
    const double c = model_cost(pd, d);
    if (c < best[ix(t)]) best[ix(t)] = c;
    std::size_t k = 0;  // next vector, odometer style
    while (k < n && d[k] == longest[k]) d[k] = shortest[k], ++k;
    if (k == n) break;
    ++d[k];
  }
  for (std::size_t t = 1; t < best.size(); ++t) best[t] = std::min(best[t], best[t - 1]);
  return best;
}

// What one walk of the loop did that the oracle should have seen.
struct Seen {
  int lengthened = 0;       // computations a unit made longer
  int multi_unit_runs = 0;  // cuts that took more than one unit
};

// Steps the loop to its end, checking every unit's plan against the brute
// force: its makespan, its durations' ranges, and its model cost.
void expect_every_plan_cheapest(const Net& net, bool multi_unit, Seen& seen, const char* label) {
  const SolverBudgets budgets = budgets_with(multi_unit);
  PhillipsDessouky pd(net.pipeline, net.dag, net.table, 1.0, budgets);
  // Each computation's duration range, from its group's quantised view.
  const Index n = pd.num_computations();
  std::vector<Units> shortest(ix(n)), longest(ix(n));
  for (Index i = 0; i < n; ++i) {
    const QuantisedGroup q(net.table, group_of(net.pipeline.computation(i)), 1.0);
    shortest[ix(i)] = q.min_duration();
    longest[ix(i)] = q.max_duration();
  }
  const std::vector<double> best = cheapest_per_makespan(pd, net.dag, shortest, longest);
  EXPECT_EQ(pd.min_units(), makespan(net.dag, shortest)) << label;
  EXPECT_EQ(pd.max_units(), makespan(net.dag, longest)) << label;

  Walk walk(pd);
  StepStatus status;
  while ((status = pd.step()) == StepStatus::kShortened) {
    std::vector<Units> previous = walk.durations();
    const auto plans = walk.catch_up();
    if (plans.size() > 1) ++seen.multi_unit_runs;
    if (!multi_unit) {
      EXPECT_EQ(plans.size(), 1u) << label;
    }
    for (const auto& plan : plans) {
      for (Index i = 0; i < n; ++i) {
        ASSERT_GE(plan[ix(i)], shortest[ix(i)]) << label;
        ASSERT_LE(plan[ix(i)], longest[ix(i)]) << label;
        if (plan[ix(i)] > previous[ix(i)]) ++seen.lengthened;
      }
      previous = plan;
    }
    const Units t = makespan(net.dag, walk.durations());
    ASSERT_EQ(t, pd.max_units() - pd.units_done()) << label;
    // Each plan of the run is optimal at its own time, not only the last.
    Units u = t + static_cast<Units>(plans.size());
    for (const auto& plan : plans) {
      --u;
      EXPECT_EQ(makespan(net.dag, plan), u) << label;
      EXPECT_NEAR(model_cost(pd, plan), best[ix(u)], 1e-9 * best[ix(u)])
          << label << (multi_unit ? ", multi-unit" : ", single-unit") << ", time " << u;
    }
  }
  EXPECT_EQ(status, StepStatus::kMinimumTime) << label;
  EXPECT_EQ(pd.units_done(), pd.max_units() - pd.min_units()) << label;
}

TEST(PhillipsDessouky, EveryUnitsPlanIsTheCheapestForItsTime) {
  std::mt19937 rng(27);
  std::uniform_real_distribution<double> first_j(20.0, 40.0), saving_j(0.3, 6.0);
  Seen seen;
  for (int trial = 0; trial < 18; ++trial) {
    const Pipeline pipeline = trial % 3 == 0   ? Pipeline(ScheduleKind::GPipe, 2, 1, 2)
                              : trial % 3 == 1 ? Pipeline(ScheduleKind::OneFOneB, 2, 1, 3)
                                               : Pipeline(ScheduleKind::OneFOneB, 3, 1, 2);
    // Per group, options at 1 s and some of 2 and 3 s with falling energies
    // (random, so often not convex: the model takes their hull). Energies
    // stay above 20 - 2 x 6 J.
    std::vector<std::vector<RawOption>> raw(ix(2 * pipeline.num_stages()));
    for (auto& group : raw) {
      double e = first_j(rng);
      for (int t = 1; t <= 3; ++t) {
        if (t > 1 && rng() % 3 == 0) continue;
        group.push_back({static_cast<double>(t), e});
        e -= saving_j(rng);
      }
      if (group.size() == 1) group.push_back({3.0, e});
    }
    const Net net(pipeline, raw, 0.5);
    const std::string label = "trial " + std::to_string(trial);
    for (const bool multi_unit : {true, false})
      expect_every_plan_cheapest(net, multi_unit, seen, label.c_str());
  }
  EXPECT_GT(seen.multi_unit_runs, 0);
}

// GPipe on three GPUs, three microbatches: the forwards form a 3 x 3 grid,
// F(s, m) after F(s-1, m) (data) and F(s, m-1) (order). Only the forwards
// move, in effective joules (blocking power 0.5 W) per unit saved: stage 0
// from 2 to 1 s at 5 J, stage 1 from 3 to 1 s at 1.125 J, stage 2 from 2 to
// 1 s at 2.5 J. Near the end, the cheapest cut shortens F(0,1) and F(2,1)
// and lengthens F(1,1) (every path through F(1,1) also passes one of the
// other two, and its refund pays for part of them). The brute force says
// that step is optimal; exactly one unit lengthens anything.
TEST(PhillipsDessouky, ACutMayLengthenAComputation) {
  const Net net(Pipeline(ScheduleKind::GPipe, 3, 1, 3),
                {{{1.0, 22.0}, {2.0, 17.5}},
                 {{3.0, 37.0}},
                 {{1.0, 32.75}, {3.0, 31.5}},
                 {{3.0, 22.0}},
                 {{1.0, 23.0}, {2.0, 21.0}},
                 {{2.0, 31.0}}},
                0.5);
  for (const bool multi_unit : {true, false}) {
    Seen seen;
    expect_every_plan_cheapest(net, multi_unit, seen, "3 x 3 GPipe");
    EXPECT_EQ(seen.lengthened, 1) << (multi_unit ? "multi-unit" : "single-unit");
  }
}

}  // namespace
}  // namespace perseus
