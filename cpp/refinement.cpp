#include "refinement.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>

namespace perseus {
namespace {

using local_search_moves::kHullGapShare;
using local_search_moves::kImprovementShare;
using local_search_moves::kStartsPerSide;

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
  // The step's durations, slowest option that fits; brought up to date for
  // the computations in `since` only when a candidate is due (a run of
  // units changes the same computations every unit).
  std::vector<OptionIndex> mapped(ix(n));
  for (Index i = 0; i < n; ++i) mapped[ix(i)] = steps.option_for(i, durations[ix(i)]);
  std::vector<Index> changed, since;  // since: changed since the last candidate
  changed.reserve(ix(n));
  std::vector<char> listed(ix(n), 0);
  // The model's energy over its own time tracks where candidates are due.
  double model_j = 0.0;
  for (Index i = 0; i < n; ++i) model_j += steps.model_cost(i, durations[ix(i)]);
  double last_value = 0.0;
  Units last_unit = 0;
  // The loop may still be running: the total is an estimate for progress,
  // and the last plan is known when has_next() says so.
  const Units expected = std::max<Units>(steps.max_units() - steps.min_units(), 1);
  // The improver holds the chain's last candidate; revert() takes it back to
  // the unimproved plan, which the steps since change in a few options, and
  // one commit() updates the times for both.
  bool started = false;
  for (Units u = 0;; ++u) {
    if (u > 0) {
      steps.advance(cursor, durations, changed);
      for (const Index i : changed) {
        model_j += steps.model_cost(i, durations[ix(i)]) - steps.model_cost(i, previous[ix(i)]);
        previous[ix(i)] = durations[ix(i)];
        if (!listed[ix(i)]) {
          listed[ix(i)] = 1;
          since.push_back(i);
        }
      }
    }
    const bool last = !steps.has_next(cursor);
    const double deadline = static_cast<double>(steps.max_units() - u) * unit_time_s;
    const double value = model_j + blocking_w * deadline;
    const bool due = u == 0 || last ||
                     (u % sampling.stride == 0 &&
                      (std::abs(value - last_value) >= sampling.energy_resolution * std::abs(value) ||
                       u - last_unit >= sampling.max_spacing * sampling.stride));
    if (due) {
      last_value = value;
      last_unit = u;
      tick(std::min(u, expected), expected);
      for (const Index i : since) mapped[ix(i)] = steps.option_for(i, durations[ix(i)]);
      if (!started) {
        for (const Index i : since) listed[ix(i)] = 0;
        since.clear();
        improver.assign(mapped.data());  // the chain starts here
        started = true;
      }
      improver.revert();
      for (const Index i : since) {
        listed[ix(i)] = 0;
        // The tight chain rounds up to the next option, never slower than its
        // last plan; the reclaimed chain takes the slowest option that fits.
        const Index option =
            chain == Chain::kTight
                ? std::min<Index>(improver.choice()[ix(i)], steps.option_at_least(i, durations[ix(i)]))
                : mapped[ix(i)];
        improver.change(i, option);
      }
      since.clear();
      improver.commit();
      // The tight chain first meets the model time. Either plan is then
      // reclaimed within its own replayed time, not the model's: options
      // rounded from the model's durations leave a plan up to a few units
      // faster than its model, and filling that gap slows computations on the
      // longest path, each move shifting the times of most of the pipeline
      // (an O(n) update, ten or more per candidate on 16 x 128). Candidates a
      // few units apart place plans at those times anyway.
      if (chain == Chain::kTight && !improver.tighten(deadline)) {
        improver.assign(mapped.data());  // cannot meet it: restart the chain from the step
      } else {
        improver.checkpoint();
        const Evaluation before = improver.evaluation();
        if (refine) improver.reclaim(improver.makespan());
        record(improver, before, log);
      }
    }
    if (last) break;
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
  while (steps.has_next(cursor)) steps.advance(cursor, durations, changed);
  std::vector<OptionIndex> chain(ix(n)), fastest(ix(n), 0);
  for (Index i = 0; i < n; ++i) chain[ix(i)] = steps.option_for(i, durations[ix(i)]);
  // Deadlines fastest + k * spacing below the fastest step plan, slowest
  // first (each tightening starts from the one before); integer-indexed, so
  // a spacing below one ulp of the times still ends.
  const auto count = first_step_s > fastest_s
                         ? static_cast<std::int64_t>(std::ceil((first_step_s - fastest_s) / spacing_s))
                         : 1;
  for (std::int64_t k = count - 1; k >= 0; --k) {
    tick(count - 1 - k, count);  // before this deadline's work: count - 1 - k done
    const double deadline = fastest_s + static_cast<double>(k) * spacing_s;
    improver.assign(chain.data());
    if (improver.tighten(deadline, TightenOrder::kUsefulSecond)) {
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

double search_deadline(double deadline, const std::vector<double>& time_s,
                       const std::function<const OptionIndex*(std::size_t)>& row_at,
                       const OptionIndex* fastest, std::int64_t end, std::size_t deadlines_left,
                       PlanImprover& improver, PlanLog* log, std::vector<OptionIndex>& best,
                       std::int64_t* fastest_cost, StartSearch start_search) {
  // The slowest plan that meets the deadline, and the next one (the first
  // plan when none meets it: it is tightened like a slower one).
  const auto after = static_cast<std::size_t>(std::upper_bound(time_s.begin(), time_s.end(), deadline) -
                                              time_s.begin());
  const bool any_meets = after > 0;
  const std::size_t k = any_meets ? after - 1 : 0;
  double best_j = kInfinity;
  Evaluation best_before{};
  // kEvery: each start that meets the deadline, once (several starts often
  // fit to one plan), with its energy over the deadline.
  const std::size_t n = best.size();
  std::vector<OptionIndex> fitted;
  std::vector<double> fitted_j;
  std::vector<Evaluation> fitted_before;  // each one's start, unreclaimed (for the log)
  auto keep_fitted = [&](const Evaluation& before) {
    const OptionIndex* plan = improver.choice().data();
    for (std::size_t f = 0; f < fitted_j.size(); ++f)
      if (std::equal(plan, plan + n, fitted.begin() + static_cast<std::ptrdiff_t>(f * n))) return;
    fitted.insert(fitted.end(), plan, plan + n);
    fitted_j.push_back(improver.energy_at(deadline));
    fitted_before.push_back(before);
  };
  auto consider = [&](const OptionIndex* start, bool tighten, std::int64_t max_work_end = INT64_MAX) {
    improver.assign(start);
    if (tighten && !improver.tighten(deadline, TightenOrder::kUsefulSecond)) return;
    improver.checkpoint();
    const Evaluation before = improver.evaluation();
    improver.reclaim_until(deadline, max_work_end);
    if (start_search != StartSearch::kCheapest && improver.makespan() <= deadline) keep_fitted(before);
    if (improver.makespan() <= deadline && improver.energy_at(deadline) < best_j) {
      best_j = improver.energy_at(deadline);
      best_before = before;
      std::copy(improver.choice().begin(), improver.choice().end(), best.begin());
    }
    if (log != nullptr) record(improver, before, *log);
  };
  // Starts, nearest first: plans on both sides of the deadline (faster ones
  // reclaimed into it, slower ones tightened to it), while the deadline's
  // share of the budget lasts, and the all-fastest plan.
  const auto left = static_cast<std::int64_t>(deadlines_left);
  const std::int64_t share_of_deadline = (end - improver.work()) / left;
  const std::int64_t starts_end = improver.work() + share_of_deadline / 2;
  const std::size_t first_slower = any_meets ? k + 1 : 0;
  if (any_meets) consider(row_at(k), false);
  if (first_slower < time_s.size()) consider(row_at(first_slower), true);
  for (std::size_t step = 1; step < kStartsPerSide && improver.within(starts_end); ++step) {
    if (any_meets && step <= k) consider(row_at(k - step), false);
    if (first_slower + step < time_s.size()) consider(row_at(first_slower + step), true);
  }
  // The all-fastest plan reclaimed into the deadline slows every computation,
  // which on a pipeline of a few hundred computations or more costs many
  // times a deadline's share: tried at every deadline, it spent the whole
  // phase on the first few dozen deadlines of a thousand, where it never
  // gave the best start (SOSP '24 8 x 12 to user 16 x 128). So it is tried
  // only while its last cost fits the deadline's share, as on tiny
  // pipelines, where it sometimes wins.
  if (fastest_cost == nullptr) {
    // One deadline (a tailored plan) has no cost to go by: the start may
    // use what is left of the starts' half of the budget and no more
    // (at 16 x 512 it took 3-6 times the whole budget, and never won).
    consider(fastest, false, starts_end);
  } else if (*fastest_cost <= share_of_deadline) {
    const std::int64_t before_fastest = improver.work();
    consider(fastest, false);
    *fastest_cost = improver.work() - before_fastest;
  }
  if (best_j == kInfinity) return kInfinity;
  if (start_search != StartSearch::kCheapest) {
    // The cheapest start first, with all that is left (as kCheapest does);
    // where its search reaches a local optimum early, each other start
    // with an even share of the rest.
    std::vector<std::size_t> order(fitted_j.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return fitted_j[a] < fitted_j[b]; });
    for (std::size_t r = 0; r < order.size(); ++r) {
      const std::int64_t rest = end - improver.work();
      if (rest <= 0) break;
      const std::int64_t share = rest / static_cast<std::int64_t>(r == 0 ? 1 : order.size() - r);
      improver.assign(fitted.data() + order[r] * n);
      improver.local_search(deadline, share);
      if (improver.makespan() <= deadline &&
          improver.energy_at(deadline) < best_j * (1 - kImprovementShare)) {
        best_j = improver.energy_at(deadline);
        best_before = fitted_before[order[r]];
        std::copy(improver.choice().begin(), improver.choice().end(), best.begin());
        if (log != nullptr) record(improver, best_before, *log);
      }
    }
    // What every start left goes to kicks from the best plan (small
    // pipelines only; PlanImprover::local_search): after the starts, so that
    // they keep the budget they had (kicks in their place lost up to 0.05 %
    // on a 2 x 5 pipeline of bench/quality.py).
    const std::int64_t rest = end - improver.work();
    if (rest > 0) {
      improver.assign(best.data());
      improver.local_search(
          deadline, rest,
          start_search == StartSearch::kEveryWithRestarts ? Kicks::kWithRestarts : Kicks::kLocal);
      if (improver.makespan() <= deadline &&
          improver.energy_at(deadline) < best_j * (1 - kImprovementShare)) {
        best_j = improver.energy_at(deadline);
        std::copy(improver.choice().begin(), improver.choice().end(), best.begin());
        if (log != nullptr) record(improver, best_before, *log);
      }
    }
    return best_j;
  }
  // A local search from the best start, with an even share of what is left.
  const std::int64_t share = (end - improver.work()) / left;
  if (share <= 0) return best_j;
  improver.assign(best.data());
  improver.local_search(deadline, share);
  if (improver.energy_at(deadline) < best_j * (1 - kImprovementShare)) {
    if (log != nullptr) record(improver, best_before, *log);
    best_j = improver.energy_at(deadline);
    std::copy(improver.choice().begin(), improver.choice().end(), best.begin());
  }
  return best_j;
}

void search_deadlines(const PlanRows& plans, const std::vector<double>& time_s, std::size_t max_grid,
                      std::int64_t max_work, Share share_of, PlanImprover& improver, PlanLog& log,
                      const Ticker& tick) {
  if (max_work <= 0 || time_s.empty()) return;
  const std::size_t n = improver.choice().size();
  // Deadlines: every plan's own time, and a grid over the frontier's range
  // (integer-indexed, so a spacing below one ulp of the times still ends).
  std::vector<double> deadlines(time_s);
  const double first = time_s.front(), last = time_s.back();
  const double spacing = (last - first) / static_cast<double>(std::max<std::size_t>(max_grid, 1));
  const auto steps = spacing > 0 ? static_cast<std::int64_t>(max_grid) - 1 : 0;
  for (std::int64_t k = 1; k <= steps; ++k)
    deadlines.push_back(first + static_cast<double>(k) * spacing);
  std::sort(deadlines.begin(), deadlines.end());
  deadlines.erase(std::unique(deadlines.begin(), deadlines.end()), deadlines.end());
  // This job's share: every parts-th deadline, so each job spans the whole frontier.
  if (share_of.parts > 1) {
    std::size_t kept = 0;
    for (std::size_t d = share_of.part; d < deadlines.size(); d += share_of.parts)
      deadlines[kept++] = deadlines[d];
    deadlines.resize(kept);
    if (deadlines.empty()) return;
  }

  const std::int64_t end = improver.work() + max_work;
  const std::vector<OptionIndex> fastest(n, 0);
  std::vector<OptionIndex> best(n);
  PlanRows::Reader rows(plans);  // starts are read near each deadline, in increasing order
  const auto row_at = [&rows](std::size_t k) { return rows.row(k); };
  std::int64_t fastest_cost = 0;  // of the last all-fastest start (none yet)
  for (std::size_t d = 0; d < deadlines.size(); ++d) {
    if (improver.work() >= end) return;
    // Progress in work units: the search ends when its budget or its
    // deadlines run out, whichever comes first.
    const double by_deadlines = static_cast<double>(d) / static_cast<double>(deadlines.size());
    tick(std::max(max_work - (end - improver.work()),
                  static_cast<std::int64_t>(by_deadlines * static_cast<double>(max_work))),
         max_work);
    search_deadline(deadlines[d], time_s, row_at, fastest.data(), end, deadlines.size() - d, improver,
                    &log, best, &fastest_cost);
  }
}

std::vector<double> hull_gap_deadlines(const std::vector<double>& time_s,
                                       const std::vector<double>& energy_j, double spacing_s,
                                       std::size_t max_count) {
  // The lower convex hull of (time, energy), fastest first (Andrew's monotone chain).
  std::vector<std::size_t> hull;
  for (std::size_t k = 0; k < time_s.size(); ++k) {
    while (hull.size() >= 2) {
      const std::size_t a = hull[hull.size() - 2], b = hull.back();
      // b is not below the segment a -> k: it leaves the hull.
      if ((energy_j[b] - energy_j[a]) * (time_s[k] - time_s[a]) >=
          (energy_j[k] - energy_j[a]) * (time_s[b] - time_s[a]))
        hull.pop_back();
      else break;
    }
    hull.push_back(k);
  }
  std::vector<std::pair<double, std::size_t>> gaps;  // (share above the hull, plan)
  std::size_t h = 0;
  for (std::size_t k = 0; k < time_s.size(); ++k) {
    while (h + 1 < hull.size() && time_s[hull[h + 1]] < time_s[k]) ++h;
    if (h + 1 >= hull.size() || hull[h] == k || hull[h + 1] == k) continue;  // on the hull
    const std::size_t a = hull[h], b = hull[h + 1];
    const double on_hull =
        energy_j[a] + (energy_j[b] - energy_j[a]) * (time_s[k] - time_s[a]) / (time_s[b] - time_s[a]);
    const double share = (energy_j[k] - on_hull) / std::abs(energy_j[k]);
    if (share > kHullGapShare) gaps.emplace_back(share, k);
  }
  std::sort(gaps.begin(), gaps.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  std::vector<double> picked;
  for (const auto& [share, k] : gaps) {
    if (picked.size() >= max_count) break;
    const double t = time_s[k];
    if (std::none_of(picked.begin(), picked.end(),
                     [&](double p) { return std::abs(p - t) <= spacing_s; }))
      picked.push_back(t);
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

void search_hull_gaps(const PlanRows& plans, const std::vector<double>& time_s,
                      const std::vector<double>& deadlines, std::int64_t work_each, Share share_of,
                      PlanImprover& improver, PlanLog& log, const Ticker& tick) {
  if (work_each <= 0) return;
  const std::size_t n = improver.choice().size();
  const std::vector<OptionIndex> fastest(n, 0);
  std::vector<OptionIndex> best(n);
  PlanRows::Reader rows(plans);
  const auto row_at = [&rows](std::size_t k) { return rows.row(k); };
  for (std::size_t d = share_of.part; d < deadlines.size(); d += share_of.parts) {
    tick(static_cast<std::int64_t>(d), static_cast<std::int64_t>(deadlines.size()));
    search_deadline(deadlines[d], time_s, row_at, fastest.data(), improver.work() + work_each, 1,
                    improver, &log, best, nullptr, StartSearch::kEvery);
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
