// The min-cut loop's record of its runs, readable while it is being written.
//
// Each run is a number of units and the (computation, direction) pairs it
// changes per unit. The refinement chains (refinement.hpp) walk these runs
// one unit at a time, and they start on other threads as soon as the loop
// does: on a large pipeline the loop and the chains each take seconds, and
// overlapping them uses both cores instead of one after the other.
//
// One thread appends; any number read. Pairs live in chunks that never move,
// so a reader holds plain pointers into them; the run table itself is read
// under the mutex (a reader copies one run's entry at a time). Readers that
// have caught up sleep until the writer has added a batch of runs or closed
// the log, so a fast loop does not wake them once per run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "index.hpp"

namespace perseus {

class StepLog {
 public:
  using Units = std::int64_t;
  struct Run {
    Units units = 0;
    const Index* computation = nullptr;
    const std::int8_t* direction = nullptr;  // -1 shorter, +1 longer, per unit
    std::size_t size = 0;
  };

  StepLog() = default;
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  // Writer: appends a run of `units` units changing `count` computations.
  void append(Units units, const Index* computation, const std::int8_t* direction, std::size_t count);
  // Writer: no more runs; wakes every reader. Idempotent.
  void close();

  // Readers: waits until run k exists or the log is closed; true (and the
  // run) if run k exists.
  bool wait(std::size_t k, Run& run) const;
  std::size_t num_runs() const;

 private:
  // Runs published per wake-up of sleeping readers.
  static constexpr std::size_t kWakeEvery = 64;
  static constexpr std::size_t kChunkEntries = std::size_t{1} << 16;

  mutable std::mutex mutex_;
  mutable std::condition_variable grown_;
  std::vector<Run> runs_;  // guarded by mutex_
  bool closed_ = false;    // guarded by mutex_
  // Writer only: chunks of pairs, and how much of the last one is used.
  std::vector<std::unique_ptr<Index[]>> computation_chunks_;
  std::vector<std::unique_ptr<std::int8_t[]>> direction_chunks_;
  std::size_t chunk_capacity_ = 0, chunk_used_ = 0;
};

}  // namespace perseus
