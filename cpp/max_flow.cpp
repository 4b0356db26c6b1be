#include "max_flow.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace perseus {

void BoundedFlow::reset(Index num_nodes) {
  PERSEUS_EXPECT(num_nodes >= 0, "BoundedFlow: a negative node count");
  num_nodes_ = num_nodes;
  finalized_ = false;
  tail_.clear();
  head_.clear();
  lower_.clear();
  upper_.clear();
  flow_.clear();
}

FlowArc BoundedFlow::add_arc(FlowNode from, FlowNode to) {
  PERSEUS_EXPECT(!finalized_, "BoundedFlow: add_arc after finalize");
  PERSEUS_EXPECT(has_node(from) && has_node(to), "BoundedFlow: an arc end is not a node");
  const FlowArc id(static_cast<Index>(tail_.size()));
  tail_.push_back(from);
  head_.push_back(to);
  lower_.push_back(0.0);
  upper_.push_back(0.0);
  flow_.push_back(0.0);
  return id;
}

void BoundedFlow::finalize() {
  const auto n = ix(num_nodes_);
  adj_offset_.assign(n + 1, 0);
  for (std::size_t a = 0; a < tail_.size(); ++a) {
    ++adj_offset_[tail_[a].index() + 1];
    ++adj_offset_[head_[a].index() + 1];
  }
  for (std::size_t v = 0; v < n; ++v) adj_offset_[v + 1] += adj_offset_[v];
  adj_.resize(2 * tail_.size());
  adj_to_.resize(2 * tail_.size());
  adj_from_.resize(2 * tail_.size());
  slot_of_.resize(2 * tail_.size());
  next_arc_.raw().assign(adj_offset_.begin(), adj_offset_.end() - 1);  // fill cursors
  for (std::size_t a = 0; a < tail_.size(); ++a) {
    const auto forward = ix(next_arc_[tail_[a]]++), reverse = ix(next_arc_[head_[a]]++);
    adj_[forward] = static_cast<Index>(2 * a);
    adj_to_[forward] = head_[a];
    adj_from_[forward] = tail_[a];
    slot_of_[2 * a] = static_cast<Index>(forward);
    adj_[reverse] = static_cast<Index>(2 * a + 1);
    adj_to_[reverse] = tail_[a];
    adj_from_[reverse] = head_[a];
    slot_of_[2 * a + 1] = static_cast<Index>(reverse);
  }
  slot_residual_.assign(2 * tail_.size(), 0.0);
  is_touched_.assign(2 * tail_.size(), 0);
  touched_.clear();
  search_queue_.assign(n, FlowNode::none());
  tail_before_.assign(n, 0);
  last_queued_ = 0;
  last_tolerance_ = -1.0;
  for (std::size_t a = 0; a < tail_.size(); ++a) refresh_residuals(a);
  imbalance_.assign(n, 0.0);
  is_imbalanced_.assign(n, 0);
  imbalanced_.clear();
  level_.assign(n, -1);
  queue_.resize(n);
  sink_queue_.resize(n);
  path_.resize(n);
  stamp_.assign(n, 0);
  reaches_sink_.assign(n, 0);
  reached_by_.assign(n, -1);
  order_.assign(n, 0);
  resume_slot_ = -1;
  epoch_ = 0;
  finalized_ = true;
}

void BoundedFlow::refresh_residuals(std::size_t a) {
  touch(slot_of_[2 * a]);
  touch(slot_of_[2 * a + 1]);
  slot_residual_[ix(slot_of_[2 * a])] = upper_[a] - flow_[a];
  slot_residual_[ix(slot_of_[2 * a + 1])] = flow_[a] - lower_[a];
}

void BoundedFlow::push_slot(Index slot, double amount) {
  const Index h = adj_[ix(slot)];
  const auto a = ix(h >> 1);
  flow_[a] += (h & 1) == 0 ? amount : -amount;
  refresh_residuals(a);
}

void BoundedFlow::book(FlowNode node, double amount) {
  imbalance_[node] += amount;
  if (!is_imbalanced_[node]) {
    is_imbalanced_[node] = 1;
    imbalanced_.push_back(node);
  }
}

void BoundedFlow::set_bounds(FlowArc arc, double lower, double upper) {
  PERSEUS_EXPECT(finalized_, "BoundedFlow: set_bounds before finalize");
  PERSEUS_EXPECT(arc.index() < lower_.size(), "BoundedFlow: no such arc");
  PERSEUS_EXPECT(lower >= 0.0 && lower != kInfinity && lower <= upper,
                 "BoundedFlow: bounds must satisfy 0 <= lower <= upper with lower finite");
  const auto a = arc.index();
  if (lower_[a] == lower && upper_[a] == upper) return;  // the flow is already within them
  lower_[a] = lower;
  upper_[a] = upper;
  const double clamped = std::min(std::max(flow_[a], lower), upper);
  const double delta = clamped - flow_[a];
  flow_[a] = clamped;
  refresh_residuals(a);
  if (delta == 0.0) return;
  // More flow on tail -> head: the head receives more (surplus), the tail sends more (deficit).
  book(head_[a], delta);
  book(tail_[a], -delta);
}

void BoundedFlow::clear_flows() {
  PERSEUS_EXPECT(finalized_, "BoundedFlow: clear_flows before finalize");
  for (std::size_t a = 0; a < flow_.size(); ++a) flow_[a] = 0.0;
  for (const FlowNode v : imbalanced_) {
    imbalance_[v] = 0.0;
    is_imbalanced_[v] = 0;
  }
  imbalanced_.clear();
  // Lower bounds flow in full: book them as imbalance at their ends.
  for (std::size_t a = 0; a < flow_.size(); ++a) {
    if (lower_[a] > 0) {
      flow_[a] = lower_[a];
      book(head_[a], lower_[a]);
      book(tail_[a], -lower_[a]);
    }
    refresh_residuals(a);
  }
}

void BoundedFlow::new_search() {
  if (++epoch_ == 0) {  // the stamps wrapped: start them over
    std::fill(stamp_.begin(), stamp_.end(), 0);
    std::fill(reaches_sink_.begin(), reaches_sink_.end(), 0);
    epoch_ = 1;
  }
}

template <typename Usable>
std::size_t BoundedFlow::levels_from(std::size_t count, FlowNode target, Usable usable) {
  new_search();
  for (std::size_t k = 0; k < count; ++k) {
    const FlowNode v = queue_[k];
    stamp_[v] = epoch_;
    level_[v] = 0;
    next_arc_[v] = first_slot(v);
  }
  std::size_t head = 0, tail = count;
  while (head < tail) {
    const FlowNode u = queue_[head++];
    if (u == target) break;
    const Index end = end_slot(u);
    for (Index k = first_slot(u); k < end; ++k) {
      // The residual first: it is read in slot order, and most slots fail it
      // (reverse slots without flow, closed arcs), which spares the node's stamp.
      if (!usable(slot_residual_[ix(k)])) continue;
      const FlowNode v = adj_to_[ix(k)];
      if (stamp_[v] == epoch_) continue;
      stamp_[v] = epoch_;
      level_[v] = level_[u] + 1;
      next_arc_[v] = first_slot(v);
      queue_[tail++] = v;
    }
    work_ += end - first_slot(u);
  }
  return tail;
}

void BoundedFlow::keep_paths_to(FlowNode sink, std::size_t reached, double tolerance) {
  // Backwards from the sink over level-graph arcs (level up by one, residual left).
  reaches_sink_[sink] = epoch_;
  sink_queue_[0] = sink;
  std::size_t head = 0, tail = 1;
  while (head < tail) {
    const FlowNode v = sink_queue_[head++];
    const Index below = level_[v] - 1;
    const Index end = end_slot(v);
    for (Index k = first_slot(v); k < end; ++k) {
      const FlowNode w = adj_to_[ix(k)];
      // The arc w -> v is the partner of v's half-arc to w.
      if (stamp_[w] != epoch_ || level_[w] != below || reaches_sink_[w] == epoch_) continue;
      if (slot_residual_[ix(slot_of_[ix(adj_[ix(k)] ^ 1)])] <= tolerance) continue;
      reaches_sink_[w] = epoch_;
      sink_queue_[tail++] = w;
    }
    work_ += end - first_slot(v);
  }
  for (std::size_t k = 0; k < reached; ++k)
    if (reaches_sink_[queue_[k]] != epoch_) level_[queue_[k]] = -1;
}

double BoundedFlow::blocking_flow(FlowNode from, FlowNode sink, bool to_deficits, double limit,
                                  double tolerance) {
  auto on_level = [&](FlowNode v) { return stamp_[v] == epoch_ && level_[v] >= 0; };
  auto is_target = [&](FlowNode v) { return to_deficits ? imbalance_[v] < -tolerance : v == sink; };
  double total = 0.0;
  std::size_t depth = 0;  // path_[0 .. depth) are the slots of a path from `from`
  FlowNode u = from;
  while (total < limit) {
    if (depth > 0 && is_target(u)) {
      double amount = limit - total;
      for (std::size_t i = 0; i < depth; ++i) amount = std::min(amount, slot_residual_[ix(path_[i])]);
      if (to_deficits) amount = std::min(amount, -imbalance_[u]);
      if (amount == kInfinity) throw std::logic_error("BoundedFlow: infinite augmenting path");
      std::size_t retreat = depth;
      for (std::size_t i = 0; i < depth; ++i) {
        push_slot(path_[i], amount);
        if (slot_residual_[ix(path_[i])] <= tolerance && retreat == depth) retreat = i;
      }
      if (to_deficits) {
        imbalance_[from] -= amount;
        imbalance_[u] += amount;
      }
      total += amount;
      work_ += static_cast<std::int64_t>(depth);
      if (retreat == depth) retreat = 0;  // the target was filled, or rounding: restart
      depth = retreat;
      u = depth == 0 ? from : adj_from_[ix(path_[depth])];
      continue;
    }
    bool advanced = false;
    const Index end = end_slot(u);
    for (Index& k = next_arc_[u]; k < end; ++k) {
      const FlowNode v = adj_to_[ix(k)];
      ++work_;
      if (on_level(v) && level_[v] == level_[u] + 1 && slot_residual_[ix(k)] > tolerance) {
        path_[depth++] = k;
        u = v;
        advanced = true;
        break;
      }
    }
    if (advanced) continue;
    // Dead end: retire u from this level graph and step back.
    level_[u] = -1;
    if (depth == 0) break;
    --depth;
    u = adj_from_[ix(path_[depth])];
    ++next_arc_[u];
  }
  return total;
}

bool BoundedFlow::restore_balance(double tolerance) {
  PERSEUS_EXPECT(finalized_, "BoundedFlow: restore_balance before finalize");
  while (true) {
    std::size_t surplus = 0;
    bool deficit = false;
    for (const FlowNode v : imbalanced_) {
      if (imbalance_[v] > tolerance) queue_[surplus++] = v;
      else if (imbalance_[v] < -tolerance) deficit = true;
    }
    if (surplus == 0 || !deficit) break;
    // Levels from every surplus node at once; the search leaves them at the
    // front of queue_.
    levels_from(surplus, FlowNode::none(), [tolerance](double r) { return r > tolerance; });
    double moved = 0.0;
    for (std::size_t k = 0; k < surplus; ++k) {
      const FlowNode v = queue_[k];
      moved += blocking_flow(v, FlowNode::none(), true, imbalance_[v], tolerance);
    }
    if (moved <= tolerance) break;
  }
  for (const FlowNode v : imbalanced_)
    if (std::abs(imbalance_[v]) > tolerance) return false;
  for (const FlowNode v : imbalanced_) {  // what is left is rounding: drop it
    imbalance_[v] = 0.0;
    is_imbalanced_[v] = 0;
  }
  imbalanced_.clear();
  return true;
}

bool BoundedFlow::search_to(FlowNode source, FlowNode sink, double tolerance, bool resume) {
  new_search();
  std::size_t head = 0, tail = 1;
  Index first = first_slot(source);  // where the first node's scan starts
  FlowNode* queue = search_queue_.data();
  if (resume && resume_slot_ >= 0) {
    // Replay the last search up to its first saturated slot: the same nodes
    // are reached, and the same work is charged for scanning them.
    for (const auto& touched : touched_) is_touched_[ix(touched.first)] = 0;
    touched_.clear();
    head = resume_head_;
    tail = resume_tail_;
    first = resume_slot_;
  } else {
    // From scratch: the last search's order holds up to the first node it
    // scanned whose slots have changed usability since.
    const bool same_search =
        tolerance == last_tolerance_ && source == last_source_ && sink == last_sink_;
    std::size_t replay = same_search ? last_queued_ : 0;
    for (const auto& [slot, was_usable] : touched_) {
      is_touched_[ix(slot)] = 0;
      if ((slot_residual_[ix(slot)] > tolerance) == (was_usable != 0)) continue;
      const FlowNode v = adj_from_[ix(slot)];
      const auto at = ix(order_[v]);
      if (at < last_queued_ && queue[at] == v) replay = std::min(replay, at);
    }
    touched_.clear();
    if (replay > 0) {
      head = replay;
      // Nothing changed: the whole last search, which found no path.
      tail = replay == last_queued_ ? last_queued_ : ix(tail_before_[replay]);
      if (head < tail) first = first_slot(queue[head]);
    } else {
      queue[0] = source;
      order_[source] = 0;
    }
  }
  // The replayed part (the source alone when nothing is): reached, and its
  // scans charged as a search from scratch would charge them.
  for (std::size_t k = 0; k < tail; ++k) stamp_[queue[k]] = epoch_;
  for (std::size_t k = 0; k < head; ++k) work_ += end_slot(queue[k]) - first_slot(queue[k]);
  last_tolerance_ = tolerance;
  last_source_ = source;
  last_sink_ = sink;
  // A resumed search picks its first node's scan up mid-way: that node's
  // count from the search it resumes stands.
  const std::size_t partial = resume && resume_slot_ >= 0 ? head : SIZE_MAX;
  resume_slot_ = -1;
  while (head < tail) {
    if (head != partial) tail_before_[head] = static_cast<Index>(tail);
    const FlowNode u = queue[head++];
    const Index end = end_slot(u);
    for (Index k = first; k < end; ++k) {
      if (slot_residual_[ix(k)] <= tolerance) continue;  // first, as in levels_from()
      const FlowNode v = adj_to_[ix(k)];
      if (stamp_[v] == epoch_) continue;
      stamp_[v] = epoch_;
      reached_by_[v] = k;
      order_[v] = static_cast<Index>(tail);
      if (v == sink) {
        work_ += k - first_slot(u) + 1;
        last_queued_ = 0;  // nothing to replay (see max_flow.hpp)
        return true;
      }
      queue[tail++] = v;
    }
    work_ += end - first_slot(u);
    if (head < tail) first = first_slot(queue[head]);
  }
  last_queued_ = tail;  // every node queued was scanned
  return false;
}

double BoundedFlow::push_along_search(FlowNode source, FlowNode sink, double tolerance) {
  double amount = kInfinity;
  for (FlowNode v = sink; v != source; v = adj_from_[ix(reached_by_[v])])
    amount = std::min(amount, slot_residual_[ix(reached_by_[v])]);
  if (amount == kInfinity) throw std::logic_error("BoundedFlow: infinite augmenting path");
  // The saturated slot that the search met first is the one whose node it
  // reached first (every path slot reached the node it leads to).
  FlowNode first = FlowNode::none();
  for (FlowNode v = sink; v != source; v = adj_from_[ix(reached_by_[v])]) {
    const Index slot = reached_by_[v];
    push_slot(slot, amount);
    if (slot_residual_[ix(slot)] <= tolerance && (!first.valid() || order_[v] < order_[first]))
      first = v;
    ++work_;
  }
  if (first.valid()) {
    const Index slot = reached_by_[first];
    resume_slot_ = slot;
    resume_head_ = ix(order_[adj_from_[ix(slot)]]);
    resume_tail_ = ix(order_[first]);
  }
  return amount;
}

double BoundedFlow::augment(FlowNode source, FlowNode sink, FlowArc frozen, double tolerance) {
  PERSEUS_EXPECT(finalized_, "BoundedFlow: augment before finalize");
  PERSEUS_EXPECT(has_node(source) && has_node(sink) && source != sink,
                 "BoundedFlow: source and sink must be two nodes of the network");
  PERSEUS_EXPECT(
      frozen.index() < tail_.size() && tail_[frozen.index()] == sink && head_[frozen.index()] == source,
      "BoundedFlow: the frozen arc must run from the sink to the source");
  const auto f = frozen.index();
  lower_[f] = upper_[f] = flow_[f];  // closed: no residual either way
  refresh_residuals(f);
  double total = 0.0;
  // One path per search (Edmonds-Karp) while calls need few: measured on the
  // benchmark corpus, 99.4 % of the min-cut loop's augmenting rounds find a
  // single path, and at most 20 are needed in one call. A round then costs
  // one search that stops at the sink, where a Dinic phase costs a full level
  // search, the pruning pass back from the sink and a blocking flow. A call
  // that needs more (a cold start) goes on with Dinic phases below.
  constexpr int kSinglePathRounds = 32;
  bool done = false;  // a search found no path and marked the source side
  for (int round = 0; round < kSinglePathRounds && !done; ++round) {
    if (search_to(source, sink, tolerance, round > 0))
      total += push_along_search(source, sink, tolerance);
    else done = true;
  }
  while (!done) {
    queue_[0] = source;
    const std::size_t reached = levels_from(1, sink, [tolerance](double r) { return r > tolerance; });
    if (stamp_[sink] != epoch_) break;
    keep_paths_to(sink, reached, tolerance);
    total += blocking_flow(source, sink, false, kInfinity, tolerance);
  }
  // The return arc carries it back, so the flow stays a circulation; it stays
  // closed until the caller opens it again with set_bounds.
  flow_[f] += total;
  lower_[f] = upper_[f] = flow_[f];
  refresh_residuals(f);
  return total;
}

bool BoundedFlow::has_infinite_path(FlowNode source, FlowNode sink) {
  PERSEUS_EXPECT(finalized_, "BoundedFlow: has_infinite_path before finalize");
  PERSEUS_EXPECT(has_node(source) && has_node(sink), "BoundedFlow: source or sink is not a node");
  queue_[0] = source;
  levels_from(1, sink, [](double r) { return r == kInfinity; });
  return stamp_[sink] == epoch_;
}

}  // namespace perseus
