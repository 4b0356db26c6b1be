// A pipeline together with a profile's useful options: the unit the Python
// API works with. It owns the schedule, its DAG and the option table, and
// offers plan replay and the frontier solve. Replays share scratch arrays, so
// one Problem serves one thread at a time (the bindings lock it).
#pragma once

#include <vector>

#include "dag.hpp"
#include "evaluate.hpp"
#include "frontier.hpp"
#include "options.hpp"
#include "pipeline.hpp"
#include "solver_options.hpp"

namespace perseus {

class Problem {
 public:
  // Throws std::invalid_argument for a table that does not fit the pipeline
  // (see OptionTable), a negative or non-finite blocking power, or values so
  // large that a plan's energy could overflow.
  Problem(const Pipeline& pipeline, std::vector<Index> offsets, std::vector<double> time_s,
          std::vector<double> energy_j, double blocking_power_w);
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  const Pipeline& pipeline() const { return pipeline_; }
  const Dag& dag() const { return dag_; }
  const OptionTable& table() const { return table_; }

  // Replays `plans` rows of option indices; throws std::invalid_argument
  // naming the plan and computation of an index out of range.
  std::vector<Evaluation> evaluate(const OptionIndex* choices, std::size_t plans);
  // Replays rows of measured times and energies (any rows, not only useful
  // options); throws std::invalid_argument for non-finite or non-positive values.
  std::vector<Evaluation> replay(const double* time_s, const double* energy_j, std::size_t plans);

  // Throws std::invalid_argument for a unit time so fine that the min-cut
  // loop's span (more than 2^31 units) or its longest iteration (more than
  // 2^52 units of the finest quantum) does not fit, before allocating anything.
  FrontierResult solve(const SolverOptions& options) const;

 private:
  static constexpr double kMaxSpanUnits = 2147483648.0;           // 2^31
  static constexpr double kMaxLongestUnits = 4503599627370496.0;  // 2^52
  double fastest_time_s_ = 0.0, slowest_time_s_ = 0.0;            // all-fastest and all-slowest plans
  Pipeline pipeline_;
  Dag dag_;
  OptionTable table_;
  Evaluator evaluator_;
};

}  // namespace perseus
