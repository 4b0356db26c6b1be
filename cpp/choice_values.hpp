// A frontier's plans as values per computation (clocks, usually), gathered in
// C++: a numpy gather of a large frontier makes int64 temporaries that cost
// more than the local search at 16 x 128.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "frontier.hpp"

namespace perseus {

// values[first_option[i] + choice] for every plan of `result` and computation
// i, row by row: the plans' clocks (first_option: where each computation's
// group starts in values). Throws std::invalid_argument for a first_option
// of the wrong length and std::out_of_range naming the computation for an
// index outside values.
std::vector<std::int32_t> choice_values(const FrontierResult& result,
                                        const std::vector<std::int32_t>& first_option,
                                        const std::int32_t* values, std::size_t count);

}  // namespace perseus
