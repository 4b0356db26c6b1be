#include "evaluate.hpp"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <limits>

namespace perseus {
namespace {

// Relative squeezes below the deadline tried by the local search.
constexpr double kSqueezes[] = {0.001, 0.003, 0.01, 0.03};

// Pair exchanges are tried among this many computations on longest paths.
constexpr std::size_t kPairCandidates = 24;

}  // namespace

Evaluator::Evaluator(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                     double blocking_power_w)
    : dag_(dag),
      table_(table),
      blocking_power_w_(blocking_power_w),
      num_gpus_(pipeline.num_gpus()),
      group_(static_cast<std::size_t>(pipeline.size())),
      start_(static_cast<std::size_t>(pipeline.size())),
      finish_(static_cast<std::size_t>(pipeline.size())),
      latest_finish_(static_cast<std::size_t>(pipeline.size())) {
  for (Index i = 0; i < pipeline.size(); ++i)
    group_[static_cast<std::size_t>(i)] = group_of(pipeline.computation(i));
  for (Index g = 0; g < table.num_groups(); ++g) {
    const Index first = static_cast<Index>(effective_.size());
    first_option_.push_back(first);
    const Index count = table.num_options(g);
    for (Index k = 0; k < count; ++k)
      effective_.push_back(table.energy_j(g, k) - blocking_power_w * table.time_s(g, k));
    for (Index j = 0; j < count; ++j) {
      Index steep = j;
      double best = -std::numeric_limits<double>::infinity();
      for (Index k = j + 1; k < count; ++k) {
        const double slope = (effective_[static_cast<std::size_t>(first + j)] -
                              effective_[static_cast<std::size_t>(first + k)]) /
                             (table.time_s(g, k) - table.time_s(g, j));
        if (slope > best) {
          best = slope;
          steep = k;
        }
      }
      steepest_.push_back(steep);
    }
  }
  stack_.reserve(static_cast<std::size_t>(pipeline.size()));
  trial_.resize(static_cast<std::size_t>(pipeline.size()));
  second_.resize(static_cast<std::size_t>(pipeline.size()));
  critical_.reserve(static_cast<std::size_t>(pipeline.size()));
  heap_.reserve(static_cast<std::size_t>(pipeline.size()));
}

double Evaluator::forward_pass(const OptionIndex* choice) {
  work_ += dag_.num_nodes() + dag_.num_edges();
  double makespan = 0.0;
  for (const Index v : dag_.topological_order()) {
    double start = 0.0;
    for (const Index* p = dag_.predecessors_begin(v); p != dag_.predecessors_end(v); ++p)
      start = std::max(start, finish_[static_cast<std::size_t>(*p)]);
    start_[static_cast<std::size_t>(v)] = start;
    finish_[static_cast<std::size_t>(v)] = start + time(v, choice);
    makespan = std::max(makespan, finish_[static_cast<std::size_t>(v)]);
  }
  return makespan;
}

void Evaluator::backward_pass(const OptionIndex* choice, double deadline_s) {
  work_ += dag_.num_nodes() + dag_.num_edges();
  const auto& order = dag_.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    double latest = deadline_s;
    for (const Index* s = dag_.successors_begin(*it); s != dag_.successors_end(*it); ++s)
      latest = std::min(latest, latest_finish_[static_cast<std::size_t>(*s)] - time(*s, choice));
    latest_finish_[static_cast<std::size_t>(*it)] = latest;
  }
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

double Evaluator::best_move(Index i, const OptionIndex* choice, Index& option) {
  const auto s = static_cast<std::size_t>(i);
  const Index g = group_[s];
  const Index current = choice[i];
  const double now = table_.time_s(g, current);
  const double room = latest_finish_[s] - start_[s];  // longest time i may take
  // Options are sorted by time: the slowest one that fits, by bisection.
  Index lo = current, hi = table_.num_options(g) - 1;
  while (lo < hi) {
    const Index mid = lo + (hi - lo + 1) / 2;
    if (table_.time_s(g, mid) <= room) lo = mid;
    else hi = mid - 1;
  }
  work_ += 1;
  option = current;
  // Over an iteration of the deadline's length the GPUs draw blocking power
  // whenever they do not compute, so savings are in effective energy, which
  // falls strictly with every slower option: the slowest that fits saves most.
  if (by_total_ || lo == current) {
    option = lo;
    return lo == current ? 0.0 : effective(i, current) - effective(i, lo);
  }
  // The steepest saving overall, if it fits; otherwise scan what fits (few
  // options, since the steepest one is usually the next).
  const Index steep = steepest_[static_cast<std::size_t>(first_option_[static_cast<std::size_t>(g)] + current)];
  if (steep <= lo) {
    option = steep;
    return (effective(i, current) - effective(i, steep)) / (table_.time_s(g, steep) - now);
  }
  double best = 0.0;
  for (Index k = lo; k > current; --k) {
    const double score = (effective(i, current) - effective(i, k)) / (table_.time_s(g, k) - now);
    if (score > best) {
      best = score;
      option = k;
    }
  }
  return best;
}

void Evaluator::raise_starts(Index from, const OptionIndex* choice) {
  // Durations only grow during reclaim, so starts only rise: relax forward.
  stack_.clear();
  stack_.push_back(from);
  while (!stack_.empty()) {
    const Index u = stack_.back();
    stack_.pop_back();
    ++work_;
    const double done = finish_[static_cast<std::size_t>(u)];
    for (const Index* v = dag_.successors_begin(u); v != dag_.successors_end(u); ++v) {
      const auto vs = static_cast<std::size_t>(*v);
      if (done > start_[vs]) {
        start_[vs] = done;
        finish_[vs] = done + time(*v, choice);
        stack_.push_back(*v);
      }
    }
  }
}

void Evaluator::lower_latest(Index from, const OptionIndex* choice) {
  // ... and latest finish times only fall: relax backward.
  stack_.clear();
  stack_.push_back(from);
  while (!stack_.empty()) {
    const Index v = stack_.back();
    stack_.pop_back();
    ++work_;
    const double latest_start = latest_finish_[static_cast<std::size_t>(v)] - time(v, choice);
    for (const Index* u = dag_.predecessors_begin(v); u != dag_.predecessors_end(v); ++u) {
      const auto us = static_cast<std::size_t>(*u);
      if (latest_start < latest_finish_[us]) {
        latest_finish_[us] = latest_start;
        stack_.push_back(*u);
      }
    }
  }
}

Evaluation Evaluator::reclaim(OptionIndex* choice, double deadline_s) {
  const double deadline = std::max(deadline_s, forward_pass(choice));
  backward_pass(choice, deadline);

  // Lazy greedy: scores only shrink as slack is used up, so a popped move
  // whose fresh score still beats the next best is the current best.
  heap_.clear();
  for (Index i = 0; i < dag_.num_nodes(); ++i) {
    Index option;
    const double score = best_move(i, choice, option);
    if (score > 0) heap_.push_back({score, i});
  }
  std::make_heap(heap_.begin(), heap_.end());
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end());
    const Index i = heap_.back().computation;
    heap_.pop_back();
    Index option;
    const double score = best_move(i, choice, option);
    if (score <= 0) continue;
    if (!heap_.empty() && score < heap_.front().score) {
      heap_.push_back({score, i});
      std::push_heap(heap_.begin(), heap_.end());
      continue;
    }
    const auto s = static_cast<std::size_t>(i);
    choice[i] = static_cast<OptionIndex>(option);
    finish_[s] = start_[s] + time(i, choice);
    raise_starts(i, choice);
    lower_latest(i, choice);
  }
  return evaluate(choice);
}

Evaluation Evaluator::improve(OptionIndex* choice, double deadline_s, std::int64_t max_work) {
  const std::int64_t limit = work_ + max_work;
  Evaluation best = reclaim_both(choice, deadline_s);
  const double deadline = std::max(deadline_s, best.iteration_time_s);
  const std::size_t n = static_cast<std::size_t>(dag_.num_nodes());
  bool improved = true;
  while (improved && work_ < limit) {
    improved = false;
    forward_pass(choice);
    backward_pass(choice, deadline);
    critical_.clear();
    const double slack_tolerance = 1e-9 * deadline;
    for (Index i = 0; i < dag_.num_nodes(); ++i) {
      const auto s = static_cast<std::size_t>(i);
      if (choice[i] > 0 && latest_finish_[s] - finish_[s] <= slack_tolerance) critical_.push_back(i);
    }
    // Exchanges speed up one computation (j == k) or two, on longest paths
    // (several paths may need to shrink at once), and then reclaim.
    const std::size_t singles = critical_.size();
    const std::size_t pairs_of = std::min(singles, kPairCandidates);
    auto try_exchange = [&](Index j, Index k, Index jump = 1) {
      std::copy(choice, choice + n, trial_.begin());
      trial_[static_cast<std::size_t>(j)] = static_cast<OptionIndex>(std::max(0, choice[j] - jump));
      if (k != j) trial_[static_cast<std::size_t>(k)] = static_cast<OptionIndex>(choice[k] - 1);
      const Evaluation e = reclaim_both(trial_.data(), deadline);
      if (energy_at(e, deadline) < energy_at(best, deadline) - 1e-12 * std::abs(best.energy_j) &&
          e.iteration_time_s <= deadline) {
        std::copy(trial_.begin(), trial_.end(), choice);
        best = e;
        return true;
      }
      return false;
    };
    for (std::size_t a = 0; a < singles && !improved && work_ < limit; ++a)
      improved = try_exchange(critical_[a], critical_[a]);
    // Bigger single jumps: one computation much faster, its time spent elsewhere.
    for (const Index jump : {2, 4, 8})
      for (std::size_t a = 0; a < singles && !improved && work_ < limit; ++a)
        if (choice[critical_[a]] >= jump) improved = try_exchange(critical_[a], critical_[a], jump);
    for (std::size_t a = 0; a < pairs_of && !improved && work_ < limit; ++a)
      for (std::size_t b = a + 1; b < pairs_of && !improved && work_ < limit; ++b)
        improved = try_exchange(critical_[a], critical_[b]);
    // Squeezes: tighten the whole plan below the deadline (cheapest speed-ups
    // first, on every path that is too long), then reclaim up to it again.
    // This moves many computations at once, where single and pair exchanges
    // stall.
    for (std::size_t q = 0; q < std::size(kSqueezes) && !improved && work_ < limit; ++q) {
      std::copy(choice, choice + n, trial_.begin());
      if (!tighten(trial_.data(), deadline * (1.0 - kSqueezes[q]))) break;
      const Evaluation e = reclaim_both(trial_.data(), deadline);
      if (energy_at(e, deadline) < energy_at(best, deadline) - 1e-12 * std::abs(best.energy_j) &&
          e.iteration_time_s <= deadline) {
        std::copy(trial_.begin(), trial_.end(), choice);
        best = e;
        improved = true;
      }
    }
  }
  return best;
}

Evaluation Evaluator::reclaim_both(OptionIndex* choice, double deadline_s) {
  const std::size_t n = static_cast<std::size_t>(dag_.num_nodes());
  std::copy(choice, choice + n, second_.begin());
  by_total_ = true;
  const Evaluation total = reclaim(second_.data(), deadline_s);
  by_total_ = false;
  const Evaluation per_second = reclaim(choice, deadline_s);
  const double common = std::max({deadline_s, total.iteration_time_s, per_second.iteration_time_s});
  if (energy_at(total, common) < energy_at(per_second, common)) {
    std::copy(second_.begin(), second_.end(), choice);
    return total;
  }
  return per_second;
}

bool Evaluator::tighten(OptionIndex* choice, double deadline_s) {
  while (true) {
    const double makespan = forward_pass(choice);
    if (makespan <= deadline_s) return true;
    backward_pass(choice, deadline_s);
    // Among computations on too-long paths (negative float), speed up the one
    // that adds the least effective energy per second it saves.
    Index best = -1, best_option = 0;
    double best_cost = std::numeric_limits<double>::infinity();
    for (Index i = 0; i < dag_.num_nodes(); ++i) {
      const auto s = static_cast<std::size_t>(i);
      if (choice[i] == 0 || finish_[s] <= latest_finish_[s]) continue;
      const Index k = choice[i] - 1;
      const double saved = time(i, choice) - table_.time_s(group_[s], k);
      const double cost = (effective(i, k) - effective(i, choice[i])) / saved;
      if (cost < best_cost) {
        best_cost = cost;
        best = i;
        best_option = k;
      }
    }
    if (best < 0) return false;
    choice[best] = static_cast<OptionIndex>(best_option);
  }
}

}  // namespace perseus
