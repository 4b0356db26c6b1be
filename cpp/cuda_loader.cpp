#include "cuda_loader.hpp"

#include "dynamic_library.hpp"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace perseus::cuda {

namespace {

constexpr const char* kDefaultLibrary = "libcuda.so.1";
constexpr const char* kLibraryVariable = "PERSEUS_CUDA_LIBRARY";

template <typename Fn>
void bind(void* handle, const char* symbol, Fn& out, const std::string& path) {
  out = reinterpret_cast<Fn>(library_symbol(
      handle, symbol, true, path, "the CUDA driver library",
      std::string("driver older than CUDA 10? Set ") + kLibraryVariable + " to a newer libcuda.so.1"));
}

std::unique_ptr<Api> load(const std::string& path) {
  void* handle = open_library(path, "the CUDA driver library",
                              std::string("Stream-ordered switching needs the NVIDIA driver; "
                                          "install it, or set ") +
                                  kLibraryVariable + " to the path of libcuda.so.1.");
  auto a = std::make_unique<Api>();
  a->path = path;
  bind(handle, "cuInit", a->init, path);
  bind(handle, "cuGetErrorName", a->error_name, path);
  bind(handle, "cuGetErrorString", a->error_string, path);
  bind(handle, "cuLaunchHostFunc", a->launch_host_func, path);
  bind(handle, "cuCtxGetCurrent", a->ctx_get_current, path);
  bind(handle, "cuModuleLoadData", a->module_load_data, path);
  bind(handle, "cuModuleUnload", a->module_unload, path);
  bind(handle, "cuModuleGetFunction", a->module_get_function, path);
  bind(handle, "cuMemHostAlloc", a->mem_host_alloc, path);
  bind(handle, "cuMemHostGetDevicePointer_v2", a->mem_host_get_device_pointer, path);
  bind(handle, "cuMemFreeHost", a->mem_free_host, path);
  bind(handle, "cuLaunchKernel", a->launch_kernel, path);
  const Result rc = a->init(0);
  if (rc != kSuccess) throw Error(*a, rc, "cuInit");
  return a;  // never dlclose()d: host functions may still be queued
}

const char* hint(Result code) {
  switch (code) {
    case kErrorInvalidContext:
      return "No CUDA context is current on the calling thread: call from a thread where "
             "your framework has already used the GPU (e.g. after torch.cuda.set_device and a "
             "first CUDA operation).";
    case kErrorInvalidHandle:
      return "The stream handle is not a live CUDA stream of the current context (pass "
             "torch.cuda.current_stream().cuda_stream or a CuPy stream's .ptr).";
    case kErrorNoDevice: return "The driver sees no GPU; check CUDA_VISIBLE_DEVICES and nvidia-smi.";
    case kErrorStreamCaptureUnsupported:
      return "The stream is being captured into a CUDA graph; host functions cannot be "
             "enqueued on it while capturing.";
    default: return "";
  }
}

}  // namespace

Error::Error(const Api& a, Result code, const std::string& function)
    : std::runtime_error([&] {
        const char* name = nullptr;
        const char* text = nullptr;
        if (a.error_name == nullptr || a.error_name(code, &name) != kSuccess) name = nullptr;
        if (a.error_string == nullptr || a.error_string(code, &text) != kSuccess) text = nullptr;
        std::string m = function + ": " + (name != nullptr ? name : "CUDA error") + " (" +
                        std::to_string(code) + ")";
        if (text != nullptr) m += ": " + std::string(text);
        const char* h = hint(code);
        if (*h != '\0') m += ". " + std::string(h);
        return m;
      }()),
      code_(code) {}

const Api& api() { return load_once<Api>(kLibraryVariable, kDefaultLibrary, &load); }

void launch_host_func(const Api& a, std::uintptr_t stream, HostFn fn, void* data) {
  check(a, a.launch_host_func(reinterpret_cast<Stream>(stream), fn, data), "cuLaunchHostFunc");
}

void check(const Api& a, Result code, const char* function) {
  if (code != kSuccess) throw Error(a, code, function);
}

}  // namespace perseus::cuda
