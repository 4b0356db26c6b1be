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
//                 scores only fall as slack is used up.
//   tighten       speeds up computations on paths longer than D, cheapest
//                 extra energy per second saved first, until T <= D. A node
//                 whose longest path fits D leaves the heap for good: paths
//                 only get shorter while tightening.
//   local_search  exchanges: speed up one computation on a longest path (by
//                 one or more options), or squeeze the whole plan below D,
//                 then reclaim; a trial is kept when energy over D falls.
//
// The plan lives here, with its longest paths kept current incrementally
// (PathTimes): every move updates only the nodes whose times move, and
// assign() of a plan that differs in k computations costs O(k's region) plus
// one O(n) comparison. Costs: reclaim O(n + moves x region), tighten
// O(moves x (log n + region)), a local-search trial O(n + region). work()
// counts node and option visits, so budgets do not depend on the machine.
#pragma once

#include <cstdint>
#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "options.hpp"
#include "path_times.hpp"
#include "pipeline.hpp"

namespace perseus {

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

  // Makes `choice` the current plan (choice[i] < options of i's group).
  void assign(const OptionIndex* choice);
  const std::vector<OptionIndex>& choice() const { return choice_; }
  // Current iteration time (s) and the energy of an iteration lasting
  // max(deadline_s, that time) (J).
  double makespan() const;
  double energy_at(double deadline_s) const;
  Evaluation evaluation() const { return {makespan(), energy_at(0.0)}; }
  // G * P_block: watts the whole pipeline draws while it waits.
  double pipeline_blocking_w() const { return blocking_w_; }

  // Slows computations down while T stays <= max(deadline_s, T); never
  // raises energy_at(deadline_s).
  void reclaim(double deadline_s, ReclaimOrder order);
  // The better of both reclaim orders (greedy orders can trap each other).
  void reclaim_best(double deadline_s);
  // Speeds computations up until T <= deadline_s; false if some path cannot
  // meet it even at its fastest options (the plan is then left as fast as the
  // greedy order got it).
  bool tighten(double deadline_s);
  // Exchanges and squeezes (see above) until none helps or about max_work
  // work units are spent; T stays <= max(deadline_s, T).
  void local_search(double deadline_s, std::int64_t max_work);

  std::int64_t work() const { return work_ + times_.work(); }

 private:
  double time_of(Index i, Index option) const { return table_.time_s(group_[ix(i)], option); }
  double effective_of(Index i, Index option) const {
    return table_.effective_j(group_[ix(i)], option);
  }
  // Changes one computation's option; commit() brings the times up to date.
  void set_option(Index i, Index option);
  void commit();
  // Best slower option for i within its room; returns its score (<= 0: none).
  double best_move(Index i, double deadline_s, ReclaimOrder order, Index& option);
  // Keeps the current plan if it beats `best_j` over deadline_s; otherwise
  // goes back to saved_. Returns whether it was kept.
  bool keep_if_better(double deadline_s, double& best_j);

  const Dag& dag_;
  const OptionTable& table_;
  double blocking_w_;  // G * P_block
  std::vector<Index> group_;
  // Per option of every group (flat; group g starts at first_option_[g]):
  // the slower option with the steepest effective saving per second.
  std::vector<Index> first_option_, steepest_;
  std::vector<Index> sinks_;

  std::vector<OptionIndex> choice_;
  std::vector<double> duration_;
  double effective_sum_ = 0.0;
  PathTimes<double> times_;
  std::vector<Index> pending_;
  std::vector<char> is_pending_;

  struct Move {
    double score;
    Index computation;
    bool operator<(const Move& other) const { return score < other.score; }
  };
  std::vector<Move> heap_;
  // Plan copies: a local-search trial's base, and reclaim_best's start and
  // first result.
  std::vector<OptionIndex> saved_, start_, first_;
  std::vector<Index> critical_;
  std::int64_t work_ = 0;
};

}  // namespace perseus
