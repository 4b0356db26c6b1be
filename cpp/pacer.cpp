#include "pacer.hpp"

#include <algorithm>
#include <stdexcept>

namespace perseus {
namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s > 0 ? s : 0.0));
}

}  // namespace

Pacer::Pacer(const SolverOptions& options)
    : options_(options),
      parts_(options.refine, solver_threads(options)),
      poll_period_(seconds(options.interrupt_poll_s)),
      report_period_(seconds(options.progress_period_s)) {
  const Clock::time_point now = Clock::now();
  next_poll_ = options_.interrupted ? now : Clock::time_point::max();
  next_report_ = options_.progress ? now + report_period_ : Clock::time_point::max();
}

void Pacer::due(Clock::time_point now, Phase phase, std::int64_t done, std::int64_t total,
                bool advances) {
  if (now >= next_poll_) {
    if (options_.interrupted()) throw SolveCancelled();
    next_poll_ = Clock::now() + poll_period_;
  }
  if (now >= next_report_) {
    // A part's own count restarts with each of its jobs (the reports may
    // also come from a part entered late), so the fraction only rises.
    if (advances) fraction_ = std::max(fraction_, parts_.fraction(done, total));
    if (!options_.progress(phase, done, total, fraction_)) throw SolveCancelled();
    // Measured after the callback: a slow callback is not called back to back.
    next_report_ = Clock::now() + report_period_;
  }
}

}  // namespace perseus
