#include "cuda_module.hpp"

#include <cstring>
#include <stdexcept>

namespace perseus::cuda {

namespace {

void require_context(const Api& api, const char* what) {
  Context context = nullptr;
  check(api, api.ctx_get_current(&context), "cuCtxGetCurrent");
  if (context == nullptr) throw Error(api, kErrorInvalidContext, what);
}

}  // namespace

MappedHostMemory::MappedHostMemory(std::size_t size_bytes)
    : api_(&cuda::api()), size_bytes_(size_bytes) {
  require_context(*api_, "cuMemHostAlloc");
  check(*api_, api_->mem_host_alloc(&host_, size_bytes, kMemHostAllocPortable | kMemHostAllocDeviceMap),
        "cuMemHostAlloc");
  try {
    check(*api_, api_->mem_host_get_device_pointer(&device_, host_, 0), "cuMemHostGetDevicePointer");
  } catch (...) {
    api_->mem_free_host(host_);
    throw;
  }
  std::memset(host_, 0, size_bytes);
}

MappedHostMemory::~MappedHostMemory() {
  try {
    close();
  } catch (const Error&) {  // nothing to do about a failed free at destruction
  }
}

void MappedHostMemory::close() {
  if (host_ == nullptr) return;
  void* host = host_;
  host_ = nullptr;
  device_ = 0;
  check(*api_, api_->mem_free_host(host), "cuMemFreeHost");
}

Module::Module(const std::string& image) : api_(&cuda::api()) {
  require_context(*api_, "cuModuleLoadData");
  // The driver reads a NUL-terminated PTX image; std::string's c_str() is one.
  check(*api_, api_->module_load_data(&module_, image.c_str()), "cuModuleLoadData");
}

Module::~Module() {
  try {
    close();
  } catch (const Error&) {  // nothing to do about a failed unload at destruction
  }
}

void Module::launch(const std::string& kernel, unsigned grid, unsigned block, std::uintptr_t stream,
                    const std::vector<std::uint64_t>& arguments) const {
  if (module_ == nullptr) throw std::logic_error("the CUDA module is closed");
  Function function = nullptr;
  check(*api_, api_->module_get_function(&function, module_, kernel.c_str()), "cuModuleGetFunction");
  // cuLaunchKernel takes one pointer per parameter; it copies the values.
  std::vector<std::uint64_t> values(arguments);
  std::vector<void*> pointers(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) pointers[i] = &values[i];
  check(*api_,
        api_->launch_kernel(function, grid, 1, 1, block, 1, 1, 0, reinterpret_cast<Stream>(stream),
                            pointers.data(), nullptr),
        "cuLaunchKernel");
}

void Module::close() {
  if (module_ == nullptr) return;
  ModuleHandle module = module_;
  module_ = nullptr;
  check(*api_, api_->module_unload(module), "cuModuleUnload");
}

}  // namespace perseus::cuda
