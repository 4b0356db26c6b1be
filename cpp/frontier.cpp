#include "frontier.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <cstdlib>

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

// The min-cut loop's quantum when refining: the user's unit divided by an
// integer (SolverBudgets::units_per_option_gap and its bounds).
std::int64_t unit_divisor(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                          const SolverOptions& options) {
  if (!options.refine) return 1;
  std::vector<double> gaps;
  for (Index g = 0; g < table.num_groups(); ++g)
    for (Index k = 1; k < table.num_options(g); ++k) gaps.push_back(table.time_s(g, k) - table.time_s(g, k - 1));
  if (gaps.empty()) return 1;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
  const double median_gap = gaps[gaps.size() / 2];
  const SolverBudgets& b = options.budgets;
  double divisor = std::ceil(b.units_per_option_gap * options.unit_time_s / median_gap);
  divisor = std::clamp(divisor, 1.0, std::max(1.0, b.max_unit_divisor));
  // The loop spans the iteration time from every option slowest to every fastest.
  Evaluator evaluator(pipeline, dag, table);
  std::vector<OptionIndex> choice(ix(pipeline.size()), 0);
  const double fastest = evaluator.evaluate(choice.data()).iteration_time_s;
  for (Index i = 0; i < pipeline.size(); ++i)
    choice[ix(i)] = static_cast<OptionIndex>(table.num_options(evaluator.group(i)) - 1);
  const double span_units = (evaluator.evaluate(choice.data()).iteration_time_s - fastest) / options.unit_time_s;
  if (span_units * divisor > b.max_solver_units) divisor = std::floor(b.max_solver_units / std::max(span_units, 1.0));
  return static_cast<std::int64_t>(std::max(1.0, divisor));
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
  const std::int64_t divisor = unit_divisor(pipeline, dag, table, options);
  const double unit = options.unit_time_s / static_cast<double>(divisor);
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
  {
    std::unique_ptr<PlanImprover> tight;
    if (options.refine) tight = std::make_unique<PlanImprover>(pipeline, dag, table);
    collect_step_plans(steps, unit, divisor, options.refine, improver, tight.get(), candidates, pacer);
  }
  if (options.refine)
    collect_fast_end(steps, options.unit_time_s, result.baseline.iteration_time_s, improver,
                     candidates, pacer);
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
    // fill_gaps wants the frontier fastest first.
    std::vector<std::size_t> by_time = select(candidates);
    if (!std::getenv("PNOFILL")) fill_gaps(candidates, by_time, options.unit_time_s, static_cast<std::int64_t>(budget), improver,
              improved, pacer);
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
