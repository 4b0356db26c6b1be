// Direct NVML access to one GPU, for `perseus reset-clocks`, the clock
// watchdog, the profiler's energy readings and the GPU checks.
//
// Unlike the frequency switcher (switcher.hpp), every call runs on the
// caller's thread and takes as long as NVML takes (milliseconds for clock
// changes). Clocks locked here bypass the switchers' reference counts and
// the watchdog (clock_locks.hpp): this is the tool for repairing or
// inspecting a GPU, not for training.
//
// Each object holds an NVML session (nvmlInit_v2 / nvmlShutdown), so NVML
// stays initialised while it lives.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nvml_loader.hpp"

namespace perseus {

class NvmlDevice {
 public:
  // GPU `cuda_index` as CUDA numbers it (honours CUDA_VISIBLE_DEVICES).
  // Throws nvml::LibraryError, nvml::Error, std::out_of_range.
  explicit NvmlDevice(int cuda_index);
  // The GPU with this UUID (info().cuda_index is -1). Throws as above.
  static NvmlDevice by_uuid(const std::string& uuid);

  NvmlDevice(NvmlDevice&&) = default;
  NvmlDevice& operator=(NvmlDevice&&) = default;
  NvmlDevice(const NvmlDevice&) = delete;
  NvmlDevice& operator=(const NvmlDevice&) = delete;

  const nvml::DeviceInfo& info() const { return info_; }

  // Supported clocks in MHz, ascending; empty when the GPU does not list them.
  std::vector<unsigned> supported_memory_clocks() const;
  // SM clocks supported at `memory_mhz` (default: the highest memory clock).
  std::vector<unsigned> supported_graphics_clocks(std::optional<unsigned> memory_mhz) const;
  unsigned clock_mhz(nvml::ClockType type) const;  // the current clock
  // Energy since the driver loaded, in mJ. Throws nvml::Error
  // (kErrorFunctionNotFound) when the driver lacks the counter.
  unsigned long long total_energy_mj() const;

  // Precondition: min_mhz <= max_mhz (else std::invalid_argument).
  void set_locked_clocks(unsigned min_mhz, unsigned max_mhz) const;
  void reset_locked_clocks() const;
  // These two throw nvml::Error (kErrorFunctionNotFound) on drivers too old
  // to lock memory clocks.
  void set_memory_locked_clocks(unsigned min_mhz, unsigned max_mhz) const;
  void reset_memory_locked_clocks() const;

 private:
  NvmlDevice(std::unique_ptr<nvml::Session> session, nvml::DeviceInfo info);
  const nvml::Api& api() const { return session_->api(); }

  std::unique_ptr<nvml::Session> session_;
  nvml::DeviceInfo info_;
};

// "sm", "graphics" or "memory"; anything else throws std::invalid_argument.
nvml::ClockType parse_clock_type(const std::string& kind);

// GPUs visible to CUDA, counted through NVML (honours CUDA_VISIBLE_DEVICES).
int nvml_device_count();
// The driver's version string; "" when the library cannot tell.
std::string nvml_driver_version();

}  // namespace perseus
