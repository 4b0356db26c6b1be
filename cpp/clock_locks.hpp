// The clock locks of this process: one entry per GPU, shared by every
// frequency switcher, and the feed that keeps the clock watchdog current.
//
// Why reference counts. A locked clock belongs to the GPU, not to the
// switcher that asked for it: two switchers on one GPU (a training loop's and
// a profiler's, say) drive the same hardware state. If closing one reset the
// GPU, the other would go on at the driver's clocks without knowing. So each
// GPU keeps its holders. A release resets the GPU only when the last holder
// lets go; otherwise, if the releasing switcher was the last to apply a
// clock, the GPU gets back the clock of the holder that applied one most
// recently. Each GPU's calls are serialised by its own mutex, held across the
// NVML call, so the books match what the hardware was last told; switchers of
// different GPUs never wait for each other.
//
// Why a watchdog. Nothing in a process runs after SIGKILL, the OOM killer, a
// segfault or os._exit(), yet the clocks it locked stay locked. The Python
// layer starts a helper process (perseus/_watchdog.py) that holds the other
// end of a socket and resets, when that socket reaches end-of-file, the
// clocks named by the last line it received. This registry writes that line:
// the whole set, "sm=<uuid> memory=<uuid> ...\n" (empty when nothing is
// locked), each time the set changes, which is only when a GPU is first
// locked or finally reset, never on a change between two locked clocks. The
// line goes out *before* the NVML call that locks and *after* the one that
// resets, so the watchdog may reset a GPU that was not locked (harmless) but
// never misses one that was. GPUs are named by UUID: CUDA_VISIBLE_DEVICES and
// NVML's numbering cannot change what a UUID means.
//
// fork(). A child owns none of its parent's locks: in the child the registry
// starts empty and its copy of the socket is closed, so that the watchdog's
// end-of-file still means "the process that locked the clocks is gone".
//
// A watchdog that does not read (stopped by SIGSTOP, a debugger, a job
// scheduler) must never stall us: every send is non-blocking, and what does
// not fit waits in an outbox that keeps only the latest state (the rest of a
// line cut short, then the current set once). The outbox is flushed on every
// later lock or release and every read-back (sm_view), so a watchdog that
// resumes catches up at the next clock change or read-back. The first stall prints one warning on
// stderr; training goes on, and only a death during the stall can leave a GPU locked.
//
// Cost: a map lookup and a mutex per lock or release; one short non-blocking
// send() when the set changes or a stalled line is pending.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nvml_loader.hpp"

namespace perseus {

class ClockLocks {
 public:
  // The registry of this process (a fresh, empty one in a forked child).
  static ClockLocks& instance();

  ClockLocks(const ClockLocks&) = delete;
  ClockLocks& operator=(const ClockLocks&) = delete;

  // `holder` (any stable address; a switcher passes itself) locks the SM, or
  // memory, clock of `device` at `mhz`. Returns NVML's status; on failure the
  // holder's earlier hold, if any, stands.
  nvml::Return lock_sm(const void* holder, const nvml::Api& api, const nvml::DeviceInfo& device,
                       unsigned mhz);
  nvml::Return lock_memory(const void* holder, const nvml::Api& api, const nvml::DeviceInfo& device,
                           unsigned mhz);

  // `holder` lets go of whatever it holds on `device`; see the preamble for
  // what happens to the GPU. A GPU whose reset failed stays listed for the
  // watchdog, and the next release of it tries again. Returns the first
  // failing status and sets *function to that NVML call.
  nvml::Return release(const void* holder, const nvml::Api& api, const nvml::DeviceInfo& device,
                       const char** function);

  // What the SM clock of `device` should read now, for the switchers'
  // read-back: the clock of the hold applied most recently (0: none), and
  // every SM clock this process set on it at or after `since_ns`
  // (CLOCK_MONOTONIC), since a change takes a while to show.
  struct SmView {
    unsigned effective_mhz = 0;
    std::vector<unsigned> recent_mhz;
    bool reset_recently = false;  // also reset in that time (the default clock may show)
  };
  SmView sm_view(const nvml::DeviceInfo& device, std::int64_t since_ns);

  // The watchdog's end of the feed: a connected stream socket, owned from
  // now on (any previous one is closed). The current set is sent at once.
  // A send that fails (the watchdog died) closes the socket; the Python
  // layer starts a new watchdog and calls this again.
  void set_watchdog(int fd);
  bool has_watchdog() const;
  // The line the watchdog was (or would be) sent last, without "\n".
  std::string state_line() const;
  // True while the latest state has not fully reached the watchdog's socket
  // (it is not reading). Sends nothing itself.
  bool watchdog_behind() const;
  // How many sends found the watchdog's socket full, since the process began.
  std::uint64_t watchdog_stalls() const;

 private:
  ClockLocks() = default;
  // pthread_atfork handlers: the fork happens between a consistent pair of
  // states, and the child gets a registry of its own.
  static void before_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();

  struct Hold {
    const void* holder;
    unsigned mhz;
    std::uint64_t seq;  // order of successful applications on this GPU
  };
  struct Domain {  // the SM clock, or the memory clock, of one GPU
    std::vector<Hold> holds;
    bool locked = false;  // told to lock and not yet reset; guarded by mutex_ too
  };
  struct Gpu {
    std::mutex mutex;  // held across every NVML call on this GPU
    std::string uuid;
    Domain sm;
    Domain memory;
    std::uint64_t next_seq = 1;
    // The latest successful SM clock changes (time ns, MHz; 0 for a reset),
    // oldest first, at most kRecentSets of them.
    std::vector<std::pair<std::int64_t, unsigned>> recent_sm;
  };
  static constexpr std::size_t kRecentSets = 64;
  static void remember_sm(Gpu& g, unsigned mhz);  // g.mutex held
  struct Calls {                                  // the NVML functions of one domain
    nvml::Return (*set)(nvml::Device, unsigned, unsigned);
    nvml::Return (*reset)(nvml::Device);
    const char* set_name;
    const char* reset_name;
  };
  static Calls sm_calls(const nvml::Api& api);
  static Calls memory_calls(const nvml::Api& api);

  Gpu& gpu(const nvml::DeviceInfo& device);
  // g.mutex held by the caller for both.
  nvml::Return lock(Gpu& g, Domain& d, const void* holder, const Calls& calls, nvml::Device handle,
                    unsigned mhz);
  nvml::Return let_go(Gpu& g, Domain& d, const void* holder, const Calls& calls, nvml::Device handle,
                      const char** function);
  // Sets d.locked and sends the new line if it changed. g.mutex held.
  void mark(Domain& d, bool locked);
  // Sends what the outbox holds, as far as the socket takes it. Prints the
  // stall warning (once per watchdog) after releasing mutex_.
  void flush();
  std::string state_line_locked() const;  // mutex_ held
  // Sends what it can without blocking; returns true when this call found
  // the socket full for the first time since the watchdog was set. mutex_ held.
  bool send_locked();

  mutable std::mutex mutex_;  // guards everything below and every Domain::locked
  std::map<std::string, std::unique_ptr<Gpu>> gpus_;  // by UUID
  int fd_ = -1;
  std::string outbox_;        // the unsent rest of a line already begun
  bool stale_ = false;        // the current set has not been queued since it changed
  bool warned_ = false;       // this watchdog's stall was reported
  std::uint64_t stalls_ = 0;  // sends that found the socket full
};

}  // namespace perseus
