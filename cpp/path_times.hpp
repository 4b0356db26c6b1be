// Longest paths through the iteration DAG, kept current under small changes.
//
// For durations t, head(v) is the longest path from the start of the
// iteration to v's start (its earliest start) and tail(v) the longest path
// from v's start to the end, t(v) included. The makespan is max head + tail,
// and v's slack against a deadline D is D - head(v) - tail(v).
//
// After some durations change, update() visits only the nodes whose head or
// tail actually moves: dirty nodes are processed in topological order
// (forward for heads, backward for tails) from a bitset over topological
// positions, so an update costs O(moved nodes and their edges + n / 64)
// instead of two passes over the whole DAG. When most of the DAG moves
// anyway (on a pipeline, a cut or a new plan moves nearly every head or
// tail), two straight passes cost less than following the moves, and
// update() switches to them for batches of several changes; both modes give
// the same times and the same moved() list. Value is std::int64_t for the
// min-cut loop's quantised durations and double for measured times.
//
// Inside, every array is indexed by topological position, not by node id,
// and the adjacency is renumbered to match: on a pipeline most of the DAG
// moves when a critical computation changes, and then an update walks its
// arrays front to back (or back to front) with neighbours close by, instead
// of hopping between ids. The public interface speaks computation ids
// (ComputationId, the DAG's node ids) and positions (Position), each its own
// type; inside, a std::size_t is always a position, and the arrays kept by
// position are walked with it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dag.hpp"
#include "index.hpp"

namespace perseus {

// Positions waiting to be visited, as a bitset with the range of words that
// hold any, so a pass scans only that range. A forward pass visits them in
// increasing order and a visit may add later positions (a backward pass:
// earlier ones), which the same pass then visits.
class DirtyPositions {
 public:
  explicit DirtyPositions(std::size_t count) : bits_((count + 63) / 64, 0), lo_(bits_.size()) {}
  void mark(std::size_t position) {
    const std::size_t word = position >> 6;
    bits_[word] |= std::uint64_t{1} << (position & 63);
    lo_ = std::min(lo_, word);
    hi_ = std::max(hi_, word);
  }
  // What a pass marks as it goes, with the range held in locals: a word of
  // the bitset has the type of the range's members (64-bit unsigned), so
  // through `this` every mark would reload and store the range after
  // storing the word.
  class Marker {
   public:
    void mark(std::size_t position) {
      const std::size_t word = position >> 6;
      bits_[word] |= std::uint64_t{1} << (position & 63);
      lo_ = std::min(lo_, word);
      hi_ = std::max(hi_, word);
    }

   private:
    friend class DirtyPositions;
    Marker(std::uint64_t* bits, std::size_t lo, std::size_t hi) : bits_(bits), lo_(lo), hi_(hi) {}
    std::uint64_t* bits_;
    std::size_t lo_, hi_;
  };
  // visit(position, marker) for every marked position in increasing order;
  // a visit may mark later positions through the marker.
  template <typename Visit>
  void drain_forward(Visit visit) {
    Marker marker(bits_.data(), lo_, hi_);
    const std::size_t words = bits_.size();
    for (std::size_t word = marker.lo_; word <= marker.hi_ && word < words; ++word)
      while (marker.bits_[word] != 0) {
        const auto bit = static_cast<std::size_t>(__builtin_ctzll(marker.bits_[word]));
        marker.bits_[word] &= marker.bits_[word] - 1;
        visit((word << 6) + bit, marker);
      }
    clear_range();
  }
  // The same in decreasing order; a visit may mark earlier positions.
  template <typename Visit>
  void drain_backward(Visit visit) {
    Marker marker(bits_.data(), lo_, hi_);
    for (std::size_t word = std::min(marker.hi_ + 1, bits_.size()); word-- > marker.lo_;)
      while (marker.bits_[word] != 0) {
        const auto bit = static_cast<std::size_t>(63 - __builtin_clzll(marker.bits_[word]));
        marker.bits_[word] &= ~(std::uint64_t{1} << bit);
        visit((word << 6) + bit, marker);
      }
    clear_range();
  }

 private:
  void clear_range() {
    lo_ = bits_.size();
    hi_ = 0;
  }
  std::vector<std::uint64_t> bits_;
  std::size_t lo_, hi_ = 0;
};

template <typename Value>
class PathTimes {
 public:
  // update()'s hand-over between following and sweeping, as shares of the
  // nodes moved by the last batch of several changes: sweep after more
  // than 1/kSweepAbove, follow again after fewer than 1/kFollowBelow. On
  // pipelines a cut or a new plan moves 90-99 % of the nodes and a
  // reclamation move a few dozen, so the exact shares matter little; the
  // gap between them keeps the mode from flapping.
  static constexpr std::size_t kSweepAbove = 2, kFollowBelow = 4;

  explicit PathTimes(const Dag& dag)
      : num_nodes_(dag.num_nodes()),
        node_(dag.topological_order()),
        position_(ix(dag.num_nodes())),
        pred_offset_(ix(dag.num_nodes()) + 1, 0),
        succ_offset_(ix(dag.num_nodes()) + 1, 0),
        head_(ix(dag.num_nodes()), Value{}),
        tail_(ix(dag.num_nodes()), Value{}),
        duration_(ix(dag.num_nodes()), Value{}),
        dirty_head_(ix(dag.num_nodes())),
        dirty_tail_(ix(dag.num_nodes())),
        moved_stamp_(ix(dag.num_nodes()), 0) {
    const auto n = ix(num_nodes_);
    for (std::size_t k = 0; k < n; ++k) position_[node_[k]] = Position(static_cast<Index>(k));
    pred_.reserve(ix(dag.num_edges()));
    succ_.reserve(ix(dag.num_edges()));
    for (std::size_t k = 0; k < n; ++k) {
      const ComputationId v = node_[k];
      for (const ComputationId* p = dag.predecessors_begin(v); p != dag.predecessors_end(v); ++p)
        pred_.push_back(position_[*p]);
      for (const ComputationId* s = dag.successors_begin(v); s != dag.successors_end(v); ++s)
        succ_.push_back(position_[*s]);
      pred_offset_[k + 1] = static_cast<Index>(pred_.size());
      succ_offset_[k + 1] = static_cast<Index>(succ_.size());
    }
    moved_.reserve(n);
  }

  // Recomputes every head and tail for these durations, duration[i] for
  // computation i (one pass each way). Afterwards moved() lists every node.
  void reset(const Value* duration) {
    const auto n = ix(num_nodes_);
    for (std::size_t p = 0; p < n; ++p) duration_[p] = duration[node_[p].index()];
    for (std::size_t p = 0; p < n; ++p) head_[p] = start_of(p);
    for (std::size_t p = n; p-- > 0;) tail_[p] = duration_[p] + after(p);
    clear_moved();
    moved_.assign(node_.begin(), node_.end());
    std::fill(moved_stamp_.begin(), moved_stamp_.end(), moved_epoch_);
    work_ += 2 * (num_nodes_ + static_cast<Index>(succ_.size()));
  }

  // Brings heads and tails up to date after duration[i] changed for every
  // computation i in `changed` (already written). Afterwards moved() lists
  // the computations whose head or tail changed (the changed ones among them).
  void update(const Value* duration, const ComputationId* changed_begin,
              const ComputationId* changed_end) {
    clear_moved();
    // A single change (a reclamation move) is always followed: its region
    // is usually small, and when it is not, following costs about two
    // sweeps, whereas sweeping after a large one would charge the next,
    // usually small, move a whole pass. Batches of several changes (a cut,
    // a new plan) sweep while most nodes move (kSweepAbove, kFollowBelow).
    const bool single = changed_end - changed_begin == 1;
    const bool sweep = !single && sweep_;
    if (sweep) sweep_update(duration, changed_begin, changed_end);
    else follow_update(duration, changed_begin, changed_end);
    const std::size_t moved = moved_.size(), n = ix(num_nodes_);
    if (!single) sweep_ = sweep ? kFollowBelow * moved >= n : kSweepAbove * moved > n;
    // Charged by what moved, so that the work (and the budgets spent in
    // it) does not depend on the mode.
    work_ += 1 + static_cast<std::int64_t>(moved);
  }
  // Whether the next update() of a batch of `size` changes sweeps (tests).
  bool sweeps_next(std::size_t size) const { return size != 1 && sweep_; }

  Value head(ComputationId v) const { return head_[position_[v].index()]; }
  Value tail(ComputationId v) const { return tail_[position_[v].index()]; }
  // head(v) + tail(v): the longest path through v.
  Value through(ComputationId v) const {
    const auto p = position_[v].index();
    return head_[p] + tail_[p];
  }
  const std::vector<ComputationId>& moved() const { return moved_; }

  // The same times by topological position, for callers that sweep every
  // node front to back: position p holds node node_at(p), and its
  // successors are the positions successor_positions()[k] for k in
  // [successors_begin(p), successors_end(p)).
  ComputationId node_at(Position p) const { return node_[p.index()]; }
  Position position_of(ComputationId v) const { return position_[v]; }
  Value head_at(Position p) const { return head_[p.index()]; }
  Value tail_at(Position p) const { return tail_[p.index()]; }
  Value duration_at(Position p) const { return duration_[p.index()]; }
  Index successors_begin(Position p) const { return succ_offset_[p.index()]; }
  Index successors_end(Position p) const { return succ_offset_[p.index() + 1]; }
  Index predecessors_begin(Position p) const { return pred_offset_[p.index()]; }
  Index predecessors_end(Position p) const { return pred_offset_[p.index() + 1]; }
  const std::vector<Position>& successor_positions() const { return succ_; }
  // The same arrays as raw pointers, for sweeps that store flags as they go
  // (a char store may alias a vector's insides, so the accessors above
  // reload them after each one).
  const Value* heads_by_position() const { return head_.data(); }
  const Value* tails_by_position() const { return tail_.data(); }
  const Value* durations_by_position() const { return duration_.data(); }
  const Index* successor_offsets() const { return succ_offset_.data(); }  // n + 1 entries
  const ComputationId* nodes_by_position() const { return node_.data(); }
  // Effort so far, machine-independent: a reset() costs two passes over
  // nodes and edges, an update() one unit plus the nodes it moved.
  std::int64_t work() const { return work_; }

 private:
  // update() by following the moves: only dirty nodes are visited.
  void follow_update(const Value* duration, const ComputationId* changed_begin,
                     const ComputationId* changed_end) {
    bool slower = true;
    for (const ComputationId* it = changed_begin; it != changed_end && slower; ++it)
      slower = duration[it->index()] >= duration_[position_[*it].index()];
    if (slower) {
      update_slower(duration, changed_begin, changed_end);
      return;
    }
    for (const ComputationId* it = changed_begin; it != changed_end; ++it) {
      const auto p = position_[*it].index();
      duration_[p] = duration[it->index()];
      move(p);  // its tail includes its own duration
      dirty_tail_.mark(p);
      for (Index k = succ_offset_[p]; k < succ_offset_[p + 1]; ++k)
        dirty_head_.mark(succ_[ix(k)].index());
    }
    // Heads, forward: a node whose head moved dirties its successors.
    dirty_head_.drain_forward([&](std::size_t p, DirtyPositions::Marker& dirty) {
      const Value start = start_of(p);
      if (start == head_[p]) return;
      head_[p] = start;
      move(p);
      for (Index k = succ_offset_[p]; k < succ_offset_[p + 1]; ++k) dirty.mark(succ_[ix(k)].index());
    });
    // Tails, backward: a node whose tail moved dirties its predecessors.
    dirty_tail_.drain_backward([&](std::size_t p, DirtyPositions::Marker& dirty) {
      const Value tail = duration_[p] + after(p);
      if (tail == tail_[p]) return;
      tail_[p] = tail;
      move(p);
      for (Index k = pred_offset_[p]; k < pred_offset_[p + 1]; ++k) dirty.mark(pred_[ix(k)].index());
    });
  }
  // update() by sweeping: every head forward, every tail backward, in two
  // straight passes with no dirty bookkeeping; cheaper than following when
  // most nodes move (a change early in a pipeline moves every head after
  // it). Times and moved() come out as following gives them, in the same
  // order: the changed nodes, then moved heads forward, then moved tails
  // backward.
  void sweep_update(const Value* duration, const ComputationId* changed_begin,
                    const ComputationId* changed_end) {
    const auto n = ix(num_nodes_);
    // Heads before the first changed position and tails after the last one
    // cannot move: the passes start there.
    std::size_t first = n, last = 0;
    for (const ComputationId* it = changed_begin; it != changed_end; ++it) {
      const auto p = position_[*it].index();
      duration_[p] = duration[it->index()];
      move(p);
      first = std::min(first, p);
      last = std::max(last, p);
    }
    // The arrays through pointers held in locals: move() stores a pointer
    // (moved_'s end), which the compiler must assume may point into any
    // vector's insides, so it would reload every member after each move.
    Value* head = head_.data();
    Value* tail = tail_.data();
    const Value* length = duration_.data();
    const Index* pred_offset = pred_offset_.data();
    const Index* succ_offset = succ_offset_.data();
    const Position* pred = pred_.data();
    const Position* succ = succ_.data();
    for (std::size_t p = first; p < n; ++p) {
      Value start{};  // as start_of(p)
      for (Index k = pred_offset[p]; k < pred_offset[p + 1]; ++k) {
        const auto q = pred[ix(k)].index();
        start = std::max(start, head[q] + length[q]);
      }
      if (start == head[p]) continue;
      head[p] = start;
      move(p);
    }
    for (std::size_t p = std::min(last + 1, n); p-- > 0;) {
      Value longest{};  // as after(p)
      for (Index k = succ_offset[p]; k < succ_offset[p + 1]; ++k)
        longest = std::max(longest, tail[succ[ix(k)].index()]);
      const Value t = length[p] + longest;
      if (t == tail[p]) continue;
      tail[p] = t;
      move(p);
    }
  }
  // update() when no duration fell (slack reclamation, the common case):
  // times only grow, so a node that moves pushes its new finish to its
  // successors (and its new tail to its predecessors) instead of each
  // dirty node scanning all of its neighbours. A bit in dirty_head_ here
  // means "push my finish on", in dirty_tail_ "push my tail back"; the
  // result equals update()'s, which is the same maximum taken in another order.
  void update_slower(const Value* duration, const ComputationId* changed_begin,
                     const ComputationId* changed_end) {
    for (const ComputationId* it = changed_begin; it != changed_end; ++it) {
      const auto p = position_[*it].index();
      duration_[p] = duration[it->index()];
      tail_[p] = duration_[p] + after(p);  // its successors' tails may still grow it below
      move(p);
      dirty_head_.mark(p);
      dirty_tail_.mark(p);
    }
    // Pointers in locals, as in sweep_update().
    Value* head = head_.data();
    Value* tail = tail_.data();
    const Value* length = duration_.data();
    const Index* pred_offset = pred_offset_.data();
    const Index* succ_offset = succ_offset_.data();
    const Position* pred = pred_.data();
    const Position* succ = succ_.data();
    dirty_head_.drain_forward([&](std::size_t p, DirtyPositions::Marker& dirty) {
      move(p);  // a changed node is listed already; a raised one is listed when it comes up
      const Value finish = head[p] + length[p];
      for (Index k = succ_offset[p]; k < succ_offset[p + 1]; ++k) {
        const auto s = succ[ix(k)].index();
        if (finish <= head[s]) continue;
        head[s] = finish;
        dirty.mark(s);
      }
    });
    dirty_tail_.drain_backward([&](std::size_t p, DirtyPositions::Marker& dirty) {
      move(p);
      const Value from_here = tail[p];
      for (Index k = pred_offset[p]; k < pred_offset[p + 1]; ++k) {
        const auto q = pred[ix(k)].index();
        const Value t = length[q] + from_here;
        if (t <= tail[q]) continue;
        tail[q] = t;
        dirty.mark(q);
      }
    });
  }
  // The earliest start at position p: the latest finish of its predecessors.
  Value start_of(std::size_t p) const {
    Value start{};
    for (Index k = pred_offset_[p]; k < pred_offset_[p + 1]; ++k) {
      const auto q = pred_[ix(k)].index();
      start = std::max(start, head_[q] + duration_[q]);
    }
    return start;
  }
  // The longest tail among position p's successors.
  Value after(std::size_t p) const {
    Value longest{};
    for (Index k = succ_offset_[p]; k < succ_offset_[p + 1]; ++k)
      longest = std::max(longest, tail_[succ_[ix(k)].index()]);
    return longest;
  }
  // Empties moved(): a new epoch, so no flag needs clearing.
  void clear_moved() {
    moved_.clear();
    if (++moved_epoch_ == 0) {  // wrapped: start the stamps over
      std::fill(moved_stamp_.begin(), moved_stamp_.end(), 0);
      moved_epoch_ = 1;
    }
  }
  void move(std::size_t p) {
    if (moved_stamp_[p] != moved_epoch_) {
      moved_stamp_[p] = moved_epoch_;
      moved_.push_back(node_[p]);
    }
  }

  Index num_nodes_;
  std::vector<ComputationId> node_;             // per position: the node there (a topological order)
  IdVector<ComputationId, Position> position_;  // per node: its position
  // Adjacency by position, CSR: offsets, and positions of each position's neighbours.
  std::vector<Index> pred_offset_, succ_offset_;
  std::vector<Position> pred_, succ_;
  std::vector<Value> head_, tail_, duration_;  // per position
  DirtyPositions dirty_head_, dirty_tail_;
  std::vector<ComputationId> moved_;        // computation ids
  std::vector<std::uint32_t> moved_stamp_;  // per position: moved_epoch_ when listed in moved_
  std::uint32_t moved_epoch_ = 1;
  bool sweep_ = false;  // update()'s mode for batches of several changes
  std::int64_t work_ = 0;
};

}  // namespace perseus
