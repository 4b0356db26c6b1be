// The CUDA driver API, loaded at run time, for two jobs: enqueueing a host
// function on a stream (cuLaunchHostFunc, the switcher's stream-ordered
// switching), and loading and launching the profiler's blocking-power kernel
// from PTX (cuda_module.hpp). It is the only place perseus loads libcuda.
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
struct ContextOpaque;                 // struct CUctx_st
using Context = ContextOpaque*;       // CUcontext
struct ModuleOpaque;                  // struct CUmod_st
using ModuleHandle = ModuleOpaque*;   // CUmodule
struct FunctionOpaque;                // struct CUfunc_st
using Function = FunctionOpaque*;     // CUfunction
using DevicePtr = std::uint64_t;      // CUdeviceptr (64-bit builds)

enum : Result {
  kSuccess = 0,
  kErrorNoDevice = 100,
  kErrorInvalidContext = 201,
  kErrorInvalidHandle = 400,
  kErrorStreamCaptureUnsupported = 900,
};

// cuMemHostAlloc flags.
inline constexpr unsigned kMemHostAllocPortable = 0x01;
inline constexpr unsigned kMemHostAllocDeviceMap = 0x02;

struct Api {
  std::string path;
  Result (*init)(unsigned);                                             // cuInit
  Result (*error_name)(Result, const char**);                           // cuGetErrorName
  Result (*error_string)(Result, const char**);                         // cuGetErrorString
  Result (*launch_host_func)(Stream, HostFn, void*);                    // cuLaunchHostFunc
  Result (*ctx_get_current)(Context*);                                  // cuCtxGetCurrent
  Result (*module_load_data)(ModuleHandle*, const void*);               // cuModuleLoadData
  Result (*module_unload)(ModuleHandle);                                // cuModuleUnload
  Result (*module_get_function)(Function*, ModuleHandle, const char*);  // cuModuleGetFunction
  Result (*mem_host_alloc)(void**, std::size_t, unsigned);              // cuMemHostAlloc
  Result (*mem_host_get_device_pointer)(DevicePtr*, void*, unsigned);   // ..._v2
  Result (*mem_free_host)(void*);                                       // cuMemFreeHost
  Result (*launch_kernel)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, Stream, void**, void**);  // cuLaunchKernel
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

// Throws Error unless code is kSuccess.
void check(const Api& api, Result code, const char* function);

}  // namespace perseus::cuda
