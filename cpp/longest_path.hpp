// The min-cut loop's view of the longest paths: PathTimes over quantised
// durations, plus the makespan (the longest path through a sink) and the
// set of critical computations (those on a longest path, head + tail ==
// makespan).
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

  // Paths are at most max_length long (the makespan with every duration
  // longest); a longer one is a logic error. min_length (every duration
  // shortest) is checked against max_length only.
  LongestPaths(const Dag& dag, Units min_length, Units max_length);

  // Recomputes everything for these durations (per computation).
  void reset(const IdVector<ComputationId, Units>& duration);
  // Updates after duration[i] changed for each computation i in `changed` (already written).
  void update(const IdVector<ComputationId, Units>& duration,
              const std::vector<ComputationId>& changed);

  Units makespan() const { return makespan_; }
  Units head(ComputationId v) const { return times_.head(v); }
  Units tail(ComputationId v) const { return times_.tail(v); }
  // The times by topological position (see PathTimes).
  const PathTimes<Units>& times() const { return times_; }
  std::int64_t work() const { return times_.work(); }

 private:
  void find_makespan();

  PathTimes<Units> times_;
  Units max_length_;
  std::vector<ComputationId> sinks_;  // nodes without successors: every longest path ends at one
  Units makespan_ = 0;
};

}  // namespace perseus
