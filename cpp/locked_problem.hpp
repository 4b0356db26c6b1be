// A Problem that several threads may use at once, as the Python API does.
//
// Problem's replays share scratch arrays and a PlanImprover holds one plan,
// so each call here takes the lock for its whole batch. The improver is made
// on first use (most Problems never reclaim). Callers that hold an
// interpreter lock release it around these calls; nothing here knows of it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "evaluate.hpp"
#include "options.hpp"
#include "plan_improver.hpp"
#include "problem.hpp"

namespace perseus {

// Plans after an improvement, with their replays.
struct ImprovedPlans {
  std::vector<Evaluation> evaluations;
  std::vector<OptionIndex> choices;  // [plans * num_computations]
};

class LockedProblem {
 public:
  // Throws as Problem's constructor does.
  LockedProblem(const Pipeline& pipeline, std::vector<Index> offsets, std::vector<double> time_s,
                std::vector<double> energy_j, double blocking_power_w);

  const Problem& problem() const { return problem_; }
  const Pipeline& pipeline() const { return problem_.pipeline(); }

  // Problem::evaluate and Problem::replay under the lock.
  std::vector<Evaluation> evaluate(const OptionIndex* choices, std::size_t plans);
  std::vector<Evaluation> replay(const double* time_s, const double* energy_j, std::size_t plans);
  // Each plan reclaimed up to max(deadline_s, its own time), or searched
  // locally at deadline_s within max_work work units (plan_improver.hpp).
  // Throws std::invalid_argument, before changing anything, for an option
  // index out of range.
  ImprovedPlans reclaim(const OptionIndex* choices, std::size_t plans, double deadline_s,
                        ReclaimOrder order);
  ImprovedPlans local_search(const OptionIndex* choices, std::size_t plans, double deadline_s,
                             std::int64_t max_work);
  // Each plan sped up until it meets deadline_s (cheapest useful speed-ups
  // first, PlanImprover::tighten with TightenOrder::kUsefulSecond), then
  // slowed back into what is left of it (reclaim): the local search's start
  // from a slower frontier plan. A plan that cannot meet the deadline even
  // at its fastest options comes back as fast as tightening got it, so
  // slower than deadline_s.
  ImprovedPlans tighten(const OptionIndex* choices, std::size_t plans, double deadline_s);
  // One plan solved for deadline_s from `plans` starts (frontier plans near
  // it, with their times time_s, fastest first): refinement.hpp's
  // search_deadline within max_work work units. Empty when not even the
  // all-fastest plan meets the deadline. Throws std::invalid_argument for an
  // option index out of range or times that are not finite and sorted.
  // `poll`, when set, is called about every kSearchPollWork work units and
  // may throw to cancel (the exception passes through; the next call starts
  // afresh).
  ImprovedPlans search_deadline(const OptionIndex* plans, std::size_t count, const double* time_s,
                                double deadline_s, std::int64_t max_work,
                                const std::function<void()>& poll = {});
  // About 1 ms of search between polls (1e8 work units a second on 16 x 128).
  static constexpr std::int64_t kSearchPollWork = 100000;
  // Problem::solve; it has no shared scratch, so it takes no lock and runs
  // beside the calls above.
  FrontierResult solve(const SolverOptions& options) const { return problem_.solve(options); }

 private:
  PlanImprover& improver();  // under the lock
  template <typename Improve>
  ImprovedPlans improve_each(const OptionIndex* choices, std::size_t plans, Improve improve);

  Problem problem_;
  std::unique_ptr<PlanImprover> improver_;  // made on first use
  std::mutex mutex_;
};

}  // namespace perseus
