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
// not a solve from zero. A search from scratch replays the last search's
// breadth-first order up to the first node it scanned whose arcs changed
// usability since: only usability (residual above the tolerance) decides a
// breadth-first search, so the order up to there is the same, and the
// search goes on from there. On the min-cut loop most of the network is
// unchanged between cuts: this replays 40 % of the nodes the searches
// reach at user 16 x 128 and at interleaved V=8 16 x 64, and takes 17 % off
// a solve of the latter (bench/results/search-replay-2026-12-07.txt); the
// cuts and flows are bit for bit those of a search from scratch.
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
  // Preconditions: num_nodes >= 0; both ends of an arc are nodes of the
  // network; add_arc() only before finalize(), everything below only after.
  void reset(Index num_nodes);
  FlowArc add_arc(FlowNode from, FlowNode to);
  void finalize();

  // Sets an arc's bounds (precondition: 0 <= lower <= upper, lower finite),
  // clamping its flow into them and booking the change as imbalance at its ends.
  void set_bounds(FlowArc arc, double lower, double upper);
  // Every flow back to zero within [0, upper], lower bounds booked as
  // imbalance (a cold start).
  void clear_flows();
  // Routes every imbalance above tolerance from surplus to deficit nodes;
  // false if some cannot be routed (then no flow meets the bounds).
  bool restore_balance(double tolerance);
  // Augments a maximum flow from source to sink (precondition: two different
  // nodes, `frozen` an arc from sink to source), with arc `frozen` closed; returns the amount added and
  // books it on `frozen`, so the flow stays a circulation. `frozen` stays closed (bounds equal to its
  // flow) until set_bounds opens it again. Afterwards marked() holds the nodes the source still
  // reaches: the source side of a minimum cut.
  double augment(FlowNode source, FlowNode sink, FlowArc frozen, double tolerance);
  // Whether the sink is reachable from the source through infinite residuals.
  bool has_infinite_path(FlowNode source, FlowNode sink);
  // Whether the last search reached the node.
  bool marked(FlowNode node) const { return stamp_[node] == epoch_; }
  double flow(FlowArc arc) const {
    PERSEUS_EXPECT(arc.index() < flow_.size(), "BoundedFlow: no such arc");
    return flow_[arc.index()];
  }
  Index num_nodes() const { return num_nodes_; }
  // Searches and arc visits so far (machine-independent effort).
  std::int64_t work() const { return work_; }

 private:
  // Half-arcs (even id: an arc forward, odd: its reverse) are listed per
  // node in adjacency slots, and a search reads a slot's residual and the
  // node it leads to from two arrays walked front to back; residuals are
  // kept per slot for that reason, and a push writes both of an arc's slots.
  void refresh_residuals(std::size_t arc);
  // A node's slots are [first_slot(v), end_slot(v)).
  Index first_slot(FlowNode v) const { return adj_offset_[v.index()]; }
  Index end_slot(FlowNode v) const { return adj_offset_[v.index() + 1]; }
  // Whether v is a node of the network (precondition checks).
  bool has_node(FlowNode v) const { return v.valid() && v.value() < num_nodes_; }
  void push_slot(Index slot, double amount);
  void book(FlowNode node, double amount);  // imbalance: + surplus, - deficit
  // A fresh epoch for the stamps: nothing is marked any more.
  void new_search();
  // Breadth-first levels from the nodes in queue_[0..count) over residuals
  // `usable` says yes to; stops early once `target` (if valid) is reached.
  // Returns how many nodes it reached (they are queue_[0..returned)).
  template <typename Usable>
  std::size_t levels_from(std::size_t count, FlowNode target, Usable usable);
  // Takes out of the level graph every node among queue_[0..reached) that
  // has no path to `sink` in it. Searching from the source, levels stop at
  // the sink's, and on pipelines most of what they reach (thousands of
  // nodes) leads nowhere: without this the blocking flow's search walks all
  // of it before it finds the one or two paths there are.
  void keep_paths_to(FlowNode sink, std::size_t reached, double tolerance);
  // One blocking flow of the current level graph from `from`, at most `limit`.
  double blocking_flow(FlowNode from, FlowNode sink, bool to_deficits, double limit, double tolerance);
  // Breadth-first from the source over residuals above tolerance, noting the
  // slot each node was reached by; stops as soon as it reaches the sink.
  // Returns whether it did (if not, the search marked the source side).
  // With `resume`, it starts where the last search first met a slot that
  // push_along_search() then saturated (see there); without, where the last
  // search's order first meets a node whose slots changed usability since
  // (see above).
  bool search_to(FlowNode source, FlowNode sink, double tolerance, bool resume);
  // Pushes the path's bottleneck along the slots search_to() noted; returns
  // it. Notes where the next search may resume: a search from scratch would
  // visit the same nodes in the same order as the last one up to the first
  // slot (in scan order) that the push saturated, since a push changes only
  // the path's slots (which lose residual) and their partners (which lead
  // back to nodes already reached). So the next search keeps the nodes
  // found before that slot, and their work, and scans on from it.
  double push_along_search(FlowNode source, FlowNode sink, double tolerance);

  // Arrays per arc are indexed by FlowArc (half-arc ids 2a and 2a + 1 are
  // its two directions), per node by FlowNode; slots and half-arc ids are
  // plain Index, used only here.
  Index num_nodes_ = 0;
  bool finalized_ = false;
  std::vector<FlowNode> tail_, head_;         // per arc
  std::vector<double> lower_, upper_, flow_;  // per arc
  std::vector<Index> adj_offset_;             // CSR: num_nodes + 1 offsets into the slots
  std::vector<Index> adj_;                    // per slot: the half-arc id it holds
  std::vector<FlowNode> adj_to_, adj_from_;   // per slot: the node it leads to, and from
  std::vector<double> slot_residual_;         // per slot: its half-arc's residual
  std::vector<Index> slot_of_;                // per half-arc id: its slot
  IdVector<FlowNode, double> imbalance_;
  std::vector<FlowNode> imbalanced_;  // nodes with a booked imbalance
  IdVector<FlowNode, char> is_imbalanced_;
  IdVector<FlowNode, Index> level_, next_arc_;              // next_arc_: a slot
  std::vector<FlowNode> queue_, sink_queue_;                // sink_queue_: keep_paths_to()'s search
  std::vector<Index> path_;                                 // slots
  IdVector<FlowNode, std::uint32_t> stamp_, reaches_sink_;  // reaches_sink_: epoch when it does
  IdVector<FlowNode, Index> reached_by_;                    // per node: the slot search_to() came in by
  // Per node: its place in search_to()'s queue (the sink: where it would go).
  IdVector<FlowNode, Index> order_;
  // Where the next search_to() may resume: the node being scanned (a place
  // in search_queue_), the slot to scan next, and how many nodes were queued then.
  std::size_t resume_head_ = 0, resume_tail_ = 0;
  Index resume_slot_ = -1;
  // search_to()'s own queue (other searches reuse queue_), kept after it
  // returns; node k of it began its scan with tail_before_[k] nodes queued.
  // After a search that found no path (it scanned every node it queued,
  // last_queued_ of them, from last_source_ to last_sink_), a later search
  // from scratch between the same nodes replays that order up to the first
  // node one of whose slots changed usability since (touched_), and scans
  // on from there. A search that met the sink leaves nothing to replay
  // (last_queued_ = 0): in augment() one that resumes it always follows.
  std::vector<FlowNode> search_queue_;
  std::vector<Index> tail_before_;
  std::size_t last_queued_ = 0;
  FlowNode last_source_ = FlowNode::none(), last_sink_ = FlowNode::none();
  double last_tolerance_ = -1.0;
  // Slots whose residual changed since the last search_to(), each with
  // whether it was usable then (listed once: is_touched_). Both are
  // cleared by every search_to(); a slot is usable above last_tolerance_.
  std::vector<char> is_touched_;
  std::vector<std::pair<Index, char>> touched_;
  void touch(Index slot) {
    if (!is_touched_[ix(slot)]) {
      is_touched_[ix(slot)] = 1;
      touched_.emplace_back(slot, slot_residual_[ix(slot)] > last_tolerance_);
    }
  }
  std::uint32_t epoch_ = 0;
  std::int64_t work_ = 0;
};

}  // namespace perseus
