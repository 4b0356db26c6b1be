// Replaying a plan on the measured options, and improving it in place.
//
// A plan chooses one option per computation (an index into its group's
// options, fastest first). Replay runs every computation as soon as its DAG
// predecessors are done, at its measured time; the iteration time T is the
// longest path. While not computing, each of the G GPUs draws the blocking
// power, so
//     E = sum_i e_i + P_block * (G * T - sum_i t_i)                (joules)
//       = sum_i e'_i + G * P_block * T,   e'_i = e_i - P_block * t_i.
//
// Two local improvements work on measured times (not the solver's quantised
// model):
//   reclaim  moves computations with slack to slower, cheaper options without
//            letting T exceed a deadline. Moves are taken greedily, most
//            energy saved per second of slack used first; after each move the
//            earliest/latest times are repaired incrementally.
//   tighten  speeds up computations on paths longer than a deadline, cheapest
//            extra energy per second saved first, until T meets the deadline.
// Every call works in scratch arrays owned by the Evaluator.
#pragma once

#include <cstdint>
#include <vector>

#include "dag.hpp"
#include "options.hpp"
#include "pipeline.hpp"

namespace perseus {

struct Evaluation {
  double iteration_time_s;
  double energy_j;
};

class Evaluator {
 public:
  // Keeps references: pipeline, dag and table must outlive the Evaluator.
  Evaluator(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
            double blocking_power_w);
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Precondition everywhere: choice[i] < options of computation i's group.
  Evaluation evaluate(const OptionIndex* choice);

  // Slows computations down while T stays <= max(deadline_s, current T) and
  // each move lowers the energy. Never lengthens T beyond that bound and never
  // raises the energy.
  Evaluation reclaim(OptionIndex* choice, double deadline_s);
  Evaluation reclaim(OptionIndex* choice) { return reclaim(choice, 0.0); }
  // The better of two reclamations: most energy saved per second of slack
  // first, and most energy saved first. Greedy orders can trap each other.
  Evaluation reclaim_both(OptionIndex* choice, double deadline_s);

  // Local search: speeds up one computation on a longest path by one option
  // and reclaims the slack this opens elsewhere, keeping the change when the
  // energy falls; repeats until no such exchange helps or `max_trials`
  // exchanges were tried (each costs one reclaim). T stays <=
  // max(deadline_s, current T). `trials` returns the exchanges tried.
  Evaluation improve(OptionIndex* choice, double deadline_s, std::int64_t max_trials,
                     std::int64_t& trials);

  // Speeds computations up until T <= deadline_s; false if even the fastest
  // options on some path cannot meet it (the plan is then as fast as it gets).
  bool tighten(OptionIndex* choice, double deadline_s);

  Index group(Index computation) const { return group_[static_cast<std::size_t>(computation)]; }

 private:
  double time(Index i, const OptionIndex* choice) const {
    return table_.time_s(group_[static_cast<std::size_t>(i)], choice[i]);
  }
  double effective(Index i, Index option) const {
    const Index g = group_[static_cast<std::size_t>(i)];
    return table_.energy_j(g, option) - blocking_power_w_ * table_.time_s(g, option);
  }
  double forward_pass(const OptionIndex* choice);             // start_, finish_; returns T
  void backward_pass(const OptionIndex* choice, double deadline_s);  // latest_finish_
  // Best slower option for i within its slack; returns saving per second (<= 0: none).
  double best_move(Index i, const OptionIndex* choice, double makespan, double deadline_s,
                   Index& option) const;
  void raise_starts(Index from, const OptionIndex* choice);    // after i got longer
  void lower_latest(Index from, const OptionIndex* choice);    // after i got longer

  const Dag& dag_;
  const OptionTable& table_;
  double blocking_power_w_;
  Index num_gpus_;
  std::vector<Index> group_;
  std::vector<double> start_, finish_, latest_finish_;
  std::vector<Index> stack_;
  std::vector<OptionIndex> trial_, second_;
  std::vector<Index> critical_;
  struct Move {
    double score;
    Index computation;
    bool operator<(const Move& other) const { return score < other.score; }
  };
  std::vector<Move> heap_;
  bool by_total_ = false;  // reclaim order: energy saved (true) or saved per second
};

}  // namespace perseus
