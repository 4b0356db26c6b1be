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

void collect_step_plans(PhillipsDessouky& steps, double unit_time_s, std::int64_t stride,
                        bool refine, PlanImprover& improver, PlanImprover* tight, PlanLog& log,
                        Pacer& pacer) {
  const Index n = steps.num_computations();
  const double blocking_w = improver.pipeline_blocking_w();
  std::vector<PhillipsDessouky::Units> durations;
  std::vector<OptionIndex> choice(ix(n));
  std::vector<Index> changed, since;  // since: changed since the last candidate
  std::vector<char> listed(ix(n), 0);
  steps.first_plan(durations);
  for (Index i = 0; i < n; ++i) choice[ix(i)] = steps.option_for(i, durations[ix(i)]);
  // Both chains hold their last candidate, reclaimed; revert() takes each
  // back to its unreclaimed plan, and the steps since change a few options.
  improver.assign(choice.data());
  if (tight != nullptr) tight->assign(choice.data());
  auto record = [&](PlanImprover& from, const Evaluation& before) {
    const Evaluation after = from.evaluation();
    log.record(from.choice().data(), after, over_same_length(before, after, blocking_w));
  };
  const Phase phase = refine ? Phase::kReclaim : Phase::kCandidates;
  const auto units = steps.units_done();
  for (PhillipsDessouky::Units u = 0; u <= units; ++u) {
    if (u > 0) {
      steps.advance(durations, changed);
      for (const Index i : changed) {
        choice[ix(i)] = steps.option_for(i, durations[ix(i)]);
        if (!listed[ix(i)]) {
          listed[ix(i)] = 1;
          since.push_back(i);
        }
      }
    }
    if (u % stride != 0 && u != units) continue;
    pacer.tick(phase, u, units + 1);
    // The model time is the deadline; a plan that runs longer than its model
    // (durations are rounded to the nearest unit) is reclaimed up to its own time.
    const double deadline = static_cast<double>(steps.max_units() - u) * unit_time_s;
    improver.revert();
    if (tight != nullptr) tight->revert();
    for (const Index i : since) {
      listed[ix(i)] = 0;
      improver.change(i, choice[ix(i)]);
      // The tight chain: the step's durations rounded up to the next option,
      // never slower than it was, then tightened to the deadline.
      if (tight != nullptr)
        tight->change(i, std::min<Index>(tight->choice()[ix(i)], steps.option_at_least(i, durations[ix(i)])));
    }
    since.clear();
    improver.commit();
    improver.checkpoint();
    const Evaluation before = improver.evaluation();
    if (refine) improver.reclaim(deadline);
    record(improver, before);
    if (tight == nullptr) continue;
    tight->commit();
    if (!tight->tighten(deadline)) {  // cannot meet it: restart the chain from the step's plan
      tight->assign(choice.data());
      continue;
    }
    tight->checkpoint();
    const Evaluation tight_before = tight->evaluation();
    tight->reclaim(deadline);
    record(*tight, tight_before);
  }
}

void collect_fast_end(PhillipsDessouky& steps, double spacing_s, double fastest_s,
                      PlanImprover& improver, PlanLog& log, Pacer& pacer) {
  const Index n = steps.num_computations();
  const double blocking_w = improver.pipeline_blocking_w();
  double first_step_s = log.size() > 0 ? log.time_s(0) : fastest_s;
  for (std::size_t k = 1; k < log.size(); ++k) first_step_s = std::min(first_step_s, log.time_s(k));
  // The last step's plan, unreclaimed: the start of the tightening chain.
  std::vector<PhillipsDessouky::Units> durations;
  std::vector<Index> changed;
  std::vector<OptionIndex> chain(ix(n)), fastest(ix(n), 0);
  steps.first_plan(durations);
  for (PhillipsDessouky::Units u = 0; u < steps.units_done(); ++u) steps.advance(durations, changed);
  for (Index i = 0; i < n; ++i) chain[ix(i)] = steps.option_for(i, durations[ix(i)]);
  // Deadlines fastest + k * spacing below the fastest step plan, slowest
  // first (each tightening starts from the one before); integer-indexed, so
  // a spacing below one ulp of the times still ends.
  const auto count = first_step_s > fastest_s
                         ? static_cast<std::int64_t>(std::ceil((first_step_s - fastest_s) / spacing_s))
                         : 1;
  for (std::int64_t k = count - 1; k >= 0; --k) {
    pacer.tick(Phase::kReclaim, count - k, count);
    const double deadline = fastest_s + static_cast<double>(k) * spacing_s;
    improver.assign(chain.data());
    if (improver.tighten(deadline)) {
      std::copy(improver.choice().begin(), improver.choice().end(), chain.begin());
      const Evaluation before = improver.evaluation();
      improver.reclaim(deadline);
      const Evaluation after = improver.evaluation();
      log.record(improver.choice().data(), after, over_same_length(before, after, blocking_w));
    }
    improver.assign(fastest.data());
    const Evaluation before = improver.evaluation();
    improver.reclaim(deadline);
    const Evaluation after = improver.evaluation();
    log.record(improver.choice().data(), after, over_same_length(before, after, blocking_w));
  }
}

void fill_gaps(const PlanLog& from, const std::vector<std::size_t>& frontier, double spacing_s,
               std::int64_t max_work, PlanImprover& improver, PlanLog& to, Pacer& pacer) {
  const double blocking_w = improver.pipeline_blocking_w();
  // The gaps, and the plans at their ends (rebuilt once, in log order).
  std::vector<std::size_t> gaps, ends;
  std::int64_t deadlines = 0;
  for (std::size_t k = 0; k + 1 < frontier.size(); ++k) {
    const double gap = from.time_s(frontier[k + 1]) - from.time_s(frontier[k]);
    if (!(gap > spacing_s)) continue;
    gaps.push_back(k);
    ends.push_back(frontier[k]);
    ends.push_back(frontier[k + 1]);
    deadlines += static_cast<std::int64_t>(std::ceil(gap / spacing_s)) - 1;
  }
  if (gaps.empty()) return;
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  const auto n = improver.choice().size();
  std::vector<OptionIndex> plans(ends.size() * n);
  from.rebuild(ends, [&](std::size_t k, const OptionIndex* choice) {
    std::copy(choice, choice + n, plans.begin() + static_cast<std::ptrdiff_t>(k * n));
  });
  auto plan = [&](std::size_t log_index) {
    const auto at = static_cast<std::size_t>(std::lower_bound(ends.begin(), ends.end(), log_index) - ends.begin());
    return plans.data() + at * n;
  };
  std::vector<OptionIndex> best(n);
  const std::int64_t end_work = improver.work() + max_work;
  std::int64_t done = 0;
  for (const std::size_t k : gaps) {
    const double faster_s = from.time_s(frontier[k]), slower_s = from.time_s(frontier[k + 1]);
    const auto count = static_cast<std::int64_t>(std::ceil((slower_s - faster_s) / spacing_s)) - 1;
    for (std::int64_t j = 1; j <= count; ++j, ++done) {
      pacer.tick(Phase::kLocalSearch, done, deadlines);
      const double deadline = faster_s + static_cast<double>(j) * spacing_s;
      if (!(deadline < slower_s)) break;
      // From the faster plan: reclaim into the extra time.
      improver.assign(plan(frontier[k]));
      Evaluation before = improver.evaluation();
      improver.reclaim(deadline);
      double best_j = improver.energy_at(deadline);
      std::copy(improver.choice().begin(), improver.choice().end(), best.begin());
      Evaluation best_before = before;
      to.record(improver.choice().data(), improver.evaluation(),
                over_same_length(before, improver.evaluation(), blocking_w));
      // From the slower plan: tighten to the deadline, then reclaim.
      improver.assign(plan(frontier[k + 1]));
      if (improver.tighten(deadline)) {
        before = improver.evaluation();
        improver.reclaim(deadline);
        to.record(improver.choice().data(), improver.evaluation(),
                  over_same_length(before, improver.evaluation(), blocking_w));
        if (improver.energy_at(deadline) < best_j) {
          best_j = improver.energy_at(deadline);
          std::copy(improver.choice().begin(), improver.choice().end(), best.begin());
          best_before = before;
        }
      }
      if (max_work <= 0) continue;
      const std::int64_t left = end_work - improver.work();
      if (left <= 0) continue;
      improver.assign(best.data());
      improver.local_search(deadline, left / std::max<std::int64_t>(1, deadlines - done));
      if (improver.energy_at(deadline) < best_j * (1 - 1e-12))
        to.record(improver.choice().data(), improver.evaluation(),
                  over_same_length(best_before, improver.evaluation(), blocking_w));
    }
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
