// Candidate plans of a solve, stored compactly.
//
// A solve produces thousands of candidate plans that differ from one another
// in a few computations. The log keeps each one as the (computation, option)
// pairs where it differs from the plan recorded before it, with its replayed
// time and energy, so memory grows with the changes rather than with
// plans x computations. The plans that make the frontier are rebuilt by one
// replay of the log. Cost: O(n) per record (one comparison), O(log size) to
// rebuild any subset.
#pragma once

#include <cstdint>
#include <vector>

#include "evaluate.hpp"
#include "index.hpp"
#include "options.hpp"

namespace perseus {

class PlanLog {
 public:
  explicit PlanLog(Index num_computations);

  // Appends a plan with its replayed evaluation and the energy of the plan it
  // was improved from, over an iteration as long as this one (J).
  void record(const OptionIndex* choice, Evaluation evaluation, double energy_before_j);

  std::size_t size() const { return time_s_.size(); }
  double time_s(std::size_t k) const { return time_s_[k]; }
  double energy_j(std::size_t k) const { return energy_j_[k]; }
  double energy_before_j(std::size_t k) const { return before_j_[k]; }

  // Rebuilds the plans `wanted` (strictly increasing indices) in order, calling
  // visit(position in wanted, choice) for each.
  template <typename Visit>
  void rebuild(const std::vector<std::size_t>& wanted, Visit visit) const {
    std::vector<OptionIndex> plan(ix(num_computations_), 0);
    std::size_t next = 0;
    for (std::size_t k = 0; k < size() && next < wanted.size(); ++k) {
      for (std::size_t c = k == 0 ? 0 : end_[k - 1]; c < end_[k]; ++c)
        plan[ix(changed_[c])] = option_[c];
      if (wanted[next] == k) visit(next++, plan.data());
    }
  }

 private:
  Index num_computations_;
  std::vector<OptionIndex> last_;  // the plan recorded last
  std::vector<Index> changed_;
  std::vector<OptionIndex> option_;
  std::vector<std::size_t> end_;  // per plan, end of its changes
  std::vector<double> time_s_, energy_j_, before_j_;
};

}  // namespace perseus
