#include "exhaustive.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "evaluate.hpp"

namespace perseus {

std::int64_t affordable_plan_count(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                                   double max_work) {
  const double per_replay = static_cast<double>(dag.num_nodes() + dag.num_edges());
  const double limit = max_work / std::max(per_replay, 1.0);
  double plans = 1.0;
  for (Index i = 0; i < pipeline.size(); ++i) {
    plans *= static_cast<double>(table.num_options(group_of(pipeline.computation(i))));
    if (plans > limit) return -1;  // also stops the product long before it overflows
  }
  return static_cast<std::int64_t>(plans);
}

void record_every_pareto_plan(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              std::int64_t plan_count, PlanLog& log, const Ticker& tick) {
  const Index n = pipeline.size();
  Evaluator evaluator(pipeline, dag, table);
  const double blocking_w = evaluator.pipeline_blocking_w();
  std::vector<Index> radix(ix(n));
  for (Index i = 0; i < n; ++i) radix[ix(i)] = table.num_options(group_of(pipeline.computation(i)));
  // The Pareto plans so far, by time: (effective energy, the plan's number).
  // A plan's number is its choice in mixed radix, computation 0 fastest.
  std::map<double, std::pair<double, std::int64_t>> pareto;
  std::vector<OptionIndex> choice(ix(n), 0);
  constexpr std::int64_t kTickEvery = 4096;
  for (std::int64_t number = 0; number < plan_count; ++number) {
    if (number % kTickEvery == 0) tick(number, plan_count);
    const Evaluation e = evaluator.evaluate(choice.data());
    const double effective = e.energy_j - blocking_w * e.iteration_time_s;
    // Dominated by a plan at least as fast and no dearer (the first of equals stays).
    auto after = pareto.upper_bound(e.iteration_time_s);
    const bool dominated = after != pareto.begin() && std::prev(after)->second.first <= effective;
    if (!dominated) {
      // It dominates the slower (or equally fast) plans that are no cheaper.
      auto it = pareto.lower_bound(e.iteration_time_s);
      while (it != pareto.end() && it->second.first >= effective) it = pareto.erase(it);
      pareto.emplace(e.iteration_time_s, std::make_pair(effective, number));
    }
    // The next plan: the odometer, computation 0 turning fastest.
    for (Index i = 0; i < n; ++i) {
      if (++choice[ix(i)] < radix[ix(i)]) break;
      choice[ix(i)] = 0;
    }
  }
  for (const auto& [time_s, kept] : pareto) {
    std::int64_t number = kept.second;
    for (Index i = 0; i < n; ++i) {
      choice[ix(i)] = static_cast<OptionIndex>(number % radix[ix(i)]);
      number /= radix[ix(i)];
    }
    const Evaluation e = evaluator.evaluate(choice.data());
    log.record(choice.data(), e, e.energy_j);
  }
}

}  // namespace perseus
