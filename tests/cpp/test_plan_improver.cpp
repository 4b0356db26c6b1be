// The plan improver (cpp/plan_improver.hpp) on random small problems:
// reclaim never lengthens the iteration beyond max(deadline, T) and never
// raises the energy over the deadline; tighten meets the deadline or returns
// false only when even the all-fastest plan cannot; revert restores the plan
// exactly; the local search never worsens; and the improver's incremental
// view always agrees with a replay of its plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "plan_improver.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

// Relative slack for comparisons of sums of doubles.
constexpr double kRel = 1e-12;

struct TestProblem {
  Pipeline pipeline;
  Dag dag;
  OptionTable table;
  Evaluator evaluator;
  TestProblem(const Pipeline& p, OptionTable t)
      : pipeline(p), dag(pipeline), table(std::move(t)), evaluator(pipeline, dag, table) {}
  TestProblem(const TestProblem&) = delete;
  TestProblem& operator=(const TestProblem&) = delete;

  std::vector<OptionIndex> random_plan(std::mt19937& rng) const {
    std::vector<OptionIndex> choice(ix(pipeline.size()));
    for (Index i = 0; i < pipeline.size(); ++i)
      choice[ix(i)] = static_cast<OptionIndex>(rng() % ix(table.num_options(evaluator.group(i))));
    return choice;
  }
  std::vector<OptionIndex> fastest_plan() const {
    return std::vector<OptionIndex>(ix(pipeline.size()), 0);
  }
  std::vector<OptionIndex> slowest_plan() const {
    std::vector<OptionIndex> choice(ix(pipeline.size()));
    for (Index i = 0; i < pipeline.size(); ++i)
      choice[ix(i)] = static_cast<OptionIndex>(table.num_options(evaluator.group(i)) - 1);
    return choice;
  }
  Evaluation replay(const std::vector<OptionIndex>& choice) {
    return evaluator.evaluate(choice.data());
  }
};

std::vector<std::unique_ptr<TestProblem>> problems() {
  std::mt19937 rng(11);
  std::vector<std::unique_ptr<TestProblem>> out;
  for (const Pipeline& p :
       {Pipeline(ScheduleKind::OneFOneB, 3, 1, 4), Pipeline(ScheduleKind::GPipe, 2, 1, 3),
        Pipeline(ScheduleKind::Interleaved1F1B, 2, 2, 4), Pipeline(ScheduleKind::OneFOneB, 4, 1, 8)}) {
    const int clocks = 3 + static_cast<int>(rng() % 6);
    out.push_back(std::make_unique<TestProblem>(
        p, test_support::table_from_raw(
               p.num_stages(), test_support::random_sweeps(p.num_stages(), clocks, rng), 60.0)));
  }
  return out;
}

// The improver's times and energies against a replay of its plan.
void expect_consistent(PlanImprover& improver, TestProblem& problem, double deadline_s) {
  const Evaluation replayed = problem.replay(improver.choice());
  EXPECT_NEAR(improver.makespan(), replayed.iteration_time_s, kRel * replayed.iteration_time_s);
  const double expected =
      problem.evaluator.energy_at(replayed, std::max(deadline_s, replayed.iteration_time_s));
  EXPECT_NEAR(improver.energy_at(deadline_s), expected, 1e-9 * expected);
}

TEST(PlanImprover, StartsAtTheFastestPlan) {
  for (auto& problem : problems()) {
    PlanImprover improver(problem->pipeline, problem->dag, problem->table);
    EXPECT_EQ(improver.choice(), problem->fastest_plan());
    const Evaluation fastest = problem->replay(problem->fastest_plan());
    EXPECT_NEAR(improver.makespan(), fastest.iteration_time_s, kRel * fastest.iteration_time_s);
    EXPECT_NEAR(improver.energy_at(0.0), fastest.energy_j, 1e-9 * fastest.energy_j);
    EXPECT_DOUBLE_EQ(improver.pipeline_blocking_w(), problem->evaluator.pipeline_blocking_w());
  }
}

TEST(PlanImprover, ReclaimNeverLengthensBeyondTheLimitNorRaisesEnergy) {
  std::mt19937 rng(12);
  for (auto& problem : problems()) {
    PlanImprover improver(problem->pipeline, problem->dag, problem->table);
    for (int trial = 0; trial < 40; ++trial) {
      const auto plan = problem->random_plan(rng);
      improver.assign(plan.data());
      const double t0 = improver.makespan();
      // Deadlines below, at and above the plan's own time.
      const double deadline = t0 * std::uniform_real_distribution<double>(0.8, 1.3)(rng);
      const double e0 = improver.energy_at(deadline);
      const auto order = trial % 2 == 0 ? ReclaimOrder::kSavingPerSecond : ReclaimOrder::kSaving;
      improver.reclaim(deadline, order);
      EXPECT_LE(improver.makespan(), std::max(deadline, t0) * (1 + kRel)) << "trial " << trial;
      EXPECT_LE(improver.energy_at(deadline), e0 + kRel * std::abs(e0)) << "trial " << trial;
      expect_consistent(improver, *problem, deadline);
      // Reclaim ends with nothing left to slow down: a second one changes nothing.
      const auto after = improver.choice();
      improver.reclaim(deadline, order);
      EXPECT_EQ(improver.choice(), after) << "trial " << trial;
    }
  }
}

TEST(PlanImprover, ReclaimFromTheFastestPlanSavesEnergyWhenThereIsSlack) {
  for (auto& problem : problems()) {
    PlanImprover improver(problem->pipeline, problem->dag, problem->table);
    const double t0 = improver.makespan();
    const double e0 = improver.energy_at(t0 * 1.2);
    improver.reclaim(t0 * 1.2);
    EXPECT_LT(improver.energy_at(t0 * 1.2), e0);  // 20 % slack always buys something here
  }
}

// A reclaim with a work limit stops there (a tailored plan's all-fastest
// start): the plan still meets the deadline, costs no more than before, and
// with an ample limit it is the plain reclaim's.
TEST(PlanImprover, ReclaimUntilStopsAtItsWorkLimitWithAPlanThatStillFits) {
  for (auto& problem : problems()) {
    PlanImprover full(problem->pipeline, problem->dag, problem->table);
    const double deadline = full.makespan() * 1.2;
    const std::int64_t start = full.work();
    full.reclaim(deadline);
    const std::int64_t full_work = full.work() - start;
    ASSERT_GT(full_work, 2);

    PlanImprover ample(problem->pipeline, problem->dag, problem->table);
    ample.reclaim_until(deadline, ample.work() + 2 * full_work);
    EXPECT_EQ(ample.choice(), full.choice());

    PlanImprover cut(problem->pipeline, problem->dag, problem->table);
    const double e0 = cut.energy_at(deadline);
    const std::int64_t limit = cut.work() + full_work / 2;
    cut.reclaim_until(deadline, limit);
    EXPECT_LT(cut.work() - limit, full_work / 2);  // stopped near the limit, one move past at most
    EXPECT_NE(cut.choice(), full.choice());
    EXPECT_LE(cut.makespan(), deadline * (1 + kRel));
    EXPECT_LE(cut.energy_at(deadline), e0 + kRel * std::abs(e0));
    expect_consistent(cut, *problem, deadline);
  }
}

TEST(PlanImprover, TightenMeetsTheDeadlineOrReturnsFalse) {
  std::mt19937 rng(13);
  for (auto& problem : problems()) {
    const double fastest_s = problem->replay(problem->fastest_plan()).iteration_time_s;
    const double slowest_s = problem->replay(problem->slowest_plan()).iteration_time_s;
    PlanImprover improver(problem->pipeline, problem->dag, problem->table);
    for (int trial = 0; trial < 40; ++trial) {
      const auto plan = trial % 4 == 0 ? problem->slowest_plan() : problem->random_plan(rng);
      improver.assign(plan.data());
      const double deadline = std::uniform_real_distribution<double>(0.9 * fastest_s, slowest_s)(rng);
      const auto order = trial % 2 == 0 ? TightenOrder::kSecondSaved : TightenOrder::kUsefulSecond;
      const bool met = improver.tighten(deadline, order);
      if (met) {
        EXPECT_LE(improver.makespan(), deadline * (1 + kRel)) << "trial " << trial;
      } else {
        EXPECT_GT(fastest_s, deadline * (1 - kRel)) << "false although the fastest plan meets it";
      }
      if (deadline >= fastest_s * (1 + 1e-9)) {
        EXPECT_TRUE(met) << "trial " << trial;
      }
      expect_consistent(improver, *problem, deadline);
    }
  }
}

TEST(PlanImprover, RevertRestoresThePlanExactly) {
  std::mt19937 rng(14);
  for (auto& problem : problems()) {
    PlanImprover improver(problem->pipeline, problem->dag, problem->table);
    for (int trial = 0; trial < 20; ++trial) {
      const auto plan = problem->random_plan(rng);
      improver.assign(plan.data());  // also the checkpoint
      const double t0 = improver.makespan(), e0 = improver.energy_at(0.0);
      // Everything that changes the plan: single changes, reclaim, tighten, search.
      for (int k = 0; k < 5; ++k) {
        const auto i = static_cast<Index>(rng() % ix(problem->pipeline.size()));
        improver.change(
            i, static_cast<Index>(rng() % ix(problem->table.num_options(problem->evaluator.group(i)))));
      }
      improver.commit();
      improver.tighten(t0 * 0.95);
      improver.reclaim(t0 * 1.1);
      improver.local_search(t0, 20000);
      improver.revert();
      EXPECT_THROW((void)improver.makespan(), std::logic_error) << "times read before commit()";
      improver.commit();
      EXPECT_EQ(improver.choice(), plan) << "trial " << trial;
      EXPECT_EQ(improver.makespan(), t0) << "trial " << trial;
      EXPECT_NEAR(improver.energy_at(0.0), e0, 1e-9 * std::abs(e0)) << "trial " << trial;
      // The same times as an improver that was given the plan directly.
      PlanImprover fresh(problem->pipeline, problem->dag, problem->table);
      fresh.assign(plan.data());
      EXPECT_EQ(fresh.makespan(), improver.makespan());
    }
  }
}

TEST(PlanImprover, RevertGoesBackToTheLastCheckpoint) {
  std::mt19937 rng(15);
  auto all = problems();
  TestProblem& problem = *all.front();
  PlanImprover improver(problem.pipeline, problem.dag, problem.table);
  const auto plan = problem.random_plan(rng);
  improver.assign(plan.data());
  improver.reclaim(improver.makespan() * 1.1);
  const auto reclaimed = improver.choice();
  const double reclaimed_s = improver.makespan();
  improver.checkpoint();
  improver.tighten(reclaimed_s * 0.9);
  ASSERT_NE(improver.choice(), reclaimed);
  improver.revert();
  improver.commit();
  EXPECT_EQ(improver.choice(), reclaimed);
  EXPECT_EQ(improver.makespan(), reclaimed_s);
}

TEST(PlanImprover, LocalSearchNeverWorsens) {
  std::mt19937 rng(16);
  for (auto& problem : problems()) {
    const double fastest_s = problem->replay(problem->fastest_plan()).iteration_time_s;
    const double slowest_s = problem->replay(problem->slowest_plan()).iteration_time_s;
    PlanImprover improver(problem->pipeline, problem->dag, problem->table);
    for (int trial = 0; trial < 8; ++trial) {
      const double deadline = std::uniform_real_distribution<double>(fastest_s, slowest_s)(rng);
      const auto plan = problem->random_plan(rng);
      improver.assign(plan.data());
      ASSERT_TRUE(improver.tighten(deadline));
      const double t0 = improver.makespan(), e0 = improver.energy_at(deadline);
      improver.local_search(deadline, 200000);
      EXPECT_LE(improver.makespan(), std::max(deadline, t0) * (1 + kRel)) << "trial " << trial;
      EXPECT_LE(improver.energy_at(deadline), e0 + kRel * std::abs(e0)) << "trial " << trial;
      expect_consistent(improver, *problem, deadline);
    }
  }
}

TEST(PlanImprover, WorkGrowsWithWhatItDoes) {
  auto all = problems();
  TestProblem& problem = *all.back();
  PlanImprover improver(problem.pipeline, problem.dag, problem.table);
  const std::int64_t start = improver.work();
  improver.reclaim(improver.makespan() * 1.1);
  const std::int64_t after_reclaim = improver.work();
  EXPECT_GT(after_reclaim, start);
  improver.local_search(improver.makespan(), 1000);
  EXPECT_GE(improver.work(), after_reclaim);
}

}  // namespace
}  // namespace perseus
