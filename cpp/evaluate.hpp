// Replaying a plan on measured times.
//
// A plan gives every computation a time and an energy (one of its group's
// options, or any measured row). Replay runs every computation as soon as its
// DAG predecessors are done; the iteration time T is the longest path. While
// not computing, each of the G GPUs draws the blocking power, so
//     E = sum_i e_i + P_block * (G * T - sum_i t_i)                (joules)
//       = sum_i e'_i + G * P_block * T,   e'_i = e_i - P_block * t_i.
// Over an iteration that lasts D >= T (waiting for a straggler, or for a
// deadline) the GPUs draw blocking power until D: E + G * P_block * (D - T).
// Cost: one pass over the DAG, O(nodes + edges).
#pragma once

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
  Evaluator(const Pipeline& pipeline, const Dag& dag, const OptionTable& table);
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Precondition: choice[i] < options of computation i's group.
  Evaluation evaluate(const OptionIndex* choice);
  // Any measured times and energies, one per computation.
  Evaluation replay(const double* time_s, const double* energy_j);

  // Energy of an iteration that lasts deadline_s (>= e's own time).
  double energy_at(const Evaluation& e, double deadline_s) const {
    return e.energy_j + blocking_w_ * (deadline_s - e.iteration_time_s);
  }
  // G * P_block: watts the pipeline draws while all of it waits.
  double pipeline_blocking_w() const { return blocking_w_; }
  GroupId group(Index computation) const { return group_[ix(computation)]; }

 private:
  const Dag& dag_;
  const OptionTable& table_;
  double num_gpus_;
  double blocking_w_;
  std::vector<GroupId> group_;  // per computation
  std::vector<double> time_, energy_, finish_;
};

}  // namespace perseus
