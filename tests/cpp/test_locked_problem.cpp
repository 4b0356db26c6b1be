// The pieces the Python bindings used to hold: LockedProblem (a Problem
// shared between threads: its batches against a direct replay and a direct
// PlanImprover, bad indices refused before anything runs, concurrent callers
// getting what sequential ones get), choice_values (the plans' clocks) and
// check_deadlock_free.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "choice_values.hpp"
#include "dag.hpp"
#include "evaluate.hpp"
#include "locked_problem.hpp"
#include "plan_improver.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

struct Flat {
  std::vector<Index> offsets{0};
  std::vector<double> time_s, energy_j;
};

// Row k of plans laid out n options each, as ImprovedPlans holds them.
std::vector<OptionIndex> row(const std::vector<OptionIndex>& rows, std::size_t k, std::size_t n) {
  return {rows.begin() + static_cast<std::ptrdiff_t>(k * n),
          rows.begin() + static_cast<std::ptrdiff_t>((k + 1) * n)};
}

Flat flatten(const OptionTable& table) {
  Flat flat;
  for (GroupId g(0); g.value() < table.num_groups(); ++g) {
    for (Index k = 0; k < table.num_options(g); ++k) {
      flat.time_s.push_back(table.time_s(g, k));
      flat.energy_j.push_back(table.energy_j(g, k));
    }
    flat.offsets.push_back(static_cast<Index>(flat.time_s.size()));
  }
  return flat;
}

struct Fixture {
  Pipeline pipeline;
  Dag dag{pipeline};
  OptionTable table;
  explicit Fixture(Index stages = 3, Index microbatches = 4)
      : pipeline(ScheduleKind::OneFOneB, stages, 1, microbatches), table([&] {
          std::mt19937 rng(9);
          return test_support::table_from_raw(
              pipeline.num_stages(), test_support::random_sweeps(pipeline.num_stages(), 5, rng), 60.0);
        }()) {}
  LockedProblem locked() const {
    const Flat flat = flatten(table);
    return LockedProblem(pipeline, flat.offsets, flat.time_s, flat.energy_j, table.blocking_power_w());
  }
  std::vector<OptionIndex> random_plans(std::size_t plans, std::mt19937& rng) const {
    Evaluator evaluator(pipeline, dag, table);
    std::vector<OptionIndex> rows;
    for (std::size_t k = 0; k < plans; ++k)
      for (Index i = 0; i < pipeline.size(); ++i)
        rows.push_back(static_cast<OptionIndex>(rng() % ix(table.num_options(evaluator.group(i)))));
    return rows;
  }
  // Random plans as search_deadline takes its starts: rows fastest first,
  // with their replayed times.
  struct Starts {
    std::vector<OptionIndex> rows;
    std::vector<double> time_s;
  };
  Starts sorted_plans(std::size_t plans, std::mt19937& rng) const {
    const std::vector<OptionIndex> rows = random_plans(plans, rng);
    Evaluator evaluator(pipeline, dag, table);
    const auto n = ix(pipeline.size());
    std::vector<std::pair<double, std::size_t>> order;
    for (std::size_t k = 0; k < plans; ++k)
      order.emplace_back(evaluator.evaluate(rows.data() + k * n).iteration_time_s, k);
    std::sort(order.begin(), order.end());
    Starts out;
    for (const auto& [time_s, k] : order) {
      out.rows.insert(out.rows.end(), rows.begin() + static_cast<std::ptrdiff_t>(k * n),
                      rows.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
      out.time_s.push_back(time_s);
    }
    return out;
  }
};

TEST(LockedProblem, BatchesAgreeWithADirectReplayAndImprover) {
  const Fixture f;
  LockedProblem locked = f.locked();
  std::mt19937 rng(4);
  const std::size_t plans = 5;
  const std::vector<OptionIndex> rows = f.random_plans(plans, rng);
  const auto n = ix(f.pipeline.size());
  Evaluator evaluator(f.pipeline, f.dag, f.table);
  const std::vector<Evaluation> replayed = locked.evaluate(rows.data(), plans);
  ASSERT_EQ(replayed.size(), plans);
  PlanImprover direct(f.pipeline, f.dag, f.table);
  const double deadline_s = 1.05 * replayed[0].iteration_time_s;
  const ImprovedPlans improved = locked.reclaim(rows.data(), plans, deadline_s, ReclaimOrder::kSaving);
  ASSERT_EQ(improved.choices.size(), plans * n);
  for (std::size_t k = 0; k < plans; ++k) {
    const Evaluation own = evaluator.evaluate(rows.data() + k * n);
    EXPECT_EQ(replayed[k].iteration_time_s, own.iteration_time_s);
    EXPECT_EQ(replayed[k].energy_j, own.energy_j);
    direct.assign(rows.data() + k * n);
    direct.reclaim(deadline_s, ReclaimOrder::kSaving);
    const std::vector<OptionIndex> plan = row(improved.choices, k, n);
    EXPECT_EQ(plan, direct.choice()) << "plan " << k;
    const Evaluation after = evaluator.evaluate(plan.data());
    EXPECT_EQ(improved.evaluations[k].iteration_time_s, after.iteration_time_s);
    EXPECT_EQ(improved.evaluations[k].energy_j, after.energy_j);
  }
  const ImprovedPlans searched = locked.local_search(rows.data(), 1, deadline_s, 20000);
  direct.assign(rows.data());
  direct.local_search(deadline_s, 20000);
  EXPECT_EQ(searched.choices, direct.choice());
}

// tighten: each plan sped up to the deadline, then slowed into what is left.
// Against a direct PlanImprover doing the same; a plan that meets the
// deadline after it replays within it, one that cannot (the deadline below
// the all-fastest time) comes back at the all-fastest time; a deadline that
// is not finite is refused.
TEST(LockedProblem, TightenMeetsTheDeadlineWhereItCan) {
  const Fixture f;
  LockedProblem locked = f.locked();
  std::mt19937 rng(12);
  const std::size_t plans = 6;
  const std::vector<OptionIndex> rows = f.random_plans(plans, rng);
  const auto n = ix(f.pipeline.size());
  Evaluator evaluator(f.pipeline, f.dag, f.table);
  const std::vector<OptionIndex> fastest(n, 0);
  const double fastest_s = evaluator.evaluate(fastest.data()).iteration_time_s;
  PlanImprover direct(f.pipeline, f.dag, f.table);
  for (const double deadline_s : {1.02 * fastest_s, 1.2 * fastest_s, 0.9 * fastest_s}) {
    const ImprovedPlans out = locked.tighten(rows.data(), plans, deadline_s);
    ASSERT_EQ(out.choices.size(), plans * n);
    for (std::size_t k = 0; k < plans; ++k) {
      direct.assign(rows.data() + k * n);
      const bool met = direct.tighten(deadline_s, TightenOrder::kUsefulSecond);
      if (met) direct.reclaim(deadline_s);
      const std::vector<OptionIndex> plan = row(out.choices, k, n);
      EXPECT_EQ(plan, direct.choice()) << "plan " << k;
      const Evaluation replayed = evaluator.evaluate(plan.data());
      EXPECT_EQ(out.evaluations[k].iteration_time_s, replayed.iteration_time_s);
      EXPECT_EQ(out.evaluations[k].energy_j, replayed.energy_j);
      EXPECT_EQ(met, deadline_s >= fastest_s);
      // Out of reach, tightening goes on until every too-long path is at its
      // fastest: the all-fastest time, and never a slowed-down plan.
      if (met) EXPECT_LE(replayed.iteration_time_s, deadline_s * (1 + 1e-12));
      else EXPECT_NEAR(replayed.iteration_time_s, fastest_s, 1e-12 * fastest_s);
    }
  }
  EXPECT_THROW(locked.tighten(rows.data(), 1, std::numeric_limits<double>::infinity()),
               std::invalid_argument);
  EXPECT_THROW(locked.tighten(rows.data(), 1, std::numeric_limits<double>::quiet_NaN()),
               std::invalid_argument);
}

TEST(LockedProblem, RefusesAnOptionOutOfRangeBeforeImproving) {
  const Fixture f;
  LockedProblem locked = f.locked();
  std::vector<OptionIndex> rows(ix(f.pipeline.size()), 0);
  rows.back() = 60000;
  EXPECT_THROW(locked.reclaim(rows.data(), 1, 0.0, ReclaimOrder::kSaving), std::invalid_argument);
  EXPECT_THROW(locked.local_search(rows.data(), 1, 1.0, 100), std::invalid_argument);
  EXPECT_THROW(locked.evaluate(rows.data(), 1), std::invalid_argument);
}

// search_deadline from random starts sorted by time: the plan meets the
// deadline, is what its own replay says, costs no more over the deadline
// than any start reclaimed into it, and the same call gives the same plan.
// Bad inputs are refused before anything runs; a deadline below the
// all-fastest time finds nothing.
TEST(LockedProblem, SearchDeadlineBeatsEveryStartReclaimedIntoIt) {
  const Fixture f;
  LockedProblem locked = f.locked();
  std::mt19937 rng(12);
  const std::size_t plans = 6;
  const auto n = ix(f.pipeline.size());
  auto [sorted, times] = f.sorted_plans(plans, rng);
  const double blocking_w = f.table.blocking_power_w() * f.pipeline.num_gpus();
  const double deadline_s = 0.5 * (times[2] + times[3]);
  const ImprovedPlans found =
      locked.search_deadline(sorted.data(), plans, times.data(), deadline_s, 1000000);
  ASSERT_EQ(found.evaluations.size(), 1u);
  ASSERT_EQ(found.choices.size(), n);
  const Evaluation got = found.evaluations[0];
  EXPECT_LE(got.iteration_time_s, deadline_s);
  const double got_j = got.energy_j + blocking_w * (deadline_s - got.iteration_time_s);
  Evaluator evaluator(f.pipeline, f.dag, f.table);
  const Evaluation replayed = evaluator.evaluate(found.choices.data());
  EXPECT_EQ(replayed.iteration_time_s, got.iteration_time_s);
  EXPECT_EQ(replayed.energy_j, got.energy_j);
  const ImprovedPlans reclaimed =
      locked.reclaim(sorted.data(), plans, deadline_s, ReclaimOrder::kSavingPerSecond);
  for (std::size_t k = 0; k < plans; ++k) {
    const Evaluation r = reclaimed.evaluations[k];
    if (r.iteration_time_s > deadline_s) continue;  // a slower start, not reclaimed into it
    EXPECT_LE(got_j, r.energy_j + blocking_w * (deadline_s - r.iteration_time_s) + 1e-9)
        << "start " << k;
  }
  const ImprovedPlans again =
      locked.search_deadline(sorted.data(), plans, times.data(), deadline_s, 1000000);
  EXPECT_EQ(again.choices, found.choices);

  std::vector<double> unsorted = times;
  std::swap(unsorted[0], unsorted[1]);
  EXPECT_THROW(locked.search_deadline(sorted.data(), plans, unsorted.data(), deadline_s, 1000),
               std::invalid_argument);
  std::vector<OptionIndex> bad = sorted;
  bad.back() = 60000;
  EXPECT_THROW(locked.search_deadline(bad.data(), plans, times.data(), deadline_s, 1000),
               std::invalid_argument);
  EXPECT_THROW(locked.search_deadline(sorted.data(), plans, times.data(), deadline_s, -1),
               std::invalid_argument);
  const std::vector<OptionIndex> fastest(n, 0);
  const double fastest_s = evaluator.evaluate(fastest.data()).iteration_time_s;
  EXPECT_TRUE(locked.search_deadline(sorted.data(), plans, times.data(), 0.5 * fastest_s, 1000)
                  .choices.empty());
}

TEST(LockedProblem, ConcurrentCallersGetWhatSequentialOnesGet) {
  const Fixture f;
  LockedProblem locked = f.locked();
  std::mt19937 rng(8);
  const std::size_t plans = 4;
  const std::vector<OptionIndex> rows = f.random_plans(plans, rng);
  const ImprovedPlans expected_reclaim =
      locked.reclaim(rows.data(), plans, 0.0, ReclaimOrder::kSavingPerSecond);
  const std::vector<Evaluation> expected_eval = locked.evaluate(rows.data(), plans);
  std::vector<ImprovedPlans> reclaimed(3);
  std::vector<std::vector<Evaluation>> evaluated(3);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        reclaimed[t] = locked.reclaim(rows.data(), plans, 0.0, ReclaimOrder::kSavingPerSecond);
        evaluated[t] = locked.evaluate(rows.data(), plans);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (std::size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(reclaimed[t].choices, expected_reclaim.choices);
    for (std::size_t k = 0; k < plans; ++k) {
      EXPECT_EQ(evaluated[t][k].iteration_time_s, expected_eval[k].iteration_time_s);
      EXPECT_EQ(evaluated[t][k].energy_j, expected_eval[k].energy_j);
    }
  }
}

TEST(ChoiceValues, GathersEachPlansValuesAndRefusesBadIndices) {
  FrontierResult result;
  result.num_computations = 2;
  result.choices = PlanRows(2);  // three plans
  for (const std::vector<OptionIndex>& row :
       std::vector<std::vector<OptionIndex>>{{0, 1}, {1, 0}, {2, 1}})
    result.choices.append(row.data());
  // Computation 0's options start at 0, computation 1's at 3.
  const std::vector<std::int32_t> values{1980, 1500, 1200, 1410, 900};
  EXPECT_EQ(choice_values(result, {0, 3}, values.data(), values.size()),
            (std::vector<std::int32_t>{1980, 900, 1500, 1410, 1200, 900}));
  EXPECT_THROW(choice_values(result, {0}, values.data(), values.size()), std::invalid_argument);
  EXPECT_THROW(choice_values(result, {0, -1}, values.data(), values.size()), std::out_of_range);
  EXPECT_THROW(choice_values(result, {0, 4}, values.data(), values.size()), std::out_of_range);
  const FrontierResult empty;
  EXPECT_TRUE(choice_values(empty, {}, values.data(), values.size()).empty());
}

TEST(CheckDeadlockFree, RefusesAnOrderThatCannotFinish) {
  EXPECT_NO_THROW(check_deadlock_free(Pipeline(ScheduleKind::OneFOneB, 4, 1, 8)));
  // 4 GPUs x 3 chunks with 5 microbatches: the ragged last group deadlocks.
  EXPECT_THROW(check_deadlock_free(Pipeline(ScheduleKind::Interleaved1F1B, 4, 3, 5)),
               std::invalid_argument);
}

// A tailored search must stop when asked (Ctrl-C in Python): the poll is
// called while it runs, an exception from it passes through, and the next
// search starts afresh and finds what an uninterrupted one finds. Polling
// never changes the plan.
TEST(LockedProblem, SearchDeadlinePollsAndStopsCleanly) {
  const Fixture f(6, 24);
  std::mt19937 rng(31);
  const std::size_t plans = 4;
  LockedProblem locked = f.locked();
  const auto [sorted, times] = f.sorted_plans(plans, rng);
  const double deadline_s = 0.5 * (times[1] + times[2]);
  const std::int64_t work = 20 * LockedProblem::kSearchPollWork;
  const ImprovedPlans plain =
      locked.search_deadline(sorted.data(), plans, times.data(), deadline_s, work);
  ASSERT_EQ(plain.evaluations.size(), 1u);

  int polls = 0;
  const ImprovedPlans polled = locked.search_deadline(sorted.data(), plans, times.data(), deadline_s,
                                                      work, [&polls] { ++polls; });
  EXPECT_GT(polls, 2);
  EXPECT_EQ(polled.choices, plain.choices);

  int calls = 0;
  struct Stop {};
  EXPECT_THROW(locked.search_deadline(sorted.data(), plans, times.data(), deadline_s, work,
                                      [&calls] {
                                        if (++calls == 2) throw Stop{};
                                      }),
               Stop);
  EXPECT_EQ(calls, 2);
  const ImprovedPlans after =
      locked.search_deadline(sorted.data(), plans, times.data(), deadline_s, work);
  EXPECT_EQ(after.choices, plain.choices);
}

}  // namespace
}  // namespace perseus
