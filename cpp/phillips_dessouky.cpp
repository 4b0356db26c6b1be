#include "phillips_dessouky.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace perseus {
namespace {

using Units = PhillipsDessouky::Units;

constexpr FlowNode kSource{0}, kSink{1};
FlowNode node_a(Position p) { return FlowNode(2 + 2 * p.value()); }
FlowNode node_b(Position p) { return FlowNode(3 + 2 * p.value()); }

IdVector<GroupId, QuantisedGroup> quantise(const OptionTable& table, double unit_time_s) {
  IdVector<GroupId, QuantisedGroup> groups;
  groups.reserve(ix(table.num_groups()));
  for (GroupId g(0); g.value() < table.num_groups(); ++g) groups.emplace_back(table, g, unit_time_s);
  return groups;
}

IdVector<ComputationId, GroupId> groups_of(const Pipeline& pipeline) {
  IdVector<ComputationId, GroupId> group(ix(pipeline.size()));
  for (Index i = 0; i < pipeline.size(); ++i)
    group[ComputationId(i)] = group_of(pipeline.computation(i));
  return group;
}

// Makespan of the DAG for durations picked per group by `pick`.
template <typename Pick>
Units makespan(const Dag& dag, const IdVector<ComputationId, GroupId>& group, Pick pick) {
  std::vector<Units> finish(ix(dag.num_nodes()));
  Units longest = 0;
  for (const ComputationId v : dag.topological_order()) {
    Units start = 0;
    for (const ComputationId* p = dag.predecessors_begin(v); p != dag.predecessors_end(v); ++p)
      start = std::max(start, finish[p->index()]);
    finish[v.index()] = start + pick(group[v]);
    longest = std::max(longest, finish[v.index()]);
  }
  return longest;
}

}  // namespace

PhillipsDessouky::PhillipsDessouky(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                                   double unit_time_s, const SolverBudgets& budgets,
                                   double asked_unit_s)
    : budgets_(budgets),
      groups_(quantise(table, unit_time_s)),
      group_(groups_of(pipeline)),
      duration_(ix(pipeline.size())),
      min_units_(makespan(dag, group_, [&](GroupId g) { return groups_[g].min_duration(); })),
      max_units_(makespan(dag, group_, [&](GroupId g) { return groups_[g].max_duration(); })),
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
    for (GroupId g(0); g.value() < table.num_groups(); ++g)
      for (Index k = 1; k < table.num_options(g); ++k)
        closest = std::min(closest, table.time_s(g, k) - table.time_s(g, k - 1));
    if (closest == kInfinity)
      throw std::invalid_argument(
          "every stage has a single useful option, so there is nothing to choose");
    char text[320];
    if (asked_unit_s > unit_time_s)
      std::snprintf(text, sizeof text,
                    "unit_time_s=%g s is so coarse that every stage's options collapse to one "
                    "duration, even at the %g s the solver refines it to; the closest options "
                    "differ by %.3g s: use a smaller unit_time_s",
                    asked_unit_s, unit_time_s, closest);
    else
      std::snprintf(text, sizeof text,
                    "unit_time_s=%g s is so coarse that every stage's options collapse to one "
                    "duration; the closest options differ by %.3g s: use a smaller unit_time_s",
                    unit_time_s, closest);
    throw std::invalid_argument(text);
  }
  // Costs are joules of order one per unit; the tolerance only absorbs rounding.
  tolerance_ = 1e-10 * std::max(scale, 1e-300);

  const Index n = pipeline.size();
  for (ComputationId i(0); i.value() < n; ++i) duration_[i] = quant(i).max_duration();
  paths_.reset(duration_);
  const PathTimes<Units>& times = paths_.times();
  flow_.reset(2 + 2 * n);
  work_arc_.assign(ix(n), FlowArc::none());
  source_arc_.assign(ix(n), FlowArc::none());
  sink_arc_.assign(ix(n), FlowArc::none());
  const std::vector<Position>& successor = times.successor_positions();
  dep_arc_.assign(successor.size(), FlowArc::none());
  for (Position p(0); p.value() < n; ++p) {
    work_arc_[p.index()] = flow_.add_arc(node_a(p), node_b(p));
    if (times.predecessors_begin(p) == times.predecessors_end(p))
      source_arc_[p.index()] = flow_.add_arc(kSource, node_a(p));
    if (times.successors_begin(p) == times.successors_end(p))
      sink_arc_[p.index()] = flow_.add_arc(node_b(p), kSink);
    for (Index k = times.successors_begin(p); k < times.successors_end(p); ++k)
      dep_arc_[ix(k)] = flow_.add_arc(node_b(p), node_a(successor[ix(k)]));
  }
  dep_tight_.assign(dep_arc_.size(), 0);
  return_arc_ = flow_.add_arc(kSink, kSource);
  flow_.finalize();
  flow_.set_bounds(return_arc_, 0.0, kInfinity);

  bounds_duration_.assign(ix(n), kArcsClosed);
  critical_.assign(ix(n), Position(0));
  changing_.assign(ix(n), Position(0));
  cut_.reserve(ix(n));
  cut_direction_.reserve(ix(n));
  changed_.reserve(ix(n));
  // The log is the only thing the loop appends to; it grows in chunks.
  run_computation_.reserve(ix(n));
  run_direction_.reserve(ix(n));
}

void PhillipsDessouky::set_dependency(std::size_t edge, bool tight) {
  if ((dep_tight_[edge] != 0) == tight) return;
  dep_tight_[edge] = tight;
  flow_.set_bounds(dep_arc_[edge], 0.0, tight ? kInfinity : 0.0);
}

void PhillipsDessouky::sync_network() {
  const PathTimes<Units>& times = paths_.times();
  // Raw pointers: the flags stored below are chars, which may alias the
  // vectors' insides and would make every accessor reload them.
  const Units* head = times.heads_by_position();
  const Units* tail = times.tails_by_position();
  const Units* duration = times.durations_by_position();
  const Index* first_successor = times.successor_offsets();
  const Position* successor = times.successor_positions().data();
  const char* dep_tight = dep_tight_.data();
  const Units* bounds_duration = bounds_duration_.data();
  Position* critical = critical_.data();
  Position* changing = changing_.data();
  std::size_t num_critical = 0, num_changing = 0;
  const Units T = paths_.makespan();
  const std::size_t n = duration_.size();
  // A dependency p -> s is critical when both ends are and s starts as p
  // ends; with p critical that is head(p) + d(p) + tail(s) == T (a longest
  // path runs through the dependency, so s is critical too), which needs no
  // flag of the successor, so one pass in topological order decides every
  // position as it reaches it. Few positions change anything at a cut
  // (measured at 16 x 64: about 20 of 2,048), so this pass only reads and
  // lists them, with no call that would make it keep its pointers on the
  // stack, and change() then updates the listed ones in the same order.
  std::int64_t visited = 0;
  Index end = first_successor[0];
  for (std::size_t p = 0; p < n; ++p) {
    const Index begin = end;
    end = first_successor[p + 1];
    const Units h = head[p];
    const bool now = h + tail[p] == T;
    const Units set_for = bounds_duration[p];
    // Off the critical subgraph now and at the last sync: its work arc and
    // its outgoing dependencies (which need both ends critical) are closed.
    if (!now && set_for == kArcsClosed) continue;
    visited += 1 + (end - begin);
    const Position position(static_cast<Index>(p));
    if (now) critical[num_critical++] = position;
    const Units d = duration[p];
    bool same = now && set_for == d;  // open at the last sync, for this duration
    if (same) {
      const Units finish_to_end = T - h - d;  // tail(s) of a successor s it is tight with
      for (Index k = begin; k < end; ++k)
        same &= (dep_tight[ix(k)] != 0) == (tail[successor[ix(k)].index()] == finish_to_end);
    }
    if (!same) changing[num_changing++] = position;
  }
  num_critical_ = num_critical;
  for (std::size_t c = 0; c < num_changing; ++c) change(changing[c], T);
  work_ += visited + static_cast<std::int64_t>(n);
}

void PhillipsDessouky::change(Position position, Units T) {
  const PathTimes<Units>& times = paths_.times();
  const std::size_t p = position.index();
  const Units d = times.duration_at(position);
  const bool now = times.head_at(position) + times.tail_at(position) == T;
  const bool was = bounds_duration_[p] != kArcsClosed;
  if (now) {
    if (bounds_duration_[p] != d) {
      bounds_duration_[p] = d;
      // Lower: the refund for lengthening by one unit; upper: the cost of
      // shortening by one (infinite at the shortest duration).
      const QuantisedGroup& q = quant(times.node_at(position));
      const double lower = d < q.max_duration() ? q.cost(d) - q.cost(d + 1) : 0.0;
      const double upper = d > q.min_duration() ? q.cost(d - 1) - q.cost(d) : kInfinity;
      flow_.set_bounds(work_arc_[p], std::max(lower, 0.0), std::max(upper, std::max(lower, 0.0)));
    }
  } else {
    bounds_duration_[p] = kArcsClosed;
    flow_.set_bounds(work_arc_[p], 0.0, 0.0);
  }
  if (now != was) {
    const double open = now ? kInfinity : 0.0;
    if (source_arc_[p].valid()) flow_.set_bounds(source_arc_[p], 0.0, open);
    if (sink_arc_[p].valid()) flow_.set_bounds(sink_arc_[p], 0.0, open);
  }
  const Units finish_to_end = T - times.head_at(position) - d;
  const std::vector<Position>& successor = times.successor_positions();
  for (Index k = times.successors_begin(position); k < times.successors_end(position); ++k) {
    const bool tight = now && times.tail_at(successor[ix(k)]) == finish_to_end;
    set_dependency(ix(k), tight);
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
  for (std::size_t c = 0; c < num_critical_; ++c) {
    const Position p = critical_[c];
    const bool a_in = flow_.marked(node_a(p));
    const bool b_in = flow_.marked(node_b(p));
    if (a_in == b_in) continue;  // both ends on one side: not in the cut (most positions)
    const ComputationId i = paths_.times().node_at(p);
    const QuantisedGroup& q = quant(i);
    const Units d = duration_[i];
    if (a_in && !b_in) {
      if (d <= q.min_duration()) return StepStatus::kInternalError;  // a finite cut cannot cross it
      cut_.push_back(i);
      cut_direction_.push_back(-1);
      run = std::min(run, d - q.breakpoint_below(d));
    } else if (d < q.max_duration()) {  // b_in && !a_in
      cut_.push_back(i);
      cut_direction_.push_back(+1);
      run = std::min(run, q.breakpoint_above(d) - d);
    }
  }
  work_ += static_cast<std::int64_t>(num_critical_);
  if (cut_.empty()) return StepStatus::kNoProgress;

  // The longest run that shortens the iteration one unit per unit: valid runs
  // are a prefix (the makespan is convex in the run length and falls by at
  // most one per unit). After a run that overshoots by e units, a path that
  // no cut computation lies on became too long: it had e units too little
  // float, so run - e is the next guess; if that fails too, halve.
  // A shorter guess is applied as the difference from the last one: one
  // update of the times instead of an undo and a redo.
  run = std::max<Units>(run, 1);
  Units applied = 0;
  while (true) {
    apply_cut(run - applied);
    applied = run;
    const Units excess = paths_.makespan() - (T - run);
    if (excess == 0) break;
    if (run == 1) {
      apply_cut(-run);
      break;
    }
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
        const ComputationId i = cut_[k];
        if (cut_direction_[k] > 0 && paths_.head(i) + paths_.tail(i) > T - 1) {
          --duration_[i];
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
    run_computation_.push_back(cut_[k].value());
    run_direction_.push_back(cut_direction_[k]);
  }
  log_.append(run, run_computation_.data(), run_direction_.data(), run_computation_.size());
  units_done_ += run;
  return StepStatus::kShortened;
}

void PhillipsDessouky::apply_cut(Units units) {
  changed_.clear();
  for (std::size_t k = 0; k < cut_.size(); ++k) {
    duration_[cut_[k]] += units * cut_direction_[k];
    changed_.push_back(cut_[k]);
  }
  update_paths();
}

void PhillipsDessouky::update_paths() { paths_.update(duration_, changed_); }

StopReason PhillipsDessouky::run(Pacer& pacer) {
  return run([&pacer](Units done, Units total) { pacer.tick(Phase::kMinCut, done, total); });
}

StopReason PhillipsDessouky::run(const std::function<void(Units, Units)>& tick) {
  struct Closer {
    StepLog& log;
    ~Closer() { log.close(); }
  } closer{log_};
  const Units expected = max_units_ - min_units_;
  while (true) {
    tick(units_done_, expected);
    switch (step()) {
      case StepStatus::kShortened: break;
      case StepStatus::kMinimumTime: return StopReason::kMinimumTime;
      case StepStatus::kNoProgress: return StopReason::kNoProgress;
      case StepStatus::kInfeasibleFlow: return StopReason::kInfeasibleFlow;
      case StepStatus::kInternalError:
        throw std::logic_error(
            "perseus internal error: a finite minimum cut crosses a computation at its shortest "
            "duration (please report it with the profile)");
    }
  }
}

void PhillipsDessouky::first_plan(std::vector<Units>& durations, Cursor& cursor) const {
  durations.resize(duration_.size());
  for (std::size_t i = 0; i < duration_.size(); ++i)
    durations[i] = quant(ComputationId(static_cast<Index>(i))).max_duration();
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
