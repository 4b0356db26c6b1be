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

std::size_t PlanRows::changes(const OptionIndex* row) const {
  std::size_t count = 0;
  for_each_change(row, last_.data(), last_.size(), [&count](std::size_t) { ++count; });
  return count;
}

// A change takes an Index and an option; a whole row one option per computation.
bool PlanRows::stored_whole(std::size_t changes) const {
  return changes * (sizeof(Index) + sizeof(OptionIndex)) >= last_.size() * sizeof(OptionIndex);
}

PlanRows PlanRows::from_rows(const OptionIndex* rows, std::size_t count, Index num_computations) {
  const std::size_t n = ix(num_computations);
  PlanRows out(num_computations);
  const std::vector<OptionIndex> zeros(n, 0);  // what the first plan changes from
  const auto before = [&](std::size_t k) { return k == 0 ? zeros.data() : rows + (k - 1) * n; };
  // Sizes first, so that every buffer is allocated once at its size.
  std::size_t options = 0, changed = 0;
  out.whole_.reserve(count);
  for (std::size_t k = 0; k < count; ++k) {
    std::size_t c = 0;
    for_each_change(rows + k * n, before(k), n, [&c](std::size_t) { ++c; });
    const bool whole = out.stored_whole(c);
    out.whole_.push_back(whole);
    options += whole ? n : c;
    changed += whole ? 0 : c;
  }
  out.option_.reserve(options);
  out.changed_.reserve(changed);
  out.end_.reserve(count);
  for (std::size_t k = 0; k < count; ++k) {
    const OptionIndex* row = rows + k * n;
    if (out.whole_[k]) {
      out.option_.insert(out.option_.end(), row, row + n);
    } else {
      for_each_change(row, before(k), n, [&](std::size_t i) {
        out.changed_.push_back(static_cast<Index>(i));
        out.option_.push_back(row[i]);
      });
    }
    out.end_.push_back(out.option_.size());
  }
  if (count > 0) std::copy(rows + (count - 1) * n, rows + count * n, out.last_.begin());
  return out;
}

void PlanRows::append(const OptionIndex* row) {
  const std::size_t n = last_.size();
  const bool whole = stored_whole(changes(row));
  if (whole) {
    option_.insert(option_.end(), row, row + n);
    std::copy(row, row + n, last_.begin());
  } else {
    for_each_change(row, last_.data(), n, [&](std::size_t i) {
      changed_.push_back(static_cast<Index>(i));
      option_.push_back(row[i]);
      last_[i] = row[i];
    });
  }
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
