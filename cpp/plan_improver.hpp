// Improving one plan on measured times: slack reclamation, tightening and a
// local search.
//
// All three aim at the energy of an iteration that lasts a given deadline D
// (a pipeline that is done early waits, drawing blocking power, until the
// iteration ends), that is at the effective energy sum_i e'_i of the plan
// (evaluate.hpp), while the iteration time stays within D:
//   reclaim       moves computations that have slack to slower, cheaper
//                 options, greedily: most effective energy saved per second
//                 of slack first (or most saved first). Lazy greedy on a heap:
//                 scores only fall as slack is used up. It ends with no
//                 computation able to slow down, so after a change that
//                 frees slack only the computations whose times moved can
//                 gain: reclaim can be seeded with just those.
//   tighten       speeds up computations on paths longer than D, cheapest
//                 extra energy per second saved first (or per second of
//                 useful speed-up: a faster option that saves more than the
//                 path's excess is charged for the excess only; the local
//                 search uses that, the candidate chains the plain rate,
//                 which the benchmark corpus favours there), until T <= D. A node whose longest
//                 path fits D leaves the heap for good: paths only get
//                 shorter while tightening.
//   local_search  exchanges: speed up one or two computations on a longest
//                 path (one or more options), then reclaim what that frees;
//                 pushes: slow one computation to its steepest saving, then
//                 tighten elsewhere to meet D and reclaim; squeezes: tighten
//                 the whole plan below D, then reclaim; when all of these
//                 fail, wide pushes: each push again to every other slower
//                 option. A trial is kept when energy over D falls, and
//                 undone from a journal otherwise.
//
// The plan lives here, with its longest paths kept current incrementally
// (PathTimes): every move updates only the nodes whose times move. Costs: a
// full reclaim O(n + moves x region); a seeded reclaim and a local-search
// trial O(region + moves x region); assign() of a plan that differs in k
// computations O(n) for the comparison plus k's region. work() counts node
// and option visits, so budgets do not depend on the machine.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "options.hpp"
#include "path_times.hpp"
#include "pipeline.hpp"

namespace perseus {

enum class TightenOrder : std::uint8_t {
  kSecondSaved,   // least extra effective energy per second the option saves
  kUsefulSecond,  // ... per second of it that the paths through it need
};

// What local_search does with the budget left at a local optimum, on
// pipelines of at most kKickComputations computations (solver_options.hpp).
enum class Kicks : std::uint8_t {
  kNone,          // nothing: it returns
  kLocal,         // kicks: random moves of a few computations, then descent
  kWithRestarts,  // the same, every kKickRestartEvery-th from a random plan
};

enum class ReclaimOrder : std::uint8_t {
  kSavingPerSecond,  // most effective energy saved per second of slack used
  kSaving,           // most effective energy saved
};

class PlanImprover {
 public:
  // Keeps references: pipeline, dag and table must outlive it. The plan
  // starts with every computation at its fastest option.
  PlanImprover(const Pipeline& pipeline, const Dag& dag, const OptionTable& table);
  PlanImprover(const PlanImprover&) = delete;
  PlanImprover& operator=(const PlanImprover&) = delete;

  // Makes `choice` the current plan (choice[i] < options of i's group) and
  // the checkpoint.
  void assign(const OptionIndex* choice);
  // Changes one computation's option; commit() brings the times up to date
  // (changes can be batched). Precondition: option < options of i's group.
  void change(Index i, Index option) { set_option(i, option); }
  void commit();
  // The current plan becomes the one revert() returns to; revert() undoes
  // every change since (including what reclaim, tighten and the local
  // search did), in O(changes) instead of an O(n) assign. Like change(), it
  // leaves the times to commit(), so that a revert and the changes after it
  // cost one update.
  void checkpoint() { journal_.clear(); }
  void revert() { undo(0); }
  const std::vector<OptionIndex>& choice() const { return choice_; }
  // Current iteration time (s) and the energy of an iteration lasting
  // max(deadline_s, that time) (J).
  double makespan() const;
  double energy_at(double deadline_s) const;
  Evaluation evaluation() const { return {makespan(), energy_at(0.0)}; }
  // G * P_block: watts the whole pipeline draws while it waits.
  double pipeline_blocking_w() const { return blocking_w_; }

  // Slows computations down while T stays <= max(deadline_s, T); never
  // raises energy_at(deadline_s). The order matters little on the benchmark
  // corpus (the two orders' frontiers differ by under 0.001 %); saving per
  // second is the default.
  void reclaim(double deadline_s, ReclaimOrder order = ReclaimOrder::kSavingPerSecond);
  // The same, stopping once work() reaches max_work_end (the plan then
  // still meets the deadline, only less of its slack is used).
  void reclaim_until(double deadline_s, std::int64_t max_work_end);
  // Speeds computations up until T <= deadline_s; false if some path cannot
  // meet it even at its fastest options (the plan is then left as fast as the
  // greedy order got it).
  bool tighten(double deadline_s, TightenOrder order = TightenOrder::kSecondSaved);
  // Exchanges and squeezes (see above) until none helps or about max_work
  // work units are spent; T stays <= max(deadline_s, T).
  // With `kicks`, on pipelines of at most kKickComputations computations,
  // the budget left at a local optimum goes to kicks (random moves of a few
  // computations, or restarts, then descent, kept when cheaper; plan_improver.cpp).
  void local_search(double deadline_s, std::int64_t max_work, Kicks kicks = Kicks::kNone);

  std::int64_t work() const { return work_ + times_.work(); }
  // Whether work() < limit; polls first when due. A search that must stay
  // interruptible (a tailored plan, bindings) sets `poll`, which may throw
  // (SolveCancelled) and is called at least every `every_work` work units
  // at the local search's and search_deadline's loop tests, where the plan
  // is committed. Without a poll (the solve, which polls between
  // deadlines) this is the plain test, so plans do not depend on it.
  void set_poll(std::function<void()> poll, std::int64_t every_work) {
    poll_ = std::move(poll);
    poll_every_work_ = every_work;
    next_poll_work_ = work() + every_work;
  }
  bool within(std::int64_t limit) {
    const std::int64_t done = work();
    if (poll_ && done >= next_poll_work_) {
      next_poll_work_ = done + poll_every_work_;
      poll_();
    }
    return done < limit;
  }

 private:
  double time_of(Index i, Index option) const { return table_.time_s(group_[ix(i)], option); }
  double effective_of(Index i, Index option) const { return table_.effective_j(group_[ix(i)], option); }
  // Changes one computation's option, journalled.
  void set_option(Index i, Index option);
  // Undoes every change journalled since `mark` (a journal size); rollback
  // also commits.
  void undo(std::size_t mark);
  void rollback(std::size_t mark) {
    undo(mark);
    commit();
  }
  // Reclaims in one order; seeds: the computations that may have room (all
  // of them when null).
  void reclaim_seeded(double limit_s, ReclaimOrder order, const std::vector<Index>* seeds,
                      std::int64_t max_work_end = INT64_MAX);
  // The better of both orders (the local search's trials use it: on small,
  // coarse problems greedy orders trap each other).
  void reclaim_both(double limit_s, const std::vector<Index>* seeds);
  // Best slower option for i within its room; returns its score (<= 0: none).
  double best_move(Index i, double limit_s, ReclaimOrder order, Index& option);
  // Extra effective energy per second saved by i's next faster option.
  double speedup_cost(Index i) const;
  // Tightens without touching `frozen` (-1: none).
  bool tighten_to(double deadline_s, Index frozen, TightenOrder order);
  // Keeps the changes since `mark` if energy over deadline_s fell below
  // best_j (and T still meets it); otherwise rolls them back.
  bool keep_if_better(std::size_t mark, double deadline_s, double& best_j);

  const Dag& dag_;
  const OptionTable& table_;
  double blocking_w_;           // G * P_block
  std::vector<GroupId> group_;  // per computation
  // Per option of every group (flat; group g starts at first_option_[g]):
  // the slower option with the steepest effective saving per second.
  IdVector<GroupId, Index> first_option_;
  std::vector<Index> steepest_;
  std::vector<ComputationId> sinks_;

  std::vector<OptionIndex> choice_;
  std::vector<double> duration_;
  double effective_sum_ = 0.0;
  PathTimes<double> times_;
  std::vector<ComputationId> pending_;
  std::vector<char> is_pending_;
  // Journal of (computation, option it had) since the checkpoint.
  std::vector<std::pair<Index, OptionIndex>> journal_;

  struct Move {
    double score;
    Index computation;
    // A strict order: equal scores fall back to the computation, so the heap
    // and the sorts give the same plans with libstdc++ and libc++ (the
    // manylinux wheel is built with Zig's libc++).
    bool operator<(const Move& other) const {
      return score < other.score || (score == other.score && computation < other.computation);
    }
  };
  std::vector<Move> heap_, pushes_;
  std::vector<std::pair<Index, OptionIndex>> first_result_;  // reclaim_both's first order
  std::vector<Index> seeds_, critical_;
  std::int64_t work_ = 0;
  std::function<void()> poll_;
  std::int64_t poll_every_work_ = 0, next_poll_work_ = 0;
};

}  // namespace perseus
