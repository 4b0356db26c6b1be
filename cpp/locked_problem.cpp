#include "locked_problem.hpp"

#include <algorithm>
#include <utility>

namespace perseus {

LockedProblem::LockedProblem(const Pipeline& pipeline, std::vector<Index> offsets,
                             std::vector<double> time_s, std::vector<double> energy_j,
                             double blocking_power_w)
    : problem_(pipeline, std::move(offsets), std::move(time_s), std::move(energy_j), blocking_power_w) {
}

std::vector<Evaluation> LockedProblem::evaluate(const OptionIndex* choices, std::size_t plans) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return problem_.evaluate(choices, plans);
}

std::vector<Evaluation> LockedProblem::replay(const double* time_s, const double* energy_j,
                                              std::size_t plans) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return problem_.replay(time_s, energy_j, plans);
}

template <typename Improve>
ImprovedPlans LockedProblem::improve_each(const OptionIndex* choices, std::size_t plans,
                                          Improve improve) {
  const std::size_t n = ix(problem_.pipeline().size());
  const std::lock_guard<std::mutex> lock(mutex_);
  // Checks every option index (the improver assumes them in range), under
  // the lock: the check replays on the shared scratch.
  problem_.evaluate(choices, plans);
  ImprovedPlans out;
  out.choices.assign(choices, choices + plans * n);
  if (!improver_)
    improver_ = std::make_unique<PlanImprover>(problem_.pipeline(), problem_.dag(), problem_.table());
  for (std::size_t k = 0; k < plans; ++k) {
    OptionIndex* row = out.choices.data() + k * n;
    improver_->assign(row);
    improve(*improver_);
    std::copy(improver_->choice().begin(), improver_->choice().end(), row);
  }
  out.evaluations = problem_.evaluate(out.choices.data(), plans);
  return out;
}

ImprovedPlans LockedProblem::reclaim(const OptionIndex* choices, std::size_t plans, double deadline_s,
                                     ReclaimOrder order) {
  return improve_each(choices, plans,
                      [&](PlanImprover& improver) { improver.reclaim(deadline_s, order); });
}

ImprovedPlans LockedProblem::local_search(const OptionIndex* choices, std::size_t plans,
                                          double deadline_s, std::int64_t max_work) {
  return improve_each(choices, plans,
                      [&](PlanImprover& improver) { improver.local_search(deadline_s, max_work); });
}

}  // namespace perseus
