#include "clock_locks.hpp"

#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>

namespace perseus {

namespace {

std::atomic<ClockLocks*> g_instance{nullptr};
std::once_flag g_once;

}  // namespace

ClockLocks& ClockLocks::instance() {
  std::call_once(g_once, [] {
    g_instance.store(new ClockLocks(), std::memory_order_release);              // never freed: workers
    pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child);  // may outlive main()
  });
  return *g_instance.load(std::memory_order_acquire);
}

void ClockLocks::before_fork() { g_instance.load()->mutex_.lock(); }

void ClockLocks::after_fork_in_parent() { g_instance.load()->mutex_.unlock(); }

void ClockLocks::after_fork_in_child() {
  // The parent's registry (its mutex still held, its GPU mutexes maybe held
  // by workers that do not exist here) is abandoned, not freed.
  ClockLocks* parents = g_instance.load();
  if (parents->fd_ >= 0) close(parents->fd_);
  parents->fd_ = -1;
  g_instance.store(new ClockLocks());
}

ClockLocks::Calls ClockLocks::sm_calls(const nvml::Api& api) {
  return {api.set_gpu_locked_clocks, api.reset_gpu_locked_clocks, "nvmlDeviceSetGpuLockedClocks",
          "nvmlDeviceResetGpuLockedClocks"};
}

ClockLocks::Calls ClockLocks::memory_calls(const nvml::Api& api) {
  return {api.set_memory_locked_clocks, api.reset_memory_locked_clocks,
          "nvmlDeviceSetMemoryLockedClocks", "nvmlDeviceResetMemoryLockedClocks"};
}

ClockLocks::Gpu& ClockLocks::gpu(const nvml::DeviceInfo& device) {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<Gpu>& g = gpus_[device.uuid];
  if (!g) {
    g = std::make_unique<Gpu>();
    g->uuid = device.uuid;
  }
  return *g;
}

nvml::Return ClockLocks::lock_sm(const void* holder, const nvml::Api& api,
                                 const nvml::DeviceInfo& device, unsigned mhz) {
  flush();  // a watchdog that resumed catches up here
  Gpu& g = gpu(device);
  const std::lock_guard<std::mutex> lock_gpu(g.mutex);
  return lock(g, g.sm, holder, sm_calls(api), device.handle, mhz);
}

nvml::Return ClockLocks::lock_memory(const void* holder, const nvml::Api& api,
                                     const nvml::DeviceInfo& device, unsigned mhz) {
  Gpu& g = gpu(device);
  const std::lock_guard<std::mutex> lock_gpu(g.mutex);
  return lock(g, g.memory, holder, memory_calls(api), device.handle, mhz);
}

nvml::Return ClockLocks::release(const void* holder, const nvml::Api& api,
                                 const nvml::DeviceInfo& device, const char** function) {
  flush();
  Gpu& g = gpu(device);
  const std::lock_guard<std::mutex> lock_gpu(g.mutex);
  const char* sm_function = "";
  const nvml::Return sm = let_go(g, g.sm, holder, sm_calls(api), device.handle, &sm_function);
  const char* memory_function = "";
  const nvml::Return memory =
      let_go(g, g.memory, holder, memory_calls(api), device.handle, &memory_function);
  if (sm != nvml::kSuccess) {
    *function = sm_function;
    return sm;
  }
  if (memory != nvml::kSuccess) *function = memory_function;
  return memory;
}

nvml::Return ClockLocks::lock(Gpu& g, Domain& d, const void* holder, const Calls& calls,
                              nvml::Device handle, unsigned mhz) {
  const bool first = !d.locked;
  if (first) mark(d, true);  // the watchdog hears of it before the GPU is locked
  const nvml::Return rc = calls.set(handle, mhz, mhz);
  if (rc != nvml::kSuccess) {
    if (first) mark(d, false);  // nothing was locked after all
    return rc;
  }
  const auto mine = std::find_if(d.holds.begin(), d.holds.end(),
                                 [holder](const Hold& h) { return h.holder == holder; });
  if (mine == d.holds.end()) d.holds.push_back(Hold{holder, mhz, g.next_seq++});
  else *mine = Hold{holder, mhz, g.next_seq++};
  if (&d == &g.sm) remember_sm(g, mhz);
  return rc;
}

nvml::Return ClockLocks::let_go(Gpu& g, Domain& d, const void* holder, const Calls& calls,
                                nvml::Device handle, const char** function) {
  const auto latest = [&d] {
    return std::max_element(d.holds.begin(), d.holds.end(),
                            [](const Hold& a, const Hold& b) { return a.seq < b.seq; });
  };
  bool applied_last = false;
  const auto mine = std::find_if(d.holds.begin(), d.holds.end(),
                                 [holder](const Hold& h) { return h.holder == holder; });
  if (mine != d.holds.end()) {
    applied_last = mine == latest();
    d.holds.erase(mine);
  }
  if (d.holds.empty()) {
    if (!d.locked || calls.reset == nullptr) return nvml::kSuccess;
    const nvml::Return rc = calls.reset(handle);
    if (rc == nvml::kSuccess && &d == &g.sm) remember_sm(g, 0);
    if (rc == nvml::kSuccess) mark(d, false);  // the watchdog hears of it after the reset
    else *function = calls.reset_name;
    return rc;
  }
  if (!applied_last) return nvml::kSuccess;  // the GPU runs at another holder's clock already
  const auto next = latest();
  const nvml::Return rc = calls.set(handle, next->mhz, next->mhz);
  if (rc == nvml::kSuccess && &d == &g.sm) remember_sm(g, next->mhz);
  if (rc == nvml::kSuccess) next->seq = g.next_seq++;
  else *function = calls.set_name;
  return rc;
}

void ClockLocks::remember_sm(Gpu& g, unsigned mhz) {
  if (g.recent_sm.size() == kRecentSets) g.recent_sm.erase(g.recent_sm.begin());
  g.recent_sm.emplace_back(nvml::now_ns(), mhz);
}

ClockLocks::SmView ClockLocks::sm_view(const nvml::DeviceInfo& device, std::int64_t since_ns) {
  flush();  // the switchers' periodic read-back also lets a resumed watchdog catch up
  Gpu& g = gpu(device);
  const std::lock_guard<std::mutex> lock_gpu(g.mutex);
  SmView view;
  const auto latest = std::max_element(g.sm.holds.begin(), g.sm.holds.end(),
                                       [](const Hold& a, const Hold& b) { return a.seq < b.seq; });
  if (latest != g.sm.holds.end()) view.effective_mhz = latest->mhz;
  for (const auto& [when, mhz] : g.recent_sm) {
    if (when < since_ns) continue;
    if (mhz == 0) view.reset_recently = true;
    else view.recent_mhz.push_back(mhz);
  }
  return view;
}

namespace {

void warn_stalled() {
  std::fputs(
      "perseus: the clock watchdog is not reading its socket (stopped? SIGSTOP, a debugger, a "
      "suspended job step); clocks are still applied and the watchdog catches up at the next "
      "clock change or read-back once it runs again, but if this process dies meanwhile (SIGKILL, a "
      "crash) "
      "some GPUs may stay locked: then run `perseus reset-clocks`\n",
      stderr);
  std::fflush(stderr);
}

}  // namespace

void ClockLocks::mark(Domain& d, bool locked) {
  bool stalled = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (d.locked == locked) return;
    d.locked = locked;
    stale_ = true;
    stalled = send_locked();
  }
  if (stalled) warn_stalled();  // never under mutex_: stderr may be a slow pipe
}

void ClockLocks::flush() {
  bool stalled = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (outbox_.empty() && !stale_) return;
    stalled = send_locked();
  }
  if (stalled) warn_stalled();
}

std::string ClockLocks::state_line_locked() const {
  std::string line;
  for (const auto& [uuid, g] : gpus_) {
    for (const auto& [domain, name] : {std::pair{&g->sm, "sm="}, std::pair{&g->memory, "memory="}}) {
      if (!domain->locked) continue;
      if (!line.empty()) line += ' ';
      line += name + uuid;
    }
  }
  return line;
}

std::string ClockLocks::state_line() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return state_line_locked();
}

bool ClockLocks::send_locked() {
  if (fd_ < 0) {
    outbox_.clear();
    stale_ = false;
    return false;
  }
  for (;;) {
    if (outbox_.empty()) {
      if (!stale_) return false;
      // Only the latest set is ever queued: states in between are dropped.
      outbox_ = state_line_locked() + "\n";
      stale_ = false;
    }
    // MSG_NOSIGNAL: a dead watchdog gives EPIPE, never a SIGPIPE that kills
    // us. MSG_DONTWAIT: a full socket (the watchdog is not reading) gives
    // EAGAIN at once instead of blocking every GPU of the process.
    const ssize_t n = send(fd_, outbox_.data(), outbox_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ++stalls_;
      if (warned_) return false;
      warned_ = true;
      return true;
    }
    if (n <= 0) {
      close(fd_);
      fd_ = -1;
      outbox_.clear();
      stale_ = false;
      return false;
    }
    outbox_.erase(0, static_cast<std::size_t>(n));
  }
}

void ClockLocks::set_watchdog(int fd) {
  bool stalled = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (fd_ >= 0 && fd_ != fd) close(fd_);
    fd_ = fd;
    outbox_.clear();  // a new watchdog starts with a whole line
    stale_ = true;
    warned_ = false;
    stalled = send_locked();
  }
  if (stalled) warn_stalled();
}

bool ClockLocks::watchdog_behind() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return fd_ >= 0 && (!outbox_.empty() || stale_);
}

std::uint64_t ClockLocks::watchdog_stalls() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stalls_;
}

bool ClockLocks::has_watchdog() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return fd_ >= 0;
}

}  // namespace perseus
