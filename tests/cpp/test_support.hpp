// Small builders the C++ tests share: option tables from raw clock sweeps and
// a random source with a fixed seed (every test is deterministic).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "index.hpp"
#include "options.hpp"

namespace perseus::test_support {

// One (time, energy) pair per measured clock, seconds and joules.
struct RawOption {
  double time_s;
  double energy_j;
};

// Keeps each group's useful options (useful_options) and builds the table;
// raw[g] holds group g = 2 * stage + instruction.
inline OptionTable table_from_raw(Index num_stages, const std::vector<std::vector<RawOption>>& raw,
                                  double blocking_power_w) {
  std::vector<Index> offsets{0};
  std::vector<double> times, energies;
  for (const auto& group : raw) {
    std::vector<double> t, e;
    for (const auto& o : group) {
      t.push_back(o.time_s);
      e.push_back(o.energy_j);
    }
    for (const Index k :
         useful_options(t.data(), e.data(), static_cast<Index>(t.size()), blocking_power_w)) {
      times.push_back(t[ix(k)]);
      energies.push_back(e[ix(k)]);
    }
    offsets.push_back(static_cast<Index>(times.size()));
  }
  return OptionTable(num_stages, offsets, times, energies, blocking_power_w);
}

// A GPU-like sweep per group: `clocks` options, the fastest taking about
// base_s, slower clocks taking longer and (mostly) less energy, with noise.
inline std::vector<std::vector<RawOption>> random_sweeps(Index num_stages, int clocks,
                                                         std::mt19937& rng) {
  std::uniform_real_distribution<double> base(0.5, 2.0), noise(0.97, 1.03);
  std::vector<std::vector<RawOption>> raw(ix(2 * num_stages));
  for (auto& group : raw) {
    const double t0 = base(rng);
    for (int c = 0; c < clocks; ++c) {
      const double slow = 1.0 + 0.15 * c;  // time grows as the clock falls
      const double power_w = 300.0 / (1.0 + 0.3 * c) * noise(rng);
      group.push_back({t0 * slow * noise(rng), t0 * slow * power_w});
    }
  }
  return raw;
}

}  // namespace perseus::test_support
