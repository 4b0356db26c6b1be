#include "longest_path.hpp"

#include <algorithm>
#include <stdexcept>

namespace perseus {

LongestPaths::LongestPaths(const Dag& dag, Units min_length, Units max_length)
    : times_(dag), max_length_(max_length) {
  if (max_length < min_length) throw std::invalid_argument("LongestPaths: empty length range");
  for (ComputationId v(0); v.value() < dag.num_nodes(); ++v)
    if (dag.successors_begin(v) == dag.successors_end(v)) sinks_.push_back(v);
}

void LongestPaths::reset(const IdVector<ComputationId, Units>& duration) {
  times_.reset(duration.data());
  find_makespan();
}

void LongestPaths::update(const IdVector<ComputationId, Units>& duration,
                          const std::vector<ComputationId>& changed) {
  times_.update(duration.data(), changed.data(), changed.data() + changed.size());
  find_makespan();
}

void LongestPaths::find_makespan() {
  Units longest = 0;
  for (const ComputationId v : sinks_) longest = std::max(longest, times_.through(v));
  if (longest > max_length_) throw std::logic_error("LongestPaths: a path is longer than the maximum");
  makespan_ = longest;
}

}  // namespace perseus
