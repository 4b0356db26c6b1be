// Replaying a plan on the measured options: iteration time and energy.
//
// A plan chooses one option per computation (an index into its group's
// options). Replay runs every computation as soon as its predecessors in the
// DAG are done, at its measured time; the iteration time T is the longest path.
// While not computing, each of the G GPUs draws the blocking power, so
//     E = sum_i e_i + P_block * (G * T - sum_i t_i)          (joules).
//
// Slack reclamation moves computations that finish before they must to slower
// (cheaper) options without lengthening T. Every call is O(nodes + edges) and
// works in scratch arrays owned by the Evaluator (no allocation per call).
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
  Evaluator(const Pipeline& pipeline, const Dag& dag, const OptionTable& table,
            double blocking_power_w);
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Precondition: choice[i] < number of options of computation i's group.
  Evaluation evaluate(const OptionIndex* choice);

  // Moves computations to slower options inside their slack, in topological
  // order, each to the slowest option that still finishes by its latest finish
  // time. Never lengthens the iteration and never raises the energy.
  Evaluation reclaim(OptionIndex* choice);

  Index group(Index computation) const { return group_[static_cast<std::size_t>(computation)]; }

 private:
  double time(Index i, const OptionIndex* choice) const {
    return table_.time_s(group_[static_cast<std::size_t>(i)], choice[i]);
  }
  double forward_pass(const OptionIndex* choice);  // fills finish_, returns T

  const Dag& dag_;
  const OptionTable& table_;
  double blocking_power_w_;
  Index num_gpus_;
  std::vector<Index> group_;
  std::vector<double> finish_;         // earliest finish time per computation
  std::vector<double> latest_finish_;  // latest finish time per computation
};

}  // namespace perseus
