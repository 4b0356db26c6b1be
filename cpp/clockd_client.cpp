#include "clockd_client.hpp"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace perseus::clockd {

namespace {

struct Route {
  const nvml::Api* direct = nullptr;
  std::string path;
  nvml::Api api;
  std::mutex mutex;  // one request at a time on the one connection
  int fd = -1;
};

Route* g_route = nullptr;  // never freed: workers may call it until exit
std::mutex g_route_mutex;

// Why this thread's last request failed, in the service's words (the text
// after the code on its answer line) or ours; "" after a success. Read by
// explain() when the caller turns the code into an nvml::Error, on the same
// thread.
thread_local std::string t_reason;
thread_local nvml::Return t_code = nvml::kSuccess;  // the code t_reason explains

nvml::Return answered(nvml::Return code, std::string reason) {
  t_code = code;
  t_reason = std::move(reason);
  return code;
}

void before_fork() {
  if (g_route != nullptr) g_route->mutex.lock();
}
void after_fork_in_parent() {
  if (g_route != nullptr) g_route->mutex.unlock();
}
void after_fork_in_child() {
  if (g_route == nullptr) return;
  if (g_route->fd >= 0) close(g_route->fd);  // the parent's connection stays the parent's
  g_route->fd = -1;
  g_route->mutex.unlock();
}

bool connect_locked(Route& r) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (r.path.size() >= sizeof address.sun_path) {
    close(fd);
    errno = ENAMETOOLONG;
    return false;
  }
  std::memcpy(address.sun_path, r.path.c_str(), r.path.size() + 1);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return false;
  }
  r.fd = fd;
  return true;
}

bool send_all(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

bool read_line(int fd, std::string* line) {
  line->clear();
  char c = 0;
  for (;;) {
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
}

// One request; the service's answer, or an NVML-like code for what failed here.
nvml::Return request(const char* op, nvml::Device device, const unsigned* range) {
  Route& r = *g_route;
  char uuid[96] = {0};
  if (r.direct->device_uuid(device, uuid, sizeof uuid) != nvml::kSuccess)
    return nvml::kErrorInvalidArgument;
  std::string line = std::string(op) + " " + uuid;
  if (range != nullptr) line += " " + std::to_string(range[0]) + " " + std::to_string(range[1]);
  line += "\n";
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (r.fd < 0 && !connect_locked(r)) {
    answered(nvml::kErrorNoPermission,
             "cannot reach the clock service at " + r.path + " (" + std::strerror(errno) +
                 "): is `perseus clockd` running there? (PERSEUS_CLOCKD_SOCKET chooses the "
                 "socket; \"none\" calls NVML directly)");
    std::fprintf(stderr, "perseus: %s\n", t_reason.c_str());
    std::fflush(stderr);
    return t_code;
  }
  std::string answer;
  if (!send_all(r.fd, line) || !read_line(r.fd, &answer)) {
    close(r.fd);  // the service went away; the next call reconnects
    r.fd = -1;
    answered(nvml::kErrorUnknown, "the clock service at " + r.path + " closed the connection");
    std::fprintf(stderr, "perseus: %s\n", t_reason.c_str());
    std::fflush(stderr);
    return t_code;
  }
  // "<code>" or "<code> <why>" (services before the reason was added send the code alone).
  char* end = nullptr;
  const long code = std::strtol(answer.c_str(), &end, 10);
  if (end == answer.c_str())
    return answered(nvml::kErrorUnknown,
                    "the clock service at " + r.path + " gave an answer that is not a code: " + answer);
  while (*end == ' ') ++end;
  std::string reason = end;
  if (reason.empty() && code == nvml::kErrorNoPermission)
    reason = "the clock service at " + r.path +
             " refused it: its --allow rules do not let this user or group lock this GPU";
  return answered(static_cast<nvml::Return>(code), reason);
}

std::string explain(nvml::Return code) {
  return code != nvml::kSuccess && code == t_code ? t_reason : std::string();
}

nvml::Return sm_lock(nvml::Device d, unsigned lo, unsigned hi) {
  const unsigned range[2] = {lo, hi};
  return request("sm_lock", d, range);
}
nvml::Return sm_reset(nvml::Device d) { return request("sm_reset", d, nullptr); }
nvml::Return mem_lock(nvml::Device d, unsigned lo, unsigned hi) {
  const unsigned range[2] = {lo, hi};
  return request("mem_lock", d, range);
}
nvml::Return mem_reset(nvml::Device d) { return request("mem_reset", d, nullptr); }

}  // namespace

std::string socket_path() {
  const char* chosen = std::getenv("PERSEUS_CLOCKD_SOCKET");
  if (chosen != nullptr && *chosen != '\0') return std::string(chosen) == "none" ? "" : chosen;
  struct stat info {};
  if (geteuid() != 0 && stat(kDefaultSocket, &info) == 0 && S_ISSOCK(info.st_mode))
    return kDefaultSocket;
  return "";
}

const nvml::Api& routed(const nvml::Api& direct, const std::string& path) {
  const std::lock_guard<std::mutex> lock(g_route_mutex);
  if (g_route == nullptr) {
    auto* r = new Route();
    r->direct = &direct;
    r->path = path;
    r->api = direct;
    r->api.set_gpu_locked_clocks = &sm_lock;
    r->api.reset_gpu_locked_clocks = &sm_reset;
    r->api.set_memory_locked_clocks = &mem_lock;
    r->api.reset_memory_locked_clocks = &mem_reset;
    r->api.explain = &explain;
    g_route = r;
    pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child);
  } else if (g_route->path != path || g_route->direct != &direct) {
    throw std::invalid_argument("perseus: one clock service per process: already using " +
                                g_route->path + ", asked for " + path);
  }
  return g_route->api;
}

}  // namespace perseus::clockd
