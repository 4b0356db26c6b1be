#include "choice_values.hpp"

#include <stdexcept>
#include <string>

namespace perseus {

namespace {

// Throws unless first_option fits the result (see choice_values).
void check_first_option(const FrontierResult& result, const std::vector<std::int32_t>& first_option) {
  const std::size_t n = ix(result.num_computations);
  if (first_option.size() != n)
    throw std::invalid_argument("first_option must have one entry per computation (" +
                                std::to_string(n) + ")");
  for (std::size_t i = 0; i < n; ++i)
    if (first_option[i] < 0)
      throw std::out_of_range("choice_values: computation " + std::to_string(i) +
                              " has a negative first option (" + std::to_string(first_option[i]) + ")");
  if (result.choices.size() > 0 && ix(result.choices.num_computations()) != n)
    throw std::invalid_argument("choice_values: the result's plans have " +
                                std::to_string(result.choices.num_computations()) +
                                " computations, not " + std::to_string(n));
}

// values[first_option[i] + choice[i]], or std::out_of_range naming computation i.
std::int32_t value_of(const std::vector<std::int32_t>& first_option, const OptionIndex* choice,
                      std::size_t i, const std::int32_t* values, std::size_t count) {
  const std::int64_t at = std::int64_t{first_option[i]} + choice[i];
  if (at >= static_cast<std::int64_t>(count))
    throw std::out_of_range("choice_values: computation " + std::to_string(i) + " indexes option " +
                            std::to_string(at) + " of " + std::to_string(count));
  return values[at];
}

}  // namespace

std::vector<std::int32_t> choice_values(const FrontierResult& result,
                                        const std::vector<std::int32_t>& first_option,
                                        const std::int32_t* values, std::size_t count) {
  check_first_option(result, first_option);
  const std::size_t n = ix(result.num_computations);
  std::vector<std::int32_t> out(result.choices.size() * n);
  result.choices.for_each([&](std::size_t k, const OptionIndex* choice) {
    std::int32_t* row = out.data() + k * n;
    for (std::size_t i = 0; i < n; ++i) row[i] = value_of(first_option, choice, i, values, count);
  });
  return out;
}

ValueChanges choice_value_changes(const FrontierResult& result,
                                  const std::vector<std::int32_t>& first_option,
                                  const std::int32_t* values, std::size_t count) {
  check_first_option(result, first_option);
  const std::size_t n = ix(result.num_computations);
  ValueChanges out;
  out.counts.reserve(result.choices.size());
  std::vector<std::int32_t> row(n);
  result.choices.for_each([&](std::size_t k, const OptionIndex* choice) {
    std::int64_t changed = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int32_t value = value_of(first_option, choice, i, values, count);
      if (k > 0 && value != row[i]) {
        out.ids.push_back(static_cast<std::uint32_t>(i));
        out.values.push_back(value);
        ++changed;
      }
      row[i] = value;
    }
    if (k == 0) out.first = row;
    out.counts.push_back(changed);
  });
  return out;
}

}  // namespace perseus
