// Ids and the one conversion the core needs everywhere.
//
// Computations, DAG nodes, option groups and flow-network nodes are dense
// signed 32-bit ids (a pipeline has at most 2^30 computations); containers
// are indexed with std::size_t. `ix` is the one place that converts, so the
// code reads `start[ix(v)]` instead of a cast at every subscript.
#pragma once

#include <cstddef>
#include <cstdint>

namespace perseus {

using Index = std::int32_t;

// Precondition: i >= 0.
constexpr std::size_t ix(Index i) { return static_cast<std::size_t>(i); }
constexpr std::size_t ix(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace perseus
