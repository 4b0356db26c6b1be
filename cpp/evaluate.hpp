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
// model). Both aim at the energy of an iteration that lasts a given deadline
// (a pipeline that waits for a straggler draws blocking power until then),
// i.e. at the effective energy sum_i e'_i:
//   reclaim  moves computations with slack to slower, cheaper options without
//            letting T exceed the deadline. Moves are taken greedily, most
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

  // Energy of an iteration that lasts deadline_s (>= e's own time): the GPUs
  // draw blocking power until then.
  double energy_at(const Evaluation& e, double deadline_s) const {
    return e.energy_j + blocking_power_w_ * static_cast<double>(num_gpus_) *
                            (deadline_s - e.iteration_time_s);
  }

  // Slows computations down while T stays <= D = max(deadline_s, current T)
  // and each move lowers the effective energy. Never lengthens T beyond D and
  // never raises energy_at(D) (with D = current T: never raises the energy).
  Evaluation reclaim(OptionIndex* choice, double deadline_s);
  Evaluation reclaim(OptionIndex* choice) { return reclaim(choice, 0.0); }
  // The better of two reclamations: most energy saved per second of slack
  // first, and most energy saved first. Greedy orders can trap each other.
  Evaluation reclaim_both(OptionIndex* choice, double deadline_s);

  // Local search: speeds up one or two computations on a longest path by one
  // option and reclaims the slack this opens elsewhere, keeping the change
  // when energy_at(deadline) falls; repeats until no such exchange helps or
  // about `max_work` (see work()) was spent. T stays <= max(deadline_s, T).
  Evaluation improve(OptionIndex* choice, double deadline_s, std::int64_t max_work);

  // Node, edge and option visits so far: a machine-independent measure of
  // effort, so callers can bound it and still get the same plans everywhere.
  std::int64_t work() const { return work_; }

  // Speeds computations up until T <= deadline_s; false if even the fastest
  // options on some path cannot meet it (the plan is then as fast as it gets).
  bool tighten(OptionIndex* choice, double deadline_s);

  Index group(Index computation) const { return group_[static_cast<std::size_t>(computation)]; }

 private:
  double time(Index i, const OptionIndex* choice) const {
    return table_.time_s(group_[static_cast<std::size_t>(i)], choice[i]);
  }
  // Effective energy e - P_block * t of computation i at an option (joules).
  double effective(Index i, Index option) const {
    return effective_[static_cast<std::size_t>(first_option_[static_cast<std::size_t>(group_[static_cast<std::size_t>(i)])] + option)];
  }
  double forward_pass(const OptionIndex* choice);             // start_, finish_; returns T
  void backward_pass(const OptionIndex* choice, double deadline_s);  // latest_finish_
  // Best slower option for i within its slack; returns its score (<= 0: none).
  double best_move(Index i, const OptionIndex* choice, Index& option);
  void raise_starts(Index from, const OptionIndex* choice);    // after i got longer
  void lower_latest(Index from, const OptionIndex* choice);    // after i got longer

  const Dag& dag_;
  const OptionTable& table_;
  double blocking_power_w_;
  Index num_gpus_;
  std::vector<Index> group_;
  // Per option of every group (flat, group g starts at first_option_[g]):
  // effective energy, and the slower option with the steepest saving per
  // second from it (the first point of the lower hull to its right).
  std::vector<Index> first_option_;
  std::vector<double> effective_;
  std::vector<Index> steepest_;
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
  std::int64_t work_ = 0;
};

}  // namespace perseus
