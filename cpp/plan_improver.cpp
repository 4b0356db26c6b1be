#include "plan_improver.hpp"

#include <cstdint>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "solver_options.hpp"

namespace perseus {
namespace {

using local_search_moves::kCriticalShare;
using local_search_moves::kImprovementShare;
using local_search_moves::kJumps;
using local_search_moves::kKickComputations;
using local_search_moves::kKickMaxMoves;
using local_search_moves::kKickMinMoves;
using local_search_moves::kKickRestartEvery;
using local_search_moves::kKicks;
using local_search_moves::kKicksWithoutGain;
using local_search_moves::kPairCandidates;
using local_search_moves::kSqueezes;

}  // namespace

PlanImprover::PlanImprover(const Pipeline& pipeline, const Dag& dag, const OptionTable& table)
    : dag_(dag),
      table_(table),
      blocking_w_(table.blocking_power_w() * static_cast<double>(pipeline.num_gpus())),
      group_(ix(pipeline.size())),
      choice_(ix(pipeline.size()), 0),
      duration_(ix(pipeline.size())),
      times_(dag),
      is_pending_(ix(pipeline.size()), 0) {
  const auto n = ix(pipeline.size());
  for (Index i = 0; i < pipeline.size(); ++i) {
    group_[ix(i)] = group_of(pipeline.computation(i));
    duration_[ix(i)] = time_of(i, 0);
    effective_sum_ += effective_of(i, 0);
  }
  for (GroupId g(0); g.value() < table.num_groups(); ++g) {
    first_option_.push_back(static_cast<Index>(steepest_.size()));
    const Index count = table.num_options(g);
    for (Index j = 0; j < count; ++j) {
      Index steep = j;
      double best = -std::numeric_limits<double>::infinity();
      for (Index k = j + 1; k < count; ++k) {
        const double slope = (table.effective_j(g, j) - table.effective_j(g, k)) /
                             (table.time_s(g, k) - table.time_s(g, j));
        if (slope > best) {
          best = slope;
          steep = k;
        }
      }
      steepest_.push_back(steep);
    }
  }
  for (ComputationId v(0); v.value() < dag.num_nodes(); ++v)
    if (dag.successors_begin(v) == dag.successors_end(v)) sinks_.push_back(v);
  times_.reset(duration_.data());
  pending_.reserve(n);
  heap_.reserve(n);
  critical_.reserve(n);
  seeds_.reserve(n);
}

void PlanImprover::set_option(Index i, Index option) {
  const auto s = ix(i);
  journal_.emplace_back(i, choice_[s]);
  effective_sum_ += effective_of(i, option) - effective_of(i, choice_[s]);
  choice_[s] = static_cast<OptionIndex>(option);
  duration_[s] = time_of(i, option);
  if (!is_pending_[s]) {
    is_pending_[s] = 1;
    pending_.push_back(ComputationId(i));
  }
}

void PlanImprover::commit() {
  if (pending_.empty()) return;
  times_.update(duration_.data(), pending_.data(), pending_.data() + pending_.size());
  for (const ComputationId i : pending_) is_pending_[i.index()] = 0;
  pending_.clear();
}

void PlanImprover::undo(std::size_t mark) {
  while (journal_.size() > mark) {
    const auto [i, option] = journal_.back();
    journal_.pop_back();
    const auto s = ix(i);
    effective_sum_ += effective_of(i, option) - effective_of(i, choice_[s]);
    choice_[s] = option;
    duration_[s] = time_of(i, option);
    if (!is_pending_[s]) {
      is_pending_[s] = 1;
      pending_.push_back(ComputationId(i));
    }
  }
}

void PlanImprover::assign(const OptionIndex* choice) {
  for (std::size_t i = 0; i < choice_.size(); ++i)
    if (choice[i] != choice_[i]) set_option(static_cast<Index>(i), choice[i]);
  work_ += static_cast<std::int64_t>(choice_.size());
  commit();
  journal_.clear();
}

double PlanImprover::makespan() const {
  if (!pending_.empty()) throw std::logic_error("PlanImprover: times read before commit()");
  double longest = 0.0;
  for (const ComputationId v : sinks_) longest = std::max(longest, times_.through(v));
  return longest;
}

double PlanImprover::energy_at(double deadline_s) const {
  return effective_sum_ + blocking_w_ * std::max(deadline_s, makespan());
}

double PlanImprover::best_move(Index i, double limit_s, ReclaimOrder order, Index& option) {
  const auto s = ix(i);
  const GroupId g = group_[s];
  const Index current = choice_[s];
  const double room =
      limit_s - times_.through(ComputationId(i)) + duration_[s];  // longest time i may take
  // Options are sorted by time: the slowest one that fits, by bisection
  // (most computations have no room at all: one look settles those).
  ++work_;
  option = current;
  const Index slowest = table_.num_options(g) - 1;
  if (current == slowest || table_.time_s(g, current + 1) > room) return 0.0;
  Index lo = current, hi = slowest;
  while (lo < hi) {
    const Index mid = lo + (hi - lo + 1) / 2;
    if (table_.time_s(g, mid) <= room) lo = mid;
    else hi = mid - 1;
  }
  // Effective energy falls strictly with every slower option: the slowest
  // that fits saves most.
  if (order == ReclaimOrder::kSaving) {
    option = lo;
    return effective_of(i, current) - effective_of(i, lo);
  }
  const double now = duration_[s];
  auto rate = [&](Index k) {
    return (effective_of(i, current) - effective_of(i, k)) / (time_of(i, k) - now);
  };
  // The steepest saving overall, if it fits; otherwise scan what fits (few
  // options, since the steepest one is usually the next).
  const Index steep = steepest_[ix(first_option_[g] + current)];
  if (steep <= lo) {
    option = steep;
    return rate(steep);
  }
  double best = 0.0;
  for (Index k = lo; k > current; --k) {
    const double score = rate(k);
    if (score > best) {
      best = score;
      option = k;
    }
  }
  work_ += lo - current;
  return best;
}

void PlanImprover::reclaim_seeded(double limit_s, ReclaimOrder order, const std::vector<Index>* seeds,
                                  std::int64_t max_work_end) {
  heap_.clear();
  auto consider = [&](Index i) {
    Index option;
    const double score = best_move(i, limit_s, order, option);
    if (score > 0) heap_.push_back({score, i});
  };
  if (seeds == nullptr)
    for (Index i = 0; i < static_cast<Index>(choice_.size()); ++i) consider(i);
  else
    for (const Index i : *seeds) consider(i);
  std::make_heap(heap_.begin(), heap_.end());
  while (!heap_.empty() && work() < max_work_end) {
    std::pop_heap(heap_.begin(), heap_.end());
    const Index i = heap_.back().computation;
    heap_.pop_back();
    Index option;
    const double score = best_move(i, limit_s, order, option);
    if (score <= 0) continue;
    if (!heap_.empty() && score < heap_.front().score) {  // stale: file it anew
      heap_.push_back({score, i});
      std::push_heap(heap_.begin(), heap_.end());
      continue;
    }
    set_option(i, option);
    commit();
    const double next = best_move(i, limit_s, order, option);
    if (next > 0) {
      heap_.push_back({next, i});
      std::push_heap(heap_.begin(), heap_.end());
    }
  }
}

void PlanImprover::reclaim_both(double limit_s, const std::vector<Index>* seeds) {
  const std::size_t mark = journal_.size();
  reclaim_seeded(limit_s, ReclaimOrder::kSaving, seeds);
  const double by_saving = energy_at(limit_s);
  first_result_.clear();
  for (std::size_t k = mark; k < journal_.size(); ++k)
    first_result_.emplace_back(journal_[k].first, choice_[ix(journal_[k].first)]);
  rollback(mark);
  reclaim_seeded(limit_s, ReclaimOrder::kSavingPerSecond, seeds);
  if (by_saving < energy_at(limit_s)) {
    rollback(mark);
    for (const auto& [i, option] : first_result_) set_option(i, option);
    commit();
  }
}

void PlanImprover::reclaim(double deadline_s, ReclaimOrder order) {
  reclaim_seeded(std::max(deadline_s, makespan()), order, nullptr);
}

void PlanImprover::reclaim_until(double deadline_s, std::int64_t max_work_end) {
  reclaim_seeded(std::max(deadline_s, makespan()), ReclaimOrder::kSavingPerSecond, nullptr,
                 max_work_end);
}

double PlanImprover::speedup_cost(Index i) const {
  const Index k = choice_[ix(i)];
  return (effective_of(i, k - 1) - effective_of(i, k)) / (time_of(i, k) - time_of(i, k - 1));
}

bool PlanImprover::tighten(double deadline_s, TightenOrder order) {
  return tighten_to(deadline_s, -1, order);
}

bool PlanImprover::tighten_to(double deadline_s, Index frozen, TightenOrder order) {
  if (makespan() <= deadline_s) return true;
  // Extra effective energy per second saved; with kUsefulSecond only the
  // part of the saving that i's paths are too long by counts. Keys only grow
  // as paths shrink, so the heap is lazy.
  auto key = [&](Index i) {
    const Index k = choice_[ix(i)];
    const double saved = time_of(i, k) - time_of(i, k - 1);
    const double useful = order == TightenOrder::kUsefulSecond
                              ? std::min(saved, times_.through(ComputationId(i)) - deadline_s)
                              : saved;
    return (effective_of(i, k - 1) - effective_of(i, k)) / useful;
  };
  heap_.clear();
  for (Index i = 0; i < static_cast<Index>(choice_.size()); ++i)
    if (i != frozen && choice_[ix(i)] > 0 && times_.through(ComputationId(i)) > deadline_s)
      heap_.push_back({-key(i), i});
  std::make_heap(heap_.begin(), heap_.end());
  work_ += static_cast<std::int64_t>(choice_.size());
  while (makespan() > deadline_s) {
    if (heap_.empty()) return false;
    std::pop_heap(heap_.begin(), heap_.end());
    const Index i = heap_.back().computation;
    heap_.pop_back();
    ++work_;
    // Paths only get shorter while tightening: a node that fits now always will.
    if (times_.through(ComputationId(i)) <= deadline_s || choice_[ix(i)] == 0) continue;
    const double now = -key(i);
    if (!heap_.empty() && now < heap_.front().score) {  // stale: file it anew
      heap_.push_back({now, i});
      std::push_heap(heap_.begin(), heap_.end());
      continue;
    }
    set_option(i, choice_[ix(i)] - 1);
    commit();
    if (choice_[ix(i)] > 0 && times_.through(ComputationId(i)) > deadline_s) {
      heap_.push_back({-key(i), i});
      std::push_heap(heap_.begin(), heap_.end());
    }
  }
  return true;
}

bool PlanImprover::keep_if_better(std::size_t mark, double deadline_s, double& best_j) {
  const double energy = energy_at(deadline_s);
  if (makespan() <= deadline_s && energy < best_j - kImprovementShare * std::abs(best_j)) {
    best_j = energy;
    return true;
  }
  rollback(mark);
  return false;
}

void PlanImprover::local_search(double deadline_s, std::int64_t max_work, Kicks kicks) {
  const std::int64_t limit = work() + max_work;
  const double deadline = std::max(deadline_s, makespan());
  reclaim_both(deadline, nullptr);
  double best = energy_at(deadline);
  // One trial: the changes made by `change`, then a reclaim of what they freed.
  auto trial = [&](auto change) {
    const std::size_t mark = journal_.size();
    change();
    commit();
    seeds_.clear();
    for (const ComputationId v : times_.moved()) seeds_.push_back(v.value());
    reclaim_both(deadline, &seeds_);
    return keep_if_better(mark, deadline, best);
  };
  // Descent: moves while one helps (below); then, on small pipelines, kicks.
  const auto descend = [&] {
    bool improved = true;
    while (improved && within(limit)) {
      improved = false;
      // Computations on a longest path of the plan as it is (which may end
      // before the deadline): speeding one up is what frees time for others.
      critical_.clear();
      const double longest = makespan(), tolerance = kCriticalShare * deadline;
      for (Index i = 0; i < static_cast<Index>(choice_.size()); ++i)
        if (choice_[ix(i)] > 0 && longest - times_.through(ComputationId(i)) <= tolerance)
          critical_.push_back(i);
      std::sort(critical_.begin(), critical_.end(), [&](Index a, Index b) {
        const double cost_a = speedup_cost(a), cost_b = speedup_cost(b);
        return cost_a < cost_b || (cost_a == cost_b && a < b);  // strict: same order in every library
      });
      work_ += static_cast<std::int64_t>(choice_.size());
      for (const Index jump : kJumps) {
        for (std::size_t a = 0; a < critical_.size() && !improved && within(limit); ++a) {
          const Index i = critical_[a];
          if (jump > 1 && choice_[ix(i)] < jump) continue;
          improved = trial([&] { set_option(i, std::max<Index>(0, choice_[ix(i)] - jump)); });
        }
        if (improved) break;
      }
      // Pushes: one computation slower (to its steepest saving), the time it
      // takes back found by tightening elsewhere, cheapest first; then reclaim.
      // The dual of the exchanges above: it finds plans that split twins, one
      // fast and one much slower, where reclaiming from either side stalls.
      if (!improved) {
        pushes_.clear();
        for (Index j = 0; j < static_cast<Index>(choice_.size()); ++j) {
          const GroupId g = group_[ix(j)];
          if (choice_[ix(j)] + 1 >= table_.num_options(g)) continue;
          const Index steep = steepest_[ix(first_option_[g] + choice_[ix(j)])];
          pushes_.push_back({(effective_of(j, choice_[ix(j)]) - effective_of(j, steep)) /
                                 (time_of(j, steep) - duration_[ix(j)]),
                             j});
        }
        std::sort(pushes_.begin(), pushes_.end(), [](const Move& a, const Move& b) { return b < a; });
        work_ += static_cast<std::int64_t>(choice_.size());
        for (std::size_t a = 0; a < pushes_.size() && !improved && within(limit); ++a) {
          const Index j = pushes_[a].computation;
          const std::size_t mark = journal_.size();
          set_option(j, steepest_[ix(first_option_[group_[ix(j)]] + choice_[ix(j)])]);
          commit();
          if (!tighten_to(deadline, j, TightenOrder::kUsefulSecond)) {  // j stays where it was pushed
            rollback(mark);
            continue;
          }
          reclaim_both(deadline, nullptr);
          improved = keep_if_better(mark, deadline, best);
        }
      }
      const std::size_t pairs_of = std::min(critical_.size(), kPairCandidates);
      for (std::size_t a = 0; a < pairs_of && !improved && within(limit); ++a)
        for (std::size_t b = a + 1; b < pairs_of && !improved && within(limit); ++b)
          improved = trial([&] {
            set_option(critical_[a], choice_[ix(critical_[a])] - 1);
            set_option(critical_[b], choice_[ix(critical_[b])] - 1);
          });
      for (std::size_t q = 0; q < std::size(kSqueezes) && !improved && within(limit); ++q) {
        const std::size_t mark = journal_.size();
        if (!tighten_to(deadline * (1.0 - kSqueezes[q]), -1, TightenOrder::kUsefulSecond)) {
          rollback(mark);
          break;
        }
        reclaim_both(deadline, nullptr);
        improved = keep_if_better(mark, deadline, best);
      }
      // Wide pushes, only when every move above failed: each push again, to
      // every slower option but the steepest one (tried above), nearest
      // first. A saving that needs one computation several options slower and
      // another several faster (measured: 0.11 % on a 3 x 2 GPipe pipeline,
      // bench/quality.py) is out of reach of single steps from either side.
      for (std::size_t a = 0; a < pushes_.size() && !improved && within(limit); ++a) {
        const Index j = pushes_[a].computation;
        const Index from = choice_[ix(j)];
        const Index steep = steepest_[ix(first_option_[group_[ix(j)]] + from)];
        for (Index option = from + 1;
             option < table_.num_options(group_[ix(j)]) && !improved && within(limit); ++option) {
          if (option == steep) continue;
          const std::size_t mark = journal_.size();
          set_option(j, option);
          commit();
          if (!tighten_to(deadline, j, TightenOrder::kUsefulSecond)) {
            rollback(mark);
            continue;
          }
          reclaim_both(deadline, nullptr);
          improved = keep_if_better(mark, deadline, best);
        }
      }
    }
  };
  descend();
  if (kicks == Kicks::kNone || static_cast<Index>(choice_.size()) > kKickComputations) return;
  // Kicks: a local optimum of a small pipeline can sit several options in
  // several computations away from a better plan (measured: 7 of 18, 0.66 %
  // dearer, bench/data/review/), out of reach of the moves above. Each kick
  // moves a few computations by an option or two at random, meets the
  // deadline again, descends, and is kept only if that ends cheaper; every
  // kKickRestartEvery-th starts from a random plan instead. The random
  // source is a fixed sequence (the same plans on every platform).
  std::uint64_t state = 0x9e3779b97f4a7c15ULL ^ static_cast<std::uint64_t>(choice_.size());
  const auto next = [&state] {  // splitmix64
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const auto n = static_cast<std::uint64_t>(choice_.size());
  std::int64_t fruitless = 0;  // kicks in a row that found nothing cheaper
  for (std::int64_t kick = 0; kick < kKicks && fruitless < kKicksWithoutGain && within(limit); ++kick) {
    ++fruitless;
    const std::size_t mark = journal_.size();
    const double before = best;
    const bool restart = kicks == Kicks::kWithRestarts && kick % kKickRestartEvery == 0;
    const std::uint64_t moved =
        restart ? 0 : kKickMinMoves + next() % (kKickMaxMoves - kKickMinMoves + 1);
    if (restart)
      for (Index i = 0; i < static_cast<Index>(n); ++i) {
        const auto options = static_cast<std::uint64_t>(table_.num_options(group_[ix(i)]));
        set_option(i, static_cast<Index>(next() % options));
      }
    for (std::uint64_t m = 0; m < moved; ++m) {
      const auto i = static_cast<Index>(next() % n);
      const std::uint64_t r = next();
      const Index step = 1 + static_cast<Index>(r % 2);
      const Index last = table_.num_options(group_[ix(i)]) - 1;
      const Index to = (r >> 1) % 2 ? std::min(last, choice_[ix(i)] + step)
                                    : std::max<Index>(0, choice_[ix(i)] - step);
      set_option(i, to);
    }
    commit();
    ++work_;
    if (!tighten_to(deadline, -1, TightenOrder::kUsefulSecond)) {
      rollback(mark);
      continue;
    }
    reclaim_both(deadline, nullptr);
    best = energy_at(deadline);
    descend();
    if (makespan() <= deadline && best < before - kImprovementShare * std::abs(before)) {
      fruitless = 0;
      continue;
    }
    rollback(mark);
    best = before;
  }
}

}  // namespace perseus
