#include "nvml_device.hpp"

#include <stdexcept>
#include <utility>

namespace perseus {

namespace {

void require(const nvml::Api& api, const void* fn, const char* name) {
  if (fn == nullptr) throw nvml::Error(api, nvml::kErrorFunctionNotFound, name);
}

}  // namespace

NvmlDevice::NvmlDevice(std::unique_ptr<nvml::Session> session, nvml::DeviceInfo info)
    : session_(std::move(session)), info_(std::move(info)) {}

NvmlDevice::NvmlDevice(int cuda_index) : session_(std::make_unique<nvml::Session>()) {
  info_ = nvml::open_device(*session_, cuda_index);
}

NvmlDevice NvmlDevice::by_uuid(const std::string& uuid) {
  auto session = std::make_unique<nvml::Session>();
  nvml::DeviceInfo info = nvml::open_device_by_uuid(*session, uuid);
  return NvmlDevice(std::move(session), std::move(info));
}

std::vector<unsigned> NvmlDevice::supported_memory_clocks() const {
  return nvml::supported_memory_clocks(api(), info_.handle);
}

std::vector<unsigned> NvmlDevice::supported_graphics_clocks(std::optional<unsigned> memory_mhz) const {
  if (!memory_mhz) {
    const std::vector<unsigned> memory = supported_memory_clocks();
    if (memory.empty()) return {};
    memory_mhz = memory.back();
  }
  return nvml::supported_graphics_clocks(api(), info_.handle, *memory_mhz);
}

unsigned NvmlDevice::clock_mhz(nvml::ClockType type) const {
  unsigned mhz = 0;
  nvml::check(api(), api().clock_info(info_.handle, type, &mhz), "nvmlDeviceGetClockInfo");
  return mhz;
}

unsigned long long NvmlDevice::total_energy_mj() const {
  require(api(), reinterpret_cast<const void*>(api().total_energy),
          "nvmlDeviceGetTotalEnergyConsumption");
  unsigned long long mj = 0;
  nvml::check(api(), api().total_energy(info_.handle, &mj), "nvmlDeviceGetTotalEnergyConsumption");
  return mj;
}

void NvmlDevice::set_locked_clocks(unsigned min_mhz, unsigned max_mhz) const {
  if (min_mhz > max_mhz)
    throw std::invalid_argument("min_mhz (" + std::to_string(min_mhz) + ") must not exceed max_mhz (" +
                                std::to_string(max_mhz) + ")");
  nvml::check(api(), api().set_gpu_locked_clocks(info_.handle, min_mhz, max_mhz),
              "nvmlDeviceSetGpuLockedClocks");
}

void NvmlDevice::reset_locked_clocks() const {
  nvml::check(api(), api().reset_gpu_locked_clocks(info_.handle), "nvmlDeviceResetGpuLockedClocks");
}

void NvmlDevice::set_memory_locked_clocks(unsigned min_mhz, unsigned max_mhz) const {
  require(api(), reinterpret_cast<const void*>(api().set_memory_locked_clocks),
          "nvmlDeviceSetMemoryLockedClocks");
  if (min_mhz > max_mhz)
    throw std::invalid_argument("min_mhz (" + std::to_string(min_mhz) + ") must not exceed max_mhz (" +
                                std::to_string(max_mhz) + ")");
  nvml::check(api(), api().set_memory_locked_clocks(info_.handle, min_mhz, max_mhz),
              "nvmlDeviceSetMemoryLockedClocks");
}

void NvmlDevice::reset_memory_locked_clocks() const {
  require(api(), reinterpret_cast<const void*>(api().reset_memory_locked_clocks),
          "nvmlDeviceResetMemoryLockedClocks");
  nvml::check(api(), api().reset_memory_locked_clocks(info_.handle),
              "nvmlDeviceResetMemoryLockedClocks");
}

nvml::ClockType parse_clock_type(const std::string& kind) {
  if (kind == "sm") return nvml::kClockSm;
  if (kind == "graphics") return nvml::kClockGraphics;
  if (kind == "memory") return nvml::kClockMem;
  throw std::invalid_argument("kind must be 'sm', 'graphics' or 'memory', not '" + kind + "'");
}

int nvml_device_count() {
  const nvml::Session session;
  return nvml::visible_device_count(session);
}

std::string nvml_driver_version() {
  const nvml::Session session;
  const nvml::Api& a = session.api();
  if (a.driver_version == nullptr) return std::string();
  char buffer[96] = {};
  nvml::check(a, a.driver_version(buffer, sizeof buffer), "nvmlSystemGetDriverVersion");
  return std::string(buffer);
}

}  // namespace perseus
