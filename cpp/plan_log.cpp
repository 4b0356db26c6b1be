#include "plan_log.hpp"

#include <algorithm>

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

std::size_t PlanRows::changes(const OptionIndex* row) const {
  std::size_t count = 0;
  for (std::size_t i = 0; i < last_.size(); ++i) count += row[i] != last_[i] ? 1 : 0;
  return count;
}

// A change takes an Index and an option; a whole row one option per computation.
bool PlanRows::stored_whole(std::size_t changes) const {
  return changes * (sizeof(Index) + sizeof(OptionIndex)) >= last_.size() * sizeof(OptionIndex);
}

PlanRows PlanRows::from_rows(const OptionIndex* rows, std::size_t count, Index num_computations) {
  const std::size_t n = ix(num_computations);
  PlanRows out(num_computations);
  std::size_t options = 0, changed = 0;
  for (std::size_t k = 0; k < count; ++k) {  // sizes first, from the same comparisons
    const std::size_t c = out.changes(rows + k * n);
    options += out.stored_whole(c) ? n : c;
    changed += out.stored_whole(c) ? 0 : c;
    std::copy(rows + k * n, rows + (k + 1) * n, out.last_.begin());
  }
  std::fill(out.last_.begin(), out.last_.end(), OptionIndex{0});
  out.option_.reserve(options);
  out.changed_.reserve(changed);
  out.end_.reserve(count);
  out.whole_.reserve(count);
  for (std::size_t k = 0; k < count; ++k) out.append(rows + k * n);
  return out;
}

void PlanRows::append(const OptionIndex* row) {
  const std::size_t n = last_.size();
  const bool whole = stored_whole(changes(row));
  if (whole) {
    option_.insert(option_.end(), row, row + n);
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      if (row[i] == last_[i]) continue;
      changed_.push_back(static_cast<Index>(i));
      option_.push_back(row[i]);
    }
  }
  std::copy(row, row + n, last_.begin());
  whole_.push_back(whole);
  end_.push_back(option_.size());
}

std::size_t PlanRows::retained_bytes() const {
  return last_.capacity() * sizeof(OptionIndex) + whole_.capacity() / 8 +
         end_.capacity() * sizeof(std::size_t) + option_.capacity() * sizeof(OptionIndex) +
         changed_.capacity() * sizeof(Index);
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
