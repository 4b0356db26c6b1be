#include "solver_options.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace perseus {
namespace {

void check_range(const char* field, double value, double low, double high) {
  if (!(value >= low && value <= high)) {  // NaN fails too
    char text[200];
    std::snprintf(text, sizeof text, "budgets.%s must be in %.10g..%.10g, got %.10g", field, low, high,
                  value);
    throw std::invalid_argument(text);
  }
}

}  // namespace

// A floor that peaks at local_search_floor_computations and falls off on
// both sides as a power of the ratio: pipelines near the peak get much
// search, large ones their per-element share, tiny ones what their few,
// short searches need.
double local_search_budget(double computations, double elements, double median_options,
                           const SolverBudgets& budgets) {
  const double coarse =
      std::max(1.0, budgets.local_search_coarse_options / std::max(median_options, 1.0));
  const double per_element = budgets.local_search_work_per_element * coarse * coarse * coarse;
  const double ratio = std::max(computations, 1.0) / budgets.local_search_floor_computations;
  const double floor = budgets.local_search_work_floor *
                       (ratio >= 1.0 ? std::pow(ratio, -budgets.local_search_floor_exponent)
                                     : std::pow(ratio, budgets.local_search_floor_exponent_below));
  return std::max(std::min(per_element * elements, budgets.local_search_work_cap), floor);
}

void check_options(const SolverOptions& options) {
  const SolverBudgets& b = options.budgets;
  const auto count = [](std::int64_t v) { return static_cast<double>(v); };
  check_range("units_per_option_gap", b.units_per_option_gap, 1e-6, 1e6);
  check_range("max_unit_divisor", b.max_unit_divisor, 1.0, 0x1p20);
  check_range("max_solver_units", b.max_solver_units, 1.0, 0x1p31);
  check_range("candidate_energy_resolution", b.candidate_energy_resolution, 0.0, 1.0);
  check_range("candidate_max_spacing_units", count(b.candidate_max_spacing_units), 1.0, 0x1p31);
  check_range("tight_chain_coarsening", count(b.tight_chain_coarsening), 1.0, 0x1p20);
  check_range("local_search_work_per_element", b.local_search_work_per_element, 0.0, 1e12);
  check_range("local_search_work_floor", b.local_search_work_floor, 0.0, 1e15);
  check_range("local_search_floor_computations", b.local_search_floor_computations, 1.0, 0x1p30);
  check_range("local_search_floor_exponent", b.local_search_floor_exponent, 0.0, 16.0);
  check_range("local_search_floor_exponent_below", b.local_search_floor_exponent_below, 0.0, 16.0);
  check_range("local_search_coarse_options", b.local_search_coarse_options, 0.0, 1e6);
  check_range("local_search_work_cap", b.local_search_work_cap, 0.0, 1e15);
  check_range("local_search_max_grid", count(b.local_search_max_grid), 0.0, 0x1p20);
  check_range("local_search_rounds", count(b.local_search_rounds), 0.0, 1000.0);
  check_range("hull_search_share", b.hull_search_share, 0.0, 1.0);
  check_range("hull_search_deadlines", count(b.hull_search_deadlines), 0.0, 0x1p20);
  check_range("hull_search_work_per_computation", b.hull_search_work_per_computation, 0.0, 1e12);
  check_range("exhaustive_max_work", b.exhaustive_max_work, 0.0, 1e12);
  check_range("plan_energy_resolution", b.plan_energy_resolution, 0.0, 0.5);
  if (!(options.threads >= 0 && options.threads <= SolverOptions::kMaxThreads))
    throw std::invalid_argument("threads must be in 0.." + std::to_string(SolverOptions::kMaxThreads) +
                                " (0: automatic), got " + std::to_string(options.threads));
  if (!(options.progress_period_s >= 0 && options.progress_period_s <= 1e9))
    throw std::invalid_argument("progress_period_s must be a number of seconds in 0..1e9");
  if (!(options.interrupt_poll_s >= 0 && options.interrupt_poll_s <= 1e9))
    throw std::invalid_argument("interrupt_poll_s must be a number of seconds in 0..1e9");
}

int solver_threads(const SolverOptions& options) {
  return options.threads > 0 ? options.threads : SolverOptions::kDefaultThreads;
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kMinCut: return "min cut";
    case Phase::kCandidates: return "candidates";
    case Phase::kReclaim: return "reclamation";
    case Phase::kLocalSearch: return "local search";
  }
  return "?";
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kMinimumTime: return "minimum_time";
    case StopReason::kNoProgress: return "no_progress";
    case StopReason::kInfeasibleFlow: return "infeasible_flow";
  }
  return "?";
}

}  // namespace perseus
