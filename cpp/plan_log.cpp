#include "plan_log.hpp"

namespace perseus {

PlanLog::PlanLog(Index num_computations)
    : num_computations_(num_computations), last_(ix(num_computations), 0) {}

void PlanLog::record(const OptionIndex* choice, Evaluation evaluation, double energy_before_j) {
  for (std::size_t i = 0; i < last_.size(); ++i) {
    if (choice[i] == last_[i]) continue;
    changed_.push_back(static_cast<Index>(i));
    option_.push_back(choice[i]);
    last_[i] = choice[i];
  }
  end_.push_back(changed_.size());
  time_s_.push_back(evaluation.iteration_time_s);
  energy_j_.push_back(evaluation.energy_j);
  before_j_.push_back(energy_before_j);
}

}  // namespace perseus
