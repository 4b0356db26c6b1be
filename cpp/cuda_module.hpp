// A kernel from PTX and host memory the GPU can see, through the run-time
// loaded CUDA driver (cuda_loader.hpp): what the profiler needs to measure
// blocking power without CuPy (python/perseus/profiler/_blocking.py).
//
// Both objects belong to the CUDA context that is current on the calling
// thread when they are made, and must be closed with that context still
// alive (torch keeps its primary context for the life of the process). No
// context current is an error, not a silent cuCtxCreate: a context of our
// own would hold GPU memory and run apart from the framework's work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_loader.hpp"

namespace perseus::cuda {

// Page-locked host memory mapped into the device's address space
// (cuMemHostAlloc, PORTABLE | DEVICEMAP), zeroed. Throws LibraryError, Error.
class MappedHostMemory {
 public:
  explicit MappedHostMemory(std::size_t size_bytes);
  ~MappedHostMemory();  // close(), errors swallowed
  MappedHostMemory(const MappedHostMemory&) = delete;
  MappedHostMemory& operator=(const MappedHostMemory&) = delete;

  std::uintptr_t host_address() const { return reinterpret_cast<std::uintptr_t>(host_); }
  DevicePtr device_address() const { return device_; }
  std::size_t size_bytes() const { return size_bytes_; }
  void close();  // cuMemFreeHost; idempotent. Throws Error.

 private:
  const Api* api_;
  void* host_ = nullptr;
  DevicePtr device_ = 0;
  std::size_t size_bytes_;
};

// A module loaded from a PTX image into the current context. Throws
// LibraryError, Error (kErrorInvalidContext when no context is current).
class Module {
 public:
  explicit Module(const std::string& image);
  ~Module();  // close(), errors swallowed
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Launches `kernel` on a grid of `grid` blocks of `block` threads on
  // `stream`; every kernel parameter is a 64-bit integer. Throws Error.
  // Precondition: not closed (std::logic_error).
  void launch(const std::string& kernel, unsigned grid, unsigned block, std::uintptr_t stream,
              const std::vector<std::uint64_t>& arguments) const;
  void close();  // cuModuleUnload; idempotent. Throws Error.

 private:
  const Api* api_;
  ModuleHandle module_ = nullptr;
};

}  // namespace perseus::cuda
