#include "options.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

namespace perseus {
namespace {

std::string group_name(GroupId group) {
  const Index g = group.value();
  return "stage " + std::to_string(g / 2) + (g % 2 == 0 ? " forward" : " backward");
}

// Largest quantised duration the loop counts in: well inside int64 and exactly
// representable as a double, so t / unit round trips.
constexpr double kMaxUnits = 4503599627370496.0;  // 2^52

}  // namespace

std::vector<Index> useful_options(const double* time_s, const double* energy_j, Index count,
                                  double blocking_power_w) {
  for (Index k = 0; k < count; ++k)
    if (!(std::isfinite(time_s[k]) && time_s[k] > 0 && std::isfinite(energy_j[k]) && energy_j[k] > 0))
      throw std::invalid_argument("option times and energies must be finite and > 0");
  std::vector<Index> order(ix(count));
  std::iota(order.begin(), order.end(), Index{0});
  auto effective = [&](Index k) { return energy_j[k] - blocking_power_w * time_s[k]; };
  // Fastest first; at equal time the cheaper one; then the order given.
  std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) {
    if (time_s[a] != time_s[b]) return time_s[a] < time_s[b];
    return energy_j[a] < energy_j[b];
  });
  std::vector<Index> kept;
  for (const Index k : order)
    if (kept.empty() || effective(k) < effective(kept.back())) kept.push_back(k);
  // Equal times survive only when cheaper, which the sort rules out: times
  // are strictly increasing along `kept`.
  return kept;
}

OptionTable::OptionTable(Index num_stages, std::vector<Index> offsets, std::vector<double> times,
                         std::vector<double> energies, double blocking_power_w)
    : num_stages_(num_stages),
      offsets_(std::move(offsets)),
      time_s_(std::move(times)),
      energy_j_(std::move(energies)),
      blocking_power_w_(blocking_power_w) {
  if (num_stages_ < 1) throw std::invalid_argument("a profile needs at least one stage");
  if (!(blocking_power_w >= 0) || !std::isfinite(blocking_power_w))
    throw std::invalid_argument("blocking power must be a finite number of watts >= 0");
  if (offsets_.size() != ix(2 * num_stages_ + 1) || offsets_.front() != 0 ||
      ix(offsets_.back()) != time_s_.size() || time_s_.size() != energy_j_.size())
    throw std::invalid_argument("option table: offsets do not match the option arrays");
  effective_j_.resize(time_s_.size());
  for (GroupId g(0); g.value() < num_groups(); ++g) {
    const Index n = num_options(g);
    if (n < 1) throw std::invalid_argument(group_name(g) + " has no options");
    if (n > 65535) throw std::invalid_argument(group_name(g) + " has more than 65535 options");
    for (Index k = 0; k < n; ++k) {
      const double t = time_s(g, k), e = energy_j(g, k);
      if (!(std::isfinite(t) && t > 0 && std::isfinite(e) && e > 0))
        throw std::invalid_argument(group_name(g) + ": times and energies must be finite and > 0");
      const double eff = e - blocking_power_w * t;
      if (!std::isfinite(eff))
        throw std::invalid_argument(group_name(g) +
                                    ": energy minus blocking power times time overflows");
      effective_j_[ix(offsets_[g.index()] + k)] = eff;
      if (k > 0 && !(t > time_s(g, k - 1) && eff < effective_j(g, k - 1)))
        throw std::invalid_argument(
            group_name(g) +
            ": options must be the useful ones, fastest first (time strictly increasing, "
            "energy minus blocking power times time strictly decreasing)");
    }
  }
}

QuantisedGroup::QuantisedGroup(const OptionTable& table, GroupId group, double unit_time_s) {
  const Index n = table.num_options(group);
  quantised_.resize(ix(n));
  for (Index k = 0; k < n; ++k) {
    const double units = std::max(1.0, std::floor(table.time_s(group, k) / unit_time_s + 0.5));
    if (!(units <= kMaxUnits)) {
      char text[160];
      std::snprintf(text, sizeof text,
                    ": an option of %g s is more than 2^52 units of %g s; use a larger unit time",
                    table.time_s(group, k), unit_time_s);
      throw std::invalid_argument(group_name(group) + text);
    }
    quantised_[ix(k)] = static_cast<std::int64_t>(units);
  }

  // One point per distinct duration: its slowest (cheapest) option.
  std::vector<std::pair<std::int64_t, double>> points;
  for (Index k = 0; k < n; ++k) {
    const double cost = table.effective_j(group, k);
    const std::int64_t d = quantised_[ix(k)];
    if (!points.empty() && points.back().first == d) points.back().second = cost;
    else points.emplace_back(d, cost);
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
  constexpr std::int64_t kMaxTable = std::int64_t{1} << 17;  // 1 MiB per group at most
  const std::int64_t range = max_duration() - min_duration() + 1;
  if (range <= kMaxTable) {
    cost_table_.resize(static_cast<std::size_t>(range));
    for (std::int64_t d = min_duration(); d <= max_duration(); ++d)
      cost_table_[static_cast<std::size_t>(d - min_duration())] = hull_cost(d);
  }
}

double QuantisedGroup::hull_cost(std::int64_t d) const {
  const auto it = std::upper_bound(hull_d_.begin(), hull_d_.end(), d);
  if (it == hull_d_.begin()) return hull_cost_.front();
  if (it == hull_d_.end()) return hull_cost_.back();
  const auto hi = static_cast<std::size_t>(it - hull_d_.begin());
  const std::size_t lo = hi - 1;
  const double frac =
      static_cast<double>(d - hull_d_[lo]) / static_cast<double>(hull_d_[hi] - hull_d_[lo]);
  return hull_cost_[lo] + frac * (hull_cost_[hi] - hull_cost_[lo]);
}

OptionIndex QuantisedGroup::option_for(std::int64_t d) const {
  const auto it = std::upper_bound(quantised_.begin(), quantised_.end(), d);
  const auto k = static_cast<std::ptrdiff_t>(it - quantised_.begin()) - 1;
  return static_cast<OptionIndex>(k < 0 ? 0 : k);
}

OptionIndex QuantisedGroup::option_at_least(std::int64_t d) const {
  const auto it = std::lower_bound(quantised_.begin(), quantised_.end(), d);
  const auto k = static_cast<std::ptrdiff_t>(it - quantised_.begin());
  return static_cast<OptionIndex>(
      std::min<std::ptrdiff_t>(k, static_cast<std::ptrdiff_t>(quantised_.size()) - 1));
}

std::int64_t QuantisedGroup::breakpoint_below(std::int64_t d) const {
  const auto it = std::lower_bound(hull_d_.begin(), hull_d_.end(), d);
  return it == hull_d_.begin() ? hull_d_.front() : *(it - 1);
}

std::int64_t QuantisedGroup::breakpoint_above(std::int64_t d) const {
  const auto it = std::upper_bound(hull_d_.begin(), hull_d_.end(), d);
  return it == hull_d_.end() ? hull_d_.back() : *it;
}

}  // namespace perseus
