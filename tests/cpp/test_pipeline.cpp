// Pipeline schedules (cpp/pipeline.hpp): each GPU's execution order for
// GPipe, 1F1B and interleaved 1F1B against small cases written out by hand,
// the computations' fields, and the sizes a schedule refuses.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline.hpp"

namespace perseus {
namespace {

// A GPU's order as "F<stage>.<microbatch>" / "B<stage>.<microbatch>".
std::vector<std::string> order_of(const Pipeline& p, Index gpu) {
  std::vector<std::string> out;
  for (const Index* it = p.order_begin(gpu); it != p.order_end(gpu); ++it) {
    const Computation& c = p.computation(*it);
    out.push_back((c.instruction == Instruction::Forward ? "F" : "B") + std::to_string(c.stage) + "." +
                  std::to_string(c.microbatch));
  }
  return out;
}

using Order = std::vector<std::string>;

TEST(Schedules, GPipeRunsAllForwardsThenAllBackwards) {
  const Pipeline p(ScheduleKind::GPipe, 2, 1, 3);
  EXPECT_EQ(order_of(p, 0), (Order{"F0.0", "F0.1", "F0.2", "B0.0", "B0.1", "B0.2"}));
  EXPECT_EQ(order_of(p, 1), (Order{"F1.0", "F1.1", "F1.2", "B1.0", "B1.1", "B1.2"}));
}

TEST(Schedules, OneFOneBWarmsUpThenAlternates) {
  const Pipeline p(ScheduleKind::OneFOneB, 4, 1, 4);
  // GPU g: min(G - g - 1, M) warm-up forwards.
  EXPECT_EQ(order_of(p, 0), (Order{"F0.0", "F0.1", "F0.2", "F0.3", "B0.0", "B0.1", "B0.2", "B0.3"}));
  EXPECT_EQ(order_of(p, 1), (Order{"F1.0", "F1.1", "F1.2", "B1.0", "F1.3", "B1.1", "B1.2", "B1.3"}));
  EXPECT_EQ(order_of(p, 2), (Order{"F2.0", "F2.1", "B2.0", "F2.2", "B2.1", "F2.3", "B2.2", "B2.3"}));
  EXPECT_EQ(order_of(p, 3), (Order{"F3.0", "B3.0", "F3.1", "B3.1", "F3.2", "B3.2", "F3.3", "B3.3"}));
}

TEST(Schedules, OneFOneBWithFewerMicrobatchesThanGpus) {
  const Pipeline p(ScheduleKind::OneFOneB, 4, 1, 2);
  EXPECT_EQ(order_of(p, 0), (Order{"F0.0", "F0.1", "B0.0", "B0.1"}));  // warm-up capped at M
  EXPECT_EQ(order_of(p, 2), (Order{"F2.0", "F2.1", "B2.0", "B2.1"}));
  EXPECT_EQ(order_of(p, 3), (Order{"F3.0", "B3.0", "F3.1", "B3.1"}));
}

TEST(Schedules, InterleavedFollowsMegatronsScheduleTable) {
  // 2 GPUs, 2 chunks (stages 0..3; GPU 0 runs stages 0 and 2), 4
  // microbatches in groups of 2. Forward table (microbatch, chunk):
  // (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1); backwards visit the
  // chunks in reverse. Warm-up: (G - g - 1) * 2 + (V - 1) * G: 4 on GPU 0,
  // 2 on GPU 1.
  const Pipeline p(ScheduleKind::Interleaved1F1B, 2, 2, 4);
  EXPECT_EQ(order_of(p, 0), (Order{"F0.0", "F0.1", "F2.0", "F2.1",  // warm-up
                                   "F0.2", "B2.0", "F0.3", "B2.1", "F2.2", "B0.0", "F2.3", "B0.1",
                                   "B2.2", "B2.3", "B0.2", "B0.3"}));
  EXPECT_EQ(order_of(p, 1), (Order{"F1.0", "F1.1",  // warm-up
                                   "F3.0", "B3.0", "F3.1", "B3.1", "F1.2", "B1.0", "F1.3", "B1.1",
                                   "F3.2", "B3.2", "F3.3", "B3.3", "B1.2", "B1.3"}));
}

TEST(Schedules, InterleavedLastGroupTakesTheRemainingMicrobatches) {
  // 2 GPUs, 2 chunks, 3 microbatches: groups {0, 1} and {2}.
  const Pipeline p(ScheduleKind::Interleaved1F1B, 2, 2, 3);
  EXPECT_EQ(order_of(p, 1), (Order{"F1.0", "F1.1", "F3.0", "B3.0", "F3.1", "B3.1", "F1.2", "B1.0",
                                   "F3.2", "B1.1", "B3.2", "B1.2"}));
}

TEST(Schedules, EveryGpuRunsEachOfItsComputationsOnce) {
  for (const auto& p :
       {Pipeline(ScheduleKind::GPipe, 3, 1, 5), Pipeline(ScheduleKind::OneFOneB, 5, 1, 7),
        Pipeline(ScheduleKind::Interleaved1F1B, 3, 3, 7)}) {
    std::set<Index> seen;
    for (Index g = 0; g < p.num_gpus(); ++g)
      for (const Index* it = p.order_begin(g); it != p.order_end(g); ++it) {
        EXPECT_EQ(p.computation(*it).gpu, g);
        EXPECT_TRUE(seen.insert(*it).second) << "computation " << *it << " twice";
      }
    EXPECT_EQ(seen.size(), ix(p.size()));
    EXPECT_EQ(p.size(), 2 * p.num_stages() * p.num_microbatches());
  }
}

TEST(Schedules, ComputationFieldsAndIds) {
  const Pipeline p(ScheduleKind::Interleaved1F1B, 4, 2, 4);
  EXPECT_EQ(p.num_stages(), 8);
  for (Index stage = 0; stage < p.num_stages(); ++stage)
    for (Index m = 0; m < p.num_microbatches(); ++m)
      for (const Instruction ins : {Instruction::Forward, Instruction::Backward}) {
        const Index id = p.id_of(stage, m, ins);
        EXPECT_EQ(id, ((stage * 4) + m) * 2 + static_cast<Index>(ins));
        const Computation& c = p.computation(id);
        EXPECT_EQ(c.stage, stage);
        EXPECT_EQ(c.gpu, stage % 4);
        EXPECT_EQ(c.chunk, stage / 4);
        EXPECT_EQ(c.microbatch, m);
        EXPECT_EQ(c.instruction, ins);
      }
}

TEST(Schedules, Names) {
  for (const ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B})
    EXPECT_EQ(parse_schedule(schedule_name(kind)), kind);
  EXPECT_STREQ(schedule_name(ScheduleKind::OneFOneB), "1f1b");
  EXPECT_THROW(parse_schedule("1F1B"), std::invalid_argument);
  EXPECT_THROW(parse_schedule(""), std::invalid_argument);
}

TEST(Schedules, RejectsSizesTheyCannotRun) {
  EXPECT_THROW(Pipeline(ScheduleKind::OneFOneB, 0, 1, 4), std::invalid_argument);
  EXPECT_THROW(Pipeline(ScheduleKind::OneFOneB, 2, 1, 0), std::invalid_argument);
  EXPECT_THROW(Pipeline(ScheduleKind::OneFOneB, 2, 0, 4), std::invalid_argument);
  EXPECT_THROW(Pipeline(ScheduleKind::OneFOneB, 2, 2, 4), std::invalid_argument);  // no chunks
  EXPECT_THROW(Pipeline(ScheduleKind::GPipe, 2, 2, 4), std::invalid_argument);
  EXPECT_THROW(Pipeline(ScheduleKind::Interleaved1F1B, 2, 1, 4), std::invalid_argument);
  EXPECT_THROW(Pipeline(ScheduleKind::Interleaved1F1B, 4, 2, 3), std::invalid_argument);  // M < G
  // 2 * 2^15 * 2^15 computations is past the 2^30 cap; refused before allocating.
  EXPECT_THROW(Pipeline(ScheduleKind::OneFOneB, 32768, 1, 32768), std::invalid_argument);
}

// The rules name the argument that breaks them, as the Python API spells it
// (the Python API and the CLI show these messages; they have no copy of the rules).
std::string rule_broken(ScheduleKind kind, Index gpus, Index chunks, Index microbatches) {
  try {
    check_schedule(kind, gpus, chunks, microbatches);
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

TEST(Schedules, RulesNameTheArgument) {
  EXPECT_EQ(rule_broken(ScheduleKind::OneFOneB, 2, 1, 4), "");
  EXPECT_EQ(rule_broken(ScheduleKind::Interleaved1F1B, 2, 2, 2), "");
  EXPECT_EQ(rule_broken(ScheduleKind::OneFOneB, 2, 1, 0),
            "microbatches must be an integer >= 1, got 0");
  EXPECT_EQ(rule_broken(ScheduleKind::GPipe, 2, 3, 4),
            "the gpipe schedule has one chunk per GPU; virtual_stages=3 needs "
            "schedule='interleaved-1f1b'");
  EXPECT_EQ(rule_broken(ScheduleKind::Interleaved1F1B, 2, 1, 4),
            "the interleaved-1f1b schedule needs virtual_stages >= 2 (got 1); use '1f1b' for one "
            "chunk per GPU");
  EXPECT_EQ(rule_broken(ScheduleKind::Interleaved1F1B, 4, 2, 3),
            "the interleaved-1f1b schedule cannot run 3 microbatches on 4 GPUs: it needs at least "
            "as many microbatches as GPUs");
  std::string known;
  try {
    parse_schedule("zb-h1");
  } catch (const std::invalid_argument& error) {
    known = error.what();
  }
  EXPECT_EQ(known, "schedule 'zb-h1' is not known; choose one of: 1f1b, gpipe, interleaved-1f1b");
  for (const ScheduleKind kind : kScheduleKinds) EXPECT_EQ(parse_schedule(schedule_name(kind)), kind);
}

}  // namespace
}  // namespace perseus
