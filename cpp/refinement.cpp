#include "refinement.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace perseus {
namespace {

// The unimproved plan's energy over an iteration as long as the improved one.
double over_same_length(const Evaluation& before, const Evaluation& after, double blocking_w) {
  return before.energy_j + blocking_w * (after.iteration_time_s - before.iteration_time_s);
}

void record(const PlanImprover& improver, const Evaluation& before, PlanLog& log) {
  const Evaluation after = improver.evaluation();
  log.record(improver.choice().data(), after,
             over_same_length(before, after, improver.pipeline_blocking_w()));
}

}  // namespace

void collect_chain(const PhillipsDessouky& steps, Chain chain, double unit_time_s,
                   const Sampling& sampling, bool refine, PlanImprover& improver, PlanLog& log,
                   const Ticker& tick) {
  using Units = PhillipsDessouky::Units;
  const Index n = steps.num_computations();
  const double blocking_w = improver.pipeline_blocking_w();
  std::vector<Units> durations, previous;
  PhillipsDessouky::Cursor cursor;
  steps.first_plan(durations, cursor);
  previous = durations;
  std::vector<OptionIndex> mapped(ix(n));  // the step's durations, slowest option that fits
  for (Index i = 0; i < n; ++i) mapped[ix(i)] = steps.option_for(i, durations[ix(i)]);
  std::vector<Index> changed, since;  // since: changed since the last candidate
  changed.reserve(ix(n));
  std::vector<char> listed(ix(n), 0);
  // The model's energy over its own time tracks where candidates are due.
  double model_j = 0.0;
  for (Index i = 0; i < n; ++i) model_j += steps.model_cost(i, durations[ix(i)]);
  double last_value = 0.0;
  Units last_unit = 0;
  // The improver holds the chain's last candidate; revert() takes it back to
  // the unimproved plan, which the steps since change in a few options.
  improver.assign(mapped.data());
  const Units units = steps.units_done();
  for (Units u = 0; u <= units; ++u) {
    if (u > 0) {
      steps.advance(cursor, durations, changed);
      for (const Index i : changed) {
        model_j += steps.model_cost(i, durations[ix(i)]) - steps.model_cost(i, previous[ix(i)]);
        previous[ix(i)] = durations[ix(i)];
        mapped[ix(i)] = steps.option_for(i, durations[ix(i)]);
        if (!listed[ix(i)]) {
          listed[ix(i)] = 1;
          since.push_back(i);
        }
      }
    }
    const double deadline = static_cast<double>(steps.max_units() - u) * unit_time_s;
    const double value = model_j + blocking_w * deadline;
    const bool due = u == 0 || u == units ||
                     (u % sampling.stride == 0 &&
                      (std::abs(value - last_value) >= sampling.energy_resolution * std::abs(value) ||
                       u - last_unit >= sampling.max_spacing * sampling.stride));
    if (!due) continue;
    last_value = value;
    last_unit = u;
    tick(u, units + 1);
    improver.revert();
    for (const Index i : since) {
      listed[ix(i)] = 0;
      // The tight chain rounds up to the next option, never slower than its
      // last plan; the reclaimed chain takes the slowest option that fits.
      const Index option = chain == Chain::kTight
                               ? std::min<Index>(improver.choice()[ix(i)], steps.option_at_least(i, durations[ix(i)]))
                               : mapped[ix(i)];
      improver.change(i, option);
    }
    since.clear();
    improver.commit();
    // The deadline is the model time; a plan that runs longer than its
    // model (durations are rounded to the nearest unit) is reclaimed up to
    // its own time.
    if (chain == Chain::kTight && !improver.tighten(deadline)) {
      improver.assign(mapped.data());  // cannot meet it: restart the chain from the step
      continue;
    }
    improver.checkpoint();
    const Evaluation before = improver.evaluation();
    if (refine) improver.reclaim(deadline);
    record(improver, before, log);
  }
}

void collect_fast_end(const PhillipsDessouky& steps, double spacing_s, double fastest_s,
                      double first_step_s, PlanImprover& improver, PlanLog& log, const Ticker& tick) {
  const Index n = steps.num_computations();
  // The last step's plan, unreclaimed: the start of the tightening chain.
  std::vector<PhillipsDessouky::Units> durations;
  std::vector<Index> changed;
  PhillipsDessouky::Cursor cursor;
  steps.first_plan(durations, cursor);
  for (PhillipsDessouky::Units u = 0; u < steps.units_done(); ++u) steps.advance(cursor, durations, changed);
  std::vector<OptionIndex> chain(ix(n)), fastest(ix(n), 0);
  for (Index i = 0; i < n; ++i) chain[ix(i)] = steps.option_for(i, durations[ix(i)]);
  // Deadlines fastest + k * spacing below the fastest step plan, slowest
  // first (each tightening starts from the one before); integer-indexed, so
  // a spacing below one ulp of the times still ends.
  const auto count = first_step_s > fastest_s
                         ? static_cast<std::int64_t>(std::ceil((first_step_s - fastest_s) / spacing_s))
                         : 1;
  for (std::int64_t k = count - 1; k >= 0; --k) {
    tick(count - k, count);
    const double deadline = fastest_s + static_cast<double>(k) * spacing_s;
    improver.assign(chain.data());
    if (improver.tighten(deadline)) {
      std::copy(improver.choice().begin(), improver.choice().end(), chain.begin());
      improver.checkpoint();
      const Evaluation before = improver.evaluation();
      improver.reclaim(deadline);
      record(improver, before, log);
    }
    improver.assign(fastest.data());
    const Evaluation before = improver.evaluation();
    improver.reclaim(deadline);
    record(improver, before, log);
  }
}

void fill_gaps(const std::vector<OptionIndex>& rows, const std::vector<double>& time_s,
               double spacing_s, std::int64_t max_work, PlanImprover& improver, PlanLog& log,
               const Ticker& tick) {
  if (max_work <= 0 || time_s.size() < 2) return;
  const std::size_t n = improver.choice().size();
  // Gaps wider than the spacing, widest first.
  std::vector<std::size_t> gaps;
  for (std::size_t k = 0; k + 1 < time_s.size(); ++k)
    if (time_s[k + 1] - time_s[k] > spacing_s) gaps.push_back(k);
  std::stable_sort(gaps.begin(), gaps.end(), [&](std::size_t a, std::size_t b) {
    return time_s[a + 1] - time_s[a] > time_s[b + 1] - time_s[b];
  });
  const std::int64_t end = improver.work() + max_work;
  std::int64_t deadlines = 0;
  for (const std::size_t k : gaps)
    deadlines += static_cast<std::int64_t>(std::ceil((time_s[k + 1] - time_s[k]) / spacing_s)) - 1;
  std::vector<OptionIndex> best(n);
  std::int64_t done = 0;
  for (const std::size_t k : gaps) {
    const OptionIndex* faster = rows.data() + k * n;
    const OptionIndex* slower = rows.data() + (k + 1) * n;
    const auto count = static_cast<std::int64_t>(std::ceil((time_s[k + 1] - time_s[k]) / spacing_s)) - 1;
    for (std::int64_t j = 1; j <= count; ++j, ++done) {
      if (improver.work() >= end) return;
      tick(done, deadlines);
      const double deadline = time_s[k] + static_cast<double>(j) * spacing_s;
      if (!(deadline < time_s[k + 1])) break;
      // From the faster neighbour: reclaim into the extra time.
      improver.assign(faster);
      Evaluation best_before = improver.evaluation();
      improver.reclaim(deadline);
      record(improver, best_before, log);
      double best_j = improver.energy_at(deadline);
      std::copy(improver.choice().begin(), improver.choice().end(), best.begin());
      // From the slower one: tighten into the gap, then reclaim.
      improver.assign(slower);
      if (improver.tighten(deadline)) {
        improver.checkpoint();
        const Evaluation before = improver.evaluation();
        improver.reclaim(deadline);
        record(improver, before, log);
        if (improver.energy_at(deadline) < best_j) {
          best_j = improver.energy_at(deadline);
          std::copy(improver.choice().begin(), improver.choice().end(), best.begin());
          best_before = before;
        }
      }
      // A local search from the better start, with an even share of what is left.
      const std::int64_t share = (end - improver.work()) / std::max<std::int64_t>(1, deadlines - done);
      if (share <= 0) continue;
      improver.assign(best.data());
      improver.local_search(deadline, share);
      if (improver.energy_at(deadline) < best_j * (1 - 1e-12)) record(improver, best_before, log);
    }
  }
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
