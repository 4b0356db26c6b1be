// Where a whole solve stands, as one fraction of its wall time, for progress
// bars and ETAs.
//
// A solve runs in parts on the caller's thread, in this order; a part whose
// job runs on a thread of its own (solver_options.hpp, threads) shows up on
// the caller's thread only as the wait for what it has left. Each part has a
// share of the wall time, which depends on how many threads the solve has,
// and a shape: how its reported done / total maps to its share of time.
// The walks report units of iteration time, and their early units are cheap
// (few computations are critical while the plans are slow), so their time
// follows kWalkTimeCurve; the other parts are about linear in their counts.
//
// The shares were measured on 2 cores (4 threads there share 2 cores; more
// cores may shorten the chains' leftovers) on user-scale shapes of bench/
// (user-h100-16u 16 x 128 and 16 x 256, GPipe 16 x 128, user-h200-32u V=2
// 16 x 128: 4,096-8,192 computations, 4-22 s), where an ETA matters. The
// local search's share is predicted per solve instead (predict_search()):
// its budget is known before the solve starts, and on small pipelines it is
// nearly all of the solve (the 4-stage example at 8 microbatches: 1.75 s of
// 1.75), on user-scale ones 3-8 %. bench/progress_eta.py reports how
// far the ETA is off (bench/results/progress-eta-2026-12-07.txt). Before
// this, fixed per-phase weights on each job's own count (0.35 min cut, 0.45
// reclamation, 0.2 local search) put the ETA up to 1.64x the solve's wall
// time off near its end, and with threads=1 held the bar still for up to
// 57 % of a solve.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace perseus {

enum class SolvePart : std::uint8_t {
  kPlainWalk,       // refine: the walk at the user's unit, before the loop (threads < 4)
  kFineWalk,        // refine: the min-cut loop on the finer quantum
  kPlainWalkRest,   // refine: what the plain walk on its own thread has left (threads >= 4)
  kReclaimedChain,  // refine: the reclaimed chain (what it has left, threads >= 2)
  kTightChain,      // refine: the tight chain (what it has left, threads >= 3)
  kFastEnd,         // refine: plans faster than the loop's fastest
  kPlainPlans,      // refine: the plain plans
  kUnrefinedWalk,   // refine=False: the min-cut loop
  kUnrefinedPlans,  // refine=False: its plans, replayed
  kSelection,       // the walk's plans replayed and the Pareto ones kept
  kLocalSearch,     // refine: the local search rounds (or every plan of a tiny pipeline)
};
inline constexpr std::size_t kSolveParts = 11;

// Shares of the wall time, by part (SolvePart order) and thread count (1, 2,
// 3, 4 or more); relative: a solve divides by the sum over the parts it runs. With
// threads the chains and the plain walk overlap the loop, which then takes
// most of the time (80-89 % measured at 4 threads); with one thread they run
// after it (the two chains 27-45 %, the plain walk 10-15 %).
inline constexpr std::array<std::array<double, 4>, kSolveParts> kPartShares{{
    {0.12, 0.16, 0.18, 0.0},       // plain walk
    {0.37, 0.50, 0.67, 0.84},      // fine walk
    {0.0, 0.0, 0.0, 0.005},        // plain walk rest
    {0.16, 0.02, 0.01, 0.01},      // reclaimed chain
    {0.22, 0.20, 0.01, 0.01},      // tight chain
    {0.005, 0.005, 0.005, 0.005},  // fast end
    {0.03, 0.045, 0.05, 0.045},    // plain plans
    {0.65, 0.65, 0.65, 0.65},      // unrefined walk
    {0.15, 0.15, 0.15, 0.15},      // unrefined plans
    {0.025, 0.03, 0.035, 0.035},   // selection (refine=False: 0.2, below)
    {0.055, 0.04, 0.04, 0.06},     // local search (a solve predicts it instead)
}};
// refine=False's selection, against its walk's 0.65 (user 16 x 128 and 16 x 256:
// walk 65 %, plans 15 %, selection 20 %).
inline constexpr double kUnrefinedSelectionShare = 0.2;

// predict_search()'s model, in seconds on the 2-core machine the shares
// were measured on (only their ratio matters): the local search runs about
// kSearchWorkPerSecond of its work units a second (6e7-1e8 measured from 64
// to 4,096 computations), every plan of a tiny pipeline about
// kReplayWorkPerSecond (solver_options.hpp, exhaustive_max_work); everything before it takes about
// kRestSeconds[threads] x computations^kRestExponent x (median useful
// options / kRestOptions)^kRestOptionsExponent (1.5e-6-3e-6 x n^1.75 from
// SOSP 8 x 96 to 16 x 256 on 60-80-clock tables; 8-clock tables walk about
// 4x faster, 20-clock ones 2x).
inline constexpr double kSearchWorkPerSecond = 8e7;
inline constexpr double kReplayWorkPerSecond = 6e8;
inline constexpr std::array<double, 4> kRestSeconds{2.5e-6, 2.2e-6, 1.8e-6, 1.6e-6};
inline constexpr double kRestExponent = 1.75;
inline constexpr double kRestOptions = 60.0;
inline constexpr double kRestOptionsExponent = 0.6;

// A walk's share of its time against its share of units: the median over
// the four cases above at 1-4 threads (within 0.05-0.1 of each case).
inline constexpr std::array<std::pair<double, double>, 11> kWalkTimeCurve{{
    {0.0, 0.0},
    {0.3, 0.03},
    {0.4, 0.075},
    {0.5, 0.19},
    {0.6, 0.28},
    {0.7, 0.38},
    {0.8, 0.515},
    {0.9, 0.685},
    {0.95, 0.8},
    {0.98, 0.905},
    {1.0, 1.0},
}};

// Tracks the part the caller's thread is in and turns a report's done /
// total into the fraction of the whole solve.
class SolveParts {
 public:
  SolveParts(bool refine, int threads);
  // The caller's thread starts `part`; parts it skips count as done.
  void enter(SolvePart part);
  // `part` will not run (no plain walk where the loop's quantum is the
  // user's unit): its share goes to the others. Precondition: not entered.
  void skip(SolvePart part);
  // Sets the local search's share from a prediction of its seconds and of
  // everything before it (the model above); before the first report.
  void predict_search(double search_s, double rest_s);
  // The fraction of the solve once the current part is done / total of the
  // way (0 <= done, total >= 1), in [0, 1].
  double fraction(std::int64_t done, std::int64_t total) const;

 private:
  std::array<double, kSolveParts> share_{};
  std::size_t current_ = 0;
  bool entered_ = false;       // whether enter() was called yet
  double search_part_ = -1.0;  // predict_search()'s share of the solve; < 0: none
};

// The rest's seconds in predict_search()'s model.
double predicted_rest_s(double computations, double median_options, int threads);

}  // namespace perseus
