// The iteration DAG (cpp/dag.hpp): its edges, its topological order, and
// cycle detection (a schedule order that would deadlock throws).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dag.hpp"

namespace perseus {
namespace {

using Edges = std::set<std::pair<Index, Index>>;

// Nodes are computation ids: a position or a raw int is refused.
static_assert(std::is_invocable_v<decltype(&Dag::successors_begin), const Dag&, ComputationId>);
static_assert(!std::is_invocable_v<decltype(&Dag::successors_begin), const Dag&, Position>);
static_assert(!std::is_invocable_v<decltype(&Dag::predecessors_begin), const Dag&, Index>);

Edges edges_of(const Dag& dag) {
  Edges edges;
  for (ComputationId v(0); v.value() < dag.num_nodes(); ++v)
    for (const ComputationId* s = dag.successors_begin(v); s != dag.successors_end(v); ++s)
      edges.emplace(v.value(), s->value());
  return edges;
}

// The edges as dag.hpp defines them, written out independently.
Edges expected_edges(const Pipeline& p) {
  Edges edges;
  const Index last = p.num_stages() - 1;
  const auto F = Instruction::Forward;
  const auto B = Instruction::Backward;
  for (Index m = 0; m < p.num_microbatches(); ++m) {
    for (Index k = 0; k < last; ++k) {
      edges.emplace(p.id_of(k, m, F), p.id_of(k + 1, m, F));
      edges.emplace(p.id_of(k + 1, m, B), p.id_of(k, m, B));
    }
    edges.emplace(p.id_of(last, m, F), p.id_of(last, m, B));
  }
  for (Index g = 0; g < p.num_gpus(); ++g)
    for (const Index* it = p.order_begin(g); it + 1 < p.order_end(g); ++it) edges.emplace(it[0], it[1]);
  return edges;
}

// Depth-first search for a cycle, the reference for Kahn's algorithm.
bool has_cycle(Index n, const Edges& edges) {
  std::vector<std::vector<Index>> succ(ix(n));
  for (const auto& [u, v] : edges) succ[ix(u)].push_back(v);
  std::vector<int> state(ix(n), 0);  // 0 new, 1 on the stack, 2 done
  std::vector<std::pair<Index, std::size_t>> stack;
  for (Index root = 0; root < n; ++root) {
    if (state[ix(root)] != 0) continue;
    stack.emplace_back(root, 0);
    state[ix(root)] = 1;
    while (!stack.empty()) {
      auto& [u, next] = stack.back();
      if (next == succ[ix(u)].size()) {
        state[ix(u)] = 2;
        stack.pop_back();
        continue;
      }
      const Index v = succ[ix(u)][next++];
      if (state[ix(v)] == 1) return true;
      if (state[ix(v)] == 0) {
        state[ix(v)] = 1;
        stack.emplace_back(v, 0);
      }
    }
  }
  return false;
}

TEST(Dag, OneGpuOneMicrobatchIsAChain) {
  const Pipeline p(ScheduleKind::OneFOneB, 1, 1, 1);
  const Dag dag(p);
  EXPECT_EQ(dag.num_nodes(), 2);
  EXPECT_EQ(dag.num_edges(), 1);  // data and order edge F -> B, merged
  EXPECT_EQ(dag.topological_order(), (std::vector<ComputationId>{ComputationId(0), ComputationId(1)}));
}

TEST(Dag, EdgesAreDataAndOrderMergedAndPredecessorsMirrorThem) {
  for (const auto& [kind, gpus, virtual_stages, microbatches] :
       std::vector<std::tuple<ScheduleKind, Index, Index, Index>>{
           {ScheduleKind::GPipe, 3, 1, 4},
           {ScheduleKind::OneFOneB, 4, 1, 6},
           {ScheduleKind::Interleaved1F1B, 2, 2, 4},
           {ScheduleKind::Interleaved1F1B, 4, 2, 8}}) {
    const Pipeline p(kind, gpus, virtual_stages, microbatches);
    const Dag dag(p);
    const Edges edges = edges_of(dag);
    EXPECT_EQ(edges, expected_edges(p)) << schedule_name(kind);
    EXPECT_EQ(static_cast<std::size_t>(dag.num_edges()), edges.size());  // no duplicates
    Edges mirrored;
    for (ComputationId v(0); v.value() < dag.num_nodes(); ++v)
      for (const ComputationId* q = dag.predecessors_begin(v); q != dag.predecessors_end(v); ++q)
        mirrored.emplace(q->value(), v.value());
    EXPECT_EQ(mirrored, edges);
  }
}

TEST(Dag, TopologicalOrderPutsEveryEdgeForward) {
  const Pipeline p(ScheduleKind::Interleaved1F1B, 4, 3, 8);
  const Dag dag(p);
  const auto& order = dag.topological_order();
  ASSERT_EQ(order.size(), ix(dag.num_nodes()));
  std::vector<Index> position(order.size(), -1);
  for (std::size_t k = 0; k < order.size(); ++k) {
    ASSERT_EQ(position[order[k].index()], -1) << "node " << order[k].value() << " twice";
    position[order[k].index()] = static_cast<Index>(k);
  }
  for (const auto& [u, v] : edges_of(dag)) EXPECT_LT(position[ix(u)], position[ix(v)]);
}

TEST(Dag, AnOrderThatDeadlocksThrows) {
  // Megatron's interleaved table with 4 GPUs, 3 chunks and 5 microbatches
  // (not a multiple of the pipeline size) orders some GPU's computations
  // against the data dependencies: the DAG has a cycle.
  const Pipeline p(ScheduleKind::Interleaved1F1B, 4, 3, 5);
  ASSERT_TRUE(has_cycle(p.size(), expected_edges(p)));
  try {
    const Dag dag(p);
    FAIL() << "no exception for a deadlocking order";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("interleaved-1f1b"), std::string::npos) << message;
    EXPECT_NE(message.find("deadlocks"), std::string::npos) << message;
    EXPECT_NE(message.find("5 microbatches"), std::string::npos) << message;
  }
}

TEST(Dag, ThrowsExactlyWhenTheEdgesHaveACycle) {
  int deadlocks = 0, fine = 0;
  for (const ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B})
    for (Index gpus = 1; gpus <= 5; ++gpus)
      for (Index v = 1; v <= 3; ++v)
        for (Index m = 1; m <= 11; ++m) {
          if ((kind == ScheduleKind::Interleaved1F1B) != (v > 1) || (v > 1 && m < gpus)) continue;
          const Pipeline p(kind, gpus, v, m);
          const bool cycle = has_cycle(p.size(), expected_edges(p));
          bool threw = false;
          try {
            const Dag dag(p);
          } catch (const std::invalid_argument&) {
            threw = true;
          }
          EXPECT_EQ(threw, cycle) << schedule_name(kind) << " " << gpus << "x" << v << " m=" << m;
          (cycle ? deadlocks : fine)++;
        }
  EXPECT_GT(deadlocks, 0);  // the sweep reaches both outcomes
  EXPECT_GT(fine, 0);
}

}  // namespace
}  // namespace perseus
