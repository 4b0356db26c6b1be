// The iteration time-energy Pareto frontier of one training iteration.
//
// Algorithm: Phillips & Dessouky, "Solving the project time/cost tradeoff
// problem using the minimal cut concept" (Management Science, 1977), as used
// by Perseus (Chung et al., SOSP '24). Time is quantised in units of
// `unit_time`; every computation's Pareto options become a convex cost curve
// over integer durations (QuantisedGroup). Starting from every computation at
// its cheapest (longest) duration, each step
//   1. finds the critical subgraph (zero total float) of the activity-on-arc
//      DAG: computation i is the arc a_i -> b_i, a dependency u -> v the arc
//      b_u -> a_v, plus arcs from the source and to the sink;
//   2. gives each critical arc flow bounds: lower = refund for lengthening by
//      one unit, upper = cost of shortening by one unit (infinite where a
//      computation cannot shrink, and on dependency arcs);
//   3. finds a minimum cut under these bounds: a feasible flow (super source
//      and sink carry the lower bounds, with an infinite sink -> source arc),
//      then a maximum flow from source to sink;
//   4. shortens forward cut arcs and lengthens backward cut arcs by one unit,
//      which shortens the iteration by one unit at the least extra cost.
// It stops when the cut is infinite: the minimum iteration time is reached.
// Steps cost O(max-flow) each; all working arrays are allocated once.
//
// Each step's durations map back to measured options (the slowest option that
// fits the duration). Every plan is then replayed on measured times and, when
// refining, improved there: slack reclamation up to the plan's model time,
// tightening of the last plan down to the all-fastest time, and a bounded
// local search at deadlines one quantum apart (Evaluator). Plans are compared
// over a common iteration length (effective energy, see pareto_order in
// frontier.cpp); dominated ones are dropped and about kMaxPlans are kept.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "options.hpp"
#include "pipeline.hpp"

namespace perseus {

// Raised when the progress callback asks to stop.
class SolveCancelled : public std::runtime_error {
 public:
  SolveCancelled() : std::runtime_error("frontier solve cancelled") {}
};

struct FrontierResult {
  Index num_computations = 0;
  // Plans, fastest first: strictly increasing time, strictly decreasing
  // effective energy (energy - G * P_block * time; see pareto_order).
  std::vector<OptionIndex> choices;             // [num_plans * num_computations]
  std::vector<double> iteration_time_s;         // replayed on measured times
  std::vector<double> energy_j;                 // replayed, after reclamation
  // The unrefined plan it came from, replayed, over an iteration of this
  // plan's length (its energy plus blocking power for any difference).
  std::vector<double> energy_before_reclaim_j;
  Evaluation baseline{};                        // every computation at its fastest option
  std::int64_t steps = 0;                       // min-cut steps run
  double unit_time_s = 0.0;                     // quantum the steps used (may be finer than asked)
  std::int64_t max_time_units = 0;              // quantised time of the cheapest plan
  std::int64_t min_time_units = 0;              // quantised all-fastest time

  Index num_plans() const {
    return num_computations == 0 ? 0
                                 : static_cast<Index>(choices.size() / static_cast<std::size_t>(num_computations));
  }
};

struct SolverOptions {
  double unit_time_s = 1e-3;
  double blocking_power_w = 0.0;
  // Improve the plans on measured times (slack reclamation, tightening near
  // the fastest time, local search at grid deadlines). false gives the plain
  // Phillips-Dessouky plans, replayed as they are (for comparisons).
  bool refine = true;
  // Called now and then with (steps done, steps expected); return false to
  // cancel (the solve throws SolveCancelled).
  std::function<bool(std::int64_t, std::int64_t)> progress;
};

// Throws std::invalid_argument if unit_time_s <= 0, blocking power < 0, or
// the unit is so coarse that no computation has two distinct durations.
FrontierResult solve_frontier(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              const SolverOptions& options);

}  // namespace perseus
