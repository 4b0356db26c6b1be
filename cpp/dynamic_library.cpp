#include "dynamic_library.hpp"

#include <dlfcn.h>

namespace perseus {

void* open_library(const std::string& path, const std::string& library, const std::string& remedy) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw LibraryError("could not load " + library + " '" + path + "' (" +
                       (why != nullptr ? why : "unknown dlopen error") + "). " + remedy);
  }
  return handle;
}

void* library_symbol(void* handle, const char* symbol, bool required, const std::string& path,
                     const std::string& library, const std::string& remedy) {
  dlerror();
  void* address = dlsym(handle, symbol);
  if (address == nullptr && required)
    throw LibraryError(library + " '" + path + "' has no symbol " + symbol + "; " + remedy);
  return address;
}

}  // namespace perseus
