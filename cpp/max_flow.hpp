// A flow with lower and upper bounds on a network of fixed shape, kept from
// one solve to the next.
//
// The min-cut loop solves one maximum flow per step on the critical
// subgraph, and from one step to the next only a few arcs change bounds:
// the cut computations that reach a new piece of their cost curve, and the
// arcs of computations that become critical. Solving each flow from zero
// costs O(network) search phases per step; here the flow persists instead.
// set_bounds() clamps an arc's flow into its new bounds and books the
// difference as an imbalance at its two ends; restore_balance() routes the
// imbalances through the residual network (Dinic from all surplus nodes to
// all deficit nodes at once, so no super source with an arc to every node);
// augment() then adds flow from source to sink: one augmenting path per
// breadth-first search first (a step of the min-cut loop nearly always needs
// exactly one; each search after a push resumes where the last one met the
// first slot that push saturated, rather than at the source), then, for a
// call that needs many, Dinic (before each blocking flow, the level graph is
// cut down to the nodes that lead to the sink). A
// step that changes k arcs costs a few searches over the region they reach,
// not a solve from zero.
//
// Arcs have bounds lower <= flow <= upper; upper may be +infinity (a real
// infinity, never a stand-in big number); an arc with bounds [0, 0] is
// absent. Residual amounts at or below `tolerance` count as zero. Searches
// stamp the nodes they visit, so a search costs what it visits, not O(nodes).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "index.hpp"

namespace perseus {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

class BoundedFlow {
 public:
  BoundedFlow() = default;
  BoundedFlow(const BoundedFlow&) = delete;
  BoundedFlow& operator=(const BoundedFlow&) = delete;

  // Shape, before finalize(): nodes 0..num_nodes-1, arcs with bounds [0, 0].
  void reset(Index num_nodes);
  Index add_arc(Index from, Index to);
  void finalize();

  // Sets an arc's bounds (lower <= upper, lower finite), clamping its flow
  // into them and booking the change as imbalance at its ends.
  void set_bounds(Index arc, double lower, double upper);
  // Every flow back to zero within [0, upper], lower bounds booked as
  // imbalance (a cold start).
  void clear_flows();
  // Routes every imbalance above tolerance from surplus to deficit nodes;
  // false if some cannot be routed (then no flow meets the bounds).
  bool restore_balance(double tolerance);
  // Augments a maximum flow from source to sink, with arc `frozen` (the sink
  // -> source return arc) closed; returns the amount added and books it on
  // `frozen`, so the flow stays a circulation. `frozen` stays closed (bounds
  // equal to its flow) until set_bounds opens it again. Afterwards marked()
  // holds the nodes the source still reaches: the source side of a minimum cut.
  double augment(Index source, Index sink, Index frozen, double tolerance);
  // Whether the sink is reachable from the source through infinite residuals.
  bool has_infinite_path(Index source, Index sink);
  // Whether the last search reached the node.
  bool marked(Index node) const { return stamp_[ix(node)] == epoch_; }
  double flow(Index arc) const { return flow_[ix(arc)]; }
  Index num_nodes() const { return num_nodes_; }
  // Searches and arc visits so far (machine-independent effort).
  std::int64_t work() const { return work_; }

 private:
  // Half-arcs (even id: an arc forward, odd: its reverse) are listed per
  // node in adjacency slots, and a search reads a slot's residual and the
  // node it leads to from two arrays walked front to back; residuals are
  // kept per slot for that reason, and a push writes both of an arc's slots.
  void refresh_residuals(std::size_t arc);
  void push_slot(Index slot, double amount);
  void book(Index node, double amount);  // imbalance: + surplus, - deficit
  // A fresh epoch for the stamps: nothing is marked any more.
  void new_search();
  // Breadth-first levels from the nodes in queue_[0..count) over residuals
  // `usable` says yes to; stops early once `target` (if >= 0) is reached.
  // Returns how many nodes it reached (they are queue_[0..returned)).
  template <typename Usable>
  std::size_t levels_from(std::size_t count, Index target, Usable usable);
  // Takes out of the level graph every node among queue_[0..reached) that
  // has no path to `sink` in it. Searching from the source, levels stop at
  // the sink's, and on pipelines most of what they reach (thousands of
  // nodes) leads nowhere: without this the blocking flow's search walks all
  // of it before it finds the one or two paths there are.
  void keep_paths_to(Index sink, std::size_t reached, double tolerance);
  // One blocking flow of the current level graph from `from`, at most `limit`.
  double blocking_flow(Index from, Index sink, bool to_deficits, double limit, double tolerance);
  // Breadth-first from the source over residuals above tolerance, noting the
  // slot each node was reached by; stops as soon as it reaches the sink.
  // Returns whether it did (if not, the search marked the source side).
  // With `resume`, it starts where the last search first met a slot that
  // push_along_search() then saturated (see there).
  bool search_to(Index source, Index sink, double tolerance, bool resume);
  // Pushes the path's bottleneck along the slots search_to() noted; returns
  // it. Notes where the next search may resume: a search from scratch would
  // visit the same nodes in the same order as the last one up to the first
  // slot (in scan order) that the push saturated, since a push changes only
  // the path's slots (which lose residual) and their partners (which lead
  // back to nodes already reached). So the next search keeps the nodes
  // found before that slot, and their work, and scans on from it.
  double push_along_search(Index source, Index sink, double tolerance);

  Index num_nodes_ = 0;
  std::vector<Index> tail_, head_;            // per arc (even ids; the reverse is id + 1)
  std::vector<double> lower_, upper_, flow_;  // per arc, indexed by id / 2
  std::vector<Index> adj_offset_, adj_;       // CSR: half-arc ids leaving each node, per slot
  std::vector<Index> adj_to_, adj_from_;      // per slot: the node it leads to, and from
  std::vector<double> slot_residual_;         // per slot: its half-arc's residual
  std::vector<Index> slot_of_;                // per half-arc id: its slot
  std::vector<double> imbalance_;
  std::vector<Index> imbalanced_;  // nodes with a booked imbalance
  std::vector<char> is_imbalanced_;
  std::vector<Index> level_, next_arc_, queue_, path_;  // path_: slots
  std::vector<std::uint32_t> stamp_, reaches_sink_;     // reaches_sink_: epoch when it does
  std::vector<Index> reached_by_;                       // per node: the slot search_to() came in by
  std::vector<Index>
      order_;  // per node: its place in search_to()'s queue (the sink: where it would go)
  // Where the next search_to() may resume: the node being scanned (a place
  // in queue_), the slot to scan next, and how many nodes were queued then.
  std::size_t resume_head_ = 0, resume_tail_ = 0;
  Index resume_slot_ = -1;
  std::uint32_t epoch_ = 0;
  std::int64_t work_ = 0;
};

}  // namespace perseus
