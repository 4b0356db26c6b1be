#include "problem.hpp"

#include <cmath>
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
      evaluator_(pipeline_, dag_, table_) {}

std::vector<Evaluation> Problem::evaluate(const OptionIndex* choices, std::size_t plans) {
  const auto n = ix(pipeline_.size());
  for (std::size_t k = 0; k < plans; ++k)
    for (std::size_t i = 0; i < n; ++i) {
      const Index g = evaluator_.group(static_cast<Index>(i));
      if (choices[k * n + i] >= table_.num_options(g))
        throw std::invalid_argument("plan " + std::to_string(k) + ": computation " +
                                    std::to_string(i) + " chooses option " +
                                    std::to_string(choices[k * n + i]) + " of " +
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
  return solve_frontier(pipeline_, dag_, table_, options);
}

}  // namespace perseus
