#include "solve_parts.hpp"

#include <algorithm>
#include <cmath>

#include "precondition.hpp"

namespace perseus {
namespace {

bool is_walk(SolvePart part) {
  return part == SolvePart::kPlainWalk || part == SolvePart::kFineWalk ||
         part == SolvePart::kPlainWalkRest || part == SolvePart::kUnrefinedWalk;
}

// Whether `part` runs in a refining solve (true), an unrefined one (false).
bool in_refining(SolvePart part) {
  return part != SolvePart::kUnrefinedWalk && part != SolvePart::kUnrefinedPlans;
}
bool in_unrefined(SolvePart part) {
  return part == SolvePart::kUnrefinedWalk || part == SolvePart::kUnrefinedPlans ||
         part == SolvePart::kSelection;
}

// kWalkTimeCurve at `units` (in [0, 1]), linear between its points.
double walk_time_share(double units) {
  for (std::size_t k = 1; k < kWalkTimeCurve.size(); ++k) {
    const auto [u1, t1] = kWalkTimeCurve[k];
    if (units <= u1) {
      const auto [u0, t0] = kWalkTimeCurve[k - 1];
      return t0 + (t1 - t0) * (units - u0) / (u1 - u0);
    }
  }
  return 1.0;
}

}  // namespace

SolveParts::SolveParts(bool refine, int threads) {
  const auto column = static_cast<std::size_t>(std::clamp(threads, 1, 4) - 1);
  for (std::size_t k = 0; k < kSolveParts; ++k) {
    const auto part = static_cast<SolvePart>(k);
    share_[k] = (refine ? in_refining(part) : in_unrefined(part)) ? kPartShares[k][column] : 0.0;
  }
  if (!refine) share_[static_cast<std::size_t>(SolvePart::kSelection)] = kUnrefinedSelectionShare;
  current_ = refine ? 0 : static_cast<std::size_t>(SolvePart::kUnrefinedWalk);
}

void SolveParts::enter(SolvePart part) {
  // Parts run in their declared order: an earlier one would hold the
  // reported fraction (which never falls) until the solve caught up.
  PERSEUS_EXPECT(!entered_ || static_cast<std::size_t>(part) >= current_, "solve parts in order");
  current_ = static_cast<std::size_t>(part);
  entered_ = true;
}

void SolveParts::skip(SolvePart part) {
  PERSEUS_EXPECT(!entered_ || static_cast<std::size_t>(part) > current_, "a part not yet entered");
  share_[static_cast<std::size_t>(part)] = 0.0;
}

void SolveParts::predict_search(double search_s, double rest_s) {
  PERSEUS_EXPECT(search_s >= 0 && rest_s >= 0, "predicted seconds");
  const double p = search_s + rest_s > 0 ? search_s / (search_s + rest_s) : 0.0;
  // Bounded so that neither side vanishes; fraction() turns it into a share
  // against the parts left after any skip().
  search_part_ = std::clamp(p, 1e-3, 1 - 1e-3);
}

double predicted_rest_s(double computations, double median_options, int threads) {
  const auto column = static_cast<std::size_t>(std::clamp(threads, 1, 4) - 1);
  return kRestSeconds[column] * std::pow(std::max(computations, 1.0), kRestExponent) *
         std::pow(std::max(median_options, 1.0) / kRestOptions, kRestOptionsExponent);
}

double SolveParts::fraction(std::int64_t done, std::int64_t total) const {
  std::array<double, kSolveParts> share = share_;
  const auto search = static_cast<std::size_t>(SolvePart::kLocalSearch);
  if (search_part_ >= 0) {
    double others = 0.0;
    for (std::size_t k = 0; k < kSolveParts; ++k)
      if (k != search) others += share[k];
    share[search] = others * search_part_ / (1 - search_part_);
  }
  double before = 0.0, all = 0.0;
  for (std::size_t k = 0; k < kSolveParts; ++k) {
    all += share[k];
    if (k < current_) before += share[k];
  }
  if (all <= 0.0) return 0.0;
  const double units =
      total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  const SolvePart part = static_cast<SolvePart>(current_);
  const double within = is_walk(part) ? walk_time_share(units) : units;
  return std::clamp((before + share[current_] * within) / all, 0.0, 1.0);
}

}  // namespace perseus
