#include "choice_values.hpp"

#include <stdexcept>
#include <string>

namespace perseus {

std::vector<std::int32_t> choice_values(const FrontierResult& result,
                                        const std::vector<std::int32_t>& first_option,
                                        const std::int32_t* values, std::size_t count) {
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
  const auto size = static_cast<std::int64_t>(count);
  std::vector<std::int32_t> out(result.choices.size() * n);
  result.choices.for_each([&](std::size_t k, const OptionIndex* choice) {
    std::int32_t* row = out.data() + k * n;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t at = std::int64_t{first_option[i]} + choice[i];
      if (at >= size)
        throw std::out_of_range("choice_values: computation " + std::to_string(i) + " indexes option " +
                                std::to_string(at) + " of " + std::to_string(count));
      row[i] = values[at];
    }
  });
  return out;
}

}  // namespace perseus
