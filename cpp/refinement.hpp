// From min-cut steps to frontier plans: candidates, their improvement on
// measured times, and the choice of the plans worth keeping.
//
// Candidates (each recorded in a PlanLog):
//   step plans   sampled from the Phillips-Dessouky walk (Sampling): the
//                step's durations mapped to the slowest options that fit,
//                reclaimed when refining within the plan's own replayed time;
//   tight plans  from the same steps, when refining: durations rounded up to
//                the next option instead, then tightened to the model time
//                (cheapest speed-ups first) and reclaimed within the time
//                that leaves (see collect_chain for why). Reclamation from
//                below and tightening from above are both greedy and end in
//                different plans; on the measured GPT-3 profiles the tight
//                ones are what beats the reference near the slow end. The
//                chain carries over from one step to the next (a computation
//                is never slower than in its last plan), so a tight plan
//                costs a few moves, not a tightening from scratch;
//   fast end     deadlines from the all-fastest time up to the fastest step
//                plan, one user unit apart: the all-fastest plan reclaimed,
//                and the last step's plan tightened (a chain) and reclaimed;
//   plain plans  every unit's plan of the walk at the user's own unit,
//                unreclaimed: what refine=False returns. The finer walk is
//                another path whose sampled plans do not cover these, so
//                without them the refined frontier lost to the plain one at
//                some times (frontier.cpp runs that walk first);
//   local search at every frontier plan's time and on a grid over the
//                frontier's range: starts per deadline, nearest first, while
//                the deadline's share of the budget lasts: up to
//                kStartsPerSide frontier plans on each side (faster ones
//                reclaimed into it, slower ones tightened to it and
//                reclaimed) and the all-fastest plan reclaimed (while that
//                fits the deadline's share); then a local search from the
//                best, the work budget spread evenly. Deadlines run fastest
//                first until the budget is spent: beyond tiny pipelines that
//                is the fast part of the range, where the chains' plans are
//                weakest (elsewhere, searching spread deadlines instead found
//                nothing better on user 16 x 64 and lost up to 0.17 % at the
//                fast end).
// The two chains are independent: with threads to spare they run on threads
// of their own while the min-cut loop runs on the caller's (they follow it
// step by step), otherwise after it; each reports through a Ticker, which
// throws SolveCancelled to stop.
//
// Selection keeps the plans whose effective energy E - G * P_block * T falls
// strictly as T grows: a plan that a faster one matches over its own length
// is dominated (a pipeline that is done early waits, drawing blocking power).
//
// Costs: a candidate costs a revert and the step's changes (O(changes)), a
// reclaim O(n + moves x region) and for the tight chain a few tightening
// moves; memory is O(changes) in the logs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "evaluate.hpp"
#include "phillips_dessouky.hpp"
#include "plan_improver.hpp"
#include "plan_log.hpp"
#include "solver_options.hpp"

namespace perseus {

// Which step plans become candidates: one whenever the model's energy over
// its own time has moved by `energy_resolution` (a share) since the last
// candidate, or `max_spacing` units after it, and the last; the sampled
// units are multiples of `stride` (the finer quantum's divisor, so at most
// one per unit of the user's).
struct Sampling {
  std::int64_t stride = 1;
  double energy_resolution = 0.0;
  std::int64_t max_spacing = 1;
};

enum class Chain : std::uint8_t { kReclaimed, kTight };

// Called once per candidate with (done, total); may throw SolveCancelled.
using Ticker = std::function<void(std::int64_t, std::int64_t)>;

// Walks the step plans and records one chain's candidates. It may run on
// another thread while the min-cut loop is still taking steps: it waits for
// each step, and ends when the loop has stopped and every step is walked.
void collect_chain(const PhillipsDessouky& steps, Chain chain, double unit_time_s,
                   const Sampling& sampling, bool refine, PlanImprover& improver, PlanLog& log,
                   const Ticker& tick);

// Records the fast-end candidates, at deadlines from fastest_s (the
// all-fastest plan's time) up to first_step_s (the fastest step plan's), one
// spacing_s apart.
void collect_fast_end(const PhillipsDessouky& steps, double spacing_s, double fastest_s,
                      double first_step_s, PlanImprover& improver, PlanLog& log, const Ticker& tick);

// Which of the local search's deadlines a job takes: every parts-th one
// from `part`, so that jobs on several threads split the phase evenly and
// the result does not depend on their timing.
struct Share {
  std::size_t part = 0;
  std::size_t parts = 1;
};

// The local-search phase (see above) on a frontier's plans with their
// times, fastest first; the grid spreads max_grid deadlines
// evenly over the frontier's range, of which the job takes its share; stops
// when max_work is spent. Records into `log`.
void search_deadlines(const PlanRows& plans, const std::vector<double>& time_s, std::size_t max_grid,
                      std::int64_t max_work, Share share, PlanImprover& improver, PlanLog& log,
                      const Ticker& tick);

// Which starts search_deadline searches from: the cheapest one after the
// starts are fitted (the solve's phase, where a deadline's share is small),
// or, for a tailored plan, which has the budget, the cheapest one with all
// of it and then, with what that search leaves when it reaches a local
// optimum early, every other distinct start, each with an even share of
// the rest (on a coarse-clock 4 x 8 pipeline the search from the cheapest
// start stalled 0.14 % above the exact optimum, where one from another start
// reached 0.034 %; bench/results/small-pipeline-search-2026-12-07.txt).
// Both kEvery kinds then kick (Kicks, plan_improver.hpp); a tailored plan's
// kicks restart from random plans too (kKickRestartEvery), the hull pass's
// do not: at its few deadlines, with a fixed share each, restarts took the
// budget that kicks had used better (bench/results/restarts-2026-12-07.txt).
enum class StartSearch : std::uint8_t { kCheapest, kEvery, kEveryWithRestarts };

// One deadline of the local-search phase, also what Frontier.plan_for(...,
// tailored=True) runs: starts from the plans (times time_s, fastest first,
// read through row_at) nearest the deadline on both sides, at least the
// slowest one that meets it and the next slower one, more while the
// deadline's share of what is left of the budget lasts (up to `end`, split
// over deadlines_left), and the all-fastest plan (with `fastest_cost` given:
// only while the cost it stores, that of the last all-fastest start, fits
// the deadline's share; it is updated when the start runs; without it, its
// reclaim stops where the starts' half of the share ends); then a local
// search from the best start with its even share. Each start and an
// improved result are recorded into `log` when given. Returns the best
// energy over the deadline (infinity when no start met it) and leaves that
// plan in `best`.
double search_deadline(double deadline, const std::vector<double>& time_s,
                       const std::function<const OptionIndex*(std::size_t)>& row_at,
                       const OptionIndex* fastest, std::int64_t end, std::size_t deadlines_left,
                       PlanImprover& improver, PlanLog* log, std::vector<OptionIndex>& best,
                       std::int64_t* fastest_cost = nullptr,
                       StartSearch start_search = StartSearch::kCheapest);

// The hull pass's deadlines (SolverBudgets::hull_search_share), in
// increasing order: the times of the plans furthest above the lower convex
// hull of (time_s, energy_j) (fastest first, as a frontier), by more than
// kHullGapShare of their energy, at most max_count and no two within
// spacing_s of each other.
std::vector<double> hull_gap_deadlines(const std::vector<double>& time_s,
                                       const std::vector<double>& energy_j, double spacing_s,
                                       std::size_t max_count);

// Searches every parts-th of those deadlines from `part` with every start
// (StartSearch::kEvery), work_each work units each (a fixed share, so the
// plans do not depend on how jobs split them), recording into `log`.
void search_hull_gaps(const PlanRows& plans, const std::vector<double>& time_s,
                      const std::vector<double>& deadlines, std::int64_t work_each, Share share_of,
                      PlanImprover& improver, PlanLog& log, const Ticker& tick);

// Indices of the plans worth keeping, fastest first: strictly increasing
// time, and effective energy (energy_j - blocking_w * time_s) falling by more
// than resolution_j from one kept plan to the next.
std::vector<std::size_t> frontier_of(const std::vector<double>& time_s,
                                     const std::vector<double>& energy_j, double blocking_w,
                                     double resolution_j);

}  // namespace perseus
