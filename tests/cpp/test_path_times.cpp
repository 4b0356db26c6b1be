// Incremental longest paths (cpp/path_times.hpp, cpp/longest_path.hpp):
// after random batches of duration changes, update() agrees exactly with a
// recompute from scratch, moved() lists every node whose head or tail
// changed, and LongestPaths' makespan and critical set match.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "dag.hpp"
#include "longest_path.hpp"
#include "path_times.hpp"

namespace perseus {
namespace {

std::vector<Pipeline> pipelines() {
  return {Pipeline(ScheduleKind::OneFOneB, 1, 1, 1), Pipeline(ScheduleKind::GPipe, 3, 1, 4),
          Pipeline(ScheduleKind::OneFOneB, 4, 1, 9), Pipeline(ScheduleKind::Interleaved1F1B, 4, 2, 8),
          Pipeline(ScheduleKind::Interleaved1F1B, 8, 3, 16)};  // 768 nodes: several bitset words
}

TEST(PathTimes, HandComputedChain) {
  // One GPU, two microbatches of 1F1B: F0 -> B0 -> F1 -> B1 (ids 0, 1, 2, 3).
  const Pipeline p(ScheduleKind::OneFOneB, 1, 1, 2);
  const Dag dag(p);
  PathTimes<double> times(dag);
  const std::vector<double> duration{1.0, 2.0, 3.0, 4.0};
  times.reset(duration.data());
  EXPECT_EQ(times.head(0), 0.0);
  EXPECT_EQ(times.head(1), 1.0);
  EXPECT_EQ(times.head(2), 3.0);
  EXPECT_EQ(times.head(3), 6.0);
  EXPECT_EQ(times.tail(0), 10.0);
  EXPECT_EQ(times.tail(3), 4.0);
  for (Index v = 0; v < 4; ++v) EXPECT_EQ(times.through(v), 10.0);
  EXPECT_EQ(times.moved().size(), 4u);
}

template <typename Value, typename Draw>
void check_against_recompute(const Pipeline& p, Draw draw, std::mt19937& rng) {
  const Dag dag(p);
  const auto n = ix(p.size());
  std::vector<Value> duration(n);
  for (auto& d : duration) d = draw(rng);
  PathTimes<Value> incremental(dag);
  incremental.reset(duration.data());
  for (int round = 0; round < 60; ++round) {
    std::vector<Value> head_before(n), tail_before(n);
    for (std::size_t v = 0; v < n; ++v) {
      head_before[v] = incremental.head(static_cast<Index>(v));
      tail_before[v] = incremental.tail(static_cast<Index>(v));
    }
    // A batch of 1..8 changes (repeats and no-op changes included); every
    // third batch only slows nodes down (update()'s path for reclamation).
    std::vector<Index> changed;
    const auto batch = 1 + rng() % 8;
    const bool slower_only = round % 3 == 0;
    for (std::size_t k = 0; k < batch; ++k) {
      const auto v = static_cast<Index>(rng() % n);
      const Value drawn = draw(rng);
      if (rng() % 5 != 0) duration[ix(v)] = slower_only ? std::max(duration[ix(v)], drawn) : drawn;
      if (std::find(changed.begin(), changed.end(), v) == changed.end()) changed.push_back(v);
    }
    incremental.update(duration.data(), changed.data(), changed.data() + changed.size());
    PathTimes<Value> scratch(dag);
    scratch.reset(duration.data());
    const std::set<Index> moved(incremental.moved().begin(), incremental.moved().end());
    ASSERT_EQ(moved.size(), incremental.moved().size()) << "moved() lists a node twice";
    for (Index v = 0; v < p.size(); ++v) {
      ASSERT_EQ(incremental.head(v), scratch.head(v)) << "head of " << v << " in round " << round;
      ASSERT_EQ(incremental.tail(v), scratch.tail(v)) << "tail of " << v << " in round " << round;
      const bool changed_times =
          incremental.head(v) != head_before[ix(v)] || incremental.tail(v) != tail_before[ix(v)];
      if (changed_times) {
        EXPECT_TRUE(moved.count(v)) << "node " << v << " moved but is not listed";
      }
    }
    for (const Index v : changed) {
      EXPECT_TRUE(moved.count(v)) << "changed node " << v << " not listed";
    }
  }
}

TEST(PathTimes, IncrementalUpdatesMatchARecomputeOnMeasuredTimes) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> seconds(0.1, 3.0);
  for (const Pipeline& p : pipelines())
    check_against_recompute<double>(
        p, [&](std::mt19937& r) { return seconds(r); }, rng);
}

TEST(PathTimes, IncrementalUpdatesMatchARecomputeOnUnits) {
  std::mt19937 rng(2);
  // Few distinct values: many ties between paths.
  for (const Pipeline& p : pipelines())
    check_against_recompute<std::int64_t>(
        p, [](std::mt19937& r) { return static_cast<std::int64_t>(1 + r() % 4); }, rng);
}

TEST(LongestPaths, MakespanAndCriticalSetFollowTheChanges) {
  std::mt19937 rng(3);
  for (const Pipeline& p : pipelines()) {
    const Dag dag(p);
    const auto n = ix(p.size());
    constexpr std::int64_t kShortest = 1, kLongest = 6;
    // A path has 1 to n nodes: its length lies in [kShortest, n * kLongest].
    LongestPaths paths(dag, kShortest, static_cast<std::int64_t>(n) * kLongest);
    std::vector<std::int64_t> duration(n);
    for (auto& d : duration) d = kShortest + static_cast<std::int64_t>(rng() % kLongest);
    paths.reset(duration);
    for (int round = 0; round < 60; ++round) {
      std::vector<Index> changed;
      for (std::size_t k = 0; k < 1 + rng() % 6; ++k) {
        const auto v = static_cast<Index>(rng() % n);
        duration[ix(v)] = kShortest + static_cast<std::int64_t>(rng() % kLongest);
        if (std::find(changed.begin(), changed.end(), v) == changed.end()) changed.push_back(v);
      }
      paths.update(duration, changed);
      PathTimes<std::int64_t> scratch(dag);
      scratch.reset(duration.data());
      std::int64_t makespan = 0;
      for (Index v = 0; v < p.size(); ++v) makespan = std::max(makespan, scratch.through(v));
      ASSERT_EQ(paths.makespan(), makespan) << "round " << round;
      std::set<Index> critical, expected;
      paths.for_each_critical([&](Index v) { EXPECT_TRUE(critical.insert(v).second); });
      for (Index v = 0; v < p.size(); ++v) {
        EXPECT_EQ(paths.head(v), scratch.head(v));
        EXPECT_EQ(paths.tail(v), scratch.tail(v));
        if (scratch.through(v) == makespan) expected.insert(v);
      }
      EXPECT_EQ(critical, expected) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace perseus
