#include "problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

namespace perseus {

Problem::Problem(const Pipeline& pipeline, std::vector<Index> offsets, std::vector<double> time_s,
                 std::vector<double> energy_j, double blocking_power_w)
    : pipeline_(pipeline),
      dag_(pipeline_),
      table_(pipeline_.num_stages(), std::move(offsets), std::move(time_s), std::move(energy_j),
             blocking_power_w),
      evaluator_(pipeline_, dag_, table_) {
  // Every sum the solver forms must stay far from overflow, whatever the
  // caller checked: plan energies (blocking included), effective energies
  // summed over all computations, and the pipeline's blocking power over the
  // slowest iteration. They are largest for the all-fastest and all-slowest
  // plans; a margin of 2^20 leaves room for the differences and sums of them.
  const auto n = ix(pipeline_.size());
  std::vector<OptionIndex> choice(n, 0);
  const Evaluation fastest = evaluator_.evaluate(choice.data());
  double effective = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const GroupId g = evaluator_.group(static_cast<Index>(i));
    choice[i] = static_cast<OptionIndex>(table_.num_options(g) - 1);
    effective += std::abs(table_.effective_j(g, 0)) + std::abs(table_.effective_j(g, choice[i]));
  }
  const Evaluation slowest = evaluator_.evaluate(choice.data());
  fastest_time_s_ = fastest.iteration_time_s;
  slowest_time_s_ = slowest.iteration_time_s;
  const double largest = std::abs(fastest.energy_j) + std::abs(slowest.energy_j) + effective +
                         evaluator_.pipeline_blocking_w() * slowest.iteration_time_s;
  if (!(std::isfinite(slowest.iteration_time_s) && std::isfinite(largest * 0x1p20)))
    throw std::invalid_argument(
        "the iteration's energy overflows: energies, times or the blocking power are too large "
        "(an iteration's energy must stay below 1e300 J or so)");
}

std::vector<Evaluation> Problem::evaluate(const OptionIndex* choices, std::size_t plans) {
  const auto n = ix(pipeline_.size());
  for (std::size_t k = 0; k < plans; ++k)
    for (std::size_t i = 0; i < n; ++i) {
      const GroupId g = evaluator_.group(static_cast<Index>(i));
      if (choices[k * n + i] >= table_.num_options(g))
        throw std::invalid_argument("plan " + std::to_string(k) + ": computation " + std::to_string(i) +
                                    " chooses option " + std::to_string(choices[k * n + i]) + " of " +
                                    std::to_string(table_.num_options(g)));
    }
  std::vector<Evaluation> out(plans);
  for (std::size_t k = 0; k < plans; ++k) out[k] = evaluator_.evaluate(choices + k * n);
  return out;
}

std::vector<Evaluation> Problem::replay(const double* time_s, const double* energy_j,
                                        std::size_t plans) {
  const auto n = ix(pipeline_.size());
  for (std::size_t k = 0; k < plans * n; ++k)
    if (!(std::isfinite(time_s[k]) && time_s[k] > 0 && std::isfinite(energy_j[k]) && energy_j[k] > 0))
      throw std::invalid_argument("plan " + std::to_string(k / n) + ": computation " +
                                  std::to_string(k % n) +
                                  " has a time or energy that is not finite and > 0");
  std::vector<Evaluation> out(plans);
  for (std::size_t k = 0; k < plans; ++k) out[k] = evaluator_.replay(time_s + k * n, energy_j + k * n);
  return out;
}

FrontierResult Problem::solve(const SolverOptions& options) const {
  // The min-cut loop counts iteration time in integer units of at least
  // unit_time_s / max_unit_divisor and keeps arrays as long as the span from
  // the fastest to the slowest iteration: both must fit, whatever the caller checked.
  check_options(options);
  const double unit = options.unit_time_s;
  if (!(unit > 0) || !std::isfinite(unit))
    throw std::invalid_argument("unit time must be a positive number of seconds");
  const double n = static_cast<double>(pipeline_.size());
  const double divisor = std::max(1.0, options.budgets.max_unit_divisor);
  if (!std::isnormal(unit / divisor)) {  // a subnormal quantum loses its digits, or is 0
    char text[160];
    std::snprintf(text, sizeof text, "unit_time_s=%g s is too small: use a larger unit_time_s", unit);
    throw std::invalid_argument(text);
  }
  const double span_units = (slowest_time_s_ - fastest_time_s_) / unit + n;
  const double longest_units = slowest_time_s_ / unit * divisor + n;
  if (!(span_units <= kMaxSpanUnits) || !(longest_units <= kMaxLongestUnits)) {
    char text[320];
    std::snprintf(text, sizeof text,
                  "unit_time_s=%g s is too fine: iterations from %g s to %g s span %.3g units "
                  "(at most 2^31; the slowest iteration at most 2^52 units of the solver's "
                  "quantum): use a larger unit_time_s",
                  unit, fastest_time_s_, slowest_time_s_, span_units);
    throw std::invalid_argument(text);
  }
  return solve_frontier(pipeline_, dag_, table_, options);
}

}  // namespace perseus
