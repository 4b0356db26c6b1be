// From min-cut steps to frontier plans: candidates, their improvement on
// measured times, and the choice of the plans worth keeping.
//
// Candidates (each recorded in a PlanLog):
//   step plans   one per `stride` units of the Phillips-Dessouky loop (one per
//                unit of the user's, when the loop runs on a finer quantum),
//                and its last: durations mapped to the slowest options that
//                fit; when refining, reclaimed up to the step's model time or
//                the plan's own, whichever is later;
//   tight plans  when refining, also from every sampled step: durations
//                rounded up to the next option instead, then tightened to the
//                step's model time (cheapest speed-ups first) and reclaimed.
//                Greedy reclamation from below and tightening from above end
//                in different plans; on the measured GPT-3 profiles the tight
//                ones are what beats the reference near the slow end. The
//                tight chain carries over from one step to the next (a
//                computation is never slower than in the chain's last plan),
//                so each costs a few moves, not a tightening from scratch;
//   fast end     deadlines from the all-fastest time up to the step plans'
//                fastest, one user unit apart, get two candidates each: the
//                fastest step plan tightened to the deadline and the
//                all-fastest plan, both reclaimed;
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

// Records the step plans (phase kReclaim when refining, kCandidates otherwise).
// `tight` (another improver, or null) runs the tight chain.
void collect_step_plans(PhillipsDessouky& steps, double unit_time_s, std::int64_t stride,
                        bool refine, PlanImprover& improver, PlanImprover* tight, PlanLog& log,
                        Pacer& pacer);

// Records the fast-end candidates at deadlines from fastest_s (the
// all-fastest plan's time) up to below the fastest candidate in `log`, one
// spacing_s apart.
void collect_fast_end(PhillipsDessouky& steps, double spacing_s, double fastest_s,
                      PlanImprover& improver, PlanLog& log, Pacer& pacer);

// Deadlines inside the gaps of a frontier: where two neighbouring plans of
// `frontier` (indices into `from`, fastest first) are more than spacing_s
// apart, deadlines one spacing_s apart in between get two candidates each:
// the faster plan reclaimed up to the deadline, and the slower one tightened
// to it and reclaimed. With max_work > 0, the better start then gets a local
// search, the budget spread evenly over the deadlines. Records into `to`.
void fill_gaps(const PlanLog& from, const std::vector<std::size_t>& frontier, double spacing_s,
               std::int64_t max_work, PlanImprover& improver, PlanLog& to, Pacer& pacer);

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
