// The client side of `perseus clockd`, the privileged clock service
// (python/perseus/clockd.py): locking clocks needs root or CAP_SYS_ADMIN,
// which most clusters do not give training jobs. A process that is not
// privileged sends its four locked-clock calls to the service instead, over
// a Unix socket, and the service (root, started once per node) makes them if
// its rules let this user or group touch that GPU. It also resets a client's
// GPUs when the client's connection closes, however the client died, so it
// replaces the clock watchdog for that process.
//
// The seam is nvml::Api: routed() gives an Api whose locked-clock functions
// talk to the service and whose other functions are NVML's own, so the
// switcher and ClockLocks do not change. Requests are one line each,
// "sm_lock <uuid> <min> <max>", "sm_reset <uuid>", "mem_lock ...",
// "mem_reset <uuid>", answered by one line holding an NVML return code, so
// errors (NO_PERMISSION for a GPU the rules deny) read as NVML's own.
//
// One connection per process, opened at the first call, close-on-exec and
// closed in a forked child, so that its end-of-file means "the process that
// locked is gone".
#pragma once

#include <string>

#include "nvml_loader.hpp"

namespace perseus::clockd {

// Where a node's service listens unless PERSEUS_CLOCKD_SOCKET says otherwise.
inline constexpr const char* kDefaultSocket = "/run/perseus/clockd.sock";

// The service to use: PERSEUS_CLOCKD_SOCKET when set and not empty ("none":
// never), else kDefaultSocket when this process is not root and that socket
// exists, else "" (call NVML directly).
std::string socket_path();

// An Api like `direct` whose locked-clock calls go to the service at `path`.
// Lives as long as the process. One service per process: a second path
// throws std::invalid_argument.
const nvml::Api& routed(const nvml::Api& direct, const std::string& path);

}  // namespace perseus::clockd
