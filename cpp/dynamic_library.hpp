// Loading a driver library at run time (dlopen), so that perseus builds,
// installs and imports on machines without an NVIDIA driver. Shared by the
// NVML and CUDA driver loaders.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace perseus {

// A library, or a required symbol in it, could not be loaded. The message
// names the library and says how to point perseus at another one.
class LibraryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// dlopen()s `path` (RTLD_NOW | RTLD_LOCAL) and never closes it. `library`
// names it in messages ("the NVML library"); `remedy` ends the message.
void* open_library(const std::string& path, const std::string& library, const std::string& remedy);

// The address of `symbol`, or nullptr when it is missing and not `required`;
// a missing required symbol throws LibraryError ending with `remedy`.
void* library_symbol(void* handle, const char* symbol, bool required, const std::string& path,
                     const std::string& library, const std::string& remedy);

// The API table loaded from $`variable` (or `default_path` when unset),
// loaded once per path by `load` and never freed: host functions and worker
// threads may still call into it while the process exits. Thread-safe.
template <typename Api>
const Api& load_once(const char* variable, const char* default_path,
                     std::unique_ptr<Api> (*load)(const std::string&)) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Api>> loaded;
  const char* env = std::getenv(variable);
  const std::string path = (env != nullptr && *env != '\0') ? env : default_path;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(path);
  if (it == loaded.end()) it = loaded.emplace(path, load(path)).first;
  return *it->second;
}

}  // namespace perseus
