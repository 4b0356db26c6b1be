#include "nvml_loader.hpp"

#include "dynamic_library.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>

namespace perseus::nvml {

namespace {

constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";
constexpr const char* kLibraryVariable = "PERSEUS_NVML_LIBRARY";

template <typename Fn>
void bind(void* handle, const char* symbol, Fn& out, bool required, const std::string& path) {
  out = reinterpret_cast<Fn>(library_symbol(
      handle, symbol, required, path, "the NVML library",
      std::string("driver too old? Set ") + kLibraryVariable + " to a newer libnvidia-ml.so.1"));
}

std::unique_ptr<Api> load(const std::string& path) {
  void* handle = open_library(path, "the NVML library",
                              std::string("Install the NVIDIA driver, or set ") + kLibraryVariable +
                                  " to the path of libnvidia-ml.so.1.");
  auto a = std::make_unique<Api>();
  a->path = path;
  bind(handle, "nvmlInit_v2", a->init, true, path);
  bind(handle, "nvmlShutdown", a->shutdown, true, path);
  bind(handle, "nvmlErrorString", a->error_string, true, path);
  bind(handle, "nvmlDeviceGetCount_v2", a->device_count, true, path);
  bind(handle, "nvmlDeviceGetHandleByIndex_v2", a->handle_by_index, true, path);
  bind(handle, "nvmlDeviceGetHandleByUUID", a->handle_by_uuid, true, path);
  bind(handle, "nvmlDeviceGetUUID", a->device_uuid, true, path);
  bind(handle, "nvmlDeviceGetName", a->device_name, true, path);
  bind(handle, "nvmlDeviceGetIndex", a->device_index, true, path);
  bind(handle, "nvmlDeviceGetSupportedMemoryClocks", a->supported_memory_clocks, true, path);
  bind(handle, "nvmlDeviceGetSupportedGraphicsClocks", a->supported_graphics_clocks, true, path);
  bind(handle, "nvmlDeviceGetClockInfo", a->clock_info, true, path);
  bind(handle, "nvmlDeviceSetGpuLockedClocks", a->set_gpu_locked_clocks, true, path);
  bind(handle, "nvmlDeviceResetGpuLockedClocks", a->reset_gpu_locked_clocks, true, path);
  bind(handle, "nvmlDeviceSetMemoryLockedClocks", a->set_memory_locked_clocks, false, path);
  bind(handle, "nvmlDeviceResetMemoryLockedClocks", a->reset_memory_locked_clocks, false, path);
  bind(handle, "nvmlDeviceGetTotalEnergyConsumption", a->total_energy, false, path);
  bind(handle, "nvmlSystemGetDriverVersion", a->driver_version, false, path);
  // The handle is deliberately never dlclose()d (see the header).
  return a;
}

// A comma-separated CUDA_VISIBLE_DEVICES, cut where CUDA stops reading it:
// at the first empty or malformed entry.
std::vector<std::string> visible_entries(const char* value) {
  std::vector<std::string> out;
  std::string entry;
  const std::string s(value);
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    entry = s.substr(start, end - start);
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    if (entry.empty()) break;
    const bool numeric = std::all_of(entry.begin(), entry.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
    const bool uuid = entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0;
    if (!numeric && !uuid) break;  // e.g. "-1": CUDA sees nothing from here on
    out.push_back(entry);
    start = end + 1;
  }
  return out;
}

std::string read_string(const Api& a, Return (*fn)(Device, char*, unsigned), Device d,
                        const char* function) {
  char buffer[256] = {};
  check(a, fn(d, buffer, sizeof buffer), function);
  return std::string(buffer);
}

// Calls query(count, buffer) with a buffer that grows until the list fits.
template <typename Query>
std::vector<unsigned> clock_list(const Api& a, const char* function, Query query) {
  std::vector<unsigned> clocks(256);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto count = static_cast<unsigned>(clocks.size());
    const Return rc = query(&count, clocks.data());
    if (rc == kSuccess) {
      clocks.resize(count);
      std::sort(clocks.begin(), clocks.end());
      clocks.erase(std::unique(clocks.begin(), clocks.end()), clocks.end());
      return clocks;
    }
    if (rc == kErrorNotSupported) return {};
    if (rc != kErrorInsufficientSize) throw Error(a, rc, function);
    clocks.resize(std::max<std::size_t>(count, 2 * clocks.size()));
  }
  throw Error(a, kErrorInsufficientSize, function);
}

}  // namespace

std::string error_string(const Api& a, Return code) {
  const char* s = a.error_string != nullptr ? a.error_string(code) : nullptr;
  return s != nullptr ? std::string(s) : "unknown NVML error";
}

const char* hint(Return code) {
  switch (code) {
    case kErrorNoPermission:
      return "Changing GPU clocks needs root or the CAP_SYS_ADMIN capability: run as root, "
             "grant the capability to the Python binary (sudo setcap cap_sys_admin+ep "
             "<python>), or start the container with --cap-add SYS_ADMIN.";
    case kErrorNotSupported:
      return "This GPU, driver or environment does not allow locking clocks (it needs a "
             "Volta or newer GPU; clock control is usually unavailable under MIG, vGPU or "
             "in some cloud VMs).";
    case kErrorInvalidArgument:
      return "The clock is outside the range the GPU supports, or the device handle is "
             "stale.";
    case kErrorDriverNotLoaded:
      return "The NVIDIA kernel driver is not loaded; check that `nvidia-smi` works.";
    case kErrorLibRmVersionMismatch:
      return "The driver library and the kernel module have different versions; reload "
             "the driver or reboot.";
    case kErrorGpuIsLost:
    case kErrorResetRequired:
      return "The GPU stopped responding and needs a reset (nvidia-smi -r) or a reboot.";
    case kErrorUninitialized:
      return "NVML was used before nvmlInit; this is a perseus bug, please report it.";
    default: return "";
  }
}

Error::Error(const Api& a, Return code, const std::string& function)
    : Error(a, code, function, explanation(a, code)) {}

Error::Error(const Api& a, Return code, const std::string& function, const std::string& why)
    : std::runtime_error([&] {
        std::string m =
            function + ": " + error_string(a, code) + " (NVML error " + std::to_string(code) + ")";
        const std::string h = why.empty() ? std::string(hint(code)) : why;
        if (!h.empty()) m += ". " + h;
        return m;
      }()),
      code_(code),
      function_(function) {}

const Api& api() { return load_once<Api>(kLibraryVariable, kDefaultLibrary, &load); }

Session::Session() : api_(&nvml::api()) { check(*api_, api_->init(), "nvmlInit_v2"); }

Session::~Session() { api_->shutdown(); }

int visible_device_count(const Session& session) {
  const Api& a = session.api();
  unsigned count = 0;
  check(a, a.device_count(&count), "nvmlDeviceGetCount_v2");
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd == nullptr) return static_cast<int>(count);
  return static_cast<int>(visible_entries(cvd).size());
}

DeviceInfo open_device(const Session& session, int cuda_index) {
  const Api& a = session.api();
  DeviceInfo info;
  info.cuda_index = cuda_index;
  unsigned count = 0;
  check(a, a.device_count(&count), "nvmlDeviceGetCount_v2");
  if (cuda_index < 0)
    throw std::out_of_range("device index must be >= 0, got " + std::to_string(cuda_index));

  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd == nullptr) {
    if (static_cast<unsigned>(cuda_index) >= count)
      throw std::out_of_range("no GPU " + std::to_string(cuda_index) + ": NVML sees " +
                              std::to_string(count) + " GPU(s)");
    info.nvml_index = static_cast<unsigned>(cuda_index);
    check(a, a.handle_by_index(info.nvml_index, &info.handle), "nvmlDeviceGetHandleByIndex_v2");
  } else {
    const std::vector<std::string> entries = visible_entries(cvd);
    if (static_cast<std::size_t>(cuda_index) >= entries.size())
      throw std::out_of_range("no GPU " + std::to_string(cuda_index) + ": CUDA_VISIBLE_DEVICES='" +
                              cvd + "' makes " + std::to_string(entries.size()) + " GPU(s) visible");
    const std::string& entry = entries[static_cast<std::size_t>(cuda_index)];
    if (std::isdigit(static_cast<unsigned char>(entry[0])) != 0) {
      const unsigned long index = std::strtoul(entry.c_str(), nullptr, 10);
      if (index >= count)
        throw std::out_of_range("CUDA_VISIBLE_DEVICES entry " + entry + " (device " +
                                std::to_string(cuda_index) + ") is not a GPU: NVML sees " +
                                std::to_string(count));
      check(a, a.handle_by_index(static_cast<unsigned>(index), &info.handle),
            "nvmlDeviceGetHandleByIndex_v2");
    } else {
      // A full UUID resolves directly; CUDA also accepts a unique prefix.
      const Return rc = a.handle_by_uuid(entry.c_str(), &info.handle);
      if (rc != kSuccess) {
        if (rc != kErrorNotFound && rc != kErrorInvalidArgument)
          throw Error(a, rc, "nvmlDeviceGetHandleByUUID");
        int matches = 0;
        for (unsigned i = 0; i < count; ++i) {
          Device d = nullptr;
          check(a, a.handle_by_index(i, &d), "nvmlDeviceGetHandleByIndex_v2");
          if (read_string(a, a.device_uuid, d, "nvmlDeviceGetUUID").rfind(entry, 0) == 0) {
            info.handle = d;
            ++matches;
          }
        }
        if (matches != 1)
          throw std::out_of_range("CUDA_VISIBLE_DEVICES entry '" + entry + "' (device " +
                                  std::to_string(cuda_index) + ") matches " + std::to_string(matches) +
                                  " GPU UUIDs; it must match one");
      }
    }
    check(a, a.device_index(info.handle, &info.nvml_index), "nvmlDeviceGetIndex");
  }
  info.name = read_string(a, a.device_name, info.handle, "nvmlDeviceGetName");
  info.uuid = read_string(a, a.device_uuid, info.handle, "nvmlDeviceGetUUID");
  return info;
}

DeviceInfo open_device_by_uuid(const Session& session, const std::string& uuid) {
  const Api& a = session.api();
  DeviceInfo info;
  info.cuda_index = -1;
  const Return rc = a.handle_by_uuid(uuid.c_str(), &info.handle);
  if (rc == kErrorNotFound || rc == kErrorInvalidArgument)
    throw std::out_of_range("no GPU has the UUID '" + uuid + "'");
  check(a, rc, "nvmlDeviceGetHandleByUUID");
  check(a, a.device_index(info.handle, &info.nvml_index), "nvmlDeviceGetIndex");
  info.name = read_string(a, a.device_name, info.handle, "nvmlDeviceGetName");
  info.uuid = read_string(a, a.device_uuid, info.handle, "nvmlDeviceGetUUID");
  return info;
}

std::vector<unsigned> supported_memory_clocks(const Api& a, Device device) {
  return clock_list(a, "nvmlDeviceGetSupportedMemoryClocks", [&](unsigned* n, unsigned* out) {
    return a.supported_memory_clocks(device, n, out);
  });
}

std::vector<unsigned> supported_graphics_clocks(const Api& a, Device device, unsigned memory_mhz) {
  return clock_list(a, "nvmlDeviceGetSupportedGraphicsClocks", [&](unsigned* n, unsigned* out) {
    return a.supported_graphics_clocks(device, memory_mhz, n, out);
  });
}

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace perseus::nvml
