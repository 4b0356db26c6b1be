#include "plan_log.hpp"

#include <algorithm>
#include <stdexcept>

namespace perseus {

PlanLog::PlanLog(Index num_computations)
    : num_computations_(num_computations), last_(ix(num_computations), 0) {}

void PlanLog::record(const OptionIndex* choice, Evaluation evaluation, double energy_before_j) {
  for (std::size_t i = 0; i < last_.size(); ++i) {
    if (choice[i] == last_[i]) continue;
    changed_.push_back(static_cast<Index>(i));
    option_.push_back(choice[i]);
    last_[i] = choice[i];
  }
  end_.push_back(changed_.size());
  time_s_.push_back(evaluation.iteration_time_s);
  energy_j_.push_back(evaluation.energy_j);
  before_j_.push_back(energy_before_j);
}

PlanRows::PlanRows(Index num_computations)
    : num_computations_(num_computations), last_(ix(num_computations), 0) {}

namespace {

// Calls visit(i) for each computation i where `row` differs from `before`,
// in order. Frontier plans change a few computations each, so blocks that
// match are skipped with one (vectorised) test each.
template <typename Visit>
void for_each_change(const OptionIndex* row, const OptionIndex* before, std::size_t n, Visit visit) {
  constexpr std::size_t kBlock = 32;
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    unsigned diff = 0;
    for (std::size_t j = 0; j < kBlock; ++j) diff |= static_cast<unsigned>(row[i + j] ^ before[i + j]);
    if (diff == 0) continue;
    for (std::size_t j = i; j < i + kBlock; ++j)
      if (row[j] != before[j]) visit(j);
  }
  for (; i < n; ++i)
    if (row[i] != before[i]) visit(i);
}

}  // namespace

// A change takes an Index and an option; a whole row one option per
// computation. A plan is also stored whole once the changes since the last
// whole one reach kChangesPerWholeRow rows, so that a reader never replays
// more than that to reach any plan.
bool PlanRows::stored_whole(std::size_t changes) const {
  const std::size_t n = last_.size();
  return changes * (sizeof(Index) + sizeof(OptionIndex)) >= n * sizeof(OptionIndex) ||
         changes_since_whole_ + changes >= kChangesPerWholeRow * n;
}

void PlanRows::note_stored(bool whole, std::size_t changes) {
  whole_.push_back(whole);
  if (whole) {
    whole_plans_.push_back(whole_.size() - 1);
    changed_after_whole_.push_back(changed_.size());
    changes_since_whole_ = 0;
  } else {
    changes_since_whole_ += changes;
  }
}

void PlanRows::append(const OptionIndex* row) {
  const std::size_t n = last_.size();
  // One pass: store the changes, then, if the plan is to be stored whole
  // after all, replace them by its row.
  const std::size_t changed_before = changed_.size(), options_before = option_.size();
  for_each_change(row, last_.data(), n, [&](std::size_t i) {
    changed_.push_back(static_cast<Index>(i));
    option_.push_back(row[i]);
    last_[i] = row[i];
  });
  const std::size_t c = changed_.size() - changed_before;
  const bool whole = stored_whole(c);
  if (whole) {
    changed_.resize(changed_before);
    option_.resize(options_before);
    option_.insert(option_.end(), row, row + n);
  }
  end_.push_back(option_.size());
  note_stored(whole, c);
}

std::size_t PlanRows::retained_bytes() const {
  return last_.capacity() * sizeof(OptionIndex) + whole_.capacity() / 8 +
         end_.capacity() * sizeof(std::size_t) + option_.capacity() * sizeof(OptionIndex) +
         changed_.capacity() * sizeof(Index) +
         (whole_plans_.capacity() + changed_after_whole_.capacity()) * sizeof(std::size_t);
}

void PlanRows::shrink_to_fit() {
  whole_.shrink_to_fit();
  end_.shrink_to_fit();
  option_.shrink_to_fit();
  changed_.shrink_to_fit();
  whole_plans_.shrink_to_fit();
  changed_after_whole_.shrink_to_fit();
}

PlanRows::Reader::Reader(const PlanRows& rows) : rows_(&rows), row_(ix(rows.num_computations()), 0) {}

const OptionIndex* PlanRows::Reader::row(std::size_t k) {
  const PlanRows& r = *rows_;
  if (k >= r.size()) throw std::out_of_range("PlanRows::Reader: no such plan");
  if (next_ == k + 1) return row_.data();
  // The last whole plan at or before k: replaying from it is never longer
  // than kChangesPerWholeRow rows' changes, so start there unless this
  // reader is already past it and before k.
  const auto after = std::upper_bound(r.whole_plans_.begin(), r.whole_plans_.end(), k);
  if (after != r.whole_plans_.begin()) {
    const std::size_t w = *(after - 1);
    if (next_ <= w || next_ > k) {
      next_ = w;
      changed_ = r.changed_after_whole_[static_cast<std::size_t>(after - 1 - r.whole_plans_.begin())];
    }
  } else if (next_ > k) {  // no whole plan before k: replay from the zeros before plan 0
    std::fill(row_.begin(), row_.end(), OptionIndex{0});
    next_ = 0;
    changed_ = 0;
  }
  for (; next_ <= k; ++next_) {
    const std::size_t begin = next_ == 0 ? 0 : r.end_[next_ - 1];
    const auto first = r.option_.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto last = r.option_.begin() + static_cast<std::ptrdiff_t>(r.end_[next_]);
    if (r.whole_[next_]) {
      std::copy(first, last, row_.begin());
    } else {
      for (auto option = first; option != last; ++option) row_[ix(r.changed_[changed_++])] = *option;
    }
  }
  return row_.data();
}

std::vector<OptionIndex> PlanRows::dense() const {
  const std::size_t n = ix(num_computations_);
  std::vector<OptionIndex> out(size() * n);
  for_each([&](std::size_t k, const OptionIndex* row) {
    std::copy(row, row + n, out.begin() + static_cast<std::ptrdiff_t>(k * n));
  });
  return out;
}

}  // namespace perseus
