#include "locked_problem.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "max_flow.hpp"  // kInfinity
#include "refinement.hpp"

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

PlanImprover& LockedProblem::improver() {
  if (!improver_)
    improver_ = std::make_unique<PlanImprover>(problem_.pipeline(), problem_.dag(), problem_.table());
  return *improver_;
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
  PlanImprover& improver = this->improver();
  for (std::size_t k = 0; k < plans; ++k) {
    OptionIndex* row = out.choices.data() + k * n;
    improver.assign(row);
    improve(improver);
    std::copy(improver.choice().begin(), improver.choice().end(), row);
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

ImprovedPlans LockedProblem::tighten(const OptionIndex* choices, std::size_t plans, double deadline_s) {
  // An infinite deadline would slow every computation to its slowest option
  // and a NaN one stop nothing: neither is a time to tighten to.
  if (!std::isfinite(deadline_s)) throw std::invalid_argument("deadline_s must be finite");
  return improve_each(choices, plans, [&](PlanImprover& improver) {
    if (improver.tighten(deadline_s, TightenOrder::kUsefulSecond)) improver.reclaim(deadline_s);
  });
}

ImprovedPlans LockedProblem::search_deadline(const OptionIndex* plans, std::size_t count,
                                             const double* time_s, double deadline_s,
                                             std::int64_t max_work, const std::function<void()>& poll) {
  const std::size_t n = ix(problem_.pipeline().size());
  std::vector<double> times(time_s, time_s + count);
  for (std::size_t k = 0; k < count; ++k)
    if (!std::isfinite(times[k]) || (k > 0 && times[k] < times[k - 1]))
      throw std::invalid_argument("the starts' times must be finite and sorted, fastest first");
  if (!std::isfinite(deadline_s)) throw std::invalid_argument("deadline_s must be finite");
  if (max_work < 0) throw std::invalid_argument("max_work must not be negative");
  const std::lock_guard<std::mutex> lock(mutex_);
  problem_.evaluate(plans, count);  // checks every option index, as improve_each does
  PlanImprover& improver = this->improver();
  const std::vector<OptionIndex> fastest(n, 0);
  std::vector<OptionIndex> best(n);
  double best_j = kInfinity;
  improver.set_poll(poll, kSearchPollWork);
  try {
    best_j = perseus::search_deadline(
        deadline_s, times, [&](std::size_t k) { return plans + k * n; }, fastest.data(),
        improver.work() + max_work, 1, improver, nullptr, best, nullptr,
        StartSearch::kEveryWithRestarts);
  } catch (...) {
    improver_.reset();  // stopped mid-search: the next call builds a fresh one
    throw;
  }
  improver.set_poll({}, 0);
  ImprovedPlans out;
  if (best_j == kInfinity) return out;
  out.choices = std::move(best);
  out.evaluations = problem_.evaluate(out.choices.data(), 1);
  return out;
}

}  // namespace perseus
