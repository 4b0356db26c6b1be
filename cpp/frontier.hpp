// The iteration time-energy Pareto frontier of one training iteration.
//
// solve_frontier runs the phases in order (solver_options.hpp, Phase):
//   min cut      Phillips-Dessouky over quantised durations
//                (phillips_dessouky.hpp): one plan per unit of iteration time
//                from the cheapest plan down to the shortest model time;
//   candidates / reclamation
//                every step's plan on measured options, reclaimed when
//                refining, plus the fast end down to the all-fastest time
//                (refinement.hpp);
//   local search at the frontier plans' own times, within a work budget;
// then keeps the plans no faster plan matches over their length, replays
// each once more on measured times and returns them fastest first.
//
// Cost: O(cuts x critical subgraph) for the min cut, O(units x (n + moves x
// region)) for the candidates, the local search's budget; memory
// O(n + changes) during the solve plus kept plans x n while selecting; the
// result holds its plans as changes (PlanRows).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "options.hpp"
#include "pacer.hpp"
#include "pipeline.hpp"
#include "plan_log.hpp"
#include "solver_options.hpp"

namespace perseus {

struct FrontierResult {
  Index num_computations = 0;
  // Plans, fastest first: strictly increasing time, strictly decreasing
  // effective energy (energy - G * P_block * time); each plan's option per
  // computation, stored as changes (plan_log.hpp: dense rows of a large
  // refine=False frontier took 2 bytes x plans x computations, 300+ MB at
  // 16 x 512, on top of the clocks the caller builds from them).
  PlanRows choices{};
  std::vector<double> iteration_time_s;  // replayed on measured times
  std::vector<double> energy_j;          // replayed
  // The plan each one was improved from, replayed, over an iteration of this
  // plan's length (its energy plus blocking power for any difference).
  std::vector<double> energy_before_reclaim_j;
  Evaluation baseline{};            // every computation at its fastest option
  std::int64_t steps = 0;           // units of iteration time the min-cut loop took
  std::int64_t cuts = 0;            // minimum cuts it solved (a cut may take several units)
  double unit_time_s = 0.0;         // quantum the steps used (may be finer than asked)
  std::int64_t max_time_units = 0;  // quantised time of the cheapest plan
  std::int64_t min_time_units = 0;  // quantised all-fastest time
  StopReason stop_reason = StopReason::kMinimumTime;
  std::array<double, 4> phase_seconds{};  // wall time per Phase
  std::int64_t candidates = 0;            // plans considered before selection

  Index num_plans() const { return static_cast<Index>(choices.size()); }
};

// Throws std::invalid_argument if unit_time_s <= 0, the profile does not fit
// the pipeline, or the unit is so coarse that no computation has two distinct
// durations; SolveCancelled when a hook asks to stop.
FrontierResult solve_frontier(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              const SolverOptions& options);

}  // namespace perseus
