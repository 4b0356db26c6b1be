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

#include "solve_parts.hpp"
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
  // done / total is how far the current part (enter()) is.
  void tick(Phase phase, std::int64_t done, std::int64_t total) {
    const Clock::time_point now = Clock::now();
    if (now >= next_poll_ || now >= next_report_) due(now, phase, done, total, true);
  }
  // The same for work that is not the current part's progress (selecting
  // plans between search rounds): the report keeps the last fraction.
  void tick_within(Phase phase, std::int64_t done, std::int64_t total) {
    const Clock::time_point now = Clock::now();
    if (now >= next_poll_ || now >= next_report_) due(now, phase, done, total, false);
  }
  // Only the caller's thread reports, so only it calls these (SolveParts).
  // The caller's thread starts `part`:
  void enter(SolvePart part) { parts_.enter(part); }
  // `part` will not run:
  void skip(SolvePart part) { parts_.skip(part); }
  // The local search's share, from predicted seconds (before any report):
  void predict_search(double search_s, double rest_s) { parts_.predict_search(search_s, rest_s); }

  // When tick() next has something to do: a thread that only waits for
  // others sleeps until then (time_point::max() when there are no hooks).
  std::chrono::steady_clock::time_point next_due() const { return std::min(next_poll_, next_report_); }

 private:
  using Clock = std::chrono::steady_clock;
  void due(Clock::time_point now, Phase phase, std::int64_t done, std::int64_t total, bool advances);

  const SolverOptions& options_;
  SolveParts parts_;
  double fraction_ = 0.0;  // the last report's; never falls
  Clock::duration poll_period_, report_period_;
  Clock::time_point next_poll_, next_report_;
};

}  // namespace perseus
