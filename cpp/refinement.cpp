#include "refinement.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace perseus {
namespace {

// The unrefined plan's energy over an iteration as long as the refined one.
double over_same_length(const Evaluation& before, const Evaluation& after, double blocking_w) {
  return before.energy_j + blocking_w * (after.iteration_time_s - before.iteration_time_s);
}

}  // namespace

void collect_step_plans(PhillipsDessouky& steps, double unit_time_s, bool refine,
                        PlanImprover& improver, PlanLog& log, Pacer& pacer) {
  const Index n = steps.num_computations();
  std::vector<PhillipsDessouky::Units> durations;
  std::vector<OptionIndex> choice(ix(n));
  std::vector<Index> changed;
  changed.reserve(ix(n));
  steps.first_plan(durations);
  for (Index i = 0; i < n; ++i) choice[ix(i)] = steps.option_for(i, durations[ix(i)]);
  const Phase phase = refine ? Phase::kReclaim : Phase::kCandidates;
  const auto units = steps.units_done();
  for (PhillipsDessouky::Units u = 0; u <= units; ++u) {
    pacer.tick(phase, u, units + 1);
    if (u > 0) {
      steps.advance(durations, changed);
      for (const Index i : changed) choice[ix(i)] = steps.option_for(i, durations[ix(i)]);
    }
    improver.assign(choice.data());
    const Evaluation before = improver.evaluation();
    // Rounded-up durations leave slack everywhere: reclaim up to the model time.
    if (refine) improver.reclaim_best(static_cast<double>(steps.max_units() - u) * unit_time_s);
    const Evaluation after = improver.evaluation();
    log.record(improver.choice().data(), after,
               over_same_length(before, after, improver.pipeline_blocking_w()));
  }
}

void collect_fast_end(PhillipsDessouky& steps, double unit_time_s, double fastest_s,
                      PlanImprover& improver, PlanLog& log, Pacer& pacer) {
  const Index n = steps.num_computations();
  const double blocking_w = improver.pipeline_blocking_w();
  // The last step's plan, unreclaimed: the start of the tightening chain.
  std::vector<PhillipsDessouky::Units> durations;
  std::vector<Index> changed;
  std::vector<OptionIndex> chain(ix(n)), fastest(ix(n), 0);
  steps.first_plan(durations);
  for (PhillipsDessouky::Units u = 0; u < steps.units_done(); ++u) steps.advance(durations, changed);
  for (Index i = 0; i < n; ++i) chain[ix(i)] = steps.option_for(i, durations[ix(i)]);
  const double last_s = static_cast<double>(steps.max_units() - steps.units_done()) * unit_time_s;
  // Deadlines last - k * unit above the fastest time, then the fastest time;
  // integer-indexed, so a unit below one ulp of the times still ends.
  const auto count = last_s > fastest_s
                         ? static_cast<std::int64_t>(std::floor((last_s - fastest_s) / unit_time_s))
                         : 0;
  for (std::int64_t k = 1; k <= count + 1; ++k) {
    pacer.tick(Phase::kReclaim, k, count + 1);
    const double deadline = k <= count ? last_s - static_cast<double>(k) * unit_time_s : fastest_s;
    if (deadline < fastest_s) continue;
    improver.assign(chain.data());
    improver.tighten(deadline);
    std::copy(improver.choice().begin(), improver.choice().end(), chain.begin());
    Evaluation before = improver.evaluation();
    improver.reclaim_best(deadline);
    Evaluation after = improver.evaluation();
    if (after.iteration_time_s <= deadline)
      log.record(improver.choice().data(), after, over_same_length(before, after, blocking_w));
    improver.assign(fastest.data());
    before = improver.evaluation();
    improver.reclaim_best(deadline);
    after = improver.evaluation();
    log.record(improver.choice().data(), after, over_same_length(before, after, blocking_w));
  }
}

void search_at_plans(const PlanLog& from, const std::vector<std::size_t>& frontier,
                     std::int64_t max_work, PlanImprover& improver, PlanLog& to, Pacer& pacer) {
  const std::int64_t end = improver.work() + max_work;
  const double blocking_w = improver.pipeline_blocking_w();
  from.rebuild(frontier, [&](std::size_t k, const OptionIndex* choice) {
    pacer.tick(Phase::kLocalSearch, static_cast<std::int64_t>(k),
               static_cast<std::int64_t>(frontier.size()));
    const std::int64_t left = end - improver.work();
    if (left <= 0) return;
    const std::int64_t share = left / static_cast<std::int64_t>(frontier.size() - k);
    const double deadline = from.time_s(frontier[k]);
    improver.assign(choice);
    const Evaluation before = improver.evaluation();
    improver.local_search(deadline, share);
    const Evaluation after = improver.evaluation();
    if (improver.energy_at(deadline) < before.energy_j * (1 - 1e-12))
      to.record(improver.choice().data(), after, over_same_length(before, after, blocking_w));
  });
}

std::vector<std::size_t> frontier_of(const std::vector<double>& time_s,
                                     const std::vector<double>& energy_j, double blocking_w,
                                     double resolution_j) {
  std::vector<std::size_t> order(time_s.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  auto effective = [&](std::size_t k) { return energy_j[k] - blocking_w * time_s[k]; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (time_s[a] != time_s[b]) return time_s[a] < time_s[b];
    return effective(a) < effective(b);
  });
  std::vector<std::size_t> kept;
  for (const std::size_t k : order) {
    if (!std::isfinite(time_s[k]) || !std::isfinite(energy_j[k])) continue;
    if (kept.empty() ||
        (time_s[k] > time_s[kept.back()] && effective(k) < effective(kept.back()) - resolution_j))
      kept.push_back(k);
  }
  return kept;
}

}  // namespace perseus
