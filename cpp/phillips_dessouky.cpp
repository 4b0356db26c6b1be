#include "phillips_dessouky.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace perseus {
namespace {

using Units = PhillipsDessouky::Units;

constexpr Index kSource = 0, kSink = 1;
Index node_a(Index i) { return 2 + 2 * i; }
Index node_b(Index i) { return 3 + 2 * i; }

std::vector<QuantisedGroup> quantise(const OptionTable& table, double unit_time_s) {
  std::vector<QuantisedGroup> groups;
  groups.reserve(ix(table.num_groups()));
  for (Index g = 0; g < table.num_groups(); ++g) groups.emplace_back(table, g, unit_time_s);
  return groups;
}

std::vector<Index> groups_of(const Pipeline& pipeline) {
  std::vector<Index> group(ix(pipeline.size()));
  for (Index i = 0; i < pipeline.size(); ++i) group[ix(i)] = group_of(pipeline.computation(i));
  return group;
}

// Makespan of the DAG for durations picked per group by `pick`.
template <typename Pick>
Units makespan(const Dag& dag, const std::vector<Index>& group, Pick pick) {
  std::vector<Units> finish(ix(dag.num_nodes()));
  Units longest = 0;
  for (const Index v : dag.topological_order()) {
    Units start = 0;
    for (const Index* p = dag.predecessors_begin(v); p != dag.predecessors_end(v); ++p)
      start = std::max(start, finish[ix(*p)]);
    finish[ix(v)] = start + pick(group[ix(v)]);
    longest = std::max(longest, finish[ix(v)]);
  }
  return longest;
}

}  // namespace

PhillipsDessouky::PhillipsDessouky(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                                   double unit_time_s, const SolverBudgets& budgets)
    : dag_(dag),
      budgets_(budgets),
      groups_(quantise(table, unit_time_s)),
      group_(groups_of(pipeline)),
      duration_(ix(pipeline.size())),
      min_units_(makespan(dag, group_, [&](Index g) { return groups_[ix(g)].min_duration(); })),
      max_units_(makespan(dag, group_, [&](Index g) { return groups_[ix(g)].max_duration(); })),
      paths_(dag, min_units_, max_units_) {
  bool any_range = false;
  double scale = 0.0;
  for (const QuantisedGroup& q : groups_) {
    if (q.max_duration() > q.min_duration()) {
      any_range = true;
      scale = std::max(scale, q.cost(q.min_duration()) - q.cost(q.max_duration()));
    }
  }
  if (!any_range) {
    double closest = kInfinity;
    for (Index g = 0; g < table.num_groups(); ++g)
      for (Index k = 1; k < table.num_options(g); ++k)
        closest = std::min(closest, table.time_s(g, k) - table.time_s(g, k - 1));
    if (closest == kInfinity)
      throw std::invalid_argument(
          "every stage has a single useful option, so there is nothing to choose");
    char text[256];
    std::snprintf(text, sizeof text,
                  "unit_time_s=%g s is so coarse that every stage's options collapse to one "
                  "duration; the closest options differ by %.3g s: use a smaller unit_time_s",
                  unit_time_s, closest);
    throw std::invalid_argument(text);
  }
  // Costs are joules of order one per unit; the tolerance only absorbs rounding.
  tolerance_ = 1e-10 * std::max(scale, 1e-300);

  const Index n = pipeline.size();
  flow_.reset(2 + 2 * n);
  work_arc_.assign(ix(n), -1);
  source_arc_.assign(ix(n), -1);
  sink_arc_.assign(ix(n), -1);
  for (Index i = 0; i < n; ++i) {
    work_arc_[ix(i)] = flow_.add_arc(node_a(i), node_b(i));
    if (dag.predecessors_begin(i) == dag.predecessors_end(i))
      source_arc_[ix(i)] = flow_.add_arc(kSource, node_a(i));
    if (dag.successors_begin(i) == dag.successors_end(i))
      sink_arc_[ix(i)] = flow_.add_arc(node_b(i), kSink);
    for (const Index* v = dag.successors_begin(i); v != dag.successors_end(i); ++v)
      dep_arc_.push_back(flow_.add_arc(node_b(i), node_a(*v)));
  }
  // The same dependency arcs in predecessor order: the edge u -> v is the
  // k-th successor of u.
  {
    std::vector<Index> first_succ(ix(n) + 1, 0);
    for (Index u = 0; u < n; ++u)
      first_succ[ix(u) + 1] =
          first_succ[ix(u)] + static_cast<Index>(dag.successors_end(u) - dag.successors_begin(u));
    dep_arc_of_pred_.reserve(dep_arc_.size());
    dep_index_of_pred_.reserve(dep_arc_.size());
    for (Index v = 0; v < n; ++v)
      for (const Index* u = dag.predecessors_begin(v); u != dag.predecessors_end(v); ++u) {
        const Index* begin = dag.successors_begin(*u);
        const Index k = static_cast<Index>(std::find(begin, dag.successors_end(*u), v) - begin);
        dep_index_of_pred_.push_back(first_succ[ix(*u)] + k);
        dep_arc_of_pred_.push_back(dep_arc_[ix(first_succ[ix(*u)] + k)]);
      }
  }
  dep_tight_.assign(dep_arc_.size(), 0);
  return_arc_ = flow_.add_arc(kSink, kSource);
  flow_.finalize();
  flow_.set_bounds(return_arc_, 0.0, kInfinity);

  for (Index i = 0; i < n; ++i) duration_[ix(i)] = groups_[ix(group_[ix(i)])].max_duration();
  paths_.reset(duration_);
  is_critical_.assign(ix(n), 0);
  arcs_open_.assign(ix(n), 0);
  bounds_duration_.assign(ix(n), 0);
  critical_.reserve(ix(n));
  next_critical_.reserve(ix(n));
  touched_.reserve(ix(n));
  touched_at_.assign(ix(n), 0);
  for (Index i = 0; i < n; ++i) touch(i);
  cut_.reserve(ix(n));
  cut_direction_.reserve(ix(n));
  changed_.reserve(ix(n));
  // The log is the only thing the loop appends to; it grows in chunks.
  run_computation_.reserve(ix(n));
  run_direction_.reserve(ix(n));
}

void PhillipsDessouky::touch(Index i) {
  if (touched_at_[ix(i)] == stamp_) return;
  touched_at_[ix(i)] = stamp_;
  touched_.push_back(i);
}

void PhillipsDessouky::refresh_arcs(Index i) {
  const bool critical = is_critical_[ix(i)] != 0;
  const bool was = arcs_open_[ix(i)] != 0;
  // Every arc of a computation off the critical subgraph stays closed.
  if (!critical && !was) return;
  arcs_open_[ix(i)] = critical;
  const QuantisedGroup& q = quant(i);
  const Units d = duration_[ix(i)];
  if (critical && (!was || bounds_duration_[ix(i)] != d)) {
    bounds_duration_[ix(i)] = d;
    // Lower: the refund for lengthening by one unit; upper: the cost of
    // shortening by one (infinite at the shortest duration).
    const double lower = d < q.max_duration() ? q.cost(d) - q.cost(d + 1) : 0.0;
    const double upper = d > q.min_duration() ? q.cost(d - 1) - q.cost(d) : kInfinity;
    flow_.set_bounds(work_arc_[ix(i)], std::max(lower, 0.0), std::max(upper, std::max(lower, 0.0)));
  } else if (!critical) {
    flow_.set_bounds(work_arc_[ix(i)], 0.0, 0.0);
  }
  if (critical != was) {
    const double open = critical ? kInfinity : 0.0;
    if (source_arc_[ix(i)] >= 0) flow_.set_bounds(source_arc_[ix(i)], 0.0, open);
    if (sink_arc_[ix(i)] >= 0) flow_.set_bounds(sink_arc_[ix(i)], 0.0, open);
  }
  // A dependency u -> v is critical when both are and v starts as u ends.
  // Both ends of an arc are often touched in one sync: a touched node sees
  // to its outgoing arcs, and to an incoming one only if its tail end was
  // not touched too. Bounds are set only when the arc's state flips.
  const Units finish = paths_.head(i) + duration_[ix(i)];
  const Index* first_succ = dag_.successors_begin(0);
  for (const Index* v = dag_.successors_begin(i); v != dag_.successors_end(i); ++v) {
    const bool tight = critical && is_critical_[ix(*v)] && finish == paths_.head(*v);
    set_dependency(ix(static_cast<Index>(v - first_succ)),
                   dep_arc_[ix(static_cast<Index>(v - first_succ))], tight);
  }
  const Units start = paths_.head(i);
  const Index* first_pred = dag_.predecessors_begin(0);
  for (const Index* u = dag_.predecessors_begin(i); u != dag_.predecessors_end(i); ++u) {
    if (touched_at_[ix(*u)] == stamp_) continue;  // its own refresh sees to the arc
    const bool tight = critical && is_critical_[ix(*u)] && paths_.head(*u) + duration_[ix(*u)] == start;
    const auto k = ix(static_cast<Index>(u - first_pred));
    set_dependency(ix(dep_index_of_pred_[k]), dep_arc_of_pred_[k], tight);
  }
  work_ += 1 + (dag_.successors_end(i) - dag_.successors_begin(i)) +
           (dag_.predecessors_end(i) - dag_.predecessors_begin(i));
}

void PhillipsDessouky::set_dependency(std::size_t edge, Index arc, bool tight) {
  if ((dep_tight_[edge] != 0) == tight) return;
  dep_tight_[edge] = tight;
  flow_.set_bounds(arc, 0.0, tight ? kInfinity : 0.0);
}

void PhillipsDessouky::sync_network() {
  // The critical set now, and who joined or left it.
  next_critical_.clear();
  paths_.for_each_critical([&](Index v) { next_critical_.push_back(v); });
  for (const Index v : critical_) is_critical_[ix(v)] = 2;  // 2: was critical, not yet seen
  for (const Index v : next_critical_) {
    if (is_critical_[ix(v)] != 2) touch(v);  // joined
    is_critical_[ix(v)] = 1;
  }
  for (const Index v : critical_)
    if (is_critical_[ix(v)] == 2) {  // left
      is_critical_[ix(v)] = 0;
      touch(v);
    }
  critical_.swap(next_critical_);
  work_ += static_cast<std::int64_t>(critical_.size());
  for (const Index i : touched_) refresh_arcs(i);
  touched_.clear();
  if (++stamp_ == 0) {
    std::fill(touched_at_.begin(), touched_at_.end(), 0);
    stamp_ = 1;
  }
}

StepStatus PhillipsDessouky::step() {
  const Units T = paths_.makespan();
  sync_network();
  // An infinite cut means some critical path cannot shrink any further.
  if (flow_.has_infinite_path(kSource, kSink)) return StepStatus::kMinimumTime;
  // A flow within the new bounds: route what the changed bounds left over
  // (through the return arc too); if that fails (rounding over many steps),
  // start from zero once.
  flow_.set_bounds(return_arc_, 0.0, kInfinity);
  if (!flow_.restore_balance(tolerance_)) {
    flow_.clear_flows();
    if (!flow_.restore_balance(tolerance_)) return StepStatus::kInfeasibleFlow;
  }
  flow_.augment(kSource, kSink, return_arc_, tolerance_);  // marks the source side

  cut_.clear();
  cut_direction_.clear();
  Units run = budgets_.multi_unit_steps ? T - min_units_ : 1;
  for (const Index i : critical_) {
    const bool a_in = flow_.marked(node_a(i));
    const bool b_in = flow_.marked(node_b(i));
    const QuantisedGroup& q = quant(i);
    const Units d = duration_[ix(i)];
    if (a_in && !b_in) {
      if (d <= q.min_duration()) return StepStatus::kNoProgress;  // cannot happen on a finite cut
      cut_.push_back(i);
      cut_direction_.push_back(-1);
      run = std::min(run, d - q.breakpoint_below(d));
    } else if (!a_in && b_in && d < q.max_duration()) {
      cut_.push_back(i);
      cut_direction_.push_back(+1);
      run = std::min(run, q.breakpoint_above(d) - d);
    }
  }
  work_ += static_cast<std::int64_t>(critical_.size());
  if (cut_.empty()) return StepStatus::kNoProgress;

  // The longest run that shortens the iteration one unit per unit: valid runs
  // are a prefix (the makespan is convex in the run length and falls by at
  // most one per unit). After a run that overshoots by e units, a path that
  // no cut computation lies on became too long: it had e units too little
  // float, so run - e is the next guess; if that fails too, halve.
  run = std::max<Units>(run, 1);
  while (true) {
    apply_cut(run);
    const Units excess = paths_.makespan() - (T - run);
    if (excess == 0) break;
    apply_cut(-run);
    if (run == 1) break;
    run = excess < run ? run - excess : run / 2;
  }
  if (paths_.makespan() != T - run) {
    // One unit and still too long: lengthening a backward computation
    // stretched a path that had exactly one unit of float. Keep the
    // shortenings and only the lengthenings that stretch nothing.
    apply_cut(1);
    bool undone = true;
    while (paths_.makespan() > T - 1 && undone) {
      undone = false;
      changed_.clear();
      for (std::size_t k = 0; k < cut_.size(); ++k) {
        const Index i = cut_[k];
        if (cut_direction_[k] > 0 && paths_.head(i) + paths_.tail(i) > T - 1) {
          --duration_[ix(i)];
          cut_direction_[k] = 0;
          changed_.push_back(i);
          undone = true;
        }
      }
      if (undone) update_paths();
    }
    if (paths_.makespan() != T - 1) return StepStatus::kNoProgress;
    run = 1;
  }
  // Log the run.
  run_computation_.clear();
  run_direction_.clear();
  for (std::size_t k = 0; k < cut_.size(); ++k) {
    if (cut_direction_[k] == 0) continue;
    run_computation_.push_back(cut_[k]);
    run_direction_.push_back(cut_direction_[k]);
  }
  log_.append(run, run_computation_.data(), run_direction_.data(), run_computation_.size());
  units_done_ += run;
  return StepStatus::kShortened;
}

void PhillipsDessouky::apply_cut(Units units) {
  changed_.clear();
  for (std::size_t k = 0; k < cut_.size(); ++k) {
    duration_[ix(cut_[k])] += units * cut_direction_[k];
    changed_.push_back(cut_[k]);
  }
  update_paths();
}

void PhillipsDessouky::update_paths() {
  paths_.update(duration_, changed_);
  // Whatever moved may change its arcs' bounds: refresh them next step.
  for (const Index i : changed_) touch(i);
  for (const Index i : paths_.moved()) touch(i);
}

StopReason PhillipsDessouky::run(Pacer& pacer) {
  struct Closer {
    StepLog& log;
    ~Closer() { log.close(); }
  } closer{log_};
  const Units expected = max_units_ - min_units_;
  while (true) {
    pacer.tick(Phase::kMinCut, units_done_, expected);
    switch (step()) {
      case StepStatus::kShortened: break;
      case StepStatus::kMinimumTime: return StopReason::kMinimumTime;
      case StepStatus::kNoProgress: return StopReason::kNoProgress;
      case StepStatus::kInfeasibleFlow: return StopReason::kInfeasibleFlow;
    }
  }
}

void PhillipsDessouky::first_plan(std::vector<Units>& durations, Cursor& cursor) const {
  durations.resize(duration_.size());
  for (std::size_t i = 0; i < duration_.size(); ++i)
    durations[i] = groups_[ix(group_[i])].max_duration();
  cursor = Cursor{};
}

bool PhillipsDessouky::has_next(Cursor& cursor) const {
  if (!cursor.loaded) cursor.loaded = log_.wait(cursor.run, cursor.current);
  return cursor.loaded;
}

void PhillipsDessouky::advance(Cursor& cursor, std::vector<Units>& durations,
                               std::vector<Index>& changed) const {
  changed.clear();
  if (!has_next(cursor)) throw std::logic_error("PhillipsDessouky: no plan after the last");
  const StepLog::Run& run = cursor.current;
  for (std::size_t k = 0; k < run.size; ++k) {
    durations[ix(run.computation[k])] += run.direction[k];
    changed.push_back(run.computation[k]);
  }
  if (++cursor.unit == run.units) {
    ++cursor.run;
    cursor.unit = 0;
    cursor.loaded = false;
  }
}

}  // namespace perseus
