// NVML (the NVIDIA Management Library), loaded at run time.
//
// perseus must build, install and import on machines without an NVIDIA
// driver, so it never links against NVML and never includes NVIDIA's headers.
// The few types, constants and function signatures it uses are declared here
// (they are part of NVML's stable C ABI), and the library is opened with
// dlopen() the first time something asks for it:
//
//   $PERSEUS_NVML_LIBRARY   a path, if set (the tests point it at a fake)
//   libnvidia-ml.so.1       otherwise, found by the dynamic loader
//
// A library that was opened is never closed: NVML handles and worker threads
// may outlive any one object, and unloading a driver library while a thread
// still runs in it would crash the process at exit.
//
// Device numbering follows CUDA: device i is the i-th entry of
// CUDA_VISIBLE_DEVICES when that variable is set (an NVML index, or a GPU
// UUID or unique UUID prefix), and NVML index i otherwise. Like most tools we
// assume CUDA's order equals NVML's (PCI bus) order, which holds on machines
// with one GPU model (set CUDA_DEVICE_ORDER=PCI_BUS_ID to be certain).
#pragma once

#include "dynamic_library.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace perseus::nvml {

// ---- The NVML ABI we use (nvml.h's names, declared by us). ----------------
using Return = int;            // nvmlReturn_t
struct DeviceOpaque;           // struct nvmlDevice_st
using Device = DeviceOpaque*;  // nvmlDevice_t

// The return codes perseus names (nvmlReturn_t values). Unscoped, so that
// they compare with the plain Return that NVML hands back.
enum ReturnCode : Return {
  kSuccess = 0,
  kErrorUninitialized = 1,
  kErrorInvalidArgument = 2,
  kErrorNotSupported = 3,
  kErrorNoPermission = 4,
  kErrorNotFound = 6,
  kErrorInsufficientSize = 7,
  kErrorDriverNotLoaded = 9,
  kErrorLibraryNotFound = 12,
  kErrorFunctionNotFound = 13,
  kErrorGpuIsLost = 15,
  kErrorResetRequired = 16,
  kErrorLibRmVersionMismatch = 18,
  kErrorInUse = 19,
  kErrorUnknown = 999,
};

// nvml.h's names without the NVML_ prefix, for Python's NvmlReturn enum.
struct ReturnCodeName {
  ReturnCode code;
  const char* name;
};
inline constexpr ReturnCodeName kReturnCodeNames[] = {
    {kSuccess, "SUCCESS"},
    {kErrorUninitialized, "ERROR_UNINITIALIZED"},
    {kErrorInvalidArgument, "ERROR_INVALID_ARGUMENT"},
    {kErrorNotSupported, "ERROR_NOT_SUPPORTED"},
    {kErrorNoPermission, "ERROR_NO_PERMISSION"},
    {kErrorNotFound, "ERROR_NOT_FOUND"},
    {kErrorInsufficientSize, "ERROR_INSUFFICIENT_SIZE"},
    {kErrorDriverNotLoaded, "ERROR_DRIVER_NOT_LOADED"},
    {kErrorLibraryNotFound, "ERROR_LIBRARY_NOT_FOUND"},
    {kErrorFunctionNotFound, "ERROR_FUNCTION_NOT_FOUND"},
    {kErrorGpuIsLost, "ERROR_GPU_IS_LOST"},
    {kErrorResetRequired, "ERROR_RESET_REQUIRED"},
    {kErrorLibRmVersionMismatch, "ERROR_LIB_RM_VERSION_MISMATCH"},
    {kErrorInUse, "ERROR_IN_USE"},
    {kErrorUnknown, "ERROR_UNKNOWN"},
};

enum ClockType : unsigned {  // nvmlClockType_t
  kClockGraphics = 0,
  kClockSm = 1,
  kClockMem = 2,
};

// Function pointers into the loaded library. Optional entries are null when
// the library lacks them (older drivers); required ones are always set.
struct Api {
  std::string path;                                // what was passed to dlopen()
  Return (*init)();                                // nvmlInit_v2
  Return (*shutdown)();                            // nvmlShutdown
  const char* (*error_string)(Return);             // nvmlErrorString
  Return (*device_count)(unsigned*);               // nvmlDeviceGetCount_v2
  Return (*handle_by_index)(unsigned, Device*);    // nvmlDeviceGetHandleByIndex_v2
  Return (*handle_by_uuid)(const char*, Device*);  // nvmlDeviceGetHandleByUUID
  Return (*device_uuid)(Device, char*, unsigned);  // nvmlDeviceGetUUID
  Return (*device_name)(Device, char*, unsigned);  // nvmlDeviceGetName
  Return (*device_index)(Device, unsigned*);       // nvmlDeviceGetIndex
  Return (*supported_memory_clocks)(Device, unsigned*, unsigned*);
  Return (*supported_graphics_clocks)(Device, unsigned, unsigned*, unsigned*);
  Return (*clock_info)(Device, ClockType, unsigned*);  // nvmlDeviceGetClockInfo
  Return (*set_gpu_locked_clocks)(Device, unsigned, unsigned);
  Return (*reset_gpu_locked_clocks)(Device);
  Return (*set_memory_locked_clocks)(Device, unsigned, unsigned);  // optional
  Return (*reset_memory_locked_clocks)(Device);                    // optional
  Return (*total_energy)(Device, unsigned long long*);             // optional, mJ
  Return (*driver_version)(char*, unsigned);                       // optional
  // What the party that made this thread's last locked-clock call says about
  // `code` ("" : nothing), used in Error's message instead of hint(code).
  // Null for NVML itself; the clock service's route sets it
  // (clockd_client.cpp), since a refusal there is its rules, not root.
  std::string (*explain)(Return) = nullptr;
};

// api.explain(code), or "" where the Api has none.
inline std::string explanation(const Api& api, Return code) {
  return api.explain != nullptr ? api.explain(code) : std::string();
}

// ---- Errors. ----------------------------------------------------------------

// The library or a required symbol could not be loaded (dynamic_library.hpp).
using LibraryError = perseus::LibraryError;

// An NVML call returned an error. what() is "<function>: <NVML's string>
// (NVML_ERROR code N). <hint>", the hint saying what usually fixes it.
class Error : public std::runtime_error {
 public:
  Error(const Api& api, Return code, const std::string& function);
  // With `why` (when not empty) in place of the advice: what the party that
  // made the call said about it (Api::explain, read right after the call).
  Error(const Api& api, Return code, const std::string& function, const std::string& why);
  Return code() const { return code_; }
  const std::string& function() const { return function_; }

 private:
  Return code_;
  std::string function_;
};

// NVML's own description of `code` ("Insufficient Permissions", ...).
std::string error_string(const Api& api, Return code);
// What usually fixes `code`, or "" when we have nothing to add.
const char* hint(Return code);

// ---- Loading. ---------------------------------------------------------------

// Opens the library named by $PERSEUS_NVML_LIBRARY (read on every call), or
// libnvidia-ml.so.1, once per distinct path. Thread-safe.
// Throws LibraryError.
const Api& api();

// Throws Error unless code is kSuccess.
inline void check(const Api& a, Return code, const char* function) {
  if (code != kSuccess) throw Error(a, code, function);
}

// RAII for nvmlInit_v2 / nvmlShutdown (NVML counts them). Not copyable.
class Session {
 public:
  Session();  // throws LibraryError, Error
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  const Api& api() const { return *api_; }

 private:
  const Api* api_;
};

// One GPU as CUDA numbers it (see the preamble). Needs a live Session.
struct DeviceInfo {
  int cuda_index = 0;       // what the caller asked for; -1 when opened by UUID
  unsigned nvml_index = 0;  // NVML's (PCI order) index
  Device handle = nullptr;
  std::string name;
  std::string uuid;
};

// Number of GPUs CUDA would see (honours CUDA_VISIBLE_DEVICES).
int visible_device_count(const Session& session);
// Throws std::out_of_range if no such visible device, Error on NVML errors.
DeviceInfo open_device(const Session& session, int cuda_index);
// The GPU with this UUID, whatever CUDA_VISIBLE_DEVICES says (the clock
// watchdog resets GPUs by UUID, which no renumbering changes). Throws
// std::out_of_range if no GPU has it, Error on other NVML errors.
DeviceInfo open_device_by_uuid(const Session& session, const std::string& uuid);

// Supported clocks in MHz, ascending. An empty vector when NVML says the
// query is not supported on this device; other errors throw.
std::vector<unsigned> supported_memory_clocks(const Api& api, Device device);
std::vector<unsigned> supported_graphics_clocks(const Api& api, Device device, unsigned memory_mhz);

// Monotonic nanoseconds (CLOCK_MONOTONIC, the clock of time.monotonic_ns()).
std::int64_t now_ns();

}  // namespace perseus::nvml
