// Incremental longest paths (cpp/path_times.hpp, cpp/longest_path.hpp):
// after random batches of duration changes, update() agrees exactly with a
// recompute from scratch in both of its modes (following the moves and
// sweeping), moved() lists exactly the changed nodes and those whose head
// or tail changed, in its documented order, and LongestPaths' makespan and
// position view match; and the min-cut loop's test for a critical
// dependency agrees with its definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <type_traits>
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

// Computation ids and positions do not mix: each accessor takes its own role.
static_assert(
    std::is_invocable_v<decltype(&PathTimes<double>::head), const PathTimes<double>&, ComputationId>);
static_assert(
    !std::is_invocable_v<decltype(&PathTimes<double>::head), const PathTimes<double>&, Position>);
static_assert(!std::is_invocable_v<decltype(&PathTimes<double>::head_at), const PathTimes<double>&,
                                   ComputationId>);
static_assert(!std::is_invocable_v<decltype(&PathTimes<double>::node_at), const PathTimes<double>&,
                                   ComputationId>);
static_assert(
    !std::is_invocable_v<decltype(&PathTimes<double>::head), const PathTimes<double>&, Index>);

TEST(PathTimes, HandComputedChain) {
  // One GPU, two microbatches of 1F1B: F0 -> B0 -> F1 -> B1 (ids 0, 1, 2, 3).
  const Pipeline p(ScheduleKind::OneFOneB, 1, 1, 2);
  const Dag dag(p);
  PathTimes<double> times(dag);
  const std::vector<double> duration{1.0, 2.0, 3.0, 4.0};
  times.reset(duration.data());
  EXPECT_EQ(times.head(ComputationId(0)), 0.0);
  EXPECT_EQ(times.head(ComputationId(1)), 1.0);
  EXPECT_EQ(times.head(ComputationId(2)), 3.0);
  EXPECT_EQ(times.head(ComputationId(3)), 6.0);
  EXPECT_EQ(times.tail(ComputationId(0)), 10.0);
  EXPECT_EQ(times.tail(ComputationId(3)), 4.0);
  for (Index v = 0; v < 4; ++v) EXPECT_EQ(times.through(ComputationId(v)), 10.0);
  EXPECT_EQ(times.moved().size(), 4u);
}

// Checks random batches on one pipeline; marks in mode_seen which update()
// modes ran ([0] following, [1] sweeping).
template <typename Value, typename Draw>
void check_against_recompute(const Pipeline& p, Draw draw, std::mt19937& rng, bool* mode_seen) {
  const Dag dag(p);
  const auto n = ix(p.size());
  std::vector<Value> duration(n);
  for (auto& d : duration) d = draw(rng);
  PathTimes<Value> incremental(dag);
  incremental.reset(duration.data());
  for (int round = 0; round < 60; ++round) {
    std::vector<Value> head_before(n), tail_before(n);
    for (std::size_t v = 0; v < n; ++v) {
      head_before[v] = incremental.head(ComputationId(static_cast<Index>(v)));
      tail_before[v] = incremental.tail(ComputationId(static_cast<Index>(v)));
    }
    // A batch of 1..8 changes (repeats and no-op changes included); every
    // third batch only slows nodes down (update()'s path for reclamation);
    // every seventh redraws most nodes, so that most times move and the
    // next batches sweep; every other batch after a redraw is empty (nothing
    // may move, in either mode).
    std::vector<ComputationId> changed;
    const auto batch = round % 7 == 6 ? 2 * n : round % 14 == 7 ? 0 : 1 + rng() % 8;
    const bool slower_only = round % 3 == 0;
    for (std::size_t k = 0; k < batch; ++k) {
      const auto v = static_cast<Index>(rng() % n);
      const Value drawn = draw(rng);
      if (rng() % 5 != 0) duration[ix(v)] = slower_only ? std::max(duration[ix(v)], drawn) : drawn;
      if (std::find(changed.begin(), changed.end(), ComputationId(v)) == changed.end())
        changed.push_back(ComputationId(v));
    }
    mode_seen[incremental.sweeps_next(changed.size())] = true;
    incremental.update(duration.data(), changed.data(), changed.data() + changed.size());
    PathTimes<Value> scratch(dag);
    scratch.reset(duration.data());
    for (Index v = 0; v < p.size(); ++v) {
      ASSERT_EQ(incremental.head(ComputationId(v)), scratch.head(ComputationId(v)))
          << "head of " << v << " in round " << round;
      ASSERT_EQ(incremental.tail(ComputationId(v)), scratch.tail(ComputationId(v)))
          << "tail of " << v << " in round " << round;
    }
    // moved(): the changed nodes as given, then the nodes whose head moved
    // in topological order, then those whose tail alone moved, in reverse.
    std::vector<ComputationId> expected(changed);
    std::vector<char> listed(n, 0);
    for (const ComputationId v : changed) listed[v.index()] = 1;
    for (Position q(0); q.index() < n; ++q) {
      const ComputationId v = scratch.node_at(q);
      if (!listed[v.index()] && scratch.head(v) != head_before[v.index()]) {
        listed[v.index()] = 1;
        expected.push_back(v);
      }
    }
    for (std::size_t q = n; q-- > 0;) {
      const ComputationId v = scratch.node_at(Position(static_cast<Index>(q)));
      if (!listed[v.index()] && scratch.tail(v) != tail_before[v.index()]) expected.push_back(v);
    }
    ASSERT_EQ(incremental.moved(), expected) << "round " << round;
  }
}

TEST(PathTimes, IncrementalUpdatesMatchARecomputeOnMeasuredTimes) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> seconds(0.1, 3.0);
  bool mode_seen[2] = {false, false};
  for (const Pipeline& p : pipelines())
    check_against_recompute<double>(
        p, [&](std::mt19937& r) { return seconds(r); }, rng, mode_seen);
  EXPECT_TRUE(mode_seen[0] && mode_seen[1]) << "both update modes should have run";
}

TEST(PathTimes, IncrementalUpdatesMatchARecomputeOnUnits) {
  std::mt19937 rng(2);
  // Few distinct values: many ties between paths.
  bool mode_seen[2] = {false, false};
  for (const Pipeline& p : pipelines())
    check_against_recompute<std::int64_t>(
        p, [](std::mt19937& r) { return static_cast<std::int64_t>(1 + r() % 4); }, rng, mode_seen);
  EXPECT_TRUE(mode_seen[0] && mode_seen[1]) << "both update modes should have run";
}

TEST(LongestPaths, TimesFollowTheChangesInBothModes) {
  std::mt19937 rng(3);
  for (const Pipeline& p : pipelines()) {
    const Dag dag(p);
    const auto n = ix(p.size());
    constexpr std::int64_t kShortest = 1, kLongest = 6;
    // A path has 1 to n nodes: its length lies in [kShortest, n * kLongest].
    LongestPaths paths(dag, kShortest, static_cast<std::int64_t>(n) * kLongest);
    IdVector<ComputationId, std::int64_t> duration(n);
    for (auto& d : duration) d = kShortest + static_cast<std::int64_t>(rng() % kLongest);
    paths.reset(duration);
    bool followed = false, swept = false;
    for (int round = 0; round < 90; ++round) {
      // Thirty rounds of a few random changes, thirty that redraw every
      // duration (most times move: the sweeping mode), thirty that rewrite
      // one duration with its own value (nothing moves: back to following).
      std::vector<ComputationId> changed;
      if (round / 30 == 1) {
        for (ComputationId v(0); v.value() < p.size(); ++v) {
          duration[v] = kShortest + static_cast<std::int64_t>(rng() % kLongest);
          changed.push_back(v);
        }
      } else if (round / 30 == 2) {
        changed.push_back(ComputationId(static_cast<Index>(rng() % n)));
      } else {
        for (std::size_t k = 0; k < 1 + rng() % 6; ++k) {
          const ComputationId v(static_cast<Index>(rng() % n));
          duration[v] = kShortest + static_cast<std::int64_t>(rng() % kLongest);
          if (std::find(changed.begin(), changed.end(), v) == changed.end()) changed.push_back(v);
        }
      }
      (paths.times().sweeps_next(changed.size()) ? swept : followed) = true;
      paths.update(duration, changed);
      PathTimes<std::int64_t> scratch(dag);
      scratch.reset(duration.data());
      std::int64_t makespan = 0;
      for (Index v = 0; v < p.size(); ++v)
        makespan = std::max(makespan, scratch.through(ComputationId(v)));
      ASSERT_EQ(paths.makespan(), makespan) << "round " << round;
      for (Index v = 0; v < p.size(); ++v) {
        ASSERT_EQ(paths.head(ComputationId(v)), scratch.head(ComputationId(v))) << "round " << round;
        ASSERT_EQ(paths.tail(ComputationId(v)), scratch.tail(ComputationId(v))) << "round " << round;
      }
      // The position view agrees with the node view.
      const PathTimes<std::int64_t>& times = paths.times();
      for (Position q(0); q.index() < n; ++q) {
        const ComputationId v = times.node_at(q);
        ASSERT_EQ(times.position_of(v), q);
        ASSERT_EQ(times.head_at(q), scratch.head(v));
        ASSERT_EQ(times.tail_at(q), scratch.tail(v));
        ASSERT_EQ(times.duration_at(q), duration[v]);
      }
    }
    EXPECT_TRUE(followed && swept) << "both update modes should have run";
  }
}

// The min-cut loop (PhillipsDessouky::sync_network) opens a dependency
// p -> s of a critical p when head(p) + d(p) + tail(s) equals the makespan,
// instead of asking whether s is critical and starts as p ends. Both must
// pick the same dependencies at every step, with the times update() keeps.
// The oracle here computes earliest finishes and longest paths to the end
// straight from the DAG (its own passes, not PathTimes) and applies the
// definition: both ends on a longest path, and s starts as p finishes.
TEST(LongestPaths, TheCriticalDependencyTestMatchesItsDefinition) {
  std::mt19937 rng(4);
  std::int64_t tight_seen = 0, loose_seen = 0;
  for (const Pipeline& p : pipelines()) {
    const Dag dag(p);
    const auto n = ix(p.size());
    constexpr std::int64_t kShortest = 1, kLongest = 4;  // few values: many ties
    LongestPaths paths(dag, kShortest, static_cast<std::int64_t>(n) * kLongest);
    IdVector<ComputationId, std::int64_t> duration(n);
    for (auto& d : duration) d = kShortest + static_cast<std::int64_t>(rng() % kLongest);
    paths.reset(duration);
    for (int round = 0; round < 60; ++round) {
      // A cut-like batch: a few computations shorter or longer by one unit.
      std::vector<ComputationId> changed;
      for (std::size_t k = 0; k < 1 + rng() % 6; ++k) {
        const ComputationId v(static_cast<Index>(rng() % n));
        const std::int64_t d = duration[v] + (rng() % 2 == 0 ? -1 : 1);
        duration[v] = std::clamp(d, kShortest, kLongest);
        if (std::find(changed.begin(), changed.end(), v) == changed.end()) changed.push_back(v);
      }
      paths.update(duration, changed);
      // Oracle: start and finish of every node, and its longest way to the end.
      std::vector<std::int64_t> start(n, 0), to_end(n, 0);
      std::int64_t makespan = 0;
      for (const ComputationId v : dag.topological_order()) {
        for (const ComputationId* q = dag.predecessors_begin(v); q != dag.predecessors_end(v); ++q)
          start[v.index()] = std::max(start[v.index()], start[q->index()] + duration[*q]);
        makespan = std::max(makespan, start[v.index()] + duration[v]);
      }
      const std::vector<ComputationId>& order = dag.topological_order();
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        std::int64_t after = 0;
        for (const ComputationId* s = dag.successors_begin(*it); s != dag.successors_end(*it); ++s)
          after = std::max(after, to_end[s->index()]);
        to_end[it->index()] = duration[*it] + after;
      }
      ASSERT_EQ(paths.makespan(), makespan) << "round " << round;
      const auto critical = [&](ComputationId v) {
        return start[v.index()] + to_end[v.index()] == makespan;
      };
      for (ComputationId v(0); v.value() < p.size(); ++v) {
        if (!critical(v)) continue;
        for (const ComputationId* s = dag.successors_begin(v); s != dag.successors_end(v); ++s) {
          const bool defined = critical(*s) && start[v.index()] + duration[v] == start[s->index()];
          const bool tested = paths.head(v) + duration[v] + paths.tail(*s) == paths.makespan();
          ASSERT_EQ(tested, defined)
              << "dependency " << v.value() << " -> " << s->value() << " in round " << round;
          ++(defined ? tight_seen : loose_seen);
        }
      }
    }
  }
  // Both kinds must occur, or the comparison above proves nothing.
  EXPECT_GT(tight_seen, 100);
  EXPECT_GT(loose_seen, 100);
}

}  // namespace
}  // namespace perseus
