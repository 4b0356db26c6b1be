#include "frontier.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "phillips_dessouky.hpp"
#include "plan_improver.hpp"
#include "plan_log.hpp"
#include "refinement.hpp"

namespace perseus {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A finer quantum brings the convex model closer to the measured options.
// When refining, small pipelines get one: the unit is divided by up to
// max_unit_divisor while (steps x DAG elements) stays within
// finer_quantum_work, so large pipelines keep the unit they were given.
double solver_unit(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                   const SolverOptions& options) {
  if (!options.refine) return options.unit_time_s;
  const PhillipsDessouky probe(pipeline, dag, table, options.unit_time_s, options.budgets);
  const double work = static_cast<double>(probe.max_units() - probe.min_units() + 1) *
                      static_cast<double>(dag.num_nodes() + dag.num_edges());
  const double divisor =
      std::floor(std::min(options.budgets.max_unit_divisor, options.budgets.finer_quantum_work / work));
  return divisor > 1 ? options.unit_time_s / divisor : options.unit_time_s;
}

}  // namespace

FrontierResult solve_frontier(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              const SolverOptions& options) {
  if (!(options.unit_time_s > 0) || !std::isfinite(options.unit_time_s))
    throw std::invalid_argument("unit time must be a positive number of seconds");
  if (table.num_stages() != pipeline.num_stages())
    throw std::invalid_argument("the profile has " + std::to_string(table.num_stages()) +
                                " stages but the pipeline needs " +
                                std::to_string(pipeline.num_stages()));
  Pacer pacer(options);
  FrontierResult result;
  result.num_computations = pipeline.size();
  const auto n = ix(pipeline.size());

  auto started = Clock::now();
  const double unit = solver_unit(pipeline, dag, table, options);
  PhillipsDessouky steps(pipeline, dag, table, unit, options.budgets);
  result.stop_reason = steps.run(pacer);
  result.steps = steps.units_done();
  result.cuts = steps.num_cuts();
  result.unit_time_s = unit;
  result.min_time_units = steps.min_units();
  result.max_time_units = steps.max_units();
  result.phase_seconds[static_cast<int>(Phase::kMinCut)] = seconds_since(started);

  started = Clock::now();
  Evaluator evaluator(pipeline, dag, table);
  {
    const std::vector<OptionIndex> fastest(n, 0);
    result.baseline = evaluator.evaluate(fastest.data());
  }
  PlanImprover improver(pipeline, dag, table);
  PlanLog candidates(pipeline.size()), improved(pipeline.size());
  collect_step_plans(steps, unit, options.refine, improver, candidates, pacer);
  if (options.refine)
    collect_fast_end(steps, unit, result.baseline.iteration_time_s, improver, candidates, pacer);
  const Phase walk = options.refine ? Phase::kReclaim : Phase::kCandidates;
  result.phase_seconds[static_cast<int>(walk)] = seconds_since(started);

  const double blocking_w = evaluator.pipeline_blocking_w();
  const double resolution_j = options.budgets.plan_energy_resolution * result.baseline.energy_j;
  auto select = [&](const PlanLog& log) {
    std::vector<double> times(log.size()), energies(log.size());
    for (std::size_t k = 0; k < log.size(); ++k) {
      times[k] = log.time_s(k);
      energies[k] = log.energy_j(k);
    }
    return frontier_of(times, energies, blocking_w, resolution_j);
  };
  // Log order (the order rebuild() visits plans in).
  std::vector<std::size_t> kept = select(candidates);
  std::sort(kept.begin(), kept.end());

  if (options.refine) {
    started = Clock::now();
    const double elements = static_cast<double>(dag.num_nodes() + dag.num_edges());
    const SolverBudgets& b = options.budgets;
    const double budget = std::clamp(b.local_search_work_per_element * elements,
                                     b.local_search_work_floor, b.local_search_work_cap);
    search_at_plans(candidates, kept, static_cast<std::int64_t>(budget), improver, improved, pacer);
    result.phase_seconds[static_cast<int>(Phase::kLocalSearch)] = seconds_since(started);
  }
  result.candidates = static_cast<std::int64_t>(candidates.size() + improved.size());

  // The kept plans of both logs, replayed once more on measured times, and
  // selected again from the exact values.
  std::vector<OptionIndex> rows;
  std::vector<double> times, energies, befores;
  auto gather = [&](const PlanLog& log, const std::vector<std::size_t>& wanted) {
    log.rebuild(wanted, [&](std::size_t k, const OptionIndex* choice) {
      const Evaluation e = evaluator.evaluate(choice);
      rows.insert(rows.end(), choice, choice + n);
      times.push_back(e.iteration_time_s);
      energies.push_back(e.energy_j);
      befores.push_back(log.energy_before_j(wanted[k]) +
                        blocking_w * (e.iteration_time_s - log.time_s(wanted[k])));
    });
  };
  gather(candidates, kept);
  if (improved.size() > 0) {
    std::vector<std::size_t> found = select(improved);
    std::sort(found.begin(), found.end());
    gather(improved, found);
  }
  for (const std::size_t k : frontier_of(times, energies, blocking_w, resolution_j)) {
    result.choices.insert(result.choices.end(), rows.begin() + static_cast<std::ptrdiff_t>(k * n),
                          rows.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
    result.iteration_time_s.push_back(times[k]);
    result.energy_j.push_back(energies[k]);
    result.energy_before_reclaim_j.push_back(std::max(befores[k], energies[k]));
  }
  return result;
}

}  // namespace perseus
