// Everything a frontier solve can be told, in one place: the problem's
// parameters, the work budgets of the refinement (each with its unit, its
// default and why), and the hooks for progress and cancellation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace perseus {

// Phases of a solve, in the order they run; progress reports name them.
enum class Phase : std::uint8_t {
  kMinCut,       // Phillips-Dessouky steps over quantised durations
  kCandidates,   // every step's plan mapped to measured options and replayed
  kReclaim,      // slack reclamation of every candidate on measured times
  kLocalSearch,  // exchanges at deadlines between the candidates' times
};
const char* phase_name(Phase phase);

// Why the min-cut loop stopped.
enum class StopReason : std::uint8_t {
  kMinimumTime,     // the cut became infinite: some critical path has every
                    // computation at its shortest duration (the normal end)
  kNoProgress,      // a finite cut could not shorten the iteration (flow
                    // tolerances on nearly flat costs); the frontier ends there
  kInfeasibleFlow,  // no flow met the lower bounds: costs too large or too
                    // flat to resolve in doubles; the frontier ends there
};
const char* stop_reason_name(StopReason reason);

// Work budgets. A work unit is one node, edge or option visit (see
// PlanImprover::work and PhillipsDessouky::work): machine-independent, so the plans do not depend on
// the machine or its load, and the budgets are the same in tests and benchmarks.
struct SolverBudgets {
  // Take a whole run of equal min-cut steps at once (Fulkerson's parametric
  // step): the same cut stays optimal while every cut computation stays on
  // one linear piece of its cost curve and no other path becomes critical.
  // false takes one unit per step (the textbook loop, for comparisons).
  bool multi_unit_steps = true;
  // Refining runs the min-cut loop on a finer quantum than the unit asked
  // for: the user's unit divided by an integer, so that the typical gap
  // between neighbouring options (the median over all groups) spans at least
  // units_per_option_gap quanta. A minimum cut can take a whole run of units
  // at once, so the cost grows with the cuts, which hardly grow with the
  // divisor, not with the units; what a coarse quantum costs is plans (at
  // 1 ms, the model cannot tell apart options 0.5 ms apart, nor place the
  // fastest plans, whose time budget is a few ms). Bounded by
  // max_unit_divisor, and so that the loop spans at most max_solver_units.
  // Candidates are still taken once per unit of the user's (see refinement.hpp).
  double units_per_option_gap = 40.0;
  double max_unit_divisor = 64.0;
  double max_solver_units = 4e6;
  // Which min-cut steps become candidate plans: one whenever the model's
  // energy over its own time has moved by this share since the last one
  // (so steep parts of the frontier, near the fastest time, get more), and
  // at least one every candidate_max_spacing_units units of the user's.
  // Together with the tight chain's candidates in between, consecutive
  // plans then differ by about 0.01 % of the energy or less, the resolution
  // the frontier is judged at (on the corpus, 1e-4 and 2e-4 give the same
  // frontier to within 0.003 %).
  double candidate_energy_resolution = 2e-4;
  std::int64_t candidate_max_spacing_units = 8;
  // The tight chain (refinement.hpp) samples this many times more sparsely:
  // it matters where the frontier is flat, near the slow end, and costs
  // twice what the other chain does per candidate.
  std::int64_t tight_chain_coarsening = 2;
  // Local search at every frontier plan's time and at most
  // local_search_max_grid more deadlines spread over the frontier's range,
  // fastest first until this budget is spent (beyond tiny pipelines it
  // reaches the fast part of the range only, where the chains' plans are
  // weakest; refinement.hpp): work units per DAG element (node or edge)
  // for the whole frontier, at most the cap, but at least a floor (and
  // above the cap when that is more). The floor is local_search_work_floor
  // at local_search_floor_computations computations; above that it falls
  // as (computations / that) to the power -local_search_floor_exponent,
  // below it as (computations / that) to the power
  // local_search_floor_exponent_below. Why: near 64 computations the
  // search is cheap and pays off most (the convex model's plans are far
  // from the discrete optimum there, most of all with coarse clock tables),
  // and one deadline's search needs about 1e5-3e5 work units to reach its
  // local optimum. On the corpus's 8-clock 4 x 8 H100 case (64
  // computations) a floor of 4.5e7 left plans 0.21 % above the exact
  // optimum (HiGHS), 9e7 0.15 %, 1.8e8 0.06 %, for 0.5, 1.0 and 2.0 CPU s
  // a solve; SOSP '24 GPT-3 4 x 8 (38 clocks) gains too (its plans' worst
  // loss to a longer search from them 0.10 -> 0.08 %, mean 0.010 ->
  // 0.006 %; bench/results/small-pipeline-search-2026-12-07.txt). The cube
  // keeps 8 x 12 (192 computations) near its former 5e6 (6.7e6), where the
  // lowtime ratio is measured; larger pipelines, whose candidates are
  // dense, get their per-element share. Smaller ones have fewer plans and
  // shorter searches: the linear fall-off gives bench/quality.py's 4 x 6
  // case (48 computations) 1.35e8 where it needed 8e7 (0.126 % above the
  // exact optimum as GPipe at 4.5e7, 0.081 % at 8e7), and the 36-computation
  // 6-clock corpus case about the 1e8 it had.
  double local_search_work_per_element = 2e3;
  double local_search_work_floor = 1.8e8;
  double local_search_floor_computations = 64;
  double local_search_floor_exponent = 3.0;
  double local_search_floor_exponent_below = 1.0;
  // Coarse clock tables: where the median group has fewer useful options
  // than local_search_coarse_options, the per-element share grows as
  // (local_search_coarse_options / that median) cubed, up to the cap. The
  // convex model spans whole option gaps there, its plans sit further from
  // the discrete optimum, and the walk that makes them is cheap (few
  // breakpoints). On 4 x 32 microbatches of the corpus's 8-clock H100
  // profile (256 computations) the frontier lost to lowtime by up to 0.35 %
  // at 21 of 471 of its plans with 2e3 per element, at 8 with 2e4, at none
  // with 5.4e4 ((24 / 8)^3 x 2e3; 0.41 CPU s a solve, lowtime 10 s).
  // Tables of 29-30 (SOSP '24) and 44-64 (synthetic A100/H100) useful
  // options per group are unaffected.
  double local_search_coarse_options = 24.0;
  double local_search_work_cap = 5e7;
  std::int64_t local_search_max_grid = 512;
  // Rounds of it, each from the frontier the last one left (the budget is
  // shared): a structure found at one deadline spreads to its neighbours.
  // Three rather than two: on bench/quality.py's 16 cases the worst gap to
  // the exact optimum fell from 0.151 % to 0.021 % (mean 0.003 -> 0.0004 %).
  std::int64_t local_search_rounds = 3;
  // After the rounds, this share of the local-search budget goes to a few
  // deadlines where the frontier bends the wrong way: the plans that sit
  // furthest above its lower convex hull (by more than kHullGapShare), at
  // most hull_search_deadlines of them and at most one per unit of the
  // user's. Each gets an even part of the share and a search from every
  // start (StartSearch::kEvery, as a tailored plan), where the rounds
  // search from the cheapest start only. A greedy search settles early at
  // such deadlines: on the corpus's 8-clock 4 x 8 H100 case the plan at
  // 0.4527 s was 0.14 % above the exact optimum and 0.12 % above the hull
  // (the fourth plan furthest above it). A search from every start needs
  // about hull_search_work_per_computation work units per computation
  // there (1.7e6 at 64 computations took that plan to 0.071 %, 1.1e6 left
  // it at 0.136 %); where the share cannot pay for one such search (from
  // about 150 computations up: the budget per computation falls as the
  // pipeline grows), there is no pass and the rounds keep the share; where
  // the pass could pay but no plan is that far above the hull, the share
  // goes to one more round.
  double hull_search_share = 0.15;
  std::int64_t hull_search_deadlines = 16;
  double hull_search_work_per_computation = 2.5e4;
  // Plans whose energy over any common iteration length differs from a
  // faster kept plan by less than this share are dropped (relative, so 1e-6
  // is a millionth of the iteration's energy): they cannot matter to a user,
  // and they bound the frontier's size.
  double plan_energy_resolution = 1e-6;
  // A pipeline whose every plan can be replayed for at most this many work
  // units (one per node and edge of a replay) gets them all replayed and
  // keeps the Pareto ones: an exact frontier, and no local search
  // (exhaustive.hpp). Why: on tiny pipelines with coarse clock tables the
  // best plan can differ from the walk's and the search's in half of its
  // computations; on 2 stages x 3 microbatches with 3 clocks (3^12 plans,
  // 1.4e7 units) the frontier was 0.51 % above the exact optimum at one
  // deadline. Replays run at about 6e8 units a second on one core: the cap
  // is about 0.17 s, less than the local search it replaces costs at those
  // sizes (0.10 s CPU against 0.025 s there;
  // bench/results/exhaustive-2026-12-07.txt). 0 turns it off.
  double exhaustive_max_work = 1e8;
};

// Progress: called with (phase, done, total, fraction) at most once per
// progress_period_s, the period measured from the previous call's return;
// done / total is how far the current job of the phase is, fraction an
// estimate of how far the whole solve is (solve_parts.hpp; it never falls);
// return false to cancel. interrupted: polled at least every
// interrupt_poll_s; return true to cancel. Either hook may be empty. A
// cancelled solve throws SolveCancelled.
using ProgressHook = std::function<bool(Phase, std::int64_t, std::int64_t, double)>;
using InterruptHook = std::function<bool()>;

struct SolverOptions {
  double unit_time_s = 1e-3;
  // Improve the plans on measured times (reclamation, local search). false
  // gives the plain Phillips-Dessouky plans, replayed as they are.
  bool refine = true;
  SolverBudgets budgets{};
  ProgressHook progress;
  double progress_period_s = 0.1;
  InterruptHook interrupted;
  double interrupt_poll_s = 0.05;
  // Threads a solve may use, the caller's included; 0 picks kDefaultThreads.
  // The independent jobs of a refining solve are the min-cut loop, the plain
  // walk at the user's unit, the two candidate chains (refinement.hpp) and
  // the second half of each local-search round: with 4 threads all of them
  // overlap, with fewer the rest run on the caller's thread in turn. The
  // default does not shrink to the machine's core count: the chains follow
  // the loop and mostly wait for its steps, so on 2 cores they cost thread
  // switches, not CPU, and running them afterwards would only lengthen the
  // wall time (before threads= existed, a solve always ran 3). The plans do
  // not depend on the count (each job has its own improver, log and
  // budget), only wall time does; 1 suits a caller that runs many solves
  // side by side. refine=False has one job and uses one thread.
  static constexpr int kDefaultThreads = 4;
  // A solve has at most four independent jobs, so any count from 4 up runs
  // the same; the cap only catches a count that is a mistake (a byte count,
  // a negative number wrapped around).
  static constexpr int kMaxThreads = 1024;
  int threads = 0;
};

// The thread count options.threads resolves to (at least 1).
int solver_threads(const SolverOptions& options);

// The local search's move set and tolerances. Unlike the budgets these are
// not options: they fix which moves and comparisons exist, so a change is a
// change of algorithm (checked on bench/quality.py), not of effort.
namespace local_search_moves {
// Relative squeezes below a deadline (PlanImprover::improve): they move many
// computations at once, where single exchanges stall.
inline constexpr double kSqueezes[] = {0.001, 0.003, 0.01, 0.03};
// Bigger single jumps, in options: one computation much faster, its time
// spent elsewhere.
inline constexpr std::int32_t kJumps[] = {1, 2, 4, 8};
// Pair exchanges are tried among this many of the cheapest critical computations.
inline constexpr std::size_t kPairCandidates = 16;
// Frontier plans tried as starts on each side of a deadline (search_deadlines).
inline constexpr std::size_t kStartsPerSide = 8;
// A move counts as an improvement only when it saves more than this share of
// the energy: replays sum in a different order after a move, and last-bit
// noise must not look like progress (or loop forever).
inline constexpr double kImprovementShare = 1e-12;
// A computation counts as critical (on a longest path) when the longest path
// through it falls short of the makespan by at most this share of the
// deadline: replayed times carry the same last-bit noise.
inline constexpr double kCriticalShare = 1e-9;
// The hull pass (SolverBudgets::hull_search_share) searches only plans more
// than this share of their energy above the frontier's lower convex hull:
// the resolution the frontier is judged at (0.01 %).
inline constexpr double kHullGapShare = 1e-4;
// Kicks (PlanImprover::local_search) on pipelines of at most this many
// computations, where a local optimum can sit several computations away
// from a better plan: up to kKicks per search, each moving kKickMinMoves to
// kKickMaxMoves computations by one or two options, within the search's
// budget. Only searches from every start use them (tailored plans and the
// hull pass, StartSearch::kEvery), and only with what every start left:
// in the rounds, or in place of the other starts, they spent budget those
// had used better (two suite cases of bench/quality.py up to 0.05 %
// dearer). A search stops kicking after kKicksWithoutGain kicks in a row
// that found nothing cheaper, or kKicks in all, or at the end of its budget.
// With at most 64 kicks of 2-6 moves, tailored plans were 0.007 % above the
// exact optimum on average and 0.368 % at worst (bench/quality.py, 197
// deadlines); with these values 0.000 % and 0.007 %, as with no limit but
// the budget, at a tenth of that one's time on the tiny pipelines where
// every kick fails (bench/results/kicks-budget-2026-12-07.txt).
inline constexpr std::int32_t kKickComputations = 64;
inline constexpr std::int64_t kKicks = 4096;
inline constexpr std::int64_t kKicksWithoutGain = 512;
inline constexpr std::uint64_t kKickMinMoves = 2;
inline constexpr std::uint64_t kKickMaxMoves = 10;
// Every kKickRestartEvery-th kick (the first included) is a restart instead:
// every computation at a random option, then the deadline met again,
// reclaimed and descended, kept only if cheaper, as a kick. On GPipe the
// best plan can differ from the search's in half of its computations (15 of
// 32, 0.350 % dearer: bench/data/review/ 4s6c-4x4-150w-gpipe), beyond any
// kick of a few moves; a restart reaches other basins. On the review's 17
// profiles at their deadlines, tailored plans exact at 16 (15 without
// restarts), worst 0.296 % (0.350 %); restarts on every kick: worst 0.131 %
// but exact at only 13, every 2nd: 15 (bench/results/restarts-2026-12-07.txt).
// Tailored plans only (StartSearch::kEveryWithRestarts): in the hull pass
// they made the frontier dearer at one deadline each of bench/quality.py's
// 1F1B and GPipe suites (0.57 % and 0.12 %).
inline constexpr std::int64_t kKickRestartEvery = 4;
}  // namespace local_search_moves

// The local search's work budget for a whole solve of a DAG with this many
// computations and elements (computations + dependency edges): the
// per-element share (larger for coarse clock tables) up to the cap, or the
// floor where that is more (see SolverBudgets above).
// median_options: the median group's count of useful options.
double local_search_budget(double computations, double elements, double median_options,
                           const SolverBudgets& budgets);

// Throws std::invalid_argument naming the first field of options.budgets
// outside its range (non-finite, negative, or so large that a count
// overflows or a loop cannot end), and for hook periods that are not seconds
// in 0..1e9. Problem::solve calls it before anything else.
void check_options(const SolverOptions& options);

}  // namespace perseus
