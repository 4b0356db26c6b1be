// BoundedFlow (cpp/max_flow.hpp): maximum flows and minimum cuts on networks
// whose answer is known, lower bounds, warm starts after set_bounds (and
// searches that replay the last one's order), and the infinite-path query,
// against a plain Edmonds-Karp reference on random ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "max_flow.hpp"

namespace perseus {
namespace {

constexpr double kTol = 1e-9;

struct Arc {
  Index from, to;
  double lower, upper;
};

// A BoundedFlow over `arcs` plus a return arc sink -> source, the way the
// min-cut loop drives it.
class Network {
 public:
  Network(Index num_nodes, std::vector<Arc> arcs, Index source, Index sink)
      : arcs_(std::move(arcs)), source_(source), sink_(sink) {
    flow_.reset(num_nodes);
    for (const Arc& a : arcs_) ids_.push_back(flow_.add_arc(FlowNode(a.from), FlowNode(a.to)));
    return_arc_ = flow_.add_arc(FlowNode(sink), FlowNode(source));
    flow_.finalize();
    for (std::size_t k = 0; k < arcs_.size(); ++k)
      flow_.set_bounds(ids_[k], arcs_[k].lower, arcs_[k].upper);
  }

  // Opens the return arc, routes the imbalances, then augments: the total
  // flow source -> sink (the return arc's flow), or -1 if infeasible.
  double solve() {
    flow_.set_bounds(return_arc_, 0.0, kInfinity);
    if (!flow_.restore_balance(kTol)) return -1.0;
    flow_.augment(FlowNode(source_), FlowNode(sink_), return_arc_, kTol);
    return flow_.flow(return_arc_);
  }

  void set_upper(std::size_t k, double upper) {
    arcs_[k].upper = upper;
    flow_.set_bounds(ids_[k], arcs_[k].lower, upper);
  }
  void set_lower(std::size_t k, double lower) {
    arcs_[k].lower = lower;
    flow_.set_bounds(ids_[k], lower, arcs_[k].upper);
  }

  // Every arc within its bounds, and flow conserved at every node.
  void expect_valid() const {
    std::vector<double> net(ix(flow_.num_nodes()), 0.0);
    for (std::size_t k = 0; k < arcs_.size(); ++k) {
      const double f = flow_.flow(ids_[k]);
      EXPECT_GE(f, arcs_[k].lower - kTol) << "arc " << k;
      EXPECT_LE(f, arcs_[k].upper + kTol) << "arc " << k;
      net[ix(arcs_[k].from)] -= f;
      net[ix(arcs_[k].to)] += f;
    }
    net[ix(sink_)] -= flow_.flow(return_arc_);
    net[ix(source_)] += flow_.flow(return_arc_);
    for (std::size_t v = 0; v < net.size(); ++v) EXPECT_NEAR(net[v], 0.0, 1e-7) << "node " << v;
  }

  // Capacity of the cut the last augment marked: upper bounds of the arcs
  // leaving the source side, minus lower bounds of those entering it.
  double marked_cut_capacity() const {
    double capacity = 0.0;
    for (const Arc& a : arcs_) {
      const bool from_in = flow_.marked(FlowNode(a.from)), to_in = flow_.marked(FlowNode(a.to));
      if (from_in && !to_in) capacity += a.upper;
      if (!from_in && to_in) capacity -= a.lower;
    }
    return capacity;
  }

  BoundedFlow& flow() { return flow_; }
  const BoundedFlow& flow() const { return flow_; }
  FlowArc return_arc() const { return return_arc_; }

 private:
  std::vector<Arc> arcs_;
  std::vector<FlowArc> ids_;
  Index source_, sink_;
  FlowArc return_arc_ = FlowArc::none();
  BoundedFlow flow_;
};

double reference_max_flow(Index n, const std::vector<Arc>& arcs, Index s, Index t);

// Solves `warm` again after its arcs changed to `arcs` and checks it against
// a network built afresh from them and the Edmonds-Karp reference: the same
// flow, a valid one, and the same source side (the nodes the source reaches
// in the residual network of a maximum flow are the same for every maximum
// flow, so the warm network, whose searches replay the last one's order,
// must mark the fresh one's).
void expect_warm_matches_fresh(Network& warm, const std::vector<Arc>& arcs, Index n, Index s, Index t,
                               const std::string& where) {
  Network fresh(n, arcs, s, t);
  const double expected = reference_max_flow(n, arcs, s, t);
  ASSERT_DOUBLE_EQ(fresh.solve(), expected) << where;
  ASSERT_DOUBLE_EQ(warm.solve(), expected) << where;
  warm.expect_valid();
  EXPECT_DOUBLE_EQ(warm.marked_cut_capacity(), expected) << where;
  for (Index v = 0; v < n; ++v)
    ASSERT_EQ(warm.flow().marked(FlowNode(v)), fresh.flow().marked(FlowNode(v)))
        << where << " node " << v;
}

// Edmonds-Karp on upper bounds only (lower bounds zero), for comparison.
double reference_max_flow(Index n, const std::vector<Arc>& arcs, Index s, Index t) {
  std::vector<std::vector<double>> cap(ix(n), std::vector<double>(ix(n), 0.0));
  for (const Arc& a : arcs) cap[ix(a.from)][ix(a.to)] += a.upper;
  double total = 0.0;
  while (true) {
    std::vector<Index> parent(ix(n), -1);
    parent[ix(s)] = s;
    std::deque<Index> queue{s};
    while (!queue.empty() && parent[ix(t)] < 0) {
      const Index u = queue.front();
      queue.pop_front();
      for (Index v = 0; v < n; ++v)
        if (parent[ix(v)] < 0 && cap[ix(u)][ix(v)] > kTol) {
          parent[ix(v)] = u;
          queue.push_back(v);
        }
    }
    if (parent[ix(t)] < 0) return total;
    double amount = kInfinity;
    for (Index v = t; v != s; v = parent[ix(v)])
      amount = std::min(amount, cap[ix(parent[ix(v)])][ix(v)]);
    for (Index v = t; v != s; v = parent[ix(v)]) {
      cap[ix(parent[ix(v)])][ix(v)] -= amount;
      cap[ix(v)][ix(parent[ix(v)])] += amount;
    }
    total += amount;
  }
}

// The network of CLRS figure 26.6: maximum flow 23, minimum cut
// {s, v1, v2, v4} | {v3, t}.
std::vector<Arc> clrs_arcs() {
  return {{0, 1, 0, 16}, {0, 2, 0, 13}, {2, 1, 0, 4},  {1, 3, 0, 12}, {3, 2, 0, 9},
          {2, 4, 0, 14}, {4, 3, 0, 7},  {3, 5, 0, 20}, {4, 5, 0, 4}};
}

TEST(BoundedFlow, KnownMaximumFlowAndMinimumCut) {
  Network net(6, clrs_arcs(), 0, 5);
  EXPECT_DOUBLE_EQ(net.solve(), 23.0);
  net.expect_valid();
  // marked(): the source side of a minimum cut.
  const std::vector<bool> source_side{true, true, true, false, true, false};
  for (Index v = 0; v < 6; ++v)
    EXPECT_EQ(net.flow().marked(FlowNode(v)), source_side[ix(v)]) << "node " << v;
  EXPECT_DOUBLE_EQ(net.marked_cut_capacity(), 23.0);
  EXPECT_GT(net.flow().work(), 0);
}

TEST(BoundedFlow, ManyDisjointPathsAreAllAugmented) {
  // 100 disjoint paths source -> middle_i -> sink of capacity i + 1: more
  // than augment() takes one search at a time before it goes on in phases,
  // so both ways of augmenting carry part of the flow.
  const Index paths = 100, source = 0, sink = 1;
  std::vector<Arc> arcs;
  double expected = 0.0;
  for (Index i = 0; i < paths; ++i) {
    const double capacity = static_cast<double>(i + 1);
    arcs.push_back({source, 2 + i, 0.0, capacity});
    arcs.push_back({2 + i, sink, 0.0, kInfinity});
    expected += capacity;
  }
  Network net(2 + paths, arcs, source, sink);
  EXPECT_NEAR(net.solve(), expected, 1e-9 * expected);
  net.expect_valid();
  EXPECT_NEAR(net.marked_cut_capacity(), expected, 1e-9 * expected);
  for (Index i = 0; i < paths; ++i) EXPECT_FALSE(net.flow().marked(FlowNode(2 + i))) << "middle " << i;
}

TEST(BoundedFlow, AugmentClosesTheReturnArcUntilItIsOpenedAgain) {
  Network net(6, clrs_arcs(), 0, 5);
  ASSERT_DOUBLE_EQ(net.solve(), 23.0);
  // Closed: a second augment finds nothing more and leaves the flow as it is.
  EXPECT_DOUBLE_EQ(net.flow().augment(FlowNode(0), FlowNode(5), net.return_arc(), kTol), 0.0);
  EXPECT_DOUBLE_EQ(net.flow().flow(net.return_arc()), 23.0);
  net.expect_valid();
}

TEST(BoundedFlow, WarmStartAfterShrinkingACutArc) {
  Network net(6, clrs_arcs(), 0, 5);
  ASSERT_DOUBLE_EQ(net.solve(), 23.0);
  net.set_upper(8, 2.0);  // v4 -> t: the cut loses 2
  EXPECT_DOUBLE_EQ(net.solve(), 21.0);
  net.expect_valid();
  EXPECT_DOUBLE_EQ(net.marked_cut_capacity(), 21.0);
}

TEST(BoundedFlow, WarmStartAfterGrowingACutArc) {
  Network net(6, clrs_arcs(), 0, 5);
  ASSERT_DOUBLE_EQ(net.solve(), 23.0);
  net.set_upper(3, 100.0);  // v1 -> v3 no longer limits; s's arcs and v2 -> v4 do
  const double expected = reference_max_flow(
      6,
      [] {
        auto arcs = clrs_arcs();
        arcs[3].upper = 100.0;
        return arcs;
      }(),
      0, 5);
  EXPECT_DOUBLE_EQ(net.solve(), expected);
  EXPECT_GT(expected, 23.0);
  net.expect_valid();
}

TEST(BoundedFlow, LowerBoundsAreMet) {
  // s -> a -> t and s -> b -> t; a -> t must carry at least 3.
  Network net(4, {{0, 1, 0, 10}, {1, 3, 3, 5}, {0, 2, 0, 1}, {2, 3, 0, 10}}, 0, 3);
  EXPECT_DOUBLE_EQ(net.solve(), 6.0);
  net.expect_valid();
  EXPECT_GE(net.flow().flow(FlowArc(1)), 3.0 - kTol);
}

TEST(BoundedFlow, CutCapacityCountsLowerBoundsOfArcsIntoTheSourceSide) {
  // a -> b carries at most 5 and b -> a at least 2 back: at most 3 reach t.
  // The minimum cut {s, a} | {b, t} has capacity 5 - 2.
  Network net(4, {{0, 1, 0, 10}, {1, 2, 0, 5}, {2, 1, 2, 4}, {2, 3, 0, 10}}, 0, 3);
  EXPECT_DOUBLE_EQ(net.solve(), 3.0);
  net.expect_valid();
  const std::vector<bool> source_side{true, true, false, false};
  for (Index v = 0; v < 4; ++v)
    EXPECT_EQ(net.flow().marked(FlowNode(v)), source_side[ix(v)]) << "node " << v;
  EXPECT_DOUBLE_EQ(net.marked_cut_capacity(), 3.0);
}

TEST(BoundedFlow, InfeasibleLowerBoundIsReported) {
  // a -> t needs 3, but at most 2 can reach a.
  Network net(3, {{0, 1, 0, 2}, {1, 2, 3, 5}}, 0, 2);
  EXPECT_EQ(net.solve(), -1.0);
}

TEST(BoundedFlow, ClearFlowsThenRestoreIsAColdStart) {
  Network net(6, clrs_arcs(), 0, 5);
  ASSERT_DOUBLE_EQ(net.solve(), 23.0);
  net.set_upper(8, 1.0);
  net.flow().clear_flows();
  for (Index a = 0; a < 9; ++a) EXPECT_EQ(net.flow().flow(FlowArc(a)), 0.0);
  EXPECT_DOUBLE_EQ(net.solve(), 20.0);
  net.expect_valid();
}

TEST(BoundedFlow, InfinitePaths) {
  // s -> a -> t with a -> t infinite and s -> a finite: no infinite path.
  Network finite(3, {{0, 1, 0, 5}, {1, 2, 0, kInfinity}}, 0, 2);
  EXPECT_FALSE(finite.flow().has_infinite_path(FlowNode(0), FlowNode(2)));
  EXPECT_DOUBLE_EQ(finite.solve(), 5.0);
  finite.expect_valid();

  Network infinite(3, {{0, 1, 0, kInfinity}, {1, 2, 0, kInfinity}, {0, 2, 0, 1}}, 0, 2);
  EXPECT_TRUE(infinite.flow().has_infinite_path(FlowNode(0), FlowNode(2)));
  EXPECT_TRUE(infinite.flow().marked(FlowNode(1)));
  // The min-cut loop asks first; augmenting along an infinite path is a bug.
  infinite.flow().set_bounds(infinite.return_arc(), 0.0, kInfinity);
  ASSERT_TRUE(infinite.flow().restore_balance(kTol));
  EXPECT_THROW(infinite.flow().augment(FlowNode(0), FlowNode(2), infinite.return_arc(), kTol),
               std::logic_error);
}

TEST(BoundedFlow, ResidualsWithinToleranceCountAsZero) {
  Network net(3, {{0, 1, 0, 1e-12}, {1, 2, 0, 1}}, 0, 2);
  EXPECT_EQ(net.solve(), 0.0);
  EXPECT_TRUE(net.flow().marked(FlowNode(0)));
  EXPECT_FALSE(net.flow().marked(FlowNode(1)));
}

TEST(BoundedFlow, ZeroBoundArcsAreAbsent) {
  Network net(4, {{0, 1, 0, 3}, {1, 3, 0, 0}, {0, 2, 0, 2}, {2, 3, 0, 2}}, 0, 3);
  EXPECT_DOUBLE_EQ(net.solve(), 2.0);
  EXPECT_TRUE(net.flow().marked(FlowNode(1)));
}

// Random integer networks: the value matches Edmonds-Karp, the marked side's
// cut has that capacity, and warm starts after random bound changes agree
// with a solve from zero.
TEST(BoundedFlow, RandomNetworksMatchTheReferenceWarmAndCold) {
  std::mt19937 rng(20241);
  for (int trial = 0; trial < 200; ++trial) {
    const Index n = 2 + static_cast<Index>(rng() % 9);
    const Index s = 0, t = n - 1;
    std::vector<Arc> arcs;
    const int m = 1 + static_cast<int>(rng() % 30);
    for (int k = 0; k < m; ++k) {
      const auto u = static_cast<Index>(rng() % ix(n));
      const auto v = static_cast<Index>(rng() % ix(n));
      if (u == v || u == t || v == s) continue;
      arcs.push_back({u, v, 0.0, static_cast<double>(rng() % 10)});
    }
    Network warm(n, arcs, s, t);
    ASSERT_DOUBLE_EQ(warm.solve(), reference_max_flow(n, arcs, s, t)) << "trial " << trial;
    warm.expect_valid();
    EXPECT_DOUBLE_EQ(warm.marked_cut_capacity(), warm.flow().flow(warm.return_arc()));
    for (int change = 0; change < 5 && !arcs.empty(); ++change) {
      const std::size_t k = rng() % arcs.size();
      arcs[k].upper = static_cast<double>(rng() % 10);
      warm.set_upper(k, arcs[k].upper);
      expect_warm_matches_fresh(warm, arcs, n, s, t,
                                "trial " + std::to_string(trial) + " change " + std::to_string(change));
    }
  }
}

// A search from scratch replays the last one's order only between the same
// source and sink: here the first augment (0 -> 1) finds nothing and the
// second (2 -> 3, with no arc changed in between) must still find its path.
TEST(BoundedFlow, ASearchBetweenOtherNodesStartsAfresh) {
  BoundedFlow flow;
  flow.reset(4);
  const FlowArc arc = flow.add_arc(FlowNode(2), FlowNode(3));
  const FlowArc back_01 = flow.add_arc(FlowNode(1), FlowNode(0));
  const FlowArc back_23 = flow.add_arc(FlowNode(3), FlowNode(2));
  flow.finalize();
  flow.set_bounds(arc, 0.0, 5.0);
  EXPECT_EQ(flow.augment(FlowNode(0), FlowNode(1), back_01, kTol), 0.0);
  EXPECT_EQ(flow.augment(FlowNode(2), FlowNode(3), back_23, kTol), 5.0);
  EXPECT_TRUE(flow.marked(FlowNode(2)));
  EXPECT_FALSE(flow.marked(FlowNode(3)));
}

// A search from scratch replays the last search's order up to the first node
// whose arcs changed usability. Long runs of changes on layered networks
// (the min-cut loop's shape: most of the network unchanged between solves,
// some solves with no change at all) keep the flow, the cut and the source
// side equal to those of a network built afresh.
TEST(BoundedFlow, SearchesReplayingTheLastOrderFindTheSameSourceSide) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 40; ++trial) {
    const Index layers = 3 + static_cast<Index>(rng() % 5), width = 2 + static_cast<Index>(rng() % 4);
    const Index n = 2 + layers * width, s = 0, t = 1;
    const auto node = [&](Index layer, Index k) { return 2 + layer * width + k; };
    std::vector<Arc> arcs;
    for (Index k = 0; k < width; ++k) {
      arcs.push_back({s, node(0, k), 0.0, static_cast<double>(5 + rng() % 10)});
      arcs.push_back({node(layers - 1, k), t, 0.0, static_cast<double>(5 + rng() % 10)});
    }
    for (Index layer = 0; layer + 1 < layers; ++layer)
      for (Index k = 0; k < width; ++k)
        for (Index j = 0; j < width; ++j)
          if (rng() % 2 == 0)
            arcs.push_back({node(layer, k), node(layer + 1, j), 0.0, static_cast<double>(rng() % 8)});
    Network warm(n, arcs, s, t);
    warm.solve();
    for (int change = 0; change < 30; ++change) {
      if (rng() % 4 != 0) {  // one in four solves changes nothing
        const std::size_t k = rng() % arcs.size();
        arcs[k].upper = static_cast<double>(rng() % 12);
        warm.set_upper(k, arcs[k].upper);
      }
      expect_warm_matches_fresh(warm, arcs, n, s, t,
                                "trial " + std::to_string(trial) + " change " + std::to_string(change));
    }
  }
}

// The stated preconditions are checked in debug builds (PERSEUS_EXPECT
// throws std::logic_error; the sanitize CI job builds Debug) and cost
// nothing in release builds, where this test has nothing to check.
TEST(BoundedFlow, ViolatedPreconditionsThrowInDebugBuilds) {
  if (!kPreconditionsChecked) GTEST_SKIP() << "an NDEBUG build: preconditions compile away";
  BoundedFlow flow;
  flow.reset(3);
  EXPECT_THROW(flow.add_arc(FlowNode(0), FlowNode(3)), std::logic_error);  // past the last node
  EXPECT_THROW(flow.add_arc(FlowNode::none(), FlowNode(1)), std::logic_error);
  const FlowArc arc = flow.add_arc(FlowNode(0), FlowNode(1));
  const FlowArc back = flow.add_arc(FlowNode(1), FlowNode(0));
  EXPECT_THROW(flow.set_bounds(arc, 0.0, 1.0), std::logic_error);  // before finalize()
  flow.finalize();
  EXPECT_THROW(flow.add_arc(FlowNode(1), FlowNode(2)), std::logic_error);  // after finalize()
  EXPECT_THROW(flow.set_bounds(arc, 2.0, 1.0), std::logic_error);          // lower > upper
  EXPECT_THROW(flow.set_bounds(arc, -1.0, 1.0), std::logic_error);         // lower < 0
  EXPECT_THROW(flow.set_bounds(arc, kInfinity, kInfinity), std::logic_error);
  EXPECT_THROW(flow.set_bounds(FlowArc(2), 0.0, 1.0), std::logic_error);  // no such arc
  EXPECT_THROW(flow.flow(FlowArc(7)), std::logic_error);
  EXPECT_THROW(flow.augment(FlowNode(0), FlowNode(0), back, kTol), std::logic_error);
  EXPECT_THROW(flow.augment(FlowNode(0), FlowNode(1), arc, kTol),
               std::logic_error);  // not sink -> source
  EXPECT_THROW(flow.has_infinite_path(FlowNode(0), FlowNode(5)), std::logic_error);
  EXPECT_THROW((void)flow.marked(FlowNode::none()), std::logic_error);
  // The checks reject only what is wrong: the same calls, right, go through.
  flow.set_bounds(arc, 0.0, 1.0);
  flow.set_bounds(back, 0.0, kInfinity);
  ASSERT_TRUE(flow.restore_balance(kTol));
  EXPECT_DOUBLE_EQ(flow.augment(FlowNode(0), FlowNode(1), back, kTol), 1.0);
  EXPECT_DOUBLE_EQ(flow.flow(arc), 1.0);
}

}  // namespace
}  // namespace perseus
