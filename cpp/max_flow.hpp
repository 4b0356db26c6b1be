// Maximum flow on a residual network whose shape is fixed once and whose
// capacities change between solves: Dinic's algorithm (blocking flows on BFS
// level graphs), O(V^2 E) worst case, far less on the shallow, wide critical
// subgraphs of pipeline DAGs.
//
// Capacities are doubles; +infinity is a real capacity (never a stand-in big
// number). Callers must make sure no augmenting path is infinite (see
// has_infinite_path) before calling max_flow; residual amounts at or below
// `tolerance` count as zero.
#pragma once

#include <limits>
#include <vector>

#include "pipeline.hpp"

namespace perseus {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

class FlowNetwork {
 public:
  explicit FlowNetwork(Index num_nodes);
  FlowNetwork(const FlowNetwork&) = delete;
  FlowNetwork& operator=(const FlowNetwork&) = delete;

  // Adds the arc from -> to (and its reverse, id ^ 1). Only before finalize().
  Index add_arc(Index from, Index to);
  // Freezes the shape and allocates every scratch array.
  void finalize();

  Index num_arcs() const { return static_cast<Index>(head_.size()); }
  // Sets the arc's capacity with zero flow on it (its reverse gets 0 residual).
  void set_capacity(Index arc, double capacity) {
    residual_[static_cast<std::size_t>(arc)] = capacity;
    residual_[static_cast<std::size_t>(arc ^ 1)] = 0.0;
  }
  void clear_arc(Index arc) { set_capacity(arc, 0.0); }
  double residual(Index arc) const { return residual_[static_cast<std::size_t>(arc)]; }
  // Flow currently on a forward arc whose capacity was set to `capacity`.
  double flow(Index arc) const { return residual_[static_cast<std::size_t>(arc ^ 1)]; }

  // Augments a maximum flow from source to sink; returns the amount added.
  double max_flow(Index source, Index sink, double tolerance);
  // Whether the sink is reachable from the source through arcs of infinite residual.
  bool has_infinite_path(Index source, Index sink);
  // BFS levels from source in the residual network: >= 0 exactly for the
  // reachable nodes (valid until the next call).
  const std::vector<Index>& reachable_from(Index source, double tolerance);

 private:
  // Fills level_ with BFS distances over arcs whose residual is `usable`.
  template <typename Usable>
  void breadth_first(Index source, Usable usable);
  bool build_levels(Index source, Index sink, double tolerance);
  double augment_blocking_flow(Index source, Index sink, double tolerance);

  Index num_nodes_;
  bool finalized_ = false;
  std::vector<Index> tail_, head_;
  std::vector<double> residual_;
  std::vector<Index> adj_offset_, adj_;  // CSR: arcs leaving each node
  std::vector<Index> level_, next_arc_, queue_, path_;
};

}  // namespace perseus
