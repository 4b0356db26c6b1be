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
// instead of two passes over the whole DAG. Value is std::int64_t for the
// min-cut loop's quantised durations and double for measured times.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dag.hpp"
#include "index.hpp"

namespace perseus {

template <typename Value>
class PathTimes {
 public:
  explicit PathTimes(const Dag& dag)
      : dag_(dag),
        head_(ix(dag.num_nodes()), Value{}),
        tail_(ix(dag.num_nodes()), Value{}),
        position_(ix(dag.num_nodes())),
        dirty_head_((ix(dag.num_nodes()) + 63) / 64, 0),
        dirty_tail_((ix(dag.num_nodes()) + 63) / 64, 0),
        is_moved_(ix(dag.num_nodes()), 0) {
    const auto& order = dag.topological_order();
    for (std::size_t k = 0; k < order.size(); ++k) position_[ix(order[k])] = static_cast<Index>(k);
    moved_.reserve(ix(dag.num_nodes()));
  }

  // Recomputes every head and tail for these durations (one pass each way).
  // Afterwards moved() lists every node.
  void reset(const Value* duration) {
    const auto& order = dag_.topological_order();
    for (const Index v : order) {
      Value start{};
      for (const Index* p = dag_.predecessors_begin(v); p != dag_.predecessors_end(v); ++p)
        start = std::max(start, head_[ix(*p)] + duration[*p]);
      head_[ix(v)] = start;
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Value after{};
      for (const Index* s = dag_.successors_begin(*it); s != dag_.successors_end(*it); ++s)
        after = std::max(after, tail_[ix(*s)]);
      tail_[ix(*it)] = duration[*it] + after;
    }
    moved_.assign(order.begin(), order.end());
    work_ += 2 * (dag_.num_nodes() + dag_.num_edges());
  }

  // Brings heads and tails up to date after duration[v] changed for every v
  // in `changed` (already written). Afterwards moved() lists the nodes whose
  // head or tail changed (the changed nodes among them).
  void update(const Value* duration, const Index* changed_begin, const Index* changed_end) {
    const auto& order = dag_.topological_order();
    for (const Index v : moved_) is_moved_[ix(v)] = 0;
    moved_.clear();
    // Dirty bits, with the range of words that hold any: only that range is scanned.
    std::size_t head_lo = dirty_head_.size(), head_hi = 0, tail_lo = dirty_tail_.size(), tail_hi = 0;
    auto mark = [](std::vector<std::uint64_t>& bits, Index position, std::size_t& lo, std::size_t& hi) {
      const std::size_t word = ix(position) >> 6;
      bits[word] |= std::uint64_t{1} << (ix(position) & 63);
      lo = std::min(lo, word);
      hi = std::max(hi, word);
    };
    for (const Index* it = changed_begin; it != changed_end; ++it) {
      const Index v = *it;
      move(v);  // its tail includes its own duration
      mark(dirty_tail_, position_[ix(v)], tail_lo, tail_hi);
      for (const Index* s = dag_.successors_begin(v); s != dag_.successors_end(v); ++s)
        mark(dirty_head_, position_[ix(*s)], head_lo, head_hi);
    }
    // Heads, forward: successors sit later in the order, in this word or a later one.
    for (std::size_t word = head_lo; word <= head_hi && word < dirty_head_.size(); ++word) {
      while (dirty_head_[word] != 0) {
        const int bit = __builtin_ctzll(dirty_head_[word]);
        dirty_head_[word] &= dirty_head_[word] - 1;
        const Index v = order[(word << 6) + ix(bit)];
        Value start{};
        for (const Index* p = dag_.predecessors_begin(v); p != dag_.predecessors_end(v); ++p)
          start = std::max(start, head_[ix(*p)] + duration[*p]);
        ++work_;
        if (start == head_[ix(v)]) continue;
        head_[ix(v)] = start;
        move(v);
        for (const Index* s = dag_.successors_begin(v); s != dag_.successors_end(v); ++s)
          mark(dirty_head_, position_[ix(*s)], head_lo, head_hi);
      }
    }
    // Tails, backward: predecessors sit earlier, in this word or an earlier one.
    for (std::size_t word = tail_hi + 1; word-- > tail_lo;) {
      while (dirty_tail_[word] != 0) {
        const int bit = 63 - __builtin_clzll(dirty_tail_[word]);
        dirty_tail_[word] &= ~(std::uint64_t{1} << bit);
        const Index v = order[(word << 6) + ix(bit)];
        Value after{};
        for (const Index* s = dag_.successors_begin(v); s != dag_.successors_end(v); ++s)
          after = std::max(after, tail_[ix(*s)]);
        ++work_;
        const Value tail = duration[v] + after;
        if (tail == tail_[ix(v)]) continue;
        tail_[ix(v)] = tail;
        move(v);
        for (const Index* p = dag_.predecessors_begin(v); p != dag_.predecessors_end(v); ++p)
          mark(dirty_tail_, position_[ix(*p)], tail_lo, tail_hi);
      }
    }
  }

  Value head(Index v) const { return head_[ix(v)]; }
  Value tail(Index v) const { return tail_[ix(v)]; }
  // head(v) + tail(v): the longest path through v.
  Value through(Index v) const { return head_[ix(v)] + tail_[ix(v)]; }
  const std::vector<Index>& moved() const { return moved_; }
  // Node visits so far: a machine-independent measure of effort.
  std::int64_t work() const { return work_; }

 private:
  void move(Index v) {
    if (!is_moved_[ix(v)]) {
      is_moved_[ix(v)] = 1;
      moved_.push_back(v);
    }
  }

  const Dag& dag_;
  std::vector<Value> head_, tail_;
  std::vector<Index> position_;
  std::vector<std::uint64_t> dirty_head_, dirty_tail_;
  std::vector<Index> moved_;
  std::vector<char> is_moved_;
  std::int64_t work_ = 0;
};

}  // namespace perseus
