// The Phillips-Dessouky min-cut loop over quantised durations.
//
// Phillips & Dessouky, "Solving the project time/cost tradeoff problem using
// the minimal cut concept" (Management Science, 1977), as used by Perseus
// (Chung et al., SOSP '24). Every computation has a convex cost curve over
// integer durations (QuantisedGroup). Starting from every computation at its
// cheapest (longest) duration, each step
//   1. takes the critical subgraph (computations on a longest path) of the
//      activity-on-arc DAG: computation i is the arc a_i -> b_i, a dependency
//      u -> v the arc b_u -> a_v, plus arcs from the source and to the sink;
//   2. gives each critical computation flow bounds: lower = refund for
//      lengthening by one unit, upper = cost of shortening by one unit
//      (infinite at the shortest duration, and on dependency arcs);
//   3. finds a minimum cut under these bounds: a feasible flow (a super source
//      and sink carry the lower bounds, with an infinite sink -> source arc),
//      then a maximum flow from source to sink;
//   4. shortens the cut's forward computations and lengthens its backward
//      ones, which shortens the iteration at the least extra cost.
// It stops when the cut is infinite: the shortest iteration is reached.
//
// Costs per step. On pipelines nearly every computation is critical and
// nearly every head or tail moves at every step (measured: 3,640 of 4,096
// critical at 16 x 128), so a step costs O(n): the longest paths are
// updated by two straight passes from the first and last cut positions
// (LongestPaths, which follows the moves instead when few move), and the
// critical set by one read-only sweep over the topological order, which
// lists the few positions whose flow bounds change (about 1 % per step) for
// an update after it.
// The flow lives on a network of the whole DAG whose non-critical arcs have
// bounds [0, 0], and it persists from step to step (BoundedFlow): a step
// changes the bounds of the arcs it touched, routes the imbalance this
// leaves, and augments, so it costs a few searches over the critical
// subgraph rather than a maximum flow from zero. One step may take a whole
// run of units (Fulkerson's parametric step): the same cut stays optimal
// while every cut computation stays on one linear piece of its cost curve and
// no other path becomes critical; the run length is bounded by the pieces
// and then checked on the longest paths, halving until it holds. All working
// arrays are allocated once; the step log (StepLog) grows in chunks and can
// be read on other threads while the loop runs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dag.hpp"
#include "longest_path.hpp"
#include "max_flow.hpp"
#include "options.hpp"
#include "pacer.hpp"
#include "pipeline.hpp"
#include "solver_options.hpp"
#include "step_log.hpp"

namespace perseus {

// Outcome of one min-cut step.
enum class StepStatus : std::uint8_t {
  kShortened,       // the iteration is one or more units shorter
  kMinimumTime,     // infinite cut: nothing on some critical path can shrink
  kNoProgress,      // a finite cut, but applying it could not shorten the iteration
  kInfeasibleFlow,  // no flow meets the lower bounds (costs too flat or too large to resolve)
  kInternalError    // a state the algorithm rules out (a finite cut through a computation
                    // already at its shortest): a bug; run() throws std::logic_error
};

class PhillipsDessouky {
 public:
  using Units = std::int64_t;

  // Keeps a reference to the budgets; pipeline, dag and table are read here. Throws
  // std::invalid_argument if the unit is so coarse that every group has a
  // single duration; the message names asked_unit_s (the user's unit, of
  // which a refining walk's is a fraction; 0: unit_time_s itself).
  PhillipsDessouky(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                   double unit_time_s, const SolverBudgets& budgets, double asked_unit_s = 0.0);
  PhillipsDessouky(const PhillipsDessouky&) = delete;
  PhillipsDessouky& operator=(const PhillipsDessouky&) = delete;

  // Steps until the minimum time (or a stop); returns why it stopped, and
  // throws std::logic_error on kInternalError. The log is closed when it
  // returns or throws, so readers on other threads (see Cursor) see the end.
  // tick(done, total) is called once per cut and may throw to stop.
  StopReason run(Pacer& pacer);
  StopReason run(const std::function<void(Units, Units)>& tick);
  // Closes the log without running: wakes readers that wait for a step
  // that will not come (a caller unwinding before or around run()).
  void close_log() { log_.close(); }
  StepStatus step();

  Index num_computations() const { return static_cast<Index>(duration_.size()); }
  Units min_units() const { return min_units_; }  // makespan with every duration shortest
  Units max_units() const { return max_units_; }  // ... longest: the first plan
  // Units the loop shortened the iteration by; plan u (0..units_done()) has
  // model time max_units() - u. Only for the thread running the loop, or
  // after it.
  Units units_done() const { return units_done_; }
  std::int64_t num_cuts() const { return static_cast<std::int64_t>(log_.num_runs()); }
  std::int64_t work() const { return work_ + paths_.work() + flow_.work(); }

  // Sequential access to the plans, one cursor per reader; readers may run
  // on other threads while the loop is still going, and then wait for it.
  // first_plan() gives plan 0 (every computation longest); has_next() says
  // whether another plan follows (waiting for the loop to take that step or
  // stop); advance() moves `durations` to the next plan, writing the
  // computations it changed to `changed`.
  struct Cursor {
    std::size_t run = 0;
    Units unit = 0;
    bool loaded = false;  // `current` holds run `run`
    StepLog::Run current;
  };
  void first_plan(std::vector<Units>& durations, Cursor& cursor) const;
  bool has_next(Cursor& cursor) const;
  void advance(Cursor& cursor, std::vector<Units>& durations, std::vector<Index>& changed) const;
  OptionIndex option_for(Index computation, Units d) const {
    return quant(ComputationId(computation)).option_for(d);
  }
  // The convex model's cost of one computation at duration d (effective joules).
  double model_cost(Index computation, Units d) const {
    return quant(ComputationId(computation)).cost(d);
  }
  OptionIndex option_at_least(Index computation, Units d) const {
    return quant(ComputationId(computation)).option_at_least(d);
  }

 private:
  const QuantisedGroup& quant(ComputationId i) const { return groups_[group_[i]]; }
  // Brings the flow bounds up to date with the durations and the critical
  // set: one sweep over the topological positions (see sync_network()).
  void sync_network();
  // sync_network()'s update of one position whose arcs change: its work
  // arc's bounds, its source and sink arcs, its dependencies.
  void change(Position position, Units makespan);
  void set_dependency(std::size_t edge, bool tight);
  // Applies `units` times the cut's direction to the cut computations.
  void apply_cut(Units units);
  void update_paths();

  const SolverBudgets& budgets_;
  IdVector<GroupId, QuantisedGroup> groups_;
  IdVector<ComputationId, GroupId> group_;  // per computation: its option group
  IdVector<ComputationId, Units> duration_;
  Units min_units_ = 0, max_units_ = 0, units_done_ = 0;
  double tolerance_ = 0.0;
  LongestPaths paths_;

  // The flow network over the whole DAG, numbered by topological position p
  // (LongestPaths' order, so that searches and sweeps walk memory forward):
  // s = 0, t = 1, a_p = 2 + 2p, b_p = 3 + 2p. Arcs of non-critical
  // computations and dependencies have bounds [0, 0]. Everything below is
  // indexed by position (a std::size_t in the sweeps), and dependencies by their index in
  // PathTimes::successor_positions().
  BoundedFlow flow_;
  std::vector<FlowArc> work_arc_, source_arc_, sink_arc_;  // per position (none() if absent)
  std::vector<FlowArc> dep_arc_;                           // per dependency
  std::vector<char> dep_tight_;                            // per dependency: its arc is open
  FlowArc return_arc_ = FlowArc::none();                   // t -> s
  // The critical positions (topological order; n slots, the first
  // num_critical_ in use), and per position the duration its work-arc
  // bounds were last set for, or kArcsClosed if its arcs were last set as
  // non-critical.
  std::vector<Position> critical_;
  std::size_t num_critical_ = 0;
  std::vector<Position> changing_;          // n slots: sync_network()'s positions to update
  static constexpr Units kArcsClosed = -1;  // durations are at least one unit (QuantisedGroup)
  std::vector<Units> bounds_duration_;
  // The cut: computations and direction (-1 shorten, +1 lengthen).
  std::vector<ComputationId> cut_;
  std::vector<std::int8_t> cut_direction_;
  std::vector<ComputationId> changed_;  // scratch for LongestPaths::update

  // Step log: per run, its units and its (computation, direction) pairs;
  // the scratch arrays gather one run's pairs.
  StepLog log_;
  std::vector<Index> run_computation_;
  std::vector<std::int8_t> run_direction_;
  std::int64_t work_ = 0;
};

}  // namespace perseus
