// The frequency switcher: sets one GPU's SM clock per computation, off the
// training thread, in stream order when asked, and always gives the clock back.
//
// Why a worker thread. nvmlDeviceSetGpuLockedClocks takes milliseconds (it
// goes through the kernel driver and firmware), while a pipeline stage's
// forward may take only a few. Calling it on the training thread would stall
// the very work whose energy we try to save. So the caller only records a
// *target* (the latest requested clock) and wakes a worker thread; the worker
// owns every NVML call after construction. Targets coalesce: if several
// arrive while the worker is busy, only the latest is applied, and a target
// equal to the one already pending or applied costs nothing. set() therefore
// takes a mutex for a few instructions and returns in about a microsecond.
//
// Why host functions. The CPU usually runs far ahead of the GPU, so a clock
// set "before the forward" on the CPU would land while the GPU still runs
// earlier work. set_on_stream() instead enqueues a CUDA host function on the
// compute stream (cuda_loader.hpp); the driver runs it when the GPU reaches
// that point of the stream. CUDA forbids CUDA calls in a host function and
// anything slow there stalls the stream, so the host function only hands its
// target to the worker exactly as set() does: lock, store, notify. It does
// not allocate: its argument points at a StreamTarget made when the request
// was enqueued. The worker then calls NVML, so the new clock takes effect
// one NVML latency after the GPU reaches the point.
//
// Errors. An NVML failure in the worker is printed on stderr at once, the
// switcher stops switching (resetting any clock it had locked), and the error
// is raised from the next set(), set_on_stream(), wait_idle() or close().
//
// Restoring. The GPU is locked only when the first target arrives, and close()
// (also run by the destructor) gives back what this switcher locked before
// the worker exits. Locks go through the process's ClockLocks
// (clock_locks.hpp), which counts the switchers holding each GPU, so closing
// one never unlocks a GPU under another, and which keeps the clock watchdog
// told which GPUs to reset if the process dies without closing (SIGKILL, a
// crash). Interpreter exit and signals are handled by the Python layer.
//
// A hung NVML call (a GPU fallen off the bus) must not make the process
// unkillable: close() waits for the worker at most close_timeout_s() (the
// environment's PERSEUS_CLOSE_TIMEOUT_S, default kDefaultCloseTimeoutS), then
// says which GPU hung, leaves the worker detached and the GPU listed for the
// watchdog (which resets it once the process is gone), and raises. From then
// on hung() is true and the object must not be freed: the worker may still
// return into it. The Python binding leaks such an object; C++ owners must too.
//
// Verifying. A lock that NVML accepted is not always the clock the GPU runs:
// drivers override a locked clock while reporting success (seen on
// Blackwell), clamp it (power and thermal limits), and another process or
// `perseus reset-clocks` can unlock a GPU under us. So while it holds a lock
// the worker reads the SM clock back (nvmlDeviceGetClockInfo): once
// verify_delay_s after each change, then every verify_interval_s. A reading
// is right if it is the clock the GPU's latest hold asked for, or any clock
// this process set on it within the delay (a change takes time to show). A
// wrong one is recorded (kOverridden, kClamped or kChanged), counted
// (mismatches()), and warned about on stderr once per cause; a lock that had
// held and was then changed from outside is re-applied (kReapply) once, a
// lock the GPU never ran at is not (re-applying would not help).
//
// fork(). A child process has no worker thread and must not reset its
// parent's clocks: close() and the destructor in another process than the
// creator only forget the object (leaking its memory) and touch nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_loader.hpp"
#include "nvml_loader.hpp"

namespace perseus {

// Why a clock change was made, or, for the read-back causes, why a reading
// of the GPU's SM clock was recorded (requested_mhz: the clock it should
// run at; applied_mhz: the clock it reported).
enum class SwitchSource : std::uint8_t {
  kSet = 0,         // set()
  kStream = 1,      // a host function enqueued by set_on_stream()
  kReset = 2,       // reset(): back to the driver's default clocks
  kClose = 3,       // close() gave back what the switcher had locked
  kRecovery = 4,    // reset after an NVML error
  kOverridden = 5,  // read-back: faster than just locked (the driver overrode the lock)
  kClamped = 6,     // read-back: slower than just locked (a clamp or a power/thermal limit)
  kChanged = 7,     // read-back: a lock that had held was changed from outside
  kReapply = 8,     // the lock re-applied after kChanged
};

// Their names, for Python's SwitchSource enum.
struct SwitchSourceName {
  SwitchSource source;
  const char* name;
};
inline constexpr SwitchSourceName kSwitchSourceNames[] = {
    {SwitchSource::kSet, "SET"},           {SwitchSource::kStream, "STREAM"},
    {SwitchSource::kReset, "RESET"},       {SwitchSource::kClose, "CLOSE"},
    {SwitchSource::kRecovery, "RECOVERY"}, {SwitchSource::kOverridden, "OVERRIDDEN"},
    {SwitchSource::kClamped, "CLAMPED"},   {SwitchSource::kChanged, "CHANGED"},
    {SwitchSource::kReapply, "REAPPLY"},
};

// One NVML clock call made by the worker. Times are CLOCK_MONOTONIC
// nanoseconds (comparable with Python's time.monotonic_ns()).
struct SwitchRecord {
  std::int64_t time_ns;         // when the NVML call returned
  std::int64_t requested_ns;    // when the target was requested (set() or host function)
  std::int64_t latency_ns;      // how long the NVML call(s) took
  std::uint32_t requested_mhz;  // as asked; 0 for a reset
  std::uint32_t applied_mhz;    // after snapping to a supported clock; 0 for a reset
  std::int32_t status;          // NVML return code, 0 on success
  SwitchSource source;
};

// The records as columns, oldest first (what Python's SwitchLog holds).
struct SwitchLog {
  std::vector<std::int64_t> time_ns;
  std::vector<std::int64_t> requested_ns;
  std::vector<std::int64_t> latency_ns;
  std::vector<std::uint32_t> requested_mhz;
  std::vector<std::uint32_t> applied_mhz;
  std::vector<std::int32_t> status;
  std::vector<std::uint8_t> source;  // SwitchSource values
  std::uint64_t dropped = 0;         // records that fell out of the ring
};

struct SwitcherOptions {
  int device = 0;                          // CUDA device index (honours CUDA_VISIBLE_DEVICES)
  unsigned memory_mhz = 0;                 // also lock memory clocks at this MHz; 0 leaves them alone
  std::size_t record_capacity = 1u << 16;  // records kept (oldest dropped first); see below
  // Read-back (see "Verifying" above): the SM clock is read verify_delay_s
  // after each change, then every verify_interval_s while locked; 0 turns
  // read-back off. The delay outlasts a Hopper clock change (10-100 ms).
  double verify_delay_s = 0.25;
  double verify_interval_s = 5.0;
};

// ---- Argument rules. The bindings turn Python values into long long (or
// double) and ask these, so each rule and its wording exist once. Each
// throws std::invalid_argument (std::out_of_range for device) naming
// `argument`. `shown` is given only for a value too large for a long long
// (Python's text of it), which every rule rejects, printing that text.

// How long close() waits for the worker's last NVML call. A clock change or
// reset takes milliseconds; 10 s is far beyond any healthy driver call, yet
// short enough that SIGTERM (whose grace period is often 30 s) still ends
// the process by itself.
inline constexpr double kDefaultCloseTimeoutS = 10.0;
// The value in force: PERSEUS_CLOSE_TIMEOUT_S if it is a number >= 0, else
// the default. Read at each close().
double close_timeout_s();

// No GPU clocks anywhere near 100 GHz: a larger number is a unit mistake.
inline constexpr long long kMaxClockMhz = 100000;
// 16 M records (640 MB): beyond that the log is a leak, not a log.
inline constexpr long long kMaxRecordCapacity = 1LL << 24;

// A clock in MHz: 1..kMaxClockMhz.
unsigned check_clock_mhz(long long mhz, const char* argument, const char* shown = nullptr);
// A CUDA device index: 0..INT_MAX (whether that GPU exists is open_device's business).
int check_device(long long device, const char* argument, const char* shown = nullptr);
// 1..kMaxRecordCapacity.
std::size_t check_record_capacity(long long capacity, const char* argument,
                                  const char* shown = nullptr);
// A CUstream handle: an address, so 0..2**63-1.
std::uintptr_t check_stream(long long stream, const char* argument, const char* shown = nullptr);
// A read-back period in seconds: finite, 0 to 1 day; returns nanoseconds.
std::int64_t check_period_s(double seconds, const char* argument);
// Seconds, >= 0 (infinity: forever); returns nanoseconds, -1 for forever.
std::int64_t check_timeout_s(double timeout_s, const char* argument);

class FrequencySwitcher {
 public:
  // Opens NVML and the device and reads its supported clocks; locks nothing.
  // Throws nvml::LibraryError, nvml::Error, std::out_of_range (no such
  // device) or std::invalid_argument (bad options, checked as above).
  explicit FrequencySwitcher(const SwitcherOptions& options);
  ~FrequencySwitcher();  // close(), errors swallowed
  FrequencySwitcher(const FrequencySwitcher&) = delete;
  FrequencySwitcher& operator=(const FrequencySwitcher&) = delete;

  // Requests SM clock `mhz` (check_clock_mhz), snapped to the nearest
  // supported clock, which is returned. Never waits for NVML. Thread-safe.
  // Throws std::invalid_argument (a bad mhz), std::logic_error (closed), or
  // the worker's NVML error once it has failed.
  unsigned set(unsigned mhz);

  // Like set(), but the target is handed over when the GPU reaches this
  // point of `stream` (a CUstream handle). The calling thread needs the
  // stream's CUDA context current. Loads the CUDA driver on first use.
  // Throws cuda::LibraryError, cuda::Error, and what set() throws.
  unsigned set_on_stream(std::uintptr_t stream, unsigned mhz);

  // Requests the driver's default clocks (unlocks). Thread-safe, non-blocking.
  void reset();

  // Waits until the worker has applied the latest target, for at most
  // timeout_ns (negative: forever). Returns false on timeout. Rethrows the
  // worker's error if it has failed.
  bool wait_idle(std::int64_t timeout_ns);

  // Resets the clocks this switcher locked, stops the worker and closes
  // NVML. Idempotent and thread-safe. Throws the worker's first error if no
  // earlier call has raised it, or the error of the final reset.
  void close();

  unsigned snap(unsigned mhz) const;
  // Supported SM clocks in MHz, ascending (empty if the GPU does not list them).
  const std::vector<unsigned>& supported_mhz() const { return supported_; }
  unsigned memory_mhz() const { return memory_mhz_; }  // 0 if memory clocks are left alone
  const nvml::DeviceInfo& device() const { return device_; }
  // The SM clock the worker last locked; 0 when the default clocks apply.
  // (With several switchers on one GPU, the GPU runs at the clock that the
  // latest of them applied.)
  unsigned applied_mhz() const { return applied_.load(std::memory_order_acquire); }
  // The latest request, applied or not; 0 for the default clocks.
  unsigned target_mhz() const;
  bool closed() const;
  bool failed() const;
  // close() gave up on a worker stuck in NVML; see the preamble.
  bool hung() const;
  // Host functions enqueued but not yet run.
  int pending_stream_callbacks() const;

  // The kept records, oldest first.
  SwitchLog records() const;

  // Read-backs that disagreed, by cause (kOverridden, kClamped, kChanged).
  std::uint64_t mismatches(SwitchSource cause) const;

  struct Shared;  // what the worker, callers and host functions share

 private:
  void run_worker();
  // In a process forked from the owner: forget everything without touching
  // the worker (which does not exist here) or NVML. close_mutex_ held.
  void abandon_after_fork();
  // Calls NVML (through ClockLocks) for `target` (0: let go). Returns the
  // status and the name of the failing function. Worker thread only.
  nvml::Return apply(unsigned target, const char** function);
  nvml::Return unlock_all(const char** function);
  void record(const SwitchRecord& r);  // takes the records mutex only
  // When the next read-back is due (CLOCK_MONOTONIC ns), -1 if none. Worker only.
  std::int64_t verify_due_ns() const;
  // Reads the SM clock back and acts on a mismatch; returns what to print.
  // Worker thread only, shared_->mutex not held.
  std::string verify();
  // Stores the error; returns the message to print. Mutex held.
  std::string fail(nvml::Return code, const char* function, bool at_close, const std::string& why);
  void throw_if_failed_locked();  // mutex held

  std::unique_ptr<nvml::Session> session_;
  // NVML's own, or routed to `perseus clockd` (clockd_client.hpp) for the
  // locked-clock calls when this process is not privileged.
  const nvml::Api* clock_api_ = nullptr;
  nvml::DeviceInfo device_;
  std::vector<unsigned> supported_;
  std::vector<unsigned> supported_memory_;
  unsigned memory_mhz_ = 0;
  std::atomic<const cuda::Api*> cuda_{nullptr};  // loaded by the first set_on_stream()

  Shared* shared_;  // owned; leaked if host functions are still queued at destruction
                    // or if the object is destroyed in a forked child
  std::atomic<unsigned> applied_{0};
  bool holds_memory_ = false;  // this switcher holds a memory lock; worker thread only
  // Something this switcher locked may still be locked (a hold, or a reset
  // that failed and is retried at close); worker thread only.
  bool dirty_ = false;
  // Read-back state; worker thread only.
  std::int64_t verify_delay_ns_ = 0;
  std::int64_t verify_interval_ns_ = 0;  // 0: off
  std::int64_t changed_ns_ = 0;          // the latest successful lock
  std::int64_t checked_ns_ = 0;          // the latest reading
  bool checked_ = false;                 // read since changed_ns_
  bool held_ = false;                    // read right since changed_ns_
  bool verify_off_ = false;              // the clock cannot be read: stop trying
  bool warned_[3] = {false, false, false};
  std::atomic<std::uint64_t> mismatches_[3] = {{0}, {0}, {0}};  // overridden, clamped, changed

  std::mutex close_mutex_;
  bool closed_ = false;     // guarded by close_mutex_
  bool abandoned_ = false;  // guarded by close_mutex_
  std::atomic<bool> hung_{false};
  long owner_pid_;  // the process that created the worker
  std::unique_ptr<std::thread> worker_;
};

// A switcher owned by a shared_ptr (what Python holds) whose deleter closes
// it (bounded: close() gives up on a hung NVML call and prints why) and then
// deletes it, except when close() gave up: the detached worker may still
// return into it, so such a switcher is leaked on purpose.
std::shared_ptr<FrequencySwitcher> make_shared_switcher(const SwitcherOptions& options);

}  // namespace perseus
