// Plan replay (cpp/evaluate.hpp) on cases computed by hand: the iteration
// time is the longest path, and every GPU draws the blocking power while it
// is not computing.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "test_support.hpp"

namespace perseus {
namespace {

// Two GPUs, 1F1B, two microbatches; one option per group: forwards 1 s,
// backwards 2 s; energies 10 J (stage 0 forward), 20 (stage 0 backward),
// 30 (stage 1 forward), 40 J (stage 1 backward); 5 W blocking.
//   GPU 0: F0.0 [0,1] F0.1 [1,2]            B0.0 [4,6]       B0.1 [7,9]
//   GPU 1:          F1.0 [1,2] B1.0 [2,4] F1.1 [4,5] B1.1 [5,7]
// T = 9 s; busy 2 * (2 * 1 + 2 * 2) = 12 s of 2 * 9 = 18: 6 s idle.
// E = 2 * (10 + 20 + 30 + 40) + 5 W * 6 s = 230 J.
struct HandCase {
  Pipeline pipeline{ScheduleKind::OneFOneB, 2, 1, 2};
  Dag dag{pipeline};
  OptionTable table{1 + 1, {0, 1, 2, 3, 4}, {1, 2, 1, 2}, {10, 20, 30, 40}, 5.0};
  Evaluator evaluator{pipeline, dag, table};
};

TEST(Evaluator, HandComputedOneFOneB) {
  HandCase c;
  const std::vector<OptionIndex> choice(ix(c.pipeline.size()), 0);
  const Evaluation e = c.evaluator.evaluate(choice.data());
  EXPECT_DOUBLE_EQ(e.iteration_time_s, 9.0);
  EXPECT_DOUBLE_EQ(e.energy_j, 230.0);
  EXPECT_DOUBLE_EQ(c.evaluator.pipeline_blocking_w(), 10.0);
  // Over a 12 s iteration both GPUs wait 3 s more.
  EXPECT_DOUBLE_EQ(c.evaluator.energy_at(e, 12.0), 260.0);
  EXPECT_DOUBLE_EQ(c.evaluator.energy_at(e, 9.0), 230.0);
}

TEST(Evaluator, ReplayTakesAnyMeasuredRows) {
  HandCase c;
  // Per computation id ((stage * M) + m) * 2 + instruction: stage 1's
  // backward of microbatch 0 (id 5) takes 4 s instead of 2 and 50 J.
  std::vector<double> t{1, 2, 1, 2, 1, 4, 1, 2};
  std::vector<double> e{10, 20, 10, 20, 30, 50, 30, 40};
  //   GPU 0: F0.0 [0,1] F0.1 [1,2]                  B0.0 [6,8]     B0.1 [9,11]
  //   GPU 1:          F1.0 [1,2] B1.0 [2,6] F1.1 [6,7] B1.1 [7,9]
  // T = 11 s; busy 14 s of 22: E = 210 J + 5 W * 8 s = 250 J.
  const Evaluation r = c.evaluator.replay(t.data(), e.data());
  EXPECT_DOUBLE_EQ(r.iteration_time_s, 11.0);
  EXPECT_DOUBLE_EQ(r.energy_j, 250.0);
}

TEST(Evaluator, GPipeOnThreeGpus) {
  // Every computation 1 s and 1 J, 3 GPUs, 2 microbatches of GPipe:
  // forwards fill the pipeline in 4 s, backwards drain it in 4 s: T = 8 s.
  // Busy 12 s of 24: E = 12 J + 2 W * 12 s = 36 J.
  const Pipeline p(ScheduleKind::GPipe, 3, 1, 2);
  const Dag dag(p);
  const OptionTable table(3, {0, 1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}, 2.0);
  Evaluator evaluator(p, dag, table);
  const std::vector<OptionIndex> choice(ix(p.size()), 0);
  const Evaluation e = evaluator.evaluate(choice.data());
  EXPECT_DOUBLE_EQ(e.iteration_time_s, 8.0);
  EXPECT_DOUBLE_EQ(e.energy_j, 36.0);
}

TEST(Evaluator, EvaluateIsReplayOfTheChosenOptions) {
  std::mt19937 rng(5);
  const Pipeline p(ScheduleKind::Interleaved1F1B, 3, 2, 6);
  const Dag dag(p);
  const OptionTable table = test_support::table_from_raw(
      p.num_stages(), test_support::random_sweeps(p.num_stages(), 6, rng), 60.0);
  Evaluator evaluator(p, dag, table);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<OptionIndex> choice(ix(p.size()));
    std::vector<double> t(choice.size()), e(choice.size());
    double effective = 0.0;
    for (Index i = 0; i < p.size(); ++i) {
      const GroupId g = evaluator.group(i);
      EXPECT_EQ(g, group_of(p.computation(i)));
      choice[ix(i)] = static_cast<OptionIndex>(rng() % ix(table.num_options(g)));
      t[ix(i)] = table.time_s(g, choice[ix(i)]);
      e[ix(i)] = table.energy_j(g, choice[ix(i)]);
      effective += table.effective_j(g, choice[ix(i)]);
    }
    const Evaluation a = evaluator.evaluate(choice.data());
    const Evaluation b = evaluator.replay(t.data(), e.data());
    EXPECT_EQ(a.iteration_time_s, b.iteration_time_s);
    EXPECT_EQ(a.energy_j, b.energy_j);
    // E = sum of effective energies + G * P_block * T.
    EXPECT_NEAR(a.energy_j, effective + evaluator.pipeline_blocking_w() * a.iteration_time_s,
                1e-9 * a.energy_j);
  }
}

}  // namespace
}  // namespace perseus
