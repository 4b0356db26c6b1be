// From min-cut steps to frontier plans: candidates, their improvement on
// measured times, and the choice of the plans worth keeping.
//
// Candidates (each recorded in a PlanLog):
//   step plans   every unit of the Phillips-Dessouky loop, its durations
//                mapped to the slowest measured options that fit; when
//                refining, reclaimed up to the step's model time (ceil
//                quantisation leaves slack on every computation);
//   fast end     the model's shortest time is above the all-fastest measured
//                time (every duration is rounded up), so deadlines from there
//                down to the all-fastest time, one unit apart, get two
//                candidates each: the last step's plan tightened to the
//                deadline (a chain: each deadline starts from the previous
//                one) and the all-fastest plan, both reclaimed;
//   local search at deadlines between frontier plans, from the best plan
//                that meets each, within a work budget (SolverBudgets).
// Selection keeps the plans whose effective energy E - G * P_block * T falls
// strictly as T grows: a plan that a faster one matches over its own length
// is dominated (a pipeline that is done early waits, drawing blocking power).
//
// Costs: a step plan costs an assign (O(n) compare plus the changed region)
// and a reclaim, O(n + moves x region); memory is O(changes) in the log.
#pragma once

#include <cstdint>
#include <vector>

#include "evaluate.hpp"
#include "pacer.hpp"
#include "phillips_dessouky.hpp"
#include "plan_improver.hpp"
#include "plan_log.hpp"
#include "solver_options.hpp"

namespace perseus {

// Records every step's plan (phase kReclaim when refining, kCandidates otherwise).
void collect_step_plans(PhillipsDessouky& steps, double unit_time_s, bool refine,
                        PlanImprover& improver, PlanLog& log, Pacer& pacer);

// Records the fast-end candidates between fastest_s (the all-fastest plan's
// time) and the last step's model time.
void collect_fast_end(PhillipsDessouky& steps, double unit_time_s, double fastest_s,
                      PlanImprover& improver, PlanLog& log, Pacer& pacer);

// Local search at the deadlines of the frontier plans `frontier` of `from`
// (their own times, from each plan), within max_work work units in all;
// records what it finds in `to`.
void search_at_plans(const PlanLog& from, const std::vector<std::size_t>& frontier,
                     std::int64_t max_work, PlanImprover& improver, PlanLog& to, Pacer& pacer);

// Indices of the plans worth keeping, fastest first: strictly increasing
// time, and effective energy (energy_j - blocking_w * time_s) falling by more
// than resolution_j from one kept plan to the next.
std::vector<std::size_t> frontier_of(const std::vector<double>& time_s,
                                     const std::vector<double>& energy_j, double blocking_w,
                                     double resolution_j);

}  // namespace perseus
