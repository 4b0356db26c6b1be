// The CUDA driver API, loaded at run time, for one job: enqueueing a host
// function on a stream (cuLaunchHostFunc).
//
// Like NVML (nvml_loader.hpp) the driver library is never linked and its
// headers are never included, so perseus builds and imports without CUDA.
// It is opened with dlopen() on first use:
//
//   $PERSEUS_CUDA_LIBRARY   a path, if set (the tests point it at a fake)
//   libcuda.so.1            otherwise
//
// Streams are plain integers here: the CUstream handle that frameworks
// expose (torch.cuda.Stream.cuda_stream, cupy.cuda.Stream.ptr); 0 is the
// legacy default stream of the calling thread's current context.
//
// A host function runs on a CUDA-internal thread once all earlier work in
// its stream has finished, and later work in the stream waits for it to
// return. CUDA forbids calling CUDA from it (that can deadlock the driver),
// and anything slow in it stalls the GPU, so perseus's host function only
// hands a number to another thread.
#pragma once

#include "dynamic_library.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace perseus::cuda {

using Result = int;                   // CUresult
struct StreamOpaque;                  // struct CUstream_st
using Stream = StreamOpaque*;         // CUstream
using HostFn = void (*)(void* data);  // CUhostFn

enum : Result {
  kSuccess = 0,
  kErrorInvalidValue = 1,
  kErrorNotInitialized = 3,
  kErrorNoDevice = 100,
  kErrorInvalidContext = 201,
  kErrorInvalidHandle = 400,
  kErrorNotPermitted = 800,
  kErrorNotSupported = 801,
  kErrorStreamCaptureUnsupported = 900,
};

struct Api {
  std::string path;
  Result (*init)(unsigned);                              // cuInit
  Result (*error_name)(Result, const char**);            // cuGetErrorName
  Result (*error_string)(Result, const char**);          // cuGetErrorString
  Result (*launch_host_func)(Stream, HostFn, void*);     // cuLaunchHostFunc
};

// The library or a required symbol could not be loaded (dynamic_library.hpp).
using LibraryError = perseus::LibraryError;

// A driver call failed: "<function>: <CUDA_ERROR_NAME>: <description>. <hint>".
class Error : public std::runtime_error {
 public:
  Error(const Api& api, Result code, const std::string& function);
  Result code() const { return code_; }

 private:
  Result code_;
};

// Opens $PERSEUS_CUDA_LIBRARY or libcuda.so.1 (once per distinct path) and
// calls cuInit(0) on first use. Thread-safe. Throws LibraryError or Error.
const Api& api();

// Enqueues fn(data) on `stream`. Throws Error.
void launch_host_func(const Api& api, std::uintptr_t stream, HostFn fn, void* data);

}  // namespace perseus::cuda
