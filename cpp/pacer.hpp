// Paces the progress and interrupt hooks of a long solve.
//
// Every phase loop calls tick() once per unit of work (a min-cut step, a
// plan, a local-search move). tick() reads a monotonic clock (tens of
// nanoseconds) and calls the hooks only when their period is up, the
// progress period being measured from the end of the previous report, so a
// slow callback can never be called back to back. Cancelling throws
// SolveCancelled, which unwinds the solve from wherever it is.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>

#include "solver_options.hpp"

namespace perseus {

class SolveCancelled : public std::runtime_error {
 public:
  SolveCancelled() : std::runtime_error("frontier solve cancelled") {}
};

class Pacer {
 public:
  explicit Pacer(const SolverOptions& options);

  // Reports and polls when due; throws SolveCancelled when asked to stop.
  void tick(Phase phase, std::int64_t done, std::int64_t total) {
    const Clock::time_point now = Clock::now();
    if (now >= next_poll_ || now >= next_report_) due(now, phase, done, total);
  }

  // When tick() next has something to do: a thread that only waits for
  // others sleeps until then (time_point::max() when there are no hooks).
  std::chrono::steady_clock::time_point next_due() const { return std::min(next_poll_, next_report_); }

 private:
  using Clock = std::chrono::steady_clock;
  void due(Clock::time_point now, Phase phase, std::int64_t done, std::int64_t total);

  const SolverOptions& options_;
  Clock::duration poll_period_, report_period_;
  Clock::time_point next_poll_, next_report_;
};

}  // namespace perseus
