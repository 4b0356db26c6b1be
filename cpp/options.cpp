#include "options.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace perseus {

OptionTable::OptionTable(Index num_stages, std::vector<Index> offsets,
                         std::vector<double> times, std::vector<double> energies)
    : num_stages_(num_stages),
      offsets_(std::move(offsets)),
      time_s_(std::move(times)),
      energy_j_(std::move(energies)) {
  if (num_stages_ < 1) throw std::invalid_argument("a profile needs at least one stage");
  if (offsets_.size() != static_cast<std::size_t>(2 * num_stages_ + 1) || offsets_.front() != 0 ||
      static_cast<std::size_t>(offsets_.back()) != time_s_.size() ||
      time_s_.size() != energy_j_.size())
    throw std::invalid_argument("option table: offsets do not match the option arrays");
  for (Index g = 0; g < num_groups(); ++g) {
    const std::string where = "stage " + std::to_string(g / 2) +
                              (g % 2 == 0 ? " forward" : " backward");
    const Index n = num_options(g);
    if (n < 1) throw std::invalid_argument(where + " has no options");
    if (n > 65535) throw std::invalid_argument(where + " has more than 65535 options");
    for (Index k = 0; k < n; ++k) {
      const double t = time_s(g, k), e = energy_j(g, k);
      if (!(std::isfinite(t) && t > 0 && std::isfinite(e) && e > 0))
        throw std::invalid_argument(where + ": times and energies must be finite and > 0");
      if (k > 0 && !(t > time_s(g, k - 1) && e < energy_j(g, k - 1)))
        throw std::invalid_argument(where +
                                    ": options must be Pareto-optimal and sorted fastest first");
    }
  }
}

QuantisedGroup::QuantisedGroup(const OptionTable& table, Index group, double unit_time_s,
                               double blocking_power_w) {
  const Index n = table.num_options(group);
  quantised_.resize(static_cast<std::size_t>(n));
  for (Index k = 0; k < n; ++k)
    // Rounded up, so a duration of d units always covers the measured time
    // and a plan never runs longer than the solver's model says. The tiny
    // nudge keeps e.g. 0.03 / 0.001 from rounding up to 31.
    quantised_[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(
        std::ceil(table.time_s(group, k) / unit_time_s * (1.0 - 1e-12)));

  // One point per distinct duration: its slowest (cheapest) option.
  std::vector<std::pair<std::int64_t, double>> points;
  for (Index k = 0; k < n; ++k) {
    const double cost = table.energy_j(group, k) - blocking_power_w * table.time_s(group, k);
    const std::int64_t d = quantised_[static_cast<std::size_t>(k)];
    if (!points.empty() && points.back().first == d)
      points.back().second = cost;
    else
      points.emplace_back(d, cost);
  }
  // Lower convex hull (monotone chain); costs fall as durations grow.
  for (const auto& [d, c] : points) {
    while (hull_d_.size() >= 2) {
      const std::size_t m = hull_d_.size();
      const double d1 = static_cast<double>(hull_d_[m - 2]), c1 = hull_cost_[m - 2];
      const double d2 = static_cast<double>(hull_d_[m - 1]), c2 = hull_cost_[m - 1];
      // Drop the middle point if it lies on or above the chord from 1 to (d, c).
      if ((c2 - c1) * (static_cast<double>(d) - d1) >= (c - c1) * (d2 - d1)) {
        hull_d_.pop_back();
        hull_cost_.pop_back();
      } else {
        break;
      }
    }
    hull_d_.push_back(d);
    hull_cost_.push_back(c);
  }
}

double QuantisedGroup::cost(std::int64_t d) const {
  const auto it = std::upper_bound(hull_d_.begin(), hull_d_.end(), d);
  if (it == hull_d_.begin()) return hull_cost_.front();
  if (it == hull_d_.end()) return hull_cost_.back();
  const std::size_t hi = static_cast<std::size_t>(it - hull_d_.begin());
  const std::size_t lo = hi - 1;
  const double frac = static_cast<double>(d - hull_d_[lo]) /
                      static_cast<double>(hull_d_[hi] - hull_d_[lo]);
  return hull_cost_[lo] + frac * (hull_cost_[hi] - hull_cost_[lo]);
}

OptionIndex QuantisedGroup::option_for(std::int64_t d) const {
  const auto it = std::upper_bound(quantised_.begin(), quantised_.end(), d);
  const auto k = static_cast<std::ptrdiff_t>(it - quantised_.begin()) - 1;
  return static_cast<OptionIndex>(k < 0 ? 0 : k);
}

}  // namespace perseus
