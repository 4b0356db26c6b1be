#include "evaluate.hpp"

#include <algorithm>

namespace perseus {

Evaluator::Evaluator(const Pipeline& pipeline, const Dag& dag, const OptionTable& table)
    : dag_(dag),
      table_(table),
      num_gpus_(static_cast<double>(pipeline.num_gpus())),
      blocking_w_(table.blocking_power_w() * num_gpus_),
      group_(ix(pipeline.size())),
      time_(ix(pipeline.size())),
      energy_(ix(pipeline.size())),
      finish_(ix(pipeline.size())) {
  for (Index i = 0; i < pipeline.size(); ++i) group_[ix(i)] = group_of(pipeline.computation(i));
}

Evaluation Evaluator::evaluate(const OptionIndex* choice) {
  for (std::size_t i = 0; i < group_.size(); ++i) {
    time_[i] = table_.time_s(group_[i], choice[i]);
    energy_[i] = table_.energy_j(group_[i], choice[i]);
  }
  return replay(time_.data(), energy_.data());
}

Evaluation Evaluator::replay(const double* time_s, const double* energy_j) {
  double makespan = 0.0, busy = 0.0, energy = 0.0;
  for (const ComputationId v : dag_.topological_order()) {
    double start = 0.0;
    for (const ComputationId* p = dag_.predecessors_begin(v); p != dag_.predecessors_end(v); ++p)
      start = std::max(start, finish_[p->index()]);
    finish_[v.index()] = start + time_s[v.index()];
    makespan = std::max(makespan, finish_[v.index()]);
  }
  for (std::size_t i = 0; i < group_.size(); ++i) {
    busy += time_s[i];
    energy += energy_j[i];
  }
  return {makespan, energy + table_.blocking_power_w() * (num_gpus_ * makespan - busy)};
}

}  // namespace perseus
