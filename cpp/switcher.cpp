#include "switcher.hpp"

#include "clock_locks.hpp"
#include "clockd_client.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>

namespace perseus {

namespace {

// What a host function needs: made by set_on_stream(), owned by Shared, never
// moved (std::map nodes are stable), so the host function only reads it.
struct StreamTarget {
  FrequencySwitcher::Shared* shared;
  unsigned mhz;        // snapped
  unsigned requested;  // as asked
};

}  // namespace

struct FrequencySwitcher::Shared {
  std::mutex mutex;
  std::condition_variable wake;  // the worker waits here for a target or stop
  std::condition_variable idle;  // wait_idle() waits here

  // The latest target (guarded by mutex). desired_seq counts changes of it;
  // done_seq is the last change the worker has finished with.
  unsigned desired = 0;  // 0: default clocks
  unsigned requested = 0;
  std::int64_t requested_ns = 0;
  SwitchSource source = SwitchSource::kSet;
  std::uint64_t desired_seq = 0;
  std::uint64_t done_seq = 0;
  bool busy = false;      // the worker is inside NVML
  bool stopping = false;  // close() has begun: targets are ignored
  bool failed = false;    // the worker hit an error and stopped switching
  bool exited = false;    // the worker has finished (close() may join it)

  std::exception_ptr error;  // the worker's first error
  bool error_delivered = false;
  std::exception_ptr close_error;  // failure of the final reset

  // Records have their own mutex, so that a reader copying many of them
  // never delays set() or a host function.
  std::mutex records_mutex;
  std::vector<SwitchRecord> ring;  // a ring buffer
  std::size_t ring_next = 0;
  std::size_t ring_count = 0;
  std::uint64_t dropped = 0;

  std::map<unsigned, StreamTarget> targets;  // by requested MHz
  std::atomic<int> inflight{0};              // host functions enqueued, not yet run

  // Makes `target` the latest; false if nothing changed. Mutex held.
  bool propose(unsigned target, unsigned requested_mhz, SwitchSource why) {
    if (stopping || failed || target == desired) return false;
    desired = target;
    requested = requested_mhz;
    requested_ns = nvml::now_ns();
    source = why;
    ++desired_seq;
    return true;
  }
};

namespace {

// The host function. Runs on a CUDA driver thread: no CUDA calls, no
// allocation, no waiting beyond a mutex that nobody holds for long.
void on_stream_point(void* data) noexcept {
  const auto* t = static_cast<const StreamTarget*>(data);
  FrequencySwitcher::Shared* s = t->shared;
  bool changed = false;
  {
    const std::lock_guard<std::mutex> lock(s->mutex);
    changed = s->propose(t->mhz, t->requested, SwitchSource::kStream);
  }
  if (changed) s->wake.notify_one();
  s->inflight.fetch_sub(1, std::memory_order_acq_rel);  // last touch of *s
}

std::int64_t elapsed_since(std::int64_t start) { return nvml::now_ns() - start; }

}  // namespace

namespace {

std::string shown_or(const char* shown, long long value) {
  return shown != nullptr ? std::string(shown) : std::to_string(value);
}

// `shown` comes only with a value too large for a long long: always outside.
bool outside(long long value, long long lo, long long hi, const char* shown) {
  return shown != nullptr || value < lo || value > hi;
}

}  // namespace

unsigned check_clock_mhz(long long mhz, const char* argument, const char* shown) {
  if (outside(mhz, 1, kMaxClockMhz, shown))
    throw std::invalid_argument(std::string(argument) + " must be a positive number of MHz (at most " +
                                std::to_string(kMaxClockMhz) + "), got " + shown_or(shown, mhz));
  return static_cast<unsigned>(mhz);
}

int check_device(long long device, const char* argument, const char* shown) {
  if (shown == nullptr && device < 0)
    throw std::out_of_range(std::string(argument) + " must be a CUDA device index >= 0, got " +
                            shown_or(shown, device));
  if (outside(device, 0, INT_MAX, shown)) throw std::out_of_range("no GPU " + shown_or(shown, device));
  return static_cast<int>(device);
}

std::size_t check_record_capacity(long long capacity, const char* argument, const char* shown) {
  if (outside(capacity, 1, kMaxRecordCapacity, shown))
    throw std::invalid_argument(std::string(argument) + " must be between 1 and " +
                                std::to_string(kMaxRecordCapacity) + " records, got " +
                                shown_or(shown, capacity));
  return static_cast<std::size_t>(capacity);
}

std::uintptr_t check_stream(long long stream, const char* argument, const char* shown) {
  if (outside(stream, 0, LLONG_MAX, shown))
    throw std::invalid_argument(std::string(argument) +
                                " must be a CUstream handle (an address, 0 to 2**63 - 1), got " +
                                shown_or(shown, stream));
  return static_cast<std::uintptr_t>(stream);
}

std::int64_t check_period_s(double seconds, const char* argument) {
  if (!(seconds >= 0 && seconds <= 86400.0))  // also NaN and infinity
    throw std::invalid_argument(std::string(argument) + " must be between 0 and 86400 seconds, got " +
                                std::to_string(seconds));
  return static_cast<std::int64_t>(seconds * 1e9);
}

double close_timeout_s() {
  const char* text = std::getenv("PERSEUS_CLOSE_TIMEOUT_S");
  if (text == nullptr || *text == '\0') return kDefaultCloseTimeoutS;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value >= 0)) return kDefaultCloseTimeoutS;
  return value;
}

std::int64_t check_timeout_s(double timeout_s, const char* argument) {
  if (!(timeout_s >= 0))  // also NaN
    throw std::invalid_argument(std::string(argument) +
                                " must be >= 0 seconds (None waits forever), got " +
                                std::to_string(timeout_s));
  if (std::isinf(timeout_s) || timeout_s >= 9.2e9) return -1;  // past int64 ns: forever
  return static_cast<std::int64_t>(timeout_s * 1e9);
}

FrequencySwitcher::FrequencySwitcher(const SwitcherOptions& options)
    : shared_(nullptr), owner_pid_(static_cast<long>(getpid())) {
  check_device(options.device, "device");
  check_record_capacity(static_cast<long long>(options.record_capacity), "record_capacity");
  if (options.memory_mhz != 0) check_clock_mhz(options.memory_mhz, "memory_mhz");
  verify_delay_ns_ = check_period_s(options.verify_delay_s, "verify_delay_s");
  verify_interval_ns_ = check_period_s(options.verify_interval_s, "verify_interval_s");
  session_ = std::make_unique<nvml::Session>();
  const nvml::Api& api = session_->api();
  const std::string service = clockd::socket_path();
  clock_api_ = service.empty() ? &api : &clockd::routed(api, service);
  device_ = nvml::open_device(*session_, options.device);
  supported_memory_ = nvml::supported_memory_clocks(api, device_.handle);

  unsigned graphics_for = supported_memory_.empty() ? 0 : supported_memory_.back();
  if (options.memory_mhz != 0) {
    if (api.set_memory_locked_clocks == nullptr || api.reset_memory_locked_clocks == nullptr)
      throw std::invalid_argument("memory_mhz: this NVML ('" + api.path +
                                  "') cannot lock memory clocks (driver too old)");
    memory_mhz_ = options.memory_mhz;
    if (!supported_memory_.empty()) {
      // The nearest supported memory clock.
      auto it = std::lower_bound(supported_memory_.begin(), supported_memory_.end(), memory_mhz_);
      if (it == supported_memory_.end()) --it;
      else if (it != supported_memory_.begin() && memory_mhz_ - *(it - 1) < *it - memory_mhz_) --it;
      memory_mhz_ = *it;
    }
    graphics_for = memory_mhz_;
  }
  if (graphics_for != 0)
    supported_ = nvml::supported_graphics_clocks(api, device_.handle, graphics_for);

  shared_ = new Shared();
  shared_->ring.resize(options.record_capacity);

  // The worker takes no signals: they go to the threads that handle them
  // (Python runs its handlers on the main thread). Block them all while the
  // thread is created, so it starts with everything blocked.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  try {
    worker_ = std::make_unique<std::thread>([this] { run_worker(); });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    delete shared_;
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

FrequencySwitcher::~FrequencySwitcher() {
  try {
    close();
  } catch (...) {  // already printed on stderr by the worker
  }
  // Host functions still queued on a stream point into *shared_; they see
  // `stopping` and do nothing, but the memory must outlive them.
  // A hung worker still uses *shared_.
  if (!abandoned_ && !hung_.load() && shared_->inflight.load(std::memory_order_acquire) == 0)
    delete shared_;
}

void FrequencySwitcher::abandon_after_fork() {
  // The worker thread, and whoever held shared_->mutex at the fork, exist
  // only in the parent: joining, locking or freeing here could hang or crash.
  (void)worker_.release();
  (void)session_.release();  // no nvmlShutdown on the parent's behalf
  abandoned_ = true;
  closed_ = true;
}

unsigned FrequencySwitcher::snap(unsigned mhz) const {
  if (supported_.empty()) return mhz;
  auto it = std::lower_bound(supported_.begin(), supported_.end(), mhz);
  if (it == supported_.end()) return supported_.back();
  if (*it == mhz || it == supported_.begin()) return *it;
  const unsigned below = *(it - 1);
  return (mhz - below < *it - mhz) ? below : *it;  // a tie goes to the faster clock
}

void FrequencySwitcher::throw_if_failed_locked() {
  if (shared_->stopping) throw std::logic_error("the frequency switcher is closed");
  if (shared_->failed) {
    shared_->error_delivered = true;
    std::rethrow_exception(shared_->error);
  }
}

unsigned FrequencySwitcher::set(unsigned mhz) {
  check_clock_mhz(mhz, "mhz");
  const unsigned target = snap(mhz);
  bool changed = false;
  {
    const std::lock_guard<std::mutex> lock(shared_->mutex);
    throw_if_failed_locked();
    changed = shared_->propose(target, mhz, SwitchSource::kSet);
  }
  if (changed) shared_->wake.notify_one();
  return target;
}

unsigned FrequencySwitcher::set_on_stream(std::uintptr_t stream, unsigned mhz) {
  check_clock_mhz(mhz, "mhz");
  const unsigned target = snap(mhz);
  const cuda::Api* api = cuda_.load(std::memory_order_acquire);
  if (api == nullptr) {
    api = &cuda::api();  // loads the driver once (may throw); never under our mutex
    cuda_.store(api, std::memory_order_release);
  }
  const StreamTarget* arg = nullptr;
  {
    const std::lock_guard<std::mutex> lock(shared_->mutex);
    throw_if_failed_locked();
    auto it = shared_->targets.find(mhz);
    if (it == shared_->targets.end())
      it = shared_->targets.emplace(mhz, StreamTarget{shared_, target, mhz}).first;
    arg = &it->second;
    shared_->inflight.fetch_add(1, std::memory_order_acq_rel);
  }
  try {
    // May block while the stream's queue is full, so outside the mutex.
    cuda::launch_host_func(*api, stream, &on_stream_point, const_cast<StreamTarget*>(arg));
  } catch (...) {
    shared_->inflight.fetch_sub(1, std::memory_order_acq_rel);
    throw;
  }
  return target;
}

void FrequencySwitcher::reset() {
  bool changed = false;
  {
    const std::lock_guard<std::mutex> lock(shared_->mutex);
    throw_if_failed_locked();
    changed = shared_->propose(0, 0, SwitchSource::kReset);
  }
  if (changed) shared_->wake.notify_one();
}

bool FrequencySwitcher::wait_idle(std::int64_t timeout_ns) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  Shared& s = *shared_;
  const auto done = [&s] { return s.stopping || s.failed || (s.done_seq == s.desired_seq && !s.busy); };
  bool ok = true;
  if (timeout_ns < 0) s.idle.wait(lock, done);
  else ok = s.idle.wait_for(lock, std::chrono::nanoseconds(timeout_ns), done);
  if (s.failed) {
    s.error_delivered = true;
    std::rethrow_exception(s.error);
  }
  return ok;
}

void FrequencySwitcher::close() {
  const std::lock_guard<std::mutex> guard(close_mutex_);
  if (abandoned_) return;
  if (static_cast<long>(getpid()) != owner_pid_) {
    abandon_after_fork();
    return;
  }
  if (!closed_) {
    {
      const std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->stopping = true;
    }
    shared_->wake.notify_all();
    shared_->idle.notify_all();
    // The worker resets what it locked, then exits; a hung NVML call must
    // not hold us (and so the process's exit) forever.
    const double limit_s = close_timeout_s();
    bool exited = false;
    {
      std::unique_lock<std::mutex> lock(shared_->mutex);
      const auto done = [this] { return shared_->exited; };
      if (std::isinf(limit_s) || limit_s >= 9.2e9) {
        shared_->idle.wait(lock, done);
        exited = true;
      } else {
        exited = shared_->idle.wait_for(
            lock, std::chrono::nanoseconds(static_cast<std::int64_t>(limit_s * 1e9)), done);
      }
    }
    closed_ = true;
    if (!exited) {
      worker_->detach();
      (void)session_.release();  // no nvmlShutdown under a call still running
      hung_.store(true);
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", limit_s);
      const std::string message =
          "perseus: frequency switcher, GPU " + std::to_string(device_.cuda_index) + " (NVML " +
          std::to_string(device_.nvml_index) + ", " + device_.name + ", " + device_.uuid +
          "): an NVML clock call has not returned after " + limit + " s (PERSEUS_CLOSE_TIMEOUT_S); " +
          "gave up waiting. Its clocks may still be locked: the clock watchdog resets them once " +
          "this process ends, or run `perseus reset-clocks`";
      std::fputs((message + "\n").c_str(), stderr);
      std::fflush(stderr);
      throw std::runtime_error(message);
    }
    if (worker_ && worker_->joinable()) worker_->join();
    session_.reset();  // nvmlShutdown
  }
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  if (shared_->close_error) {
    std::exception_ptr e = shared_->close_error;
    shared_->close_error = nullptr;
    std::rethrow_exception(e);
  }
  if (shared_->error && !shared_->error_delivered) {
    shared_->error_delivered = true;
    std::rethrow_exception(shared_->error);
  }
}

bool FrequencySwitcher::closed() const {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->stopping;
}

unsigned FrequencySwitcher::target_mhz() const {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->desired;
}

bool FrequencySwitcher::hung() const { return hung_.load(); }

bool FrequencySwitcher::failed() const {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->failed;
}

int FrequencySwitcher::pending_stream_callbacks() const {
  return shared_->inflight.load(std::memory_order_acquire);
}

SwitchLog FrequencySwitcher::records() const {
  std::vector<SwitchRecord> rows;
  SwitchLog log;
  {
    const std::lock_guard<std::mutex> lock(shared_->records_mutex);
    const Shared& s = *shared_;
    rows.reserve(s.ring_count);
    const std::size_t cap = s.ring.size();
    const std::size_t first = (s.ring_next + cap - s.ring_count) % cap;
    for (std::size_t k = 0; k < s.ring_count; ++k) rows.push_back(s.ring[(first + k) % cap]);
    log.dropped = s.dropped;
  }
  const std::size_t n = rows.size();
  log.time_ns.resize(n);
  log.requested_ns.resize(n);
  log.latency_ns.resize(n);
  log.requested_mhz.resize(n);
  log.applied_mhz.resize(n);
  log.status.resize(n);
  log.source.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    log.time_ns[i] = rows[i].time_ns;
    log.requested_ns[i] = rows[i].requested_ns;
    log.latency_ns[i] = rows[i].latency_ns;
    log.requested_mhz[i] = rows[i].requested_mhz;
    log.applied_mhz[i] = rows[i].applied_mhz;
    log.status[i] = rows[i].status;
    log.source[i] = static_cast<std::uint8_t>(rows[i].source);
  }
  return log;
}

std::uint64_t FrequencySwitcher::mismatches(SwitchSource cause) const {
  switch (cause) {
    case SwitchSource::kOverridden: return mismatches_[0].load();
    case SwitchSource::kClamped: return mismatches_[1].load();
    case SwitchSource::kChanged: return mismatches_[2].load();
    default: return 0;
  }
}

std::int64_t FrequencySwitcher::verify_due_ns() const {
  if (verify_interval_ns_ == 0 || verify_off_ || applied_.load(std::memory_order_relaxed) == 0)
    return -1;
  return checked_ ? checked_ns_ + verify_interval_ns_ : changed_ns_ + verify_delay_ns_;
}

std::string FrequencySwitcher::verify() {
  const nvml::Api& api = session_->api();
  const std::string gpu = "perseus: frequency switcher, GPU " + std::to_string(device_.cuda_index) +
                          " (NVML " + std::to_string(device_.nvml_index) + ", " + device_.name + "): ";
  unsigned observed = 0;
  const std::int64_t start = nvml::now_ns();
  const nvml::Return rc = api.clock_info(device_.handle, nvml::kClockSm, &observed);
  const std::int64_t end = nvml::now_ns();
  checked_ns_ = end;
  if (rc != nvml::kSuccess) {
    verify_off_ = true;
    return gpu + "cannot read the SM clock back (" +
           nvml::Error(api, rc, "nvmlDeviceGetClockInfo").what() +
           "); clocks are applied but no longer verified\n";
  }
  const unsigned target = applied_.load(std::memory_order_relaxed);
  const ClockLocks::SmView view = ClockLocks::instance().sm_view(device_, start - verify_delay_ns_);
  const unsigned expected = view.effective_mhz != 0 ? view.effective_mhz : target;
  const bool right =
      observed == expected ||
      std::find(view.recent_mhz.begin(), view.recent_mhz.end(), observed) != view.recent_mhz.end() ||
      (view.reset_recently && !supported_.empty() && observed == supported_.back());
  checked_ = true;
  if (right) {
    held_ = true;
    return "";
  }
  const SwitchSource cause = held_                 ? SwitchSource::kChanged
                             : observed < expected ? SwitchSource::kClamped
                                                   : SwitchSource::kOverridden;
  const int k = cause == SwitchSource::kOverridden ? 0 : cause == SwitchSource::kClamped ? 1 : 2;
  record(SwitchRecord{end, start, end - start, expected, observed, 0, cause});
  mismatches_[k].fetch_add(1);
  std::string message;
  if (!warned_[k]) {
    warned_[k] = true;
    const std::string locked = std::to_string(expected) + " MHz";
    const std::string runs = std::to_string(observed) + " MHz";
    const std::string what[3] = {
        "locked at " + locked + ", it runs at " + runs +
            ": the driver overrode the lock (reported on Blackwell) or another tool set the "
            "clocks. The plan's times and energy assume " +
            locked + "; check `nvidia-smi -q -d CLOCK,PERFORMANCE`.",
        "locked at " + locked + ", it runs slower, at " + runs +
            ": a power or thermal limit, or a driver clamp. The plan's times assume " + locked +
            "; check the clock event reasons and power limit in `nvidia-smi -q -d PERFORMANCE,POWER`.",
        "the lock at " + locked + " held, then the GPU ran at " + runs +
            ": another process, `perseus reset-clocks` or `nvidia-smi -rgc/-lgc` changed its clocks "
            "while this one trained; re-applying " +
            locked + ". Do not reset or lock clocks on a node while a job runs on it.",
    };
    message = gpu + what[k] +
              " (said once per cause; every time is in records() and FrequencySwitcher."
              "clock_mismatches)\n";
  }
  if (cause == SwitchSource::kChanged) {
    const char* function = "nvmlDeviceSetGpuLockedClocks";
    const std::int64_t t0 = nvml::now_ns();
    const nvml::Return again = ClockLocks::instance().lock_sm(this, *clock_api_, device_, target);
    const std::int64_t t1 = nvml::now_ns();
    record(SwitchRecord{t1, t0, t1 - t0, target, target, again, SwitchSource::kReapply});
    if (again == nvml::kSuccess) {
      changed_ns_ = t1;
      checked_ = held_ = false;
    } else {
      message += gpu + "could not re-apply " + std::to_string(target) + " MHz: " +
                 nvml::Error(api, again, function, nvml::explanation(*clock_api_, again)).what() + "\n";
    }
  }
  return message;
}

void FrequencySwitcher::record(const SwitchRecord& r) {
  Shared& s = *shared_;
  const std::lock_guard<std::mutex> lock(s.records_mutex);
  s.ring[s.ring_next] = r;
  s.ring_next = (s.ring_next + 1) % s.ring.size();
  if (s.ring_count < s.ring.size()) ++s.ring_count;
  else ++s.dropped;
}

std::string FrequencySwitcher::fail(nvml::Return code, const char* function, bool at_close,
                                    const std::string& why) {
  Shared& s = *shared_;
  const nvml::Error error(session_->api(), code, function, why);
  std::string message = "perseus: frequency switcher, GPU " + std::to_string(device_.cuda_index) +
                        " (NVML " + std::to_string(device_.nvml_index) + ", " + device_.name +
                        "): " + error.what() + "\nperseus: " +
                        (at_close ? "the clocks may still be locked; run `perseus reset-clocks`"
                                  : "switching stopped; the error is raised from the next set() "
                                    "or close()") +
                        "\n";
  if (at_close) {
    if (!s.close_error) s.close_error = std::make_exception_ptr(error);
  } else {
    if (!s.error) s.error = std::make_exception_ptr(error);
    s.failed = true;
  }
  return message;
}

nvml::Return FrequencySwitcher::apply(unsigned target, const char** function) {
  if (target == 0) return unlock_all(function);
  ClockLocks& locks = ClockLocks::instance();
  const nvml::Api& api = *clock_api_;
  if (memory_mhz_ != 0 && !holds_memory_) {
    *function = "nvmlDeviceSetMemoryLockedClocks";
    const nvml::Return rc = locks.lock_memory(this, api, device_, memory_mhz_);
    if (rc != nvml::kSuccess) return rc;
    holds_memory_ = dirty_ = true;
  }
  *function = "nvmlDeviceSetGpuLockedClocks";
  const nvml::Return rc = locks.lock_sm(this, api, device_, target);
  if (rc == nvml::kSuccess) dirty_ = true;
  return rc;
}

nvml::Return FrequencySwitcher::unlock_all(const char** function) {
  if (!dirty_) return nvml::kSuccess;
  const nvml::Return rc = ClockLocks::instance().release(this, *clock_api_, device_, function);
  holds_memory_ = false;  // released even when a reset failed (ClockLocks retries it)
  if (rc == nvml::kSuccess) dirty_ = false;
  return rc;
}

namespace {

// Errors are printed by the worker without holding the mutex (stderr may be
// a slow pipe, and host functions must never wait long for the mutex).
void print_unlocked(std::unique_lock<std::mutex>& lock, std::string& message) {
  if (message.empty()) return;
  lock.unlock();
  std::fputs(message.c_str(), stderr);
  std::fflush(stderr);
  message.clear();
  lock.lock();
}

}  // namespace

void FrequencySwitcher::run_worker() {
  Shared& s = *shared_;
  std::string message;
  // Makes one timed NVML change without holding the mutex, then records it.
  const auto timed = [this](SwitchRecord r, auto&& call) {
    const std::int64_t start = nvml::now_ns();
    r.status = call();
    r.latency_ns = elapsed_since(start);
    r.time_ns = start + r.latency_ns;
    if (r.requested_ns == 0) r.requested_ns = start;
    record(r);
    return r.status;
  };

  std::unique_lock<std::mutex> lock(s.mutex);
  const auto woken = [&s] { return s.stopping || (!s.failed && s.desired_seq != s.done_seq); };
  for (;;) {
    const std::int64_t due = s.failed ? -1 : verify_due_ns();
    if (due < 0) {
      s.wake.wait(lock, woken);
    } else if (!s.wake.wait_for(
                   lock, std::chrono::nanoseconds(std::max<std::int64_t>(0, due - nvml::now_ns())),
                   woken)) {
      lock.unlock();
      message = verify();
      lock.lock();
      print_unlocked(lock, message);
      continue;
    }
    if (s.stopping) break;
    const std::uint64_t seq = s.desired_seq;
    const unsigned target = s.desired;
    const SwitchRecord pending{0, s.requested_ns, 0, s.requested, target, 0, s.source};
    if (target == applied_.load(std::memory_order_relaxed) && (target != 0 || !dirty_)) {
      s.done_seq = seq;  // e.g. a, b, a coalesced back to a: nothing to do
      s.idle.notify_all();
      continue;
    }
    s.busy = true;
    lock.unlock();

    const char* function = "";
    const nvml::Return rc = timed(pending, [&] { return apply(target, &function); });
    const std::string why = nvml::explanation(*clock_api_, rc);  // before another call
    nvml::Return reset_rc = nvml::kSuccess;
    const char* reset_function = "";
    const bool recover = rc != nvml::kSuccess && dirty_;
    std::string reset_why;
    if (recover) {  // never leave a stale clock behind
      reset_rc = timed(SwitchRecord{0, 0, 0, 0, 0, 0, SwitchSource::kRecovery},
                       [&] { return unlock_all(&reset_function); });
      reset_why = nvml::explanation(*clock_api_, reset_rc);
    }

    lock.lock();
    if (rc == nvml::kSuccess) {
      applied_.store(target, std::memory_order_release);
      changed_ns_ = nvml::now_ns();  // read back verify_delay_ns_ from now
      checked_ = held_ = false;
    } else {
      message = fail(rc, function, false, why);
      if (recover && reset_rc == nvml::kSuccess) applied_.store(0, std::memory_order_release);
      if (recover && reset_rc != nvml::kSuccess)
        message += fail(reset_rc, reset_function, true, reset_why);
    }
    s.busy = false;
    s.done_seq = seq;
    s.idle.notify_all();
    print_unlocked(lock, message);
  }

  // Closing: give back whatever this switcher locked.
  if (dirty_) {
    s.busy = true;
    lock.unlock();
    const char* function = "";
    const nvml::Return rc = timed(SwitchRecord{0, 0, 0, 0, 0, 0, SwitchSource::kClose},
                                  [&] { return unlock_all(&function); });
    const std::string why = nvml::explanation(*clock_api_, rc);
    lock.lock();
    if (rc == nvml::kSuccess) applied_.store(0, std::memory_order_release);
    else message = fail(rc, function, true, why);
    s.busy = false;
  }
  print_unlocked(lock, message);
  s.exited = true;
  s.idle.notify_all();
}

std::shared_ptr<FrequencySwitcher> make_shared_switcher(const SwitcherOptions& options) {
  return std::shared_ptr<FrequencySwitcher>(new FrequencySwitcher(options), [](FrequencySwitcher* s) {
    try {
      s->close();  // bounded; prints what went wrong
    } catch (...) {
    }
    if (!s->hung()) delete s;
  });
}

}  // namespace perseus
