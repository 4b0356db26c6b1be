// Measured execution options of every (stage, instruction): which are worth
// keeping, the table the solver reads, and the convex view of one group that
// the min-cut loop works with.
//
// Effective energy. While a GPU waits on a pipeline neighbour it still draws
// P_block, so over an iteration of fixed length an option costs its
// *effective* energy e' = e - P_block * t (design.md, section 1). An option is
// useless exactly when another one is no slower and has no higher effective
// energy. This keeps options that are slower and use slightly more raw energy
// (less than P_block times the extra time): with slack, running slowly is
// cheaper than idling. Filtering on raw (time, energy) drops them, which cost
// up to 0.9 % against the exact optimum on A100-like profiles.
//
// Group g = 2 * stage + instruction holds one (stage, instruction)'s useful
// options, fastest first.
#pragma once

#include <cstdint>
#include <vector>

#include "index.hpp"
#include "pipeline.hpp"

namespace perseus {

using OptionIndex = std::uint16_t;

inline GroupId group_of(const Computation& c) {
  return GroupId(2 * c.stage + static_cast<Index>(c.instruction));
}

// Positions (into time_s / energy_j) of the useful options, fastest first:
// time strictly increasing, effective energy strictly decreasing. Of options
// equal in both, the one listed first is kept. Throws std::invalid_argument
// on non-finite or non-positive values. O(count log count).
std::vector<Index> useful_options(const double* time_s, const double* energy_j, Index count,
                                  double blocking_power_w);

class OptionTable {
 public:
  // offsets has 2*num_stages+1 entries; group g's options are
  // [offsets[g], offsets[g+1]) of times / energies (seconds, joules), each
  // group exactly as useful_options() keeps it. Throws std::invalid_argument
  // naming the stage otherwise, or for a negative or non-finite blocking power.
  OptionTable(Index num_stages, std::vector<Index> offsets, std::vector<double> times,
              std::vector<double> energies, double blocking_power_w);

  Index num_stages() const { return num_stages_; }
  Index num_groups() const { return 2 * num_stages_; }
  // Options are numbered 0 .. num_options(group) - 1 within their group,
  // fastest first (precondition, checked in debug builds: in that range).
  Index num_options(GroupId group) const {
    return offsets_[group.index() + 1] - offsets_[group.index()];
  }
  double time_s(GroupId group, Index option) const { return time_s_[at(group, option)]; }
  double energy_j(GroupId group, Index option) const { return energy_j_[at(group, option)]; }
  // e - P_block * t of an option (joules).
  double effective_j(GroupId group, Index option) const { return effective_j_[at(group, option)]; }
  double blocking_power_w() const { return blocking_power_w_; }

 private:
  std::size_t at(GroupId group, Index option) const {
    PERSEUS_EXPECT(group.value() < num_groups() && option >= 0 && option < num_options(group),
                   "OptionTable: no such group or option");
    return ix(offsets_[group.index()] + option);
  }

  Index num_stages_;
  std::vector<Index> offsets_;
  std::vector<double> time_s_, energy_j_, effective_j_;
  double blocking_power_w_;
};

// Quantised, convex view of one group for the Phillips-Dessouky loop.
// Durations are integers d = round(t / unit_time), at least 1: rounding to
// the nearest unit keeps a long path's model time within a few units of its
// measured time (rounding up would add half a unit per computation and put
// the model's shortest iteration far above the real one). Every plan is
// replayed on measured times afterwards, so the model never decides a
// plan's reported time. The cost of a duration is the effective energy; the
// model is the lower convex hull of the (duration, cost) points, linear in
// between.
class QuantisedGroup {
 public:
  // Throws std::invalid_argument if some t / unit_time does not fit the
  // integer range the loop can count in (2^52 units).
  QuantisedGroup(const OptionTable& table, GroupId group, double unit_time_s);

  std::int64_t min_duration() const { return quantised_.front(); }
  std::int64_t max_duration() const { return quantised_.back(); }
  // Convex, non-increasing cost of duration d in [min_duration, max_duration].
  double cost(std::int64_t d) const {
    if (!cost_table_.empty()) return cost_table_[ix(d - quantised_.front())];
    return hull_cost(d);
  }
  // The slowest option whose quantised duration is <= d.
  OptionIndex option_for(std::int64_t d) const;
  // The fastest option whose quantised duration is >= d (the slowest if none).
  OptionIndex option_at_least(std::int64_t d) const;
  // Hull breakpoints around d: the largest one < d (or min_duration) and the
  // smallest one > d (or max_duration). cost() is linear between them, so a
  // duration may move that far at an unchanged cost per unit.
  std::int64_t breakpoint_below(std::int64_t d) const;
  std::int64_t breakpoint_above(std::int64_t d) const;

 private:
  std::vector<std::int64_t> quantised_;    // per option, non-decreasing
  double hull_cost(std::int64_t d) const;  // by bisection over the hull
  std::vector<std::int64_t> hull_d_;       // hull breakpoints, increasing
  std::vector<double> hull_cost_;
  // cost(d) for every duration in the range, when the range is small enough
  // (the min-cut loop and the candidate walk ask for it millions of times).
  std::vector<double> cost_table_;
};

}  // namespace perseus
