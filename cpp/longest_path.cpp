#include "longest_path.hpp"

#include <algorithm>
#include <stdexcept>

namespace perseus {

LongestPaths::LongestPaths(const Dag& dag, Units min_length, Units max_length)
    : times_(dag), min_length_(min_length), max_length_(max_length) {
  if (max_length < min_length) throw std::invalid_argument("LongestPaths: empty length range");
  const auto n = ix(dag.num_nodes());
  bucket_first_.assign(ix(max_length - min_length + 1), -1);
  bucket_next_.assign(n, -1);
  bucket_prev_.assign(n, -1);
  filed_as_.assign(n, -1);
}

void LongestPaths::reset(const std::vector<Units>& duration) {
  times_.reset(duration.data());
  makespan_ = min_length_;
  refile_moved();
}

void LongestPaths::update(const std::vector<Units>& duration, const std::vector<Index>& changed) {
  times_.update(duration.data(), changed.data(), changed.data() + changed.size());
  refile_moved();
}

void LongestPaths::refile_moved() {
  // The makespan is the longest non-empty bucket: at most the longer of the
  // old makespan and the moved lengths.
  Units top = makespan_;
  for (const Index v : times_.moved()) {
    const Units length = times_.through(v);
    if (length > max_length_) throw std::logic_error("LongestPaths: a path is longer than the maximum");
    const Units now = length < min_length_ ? -1 : length;
    top = std::max(top, now);
    const Units before = filed_as_[ix(v)];
    if (now == before) continue;
    if (before >= 0) {  // unlink
      const Index prev = bucket_prev_[ix(v)], next = bucket_next_[ix(v)];
      if (prev >= 0) bucket_next_[ix(prev)] = next;
      else bucket_first_[ix(before - min_length_)] = next;
      if (next >= 0) bucket_prev_[ix(next)] = prev;
    }
    filed_as_[ix(v)] = now;
    if (now >= 0) {  // push front
      Index& first = bucket_first_[ix(now - min_length_)];
      bucket_prev_[ix(v)] = -1;
      bucket_next_[ix(v)] = first;
      if (first >= 0) bucket_prev_[ix(first)] = v;
      first = v;
    }
  }
  while (top > min_length_ && bucket_first_[ix(top - min_length_)] < 0) --top;
  if (bucket_first_[ix(top - min_length_)] < 0) throw std::logic_error("LongestPaths: no longest path");
  makespan_ = top;
}

}  // namespace perseus
