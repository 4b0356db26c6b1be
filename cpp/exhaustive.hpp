// Every plan of a tiny pipeline, tried: the exact frontier where that is cheap.
//
// A pipeline whose computations have k_i useful options each has prod k_i
// plans. On tiny pipelines with coarse clock tables the best plan at a
// deadline can differ from what the min-cut walk and the local search find
// in half of its computations (2 stages x 3 microbatches, 3 clocks: 7 of 12,
// 0.51 % dearer than the exact optimum, out of reach of moves of one or two
// computations). Where replaying every plan costs at most
// SolverBudgets::exhaustive_max_work work units (one unit per node and edge
// of a replay), every plan is replayed and the Pareto plans are recorded:
// the frontier is then exact, and the local search has nothing to find.
// Costs: the replays, O(plans x (nodes + edges)); memory O(Pareto plans).
#pragma once

#include <cstdint>

#include "dag.hpp"
#include "options.hpp"
#include "pipeline.hpp"
#include "plan_log.hpp"
#include "refinement.hpp"

namespace perseus {

// How many plans the pipeline has, or -1 when replaying them all would cost
// more than max_work work units.
std::int64_t affordable_plan_count(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                                   double max_work);

// Replays every plan and records the Pareto ones (no other plan is as fast
// and no dearer in effective energy) into `log`, fastest first. Calls
// tick(done, total) every few thousand plans (it may throw SolveCancelled).
// Precondition: affordable_plan_count() said how many there are.
void record_every_pareto_plan(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
                              std::int64_t plan_count, PlanLog& log, const Ticker& tick);

}  // namespace perseus
