#include "evaluate.hpp"

#include <algorithm>

namespace perseus {

Evaluator::Evaluator(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                     double blocking_power_w)
    : dag_(dag),
      table_(table),
      blocking_power_w_(blocking_power_w),
      num_gpus_(pipeline.num_gpus()),
      group_(static_cast<std::size_t>(pipeline.size())),
      finish_(static_cast<std::size_t>(pipeline.size())),
      latest_finish_(static_cast<std::size_t>(pipeline.size())) {
  for (Index i = 0; i < pipeline.size(); ++i)
    group_[static_cast<std::size_t>(i)] = group_of(pipeline.computation(i));
}

double Evaluator::forward_pass(const OptionIndex* choice) {
  double makespan = 0.0;
  for (const Index v : dag_.topological_order()) {
    double start = 0.0;
    for (const Index* p = dag_.predecessors_begin(v); p != dag_.predecessors_end(v); ++p)
      start = std::max(start, finish_[static_cast<std::size_t>(*p)]);
    const double end = start + time(v, choice);
    finish_[static_cast<std::size_t>(v)] = end;
    makespan = std::max(makespan, end);
  }
  return makespan;
}

Evaluation Evaluator::evaluate(const OptionIndex* choice) {
  const double makespan = forward_pass(choice);
  double busy_time = 0.0, energy = 0.0;
  for (Index i = 0; i < dag_.num_nodes(); ++i) {
    busy_time += time(i, choice);
    energy += table_.energy_j(group_[static_cast<std::size_t>(i)], choice[i]);
  }
  energy += blocking_power_w_ * (static_cast<double>(num_gpus_) * makespan - busy_time);
  return {makespan, energy};
}

Evaluation Evaluator::reclaim(OptionIndex* choice) {
  const double makespan = forward_pass(choice);
  const auto& order = dag_.topological_order();
  // Latest finish times under the current choices, deadline = makespan.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Index v = *it;
    double latest = makespan;
    for (const Index* s = dag_.successors_begin(v); s != dag_.successors_end(v); ++s)
      latest = std::min(latest, latest_finish_[static_cast<std::size_t>(*s)] - time(*s, choice));
    latest_finish_[static_cast<std::size_t>(v)] = latest;
  }
  // Forward in topological order: a computation that finishes by its latest
  // finish time leaves every successor able to start by its latest start, so
  // the successors keep at least their current options and T cannot grow.
  for (const Index v : order) {
    double start = 0.0;
    for (const Index* p = dag_.predecessors_begin(v); p != dag_.predecessors_end(v); ++p)
      start = std::max(start, finish_[static_cast<std::size_t>(*p)]);
    const Index g = group_[static_cast<std::size_t>(v)];
    const double budget = latest_finish_[static_cast<std::size_t>(v)] - start;
    Index k = table_.num_options(g) - 1;
    while (k > choice[v] && table_.time_s(g, k) > budget) --k;
    choice[v] = static_cast<OptionIndex>(k);
    finish_[static_cast<std::size_t>(v)] = start + table_.time_s(g, k);
  }
  return evaluate(choice);
}

}  // namespace perseus
