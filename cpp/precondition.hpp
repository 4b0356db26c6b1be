// Preconditions checked in debug builds.
//
// PERSEUS_EXPECT(condition, what) states a precondition where it binds. In
// a build without NDEBUG (CMake's Debug, which the sanitize CI job uses) a
// violated one throws std::logic_error naming the file, line and `what`;
// under NDEBUG (Release, the wheel) it compiles to nothing, so the solver's
// inner loops pay nothing for it. A throw, not abort(): the C++ tests check
// it in-process with EXPECT_THROW (no forked death test, which ASan and
// threads make slow and fragile), and from Python a bug surfaces as an
// exception with a message instead of killing the interpreter.
#pragma once

#include <stdexcept>
#include <string>

namespace perseus {

#ifdef NDEBUG
inline constexpr bool kPreconditionsChecked = false;
#define PERSEUS_EXPECT(condition, what) ((void)0)
#else
inline constexpr bool kPreconditionsChecked = true;
[[noreturn]] inline void precondition_failed(const char* file, int line, const char* condition,
                                             const char* what) {
  throw std::logic_error(std::string("perseus internal error: precondition violated at ") + file + ":" +
                         std::to_string(line) + ": " + what + " (" + condition + ")");
}
#define PERSEUS_EXPECT(condition, what) \
  ((condition) ? (void)0 : ::perseus::precondition_failed(__FILE__, __LINE__, #condition, (what)))
#endif

}  // namespace perseus
