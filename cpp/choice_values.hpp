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

// The same values kept as the first plan's row and then, plan after plan,
// the computations whose value changes and their new values: what a
// frontier keeps (perseus._plan_store.PlanStore), at the size of the changes
// instead of plans x computations (5 GB of int32 clocks at 16 x 1024).
// Same arguments and errors as choice_values.
struct ValueChanges {
  std::vector<std::int32_t> first;   // plan 0's value per computation
  std::vector<std::int64_t> counts;  // per plan, how many values change (0 for plan 0)
  std::vector<std::uint32_t> ids;    // which computations, plan after plan
  std::vector<std::int32_t> values;  // and their new values
};
ValueChanges choice_value_changes(const FrontierResult& result,
                                  const std::vector<std::int32_t>& first_option,
                                  const std::int32_t* values, std::size_t count);

}  // namespace perseus
