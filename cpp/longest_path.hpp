// The min-cut loop's view of the longest paths: PathTimes over quantised
// durations, plus the set of critical computations (those on a longest path,
// head + tail == makespan) kept in buckets by head + tail, so a step reads
// the critical set off one bucket and an update refiles only the nodes that
// moved.
#pragma once

#include <cstdint>
#include <vector>

#include "dag.hpp"
#include "index.hpp"
#include "path_times.hpp"

namespace perseus {

class LongestPaths {
 public:
  using Units = std::int64_t;

  // Buckets cover path lengths in [min_length, max_length]: the makespans the
  // durations can give (all shortest, all longest). A node whose head + tail
  // is below min_length is never critical.
  LongestPaths(const Dag& dag, Units min_length, Units max_length);

  // Recomputes everything for these durations.
  void reset(const std::vector<Units>& duration);
  // Updates after duration[v] changed for each v in `changed` (already written).
  void update(const std::vector<Units>& duration, const std::vector<Index>& changed);

  Units makespan() const { return makespan_; }
  Units head(Index v) const { return times_.head(v); }
  Units tail(Index v) const { return times_.tail(v); }
  // Visits every node with head + tail == makespan, in no particular order.
  template <typename Visit>
  void for_each_critical(Visit visit) const {
    for (Index v = bucket_first_[ix(makespan_ - min_length_)]; v >= 0; v = bucket_next_[ix(v)])
      visit(v);
  }
  // Nodes whose head or tail changed in the last reset() or update().
  const std::vector<Index>& moved() const { return times_.moved(); }
  std::int64_t work() const { return times_.work(); }

 private:
  void refile_moved();

  PathTimes<Units> times_;
  Units min_length_, max_length_;
  // Doubly linked lists of nodes by head + tail (-1 ends a list).
  std::vector<Index> bucket_first_, bucket_next_, bucket_prev_;
  std::vector<Units> filed_as_;  // the length a node is filed under; -1 below the range
  Units makespan_ = 0;           // the longest non-empty bucket
};

}  // namespace perseus
