// The dependency DAG of one training iteration, activity-on-node form.
//
// Nodes are the computations of a Pipeline (same ids: ComputationId). Edges are
//   data:  F(k, m) -> F(k+1, m),  F(last, m) -> B(last, m),  B(k+1, m) -> B(k, m)
//   order: consecutive computations in one GPU's execution order.
// Duplicate edges are merged. Adjacency is stored as CSR in both directions,
// together with one topological order; building fails on a cycle (a schedule
// order that would deadlock).
#pragma once

#include <vector>

#include "pipeline.hpp"

namespace perseus {

// Throws std::invalid_argument, as the Dag constructor does, if the
// pipeline's orders would deadlock; builds the DAG and drops it.
void check_deadlock_free(const Pipeline& pipeline);

class Dag {
 public:
  // Throws std::invalid_argument if the schedule's order contradicts the data
  // dependencies (the pipeline could never finish).
  explicit Dag(const Pipeline& pipeline);

  Index num_nodes() const { return num_nodes_; }
  Index num_edges() const { return static_cast<Index>(succ_.size()); }

  const ComputationId* successors_begin(ComputationId v) const {
    return succ_.data() + succ_offset_[node(v)];
  }
  const ComputationId* successors_end(ComputationId v) const {
    return succ_.data() + succ_offset_[node(v) + 1];
  }
  const ComputationId* predecessors_begin(ComputationId v) const {
    return pred_.data() + pred_offset_[node(v)];
  }
  const ComputationId* predecessors_end(ComputationId v) const {
    return pred_.data() + pred_offset_[node(v) + 1];
  }

  // Every edge goes from an earlier to a later position in this order.
  const std::vector<ComputationId>& topological_order() const { return topo_; }

 private:
  std::size_t node(ComputationId v) const {
    PERSEUS_EXPECT(v.valid() && v.value() < num_nodes_, "Dag: no such node");
    return v.index();
  }

  Index num_nodes_;
  std::vector<Index> succ_offset_, pred_offset_;
  std::vector<ComputationId> succ_, pred_;
  std::vector<ComputationId> topo_;
};

}  // namespace perseus
