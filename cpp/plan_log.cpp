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

void PlanRows::append(const OptionIndex* row) {
  const std::size_t n = last_.size();
  std::size_t changes = 0;
  for (std::size_t i = 0; i < n; ++i) changes += row[i] != last_[i] ? 1 : 0;
  // A change takes an Index and an option; a whole row one option per computation.
  const bool whole = changes * (sizeof(Index) + sizeof(OptionIndex)) >= n * sizeof(OptionIndex);
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
