#include "step_log.hpp"

#include <algorithm>

namespace perseus {

void StepLog::append(Units units, const Index* computation, const std::int8_t* direction,
                     std::size_t count) {
  if (chunk_used_ + count > chunk_capacity_) {  // a new chunk; the old ones stay where they are
    chunk_capacity_ = std::max(kChunkEntries, count);
    computation_chunks_.emplace_back(new Index[chunk_capacity_]);
    direction_chunks_.emplace_back(new std::int8_t[chunk_capacity_]);
    chunk_used_ = 0;
  }
  Index* computations = computation_chunks_.back().get() + chunk_used_;
  std::int8_t* directions = direction_chunks_.back().get() + chunk_used_;
  std::copy(computation, computation + count, computations);
  std::copy(direction, direction + count, directions);
  chunk_used_ += count;
  bool wake = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    runs_.push_back(Run{units, computations, directions, count});
    wake = runs_.size() % kWakeEvery == 0;
  }
  if (wake) grown_.notify_all();
}

void StepLog::close() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  grown_.notify_all();
}

bool StepLog::wait(std::size_t k, Run& run) const {
  std::unique_lock<std::mutex> lock(mutex_);
  grown_.wait(lock, [&] { return k < runs_.size() || closed_; });
  if (k >= runs_.size()) return false;
  run = runs_[k];
  return true;
}

std::size_t StepLog::num_runs() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return runs_.size();
}

}  // namespace perseus
