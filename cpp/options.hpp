// Measured execution options of every (stage, instruction), and the view of
// them the frontier solver works with.
//
// Group g = 2*stage + instruction holds that pair's Pareto-optimal options,
// fastest first: time strictly increasing, energy strictly decreasing.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline.hpp"

namespace perseus {

using OptionIndex = std::uint16_t;

inline Index group_of(const Computation& c) {
  return 2 * c.stage + static_cast<Index>(c.instruction);
}

class OptionTable {
 public:
  // offsets has 2*num_stages+1 entries; group g's options are
  // [offsets[g], offsets[g+1]) of times / energies (seconds, joules).
  // Throws std::invalid_argument on malformed input.
  OptionTable(Index num_stages, std::vector<Index> offsets, std::vector<double> times,
              std::vector<double> energies);

  Index num_stages() const { return num_stages_; }
  Index num_groups() const { return 2 * num_stages_; }
  Index num_options(Index group) const { return offsets_[group + 1] - offsets_[group]; }
  double time_s(Index group, Index option) const { return time_s_[offsets_[group] + option]; }
  double energy_j(Index group, Index option) const { return energy_j_[offsets_[group] + option]; }

 private:
  Index num_stages_;
  std::vector<Index> offsets_;
  std::vector<double> time_s_;
  std::vector<double> energy_j_;
};

// Quantised, convex view of one group's options for the Phillips-Dessouky
// solver. Durations are integers d = ceil(t / unit_time). The cost of a
// duration is the effective energy e - P_block * t (joules); the model is the
// lower convex hull of the (duration, cost) points, linear in between.
class QuantisedGroup {
 public:
  QuantisedGroup(const OptionTable& table, Index group, double unit_time_s,
                 double blocking_power_w);

  std::int64_t min_duration() const { return quantised_.front(); }
  std::int64_t max_duration() const { return quantised_.back(); }
  // Convex, non-increasing cost of duration d in [min_duration, max_duration].
  double cost(std::int64_t d) const;
  // The slowest measured option whose quantised duration is <= d.
  OptionIndex option_for(std::int64_t d) const;

 private:
  std::vector<std::int64_t> quantised_;  // per option, non-decreasing
  std::vector<std::int64_t> hull_d_;     // hull breakpoints, increasing
  std::vector<double> hull_cost_;
};

}  // namespace perseus
