/* A fake libnvidia-ml.so.1 for tests and benchmarks without a GPU.
 *
 * It exports the NVML functions perseus resolves (cpp/nvml_loader.cpp) with
 * NVML's C ABI, keeps every device's clocks in memory, and is steered by
 * environment variables, read by nvmlInit_v2 (and by fake_nvml_reload()):
 *
 *   FAKE_NVML_DEVICES     number of GPUs (default 2)
 *   FAKE_NVML_CLOCKS      supported SM clocks in MHz, comma-separated
 *                         (default 1980, 1965, ..., 210: steps of 15 MHz)
 *   FAKE_NVML_MEM_CLOCKS  supported memory clocks (default 2619)
 *   FAKE_NVML_NAME        device name (default "Fake NVIDIA H200")
 *   FAKE_NVML_FAIL        failures, "function=code[@n],...": the function
 *                         returns `code` after n successful calls (n = 0:
 *                         always), e.g. "nvmlDeviceSetGpuLockedClocks=4";
 *                         code "hang" makes a clock-changing call never
 *                         return (a GPU fallen off the bus), e.g.
 *                         "nvmlDeviceResetGpuLockedClocks=hang@1"
 *   FAKE_NVML_SLEEP_MS    milliseconds that every clock-changing call sleeps
 *   FAKE_NVML_LOG         append one line per call to this file:
 *                         "<CLOCK_MONOTONIC ns> <pid> <function> <args> = <return code>"
 *   FAKE_NVML_STATE       a file holding the locked clocks, read at init and
 *                         rewritten on every change, so that locks outlive
 *                         a process as they do on a real GPU
 *   FAKE_NVML_SETTLE_MS   a change of the locked SM clock takes effect this
 *                         long after the call (a real GPU's switch latency):
 *                         until then the GPU runs, reports and draws power
 *                         at the clock it ran before
 *   FAKE_NVML_CLAMP_MHZ   the GPU silently runs no faster than this, whatever
 *                         it is locked at (nvmlDeviceGetClockInfo tells)
 *   FAKE_NVML_POWER       "idle_w,max_w" (default "100,700"): the energy
 *                         counter integrates P(f) = idle + (max - idle) *
 *                         (f / f_max)^3 over time, f the current SM clock
 *
 * Test hooks (call through ctypes on the same path; dlopen returns the same
 * copy): fake_nvml_reload, fake_nvml_reset, fake_nvml_locked_clock,
 * fake_nvml_locked_memory_clock, fake_nvml_calls, fake_nvml_init_count, fake_nvml_override (the
 * driver runs a GPU at another clock than it is locked at, as reported on
 * Blackwell, until called again with 0).
 *
 * Build: cc -shared -fPIC -O1 -o libnvidia-ml.so.1 fake_nvml.c -lpthread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;

enum {
  OK = 0,
  ERR_UNINITIALIZED = 1,
  ERR_INVALID_ARGUMENT = 2,
  ERR_NOT_SUPPORTED = 3,
  ERR_NOT_FOUND = 6,
  ERR_INSUFFICIENT_SIZE = 7,
  HANG = -1, /* not an NVML code: the call never returns */
};

#define MAX_DEVICES 16
#define MAX_CLOCKS 512
#define MAX_FAILS 32
#define MAX_COUNTED 64

struct nvmlDevice_st {
  unsigned index;
  unsigned gpu_min, gpu_max; /* locked SM clocks, 0 = unlocked */
  unsigned mem_min, mem_max; /* locked memory clocks, 0 = unlocked */
  unsigned override_mhz;     /* the clock it really runs at, 0 = as locked */
  unsigned before_mhz;       /* the clock it runs until settle_at_ns (FAKE_NVML_SETTLE_MS) */
  long long settle_at_ns;
  double energy_mj;
  long long energy_at_ns;
};

struct fail_rule {
  char function[64];
  int code;
  long after;
};

struct counter {
  char function[64];
  unsigned long calls;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlDevice_st g_devices[MAX_DEVICES];
static unsigned g_device_count = 2;
static unsigned g_clocks[MAX_CLOCKS]; /* descending, as NVML lists them */
static unsigned g_clock_count;
static unsigned g_mem_clocks[MAX_CLOCKS];
static unsigned g_mem_clock_count;
static char g_name[96] = "Fake NVIDIA H200";
static struct fail_rule g_fails[MAX_FAILS];
static int g_fail_count;
static struct counter g_counters[MAX_COUNTED];
static int g_counter_count;
static double g_sleep_ms;
static double g_settle_ms;
static unsigned g_clamp_mhz; /* 0: no clamp */
static char g_log[1024];
static char g_state[1024];
static double g_idle_w = 100.0, g_max_w = 700.0;
static int g_init_count;
static int g_configured;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void copy_env(char* out, size_t size, const char* name) {
  const char* v = getenv(name);
  out[0] = '\0';
  if (v != NULL) snprintf(out, size, "%s", v);
}

static unsigned parse_list(const char* text, unsigned* out, unsigned max) {
  unsigned n = 0;
  const char* p = text;
  while (*p != '\0' && n < max) {
    char* end = NULL;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p) break;
    if (v > 0) out[n++] = (unsigned)v;
    p = (*end == ',') ? end + 1 : end;
    if (*end != ',') break;
  }
  return n;
}

static int cmp_desc(const void* a, const void* b) {
  unsigned x = *(const unsigned*)a, y = *(const unsigned*)b;
  return (x < y) - (x > y);
}

/* Lock held. */
static void configure(void) {
  const char* v;
  v = getenv("FAKE_NVML_DEVICES");
  g_device_count = v ? (unsigned)atoi(v) : 2;
  if (g_device_count > MAX_DEVICES) g_device_count = MAX_DEVICES;

  v = getenv("FAKE_NVML_CLOCKS");
  if (v != NULL && *v != '\0') {
    g_clock_count = parse_list(v, g_clocks, MAX_CLOCKS);
  } else {
    g_clock_count = 0;
    for (unsigned f = 1980; f >= 210; f -= 15) g_clocks[g_clock_count++] = f;
  }
  qsort(g_clocks, g_clock_count, sizeof(unsigned), cmp_desc);

  v = getenv("FAKE_NVML_MEM_CLOCKS");
  g_mem_clock_count = (v != NULL && *v != '\0') ? parse_list(v, g_mem_clocks, MAX_CLOCKS) : 0;
  if (g_mem_clock_count == 0) {
    g_mem_clocks[0] = 2619;
    g_mem_clock_count = 1;
  }
  qsort(g_mem_clocks, g_mem_clock_count, sizeof(unsigned), cmp_desc);

  v = getenv("FAKE_NVML_NAME");
  snprintf(g_name, sizeof g_name, "%s", (v != NULL && *v != '\0') ? v : "Fake NVIDIA H200");

  g_fail_count = 0;
  v = getenv("FAKE_NVML_FAIL");
  if (v != NULL) {
    char buffer[2048];
    snprintf(buffer, sizeof buffer, "%s", v);
    char* save = NULL;
    for (char* item = strtok_r(buffer, ",", &save); item != NULL && g_fail_count < MAX_FAILS;
         item = strtok_r(NULL, ",", &save)) {
      char* eq = strchr(item, '=');
      if (eq == NULL) continue;
      *eq = '\0';
      struct fail_rule* r = &g_fails[g_fail_count++];
      snprintf(r->function, sizeof r->function, "%s", item);
      r->code = strncmp(eq + 1, "hang", 4) == 0 ? HANG : atoi(eq + 1);
      char* at = strchr(eq + 1, '@');
      r->after = at ? atol(at + 1) : 0;
    }
  }

  v = getenv("FAKE_NVML_CLAMP_MHZ");
  g_clamp_mhz = v ? (unsigned)atoi(v) : 0;
  v = getenv("FAKE_NVML_SLEEP_MS");
  g_sleep_ms = v ? atof(v) : 0.0;
  v = getenv("FAKE_NVML_SETTLE_MS");
  g_settle_ms = v ? atof(v) : 0.0;
  copy_env(g_log, sizeof g_log, "FAKE_NVML_LOG");
  copy_env(g_state, sizeof g_state, "FAKE_NVML_STATE");
  v = getenv("FAKE_NVML_POWER");
  if (v == NULL || sscanf(v, "%lf,%lf", &g_idle_w, &g_max_w) != 2) {
    g_idle_w = 100.0;
    g_max_w = 700.0;
  }
  for (unsigned i = 0; i < MAX_DEVICES; ++i) {
    g_devices[i].index = i;
    if (g_devices[i].energy_at_ns == 0) g_devices[i].energy_at_ns = now_ns();
  }
  g_configured = 1;
}

static void ensure_configured(void) {
  if (!g_configured) configure();
}

/* Lock held. */
static void write_log(const char* function, int rc, const char* fmt, ...) {
  if (g_log[0] == '\0') return;
  char args[256] = "";
  if (fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
  }
  char line[512];
  int n = snprintf(line, sizeof line, "%lld %d %s %s = %d\n", now_ns(), (int)getpid(), function,
                   args, rc);
  int fd = open(g_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  ssize_t ignored = write(fd, line, (size_t)n); /* one write: lines never interleave */
  (void)ignored;
  close(fd);
}

/* Counts the call; returns the configured failure for it, or OK. Lock held. */
static int count_call(const char* function) {
  struct counter* c = NULL;
  for (int i = 0; i < g_counter_count; ++i)
    if (strcmp(g_counters[i].function, function) == 0) c = &g_counters[i];
  if (c == NULL && g_counter_count < MAX_COUNTED) {
    c = &g_counters[g_counter_count++];
    snprintf(c->function, sizeof c->function, "%s", function);
    c->calls = 0;
  }
  unsigned long calls = c ? c->calls++ : 0;
  for (int i = 0; i < g_fail_count; ++i)
    if (strcmp(g_fails[i].function, function) == 0 && (long)calls >= g_fails[i].after)
      return g_fails[i].code;
  return OK;
}

static void load_state(void) {
  if (g_state[0] == '\0') return;
  FILE* f = fopen(g_state, "r");
  if (f == NULL) return;
  unsigned i, a, b, c, d;
  while (fscanf(f, "%u %u %u %u %u", &i, &a, &b, &c, &d) == 5)
    if (i < MAX_DEVICES) {
      g_devices[i].gpu_min = a;
      g_devices[i].gpu_max = b;
      g_devices[i].mem_min = c;
      g_devices[i].mem_max = d;
    }
  fclose(f);
}

static void save_state(void) {
  if (g_state[0] == '\0') return;
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", g_state, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (f == NULL) return;
  for (unsigned i = 0; i < g_device_count; ++i)
    fprintf(f, "%u %u %u %u %u\n", i, g_devices[i].gpu_min, g_devices[i].gpu_max,
            g_devices[i].mem_min, g_devices[i].mem_max);
  fclose(f);
  rename(tmp, g_state);
}

static unsigned current_clock(const struct nvmlDevice_st* d) {
  if (d->override_mhz != 0) return d->override_mhz;
  if (d->settle_at_ns != 0 && now_ns() < d->settle_at_ns) return d->before_mhz;
  unsigned top = g_clock_count ? g_clocks[0] : 1980;
  unsigned mhz = d->gpu_max != 0 ? d->gpu_max : top;
  return g_clamp_mhz != 0 && mhz > g_clamp_mhz ? g_clamp_mhz : mhz;
}

static double power_w(unsigned mhz) {
  double fmax = g_clock_count ? (double)g_clocks[0] : 1980.0;
  double x = (double)mhz / fmax;
  return g_idle_w + (g_max_w - g_idle_w) * x * x * x;
}

/* Brings the energy counter up to now at the clocks run since the last
 * update (the one before a settling change, then the current one). Lock
 * held. */
static void advance_energy(struct nvmlDevice_st* d) {
  long long t = now_ns();
  if (d->override_mhz == 0 && d->settle_at_ns > d->energy_at_ns) {
    long long until = d->settle_at_ns < t ? d->settle_at_ns : t;
    d->energy_mj += power_w(d->before_mhz) * (double)(until - d->energy_at_ns) * 1e-6;
    d->energy_at_ns = until;
  }
  /* W * ns * 1e-6 = mJ */
  d->energy_mj += power_w(current_clock(d)) * (double)(t - d->energy_at_ns) * 1e-6;
  d->energy_at_ns = t;
}

/* Before a change of the locked SM clock: the GPU keeps the clock it runs
 * now for FAKE_NVML_SETTLE_MS more. Lock held. */
static void begin_settling(struct nvmlDevice_st* d) {
  if (g_settle_ms <= 0) {
    d->settle_at_ns = 0;
    return;
  }
  d->before_mhz = current_clock(d);
  d->settle_at_ns = now_ns() + (long long)(g_settle_ms * 1e6);
}

static void sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts;
  ts.tv_sec = (time_t)(ms / 1000.0);
  ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000.0) * 1e6);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int valid_device(nvmlDevice_t d) {
  return d != NULL && d >= g_devices && d < g_devices + g_device_count;
}

/* Common entry: lock, count, fail if told to, check init and device. */
#define ENTER(name, device_ok)                       \
  pthread_mutex_lock(&g_lock);                       \
  ensure_configured();                               \
  int rc = count_call(name);                         \
  if (rc == OK && g_init_count == 0) rc = ERR_UNINITIALIZED; \
  if (rc == OK && !(device_ok)) rc = ERR_INVALID_ARGUMENT

/* ---- NVML API ---------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  pthread_mutex_lock(&g_lock);
  configure();
  int rc = count_call("nvmlInit_v2");
  if (rc == OK) {
    if (g_init_count == 0) load_state();
    ++g_init_count;
  }
  write_log("nvmlInit_v2", rc, NULL);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
  ENTER("nvmlShutdown", 1);
  if (rc == OK) --g_init_count;
  write_log("nvmlShutdown", rc, NULL);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT const char* nvmlErrorString(nvmlReturn_t code) {
  switch (code) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    default: return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  ENTER("nvmlSystemGetDriverVersion", version != NULL);
  if (rc == OK) snprintf(version, length, "%s", "999.99-fake");
  write_log("nvmlSystemGetDriverVersion", rc, NULL);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  ENTER("nvmlDeviceGetCount_v2", count != NULL);
  if (rc == OK) *count = g_device_count;
  write_log("nvmlDeviceGetCount_v2", rc, NULL);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  ENTER("nvmlDeviceGetHandleByIndex_v2", device != NULL && index < g_device_count);
  if (rc == OK) *device = &g_devices[index];
  write_log("nvmlDeviceGetHandleByIndex_v2", rc, "%u", index);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

static void format_uuid(char* out, unsigned length, unsigned index) {
  snprintf(out, length, "GPU-fa4e%04u-0000-0000-0000-%012u", index, index);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  ENTER("nvmlDeviceGetHandleByUUID", uuid != NULL && device != NULL);
  if (rc == OK) {
    rc = ERR_NOT_FOUND;
    for (unsigned i = 0; i < g_device_count; ++i) {
      char buffer[96];
      format_uuid(buffer, sizeof buffer, i);
      if (strcmp(buffer, uuid) == 0) {
        *device = &g_devices[i];
        rc = OK;
      }
    }
  }
  write_log("nvmlDeviceGetHandleByUUID", rc, "%s", uuid ? uuid : "(null)");
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  ENTER("nvmlDeviceGetUUID", valid_device(device) && uuid != NULL);
  if (rc == OK) format_uuid(uuid, length, device->index);
  write_log("nvmlDeviceGetUUID", rc, "%u", valid_device(device) ? device->index : 999u);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  ENTER("nvmlDeviceGetName", valid_device(device) && name != NULL);
  if (rc == OK) snprintf(name, length, "%s", g_name);
  write_log("nvmlDeviceGetName", rc, "%u", valid_device(device) ? device->index : 999u);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned* index) {
  ENTER("nvmlDeviceGetIndex", valid_device(device) && index != NULL);
  if (rc == OK) *index = device->index;
  write_log("nvmlDeviceGetIndex", rc, NULL);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

static int copy_clocks(const unsigned* from, unsigned n, unsigned* count, unsigned* out) {
  if (*count < n) {
    *count = n;
    return ERR_INSUFFICIENT_SIZE;
  }
  memcpy(out, from, n * sizeof(unsigned));
  *count = n;
  return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned* count,
                                                       unsigned* clocks) {
  ENTER("nvmlDeviceGetSupportedMemoryClocks", valid_device(device) && count != NULL);
  if (rc == OK) rc = copy_clocks(g_mem_clocks, g_mem_clock_count, count, clocks);
  write_log("nvmlDeviceGetSupportedMemoryClocks", rc, "%u", valid_device(device) ? device->index : 999u);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned memory_mhz,
                                                         unsigned* count, unsigned* clocks) {
  ENTER("nvmlDeviceGetSupportedGraphicsClocks", valid_device(device) && count != NULL);
  if (rc == OK) {
    int known = 0;
    for (unsigned i = 0; i < g_mem_clock_count; ++i) known |= g_mem_clocks[i] == memory_mhz;
    rc = known ? copy_clocks(g_clocks, g_clock_count, count, clocks) : ERR_NOT_FOUND;
  }
  write_log("nvmlDeviceGetSupportedGraphicsClocks", rc, "%u %u",
            valid_device(device) ? device->index : 999u, memory_mhz);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned type, unsigned* clock) {
  ENTER("nvmlDeviceGetClockInfo", valid_device(device) && clock != NULL && type <= 3);
  if (rc == OK) {
    if (type == 2) *clock = device->mem_max ? device->mem_max : g_mem_clocks[0];
    else *clock = current_clock(device);
  }
  write_log("nvmlDeviceGetClockInfo", rc, "%u %u", valid_device(device) ? device->index : 999u, type);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                        unsigned long long* energy_mj) {
  ENTER("nvmlDeviceGetTotalEnergyConsumption", valid_device(device) && energy_mj != NULL);
  if (rc == OK) {
    advance_energy(device);
    *energy_mj = (unsigned long long)device->energy_mj;
  }
  write_log("nvmlDeviceGetTotalEnergyConsumption", rc, "%u", valid_device(device) ? device->index : 999u);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* milliwatts) {
  ENTER("nvmlDeviceGetPowerUsage", valid_device(device) && milliwatts != NULL);
  if (rc == OK) {
    *milliwatts = (unsigned)(1000.0 * power_w(current_clock(device)));
  }
  write_log("nvmlDeviceGetPowerUsage", rc, "%u", valid_device(device) ? device->index : 999u);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* The clock-changing calls are counted (and may fail) on entry, then sleep
 * without the lock, like the slow driver call they stand for, then act. A
 * test that sees the call counted knows the caller is inside it. */
static void sleep_unlocked(int rc) {
  double ms = g_sleep_ms;
  pthread_mutex_unlock(&g_lock);
  sleep_ms(ms);
  if (rc == HANG) /* without the lock: the rest of the library keeps working */
    for (;;) sleep_ms(1000.0);
  pthread_mutex_lock(&g_lock);
}

static int in_range(const unsigned* clocks, unsigned n, unsigned mhz) {
  return n == 0 || (mhz >= clocks[n - 1] && mhz <= clocks[0]);
}

EXPORT nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned min_mhz,
                                                 unsigned max_mhz) {
  ENTER("nvmlDeviceSetGpuLockedClocks", valid_device(device) && min_mhz <= max_mhz &&
                                            in_range(g_clocks, g_clock_count, min_mhz) &&
                                            in_range(g_clocks, g_clock_count, max_mhz));
  sleep_unlocked(rc);
  if (rc == OK) {
    advance_energy(device);
    begin_settling(device);
    device->gpu_min = min_mhz;
    device->gpu_max = max_mhz;
    save_state();
  }
  write_log("nvmlDeviceSetGpuLockedClocks", rc, "%u %u %u", valid_device(device) ? device->index : 999u,
            min_mhz, max_mhz);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device) {
  ENTER("nvmlDeviceResetGpuLockedClocks", valid_device(device));
  sleep_unlocked(rc);
  if (rc == OK) {
    advance_energy(device);
    begin_settling(device);
    device->gpu_min = device->gpu_max = 0;
    save_state();
  }
  write_log("nvmlDeviceResetGpuLockedClocks", rc, "%u", valid_device(device) ? device->index : 999u);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device, unsigned min_mhz,
                                                    unsigned max_mhz) {
  ENTER("nvmlDeviceSetMemoryLockedClocks", valid_device(device) && min_mhz <= max_mhz &&
                                               in_range(g_mem_clocks, g_mem_clock_count, min_mhz) &&
                                               in_range(g_mem_clocks, g_mem_clock_count, max_mhz));
  sleep_unlocked(rc);
  if (rc == OK) {
    device->mem_min = min_mhz;
    device->mem_max = max_mhz;
    save_state();
  }
  write_log("nvmlDeviceSetMemoryLockedClocks", rc, "%u %u %u",
            valid_device(device) ? device->index : 999u, min_mhz, max_mhz);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device) {
  ENTER("nvmlDeviceResetMemoryLockedClocks", valid_device(device));
  sleep_unlocked(rc);
  if (rc == OK) {
    device->mem_min = device->mem_max = 0;
    save_state();
  }
  write_log("nvmlDeviceResetMemoryLockedClocks", rc, "%u", valid_device(device) ? device->index : 999u);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* ---- Test hooks -------------------------------------------------------- */

EXPORT void fake_nvml_reload(void) {
  pthread_mutex_lock(&g_lock);
  configure();
  load_state();
  pthread_mutex_unlock(&g_lock);
}

EXPORT void fake_nvml_reset(void) {
  pthread_mutex_lock(&g_lock);
  for (unsigned i = 0; i < MAX_DEVICES; ++i) {
    g_devices[i].gpu_min = g_devices[i].gpu_max = 0;
    g_devices[i].mem_min = g_devices[i].mem_max = 0;
    g_devices[i].override_mhz = 0;
    g_devices[i].settle_at_ns = 0;
    g_devices[i].energy_mj = 0.0;
    g_devices[i].energy_at_ns = now_ns();
  }
  g_counter_count = 0;
  pthread_mutex_unlock(&g_lock);
}

EXPORT unsigned fake_nvml_locked_clock(unsigned index) {
  pthread_mutex_lock(&g_lock);
  unsigned v = index < MAX_DEVICES ? g_devices[index].gpu_max : 0;
  pthread_mutex_unlock(&g_lock);
  return v;
}

EXPORT void fake_nvml_override(unsigned index, unsigned mhz) {
  pthread_mutex_lock(&g_lock);
  if (index < MAX_DEVICES) {
    advance_energy(&g_devices[index]);
    g_devices[index].override_mhz = mhz;
  }
  pthread_mutex_unlock(&g_lock);
}

EXPORT unsigned fake_nvml_locked_memory_clock(unsigned index) {
  pthread_mutex_lock(&g_lock);
  unsigned v = index < MAX_DEVICES ? g_devices[index].mem_max : 0;
  pthread_mutex_unlock(&g_lock);
  return v;
}

EXPORT unsigned long fake_nvml_calls(const char* function) {
  unsigned long n = 0;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < g_counter_count; ++i)
    if (strcmp(g_counters[i].function, function) == 0) n = g_counters[i].calls;
  pthread_mutex_unlock(&g_lock);
  return n;
}

EXPORT int fake_nvml_init_count(void) {
  pthread_mutex_lock(&g_lock);
  int n = g_init_count;
  pthread_mutex_unlock(&g_lock);
  return n;
}
