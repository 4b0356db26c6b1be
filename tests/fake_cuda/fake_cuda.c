/* A fake libcuda.so.1: just enough of the CUDA driver API for perseus's
 * stream-ordered switching and its blocking-power kernel (cpp/cuda_loader.cpp,
 * cpp/cuda_module.cpp) to run without a GPU.
 *
 * Every stream handle (any integer; 0 included) gets a FIFO queue and a
 * thread of its own that plays the role of the GPU: it takes the queued
 * items in order and runs them. cuLaunchHostFunc queues a host function,
 * which thus runs later, on that thread, after everything queued before it
 * -- as the driver does. Tests queue fake kernels (fake_cuda_launch_kernel:
 * sleep, logging their start and end) around host functions to check where
 * a clock change lands.
 *
 * Modules and kernels: cuModuleLoadData keeps the PTX text, and
 * cuModuleGetFunction finds ".entry <name>(" in it. cuLaunchKernel of
 * "perseus_wait" (the profiler's blocking-power kernel) runs, on the stream's
 * thread, what the kernel does: poll the int at its first argument until it
 * is non-zero or its second argument (ns) has passed, then store the number
 * of polls and whether the flag was seen at its third argument. Any other
 * kernel just logs. Host memory (cuMemHostAlloc) is calloc'ed, and its
 * "device" address is its host address.
 *
 * Environment, read by cuInit and fake_cuda_reload():
 *   FAKE_CUDA_LOG    append "<CLOCK_MONOTONIC ns> <event> <arg>" lines here
 *                    (events: kernel_start, kernel_end, host_start, host_end)
 *   FAKE_CUDA_FAIL   "function=code,...": the function returns `code`
 *                    (e.g. "cuLaunchHostFunc=201", CUDA_ERROR_INVALID_CONTEXT)
 *   FAKE_CUDA_DELAY_US  the "GPU" waits this long before each item
 *   FAKE_CUDA_NO_CONTEXT  if set, cuCtxGetCurrent reports no current context
 *
 * Test hooks: fake_cuda_reload, fake_cuda_launch_kernel,
 * fake_cuda_synchronize, fake_cuda_pause, fake_cuda_pending.
 *
 * Build: cc -shared -fPIC -O1 -o libcuda.so.1 fake_cuda.c -lpthread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_STREAMS 64
#define MAX_FAILS 16

typedef int CUresult;
typedef void (*CUhostFn)(void*);

struct item {
  struct item* next;
  CUhostFn fn;         /* host function, or NULL for a fake kernel */
  void* data;
  unsigned duration_us; /* fake kernel */
  unsigned id;
  int wait;             /* perseus_wait: args[0] flag, args[1] timeout ns, args[2] out */
  uint64_t args[3];
};

struct module {
  char* image;
};

struct function {
  char name[128];
};

struct stream {
  uintptr_t handle;
  int used;
  int paused;
  int running; /* an item is executing */
  struct item* head;
  struct item* tail;
  int pending;
  pthread_cond_t changed;
  pthread_t thread;
};

struct fail_rule {
  char function[64];
  int code;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stream g_streams[MAX_STREAMS];
static char g_log[1024];
static struct fail_rule g_fails[MAX_FAILS];
static int g_fail_count;
static unsigned g_delay_us;
static int g_no_context;
static int g_context; /* its address is the one context handle */

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_us(unsigned us) {
  struct timespec ts;
  ts.tv_sec = us / 1000000u;
  ts.tv_nsec = (long)(us % 1000000u) * 1000L;
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Called without the lock (the path is only changed by configure). */
static void log_event(const char* event, unsigned arg) {
  char path[1024];
  pthread_mutex_lock(&g_lock);
  memcpy(path, g_log, sizeof path);
  pthread_mutex_unlock(&g_lock);
  if (path[0] == '\0') return;
  char line[128];
  int n = snprintf(line, sizeof line, "%lld %s %u\n", now_ns(), event, arg);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  ssize_t ignored = write(fd, line, (size_t)n);
  (void)ignored;
  close(fd);
}

/* Lock held. */
static void configure(void) {
  const char* v = getenv("FAKE_CUDA_LOG");
  snprintf(g_log, sizeof g_log, "%s", v ? v : "");
  v = getenv("FAKE_CUDA_DELAY_US");
  g_delay_us = v ? (unsigned)atoi(v) : 0;
  g_no_context = getenv("FAKE_CUDA_NO_CONTEXT") != NULL;
  g_fail_count = 0;
  v = getenv("FAKE_CUDA_FAIL");
  if (v != NULL) {
    char buffer[1024];
    snprintf(buffer, sizeof buffer, "%s", v);
    char* save = NULL;
    for (char* it = strtok_r(buffer, ",", &save); it && g_fail_count < MAX_FAILS;
         it = strtok_r(NULL, ",", &save)) {
      char* eq = strchr(it, '=');
      if (eq == NULL) continue;
      *eq = '\0';
      snprintf(g_fails[g_fail_count].function, 64, "%s", it);
      g_fails[g_fail_count++].code = atoi(eq + 1);
    }
  }
}

/* Lock held. */
static CUresult failure(const char* function) {
  for (int i = 0; i < g_fail_count; ++i)
    if (strcmp(g_fails[i].function, function) == 0) return g_fails[i].code;
  return 0;
}

static void* run_stream(void* arg) {
  struct stream* s = (struct stream*)arg;
  pthread_mutex_lock(&g_lock);
  for (;;) {
    while (s->head == NULL || s->paused) pthread_cond_wait(&s->changed, &g_lock);
    struct item* it = s->head;
    s->head = it->next;
    if (s->head == NULL) s->tail = NULL;
    s->running = 1;
    unsigned delay = g_delay_us;
    pthread_mutex_unlock(&g_lock);

    if (delay) sleep_us(delay);
    if (it->wait) {
      log_event("kernel_start", it->id);
      const volatile int* flag = (const volatile int*)(uintptr_t)it->args[0];
      long long start = now_ns();
      uint64_t spins = 0, seen = 0;
      for (;;) {
        if (*flag != 0) {
          seen = 1;
          break;
        }
        ++spins;
        if ((uint64_t)(now_ns() - start) >= it->args[1]) break;
        sleep_us(200); /* a GPU spins; two shared CPU cores should not */
      }
      uint64_t* out = (uint64_t*)(uintptr_t)it->args[2];
      out[0] = spins;
      out[1] = seen;
      log_event("kernel_end", it->id);
    } else if (it->fn != NULL) {
      log_event("host_start", it->id);
      it->fn(it->data);
      log_event("host_end", it->id);
    } else {
      log_event("kernel_start", it->id);
      sleep_us(it->duration_us);
      log_event("kernel_end", it->id);
    }
    free(it);

    pthread_mutex_lock(&g_lock);
    s->running = 0;
    --s->pending;
    pthread_cond_broadcast(&s->changed);
  }
  return NULL;
}

/* Lock held. */
static struct stream* find_stream(uintptr_t handle, int create) {
  struct stream* free_slot = NULL;
  for (int i = 0; i < MAX_STREAMS; ++i) {
    if (g_streams[i].used && g_streams[i].handle == handle) return &g_streams[i];
    if (!g_streams[i].used && free_slot == NULL) free_slot = &g_streams[i];
  }
  if (!create || free_slot == NULL) return NULL;
  free_slot->used = 1;
  free_slot->handle = handle;
  pthread_cond_init(&free_slot->changed, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&free_slot->thread, &attr, run_stream, free_slot);
  pthread_attr_destroy(&attr);
  return free_slot;
}

static CUresult enqueue(uintptr_t handle, CUhostFn fn, void* data, unsigned duration_us, unsigned id,
                        const char* function) {
  pthread_mutex_lock(&g_lock);
  CUresult rc = failure(function);
  if (rc == 0) {
    struct stream* s = find_stream(handle, 1);
    struct item* it = (struct item*)calloc(1, sizeof *it);
    if (s == NULL || it == NULL) {
      free(it);
      rc = 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    } else {
      it->fn = fn;
      it->data = data;
      it->duration_us = duration_us;
      it->id = id;
      if (s->tail) s->tail->next = it;
      else s->head = it;
      s->tail = it;
      ++s->pending;
      pthread_cond_broadcast(&s->changed);
    }
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* ---- Driver API -------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned flags) {
  (void)flags;
  pthread_mutex_lock(&g_lock);
  configure();
  CUresult rc = failure("cuInit");
  pthread_mutex_unlock(&g_lock);
  return rc;
}

static const char* name_of(CUresult code) {
  switch (code) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    default: return NULL;
  }
}

static const char* text_of(CUresult code) {
  switch (code) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 3: return "initialization error";
    case 100: return "no CUDA-capable device is detected";
    case 201: return "invalid device context";
    case 400: return "invalid resource handle";
    case 500: return "named symbol not found";
    default: return NULL;
  }
}

EXPORT CUresult cuGetErrorName(CUresult code, const char** out) {
  *out = name_of(code);
  return *out ? 0 : 1;
}

EXPORT CUresult cuGetErrorString(CUresult code, const char** out) {
  *out = text_of(code);
  return *out ? 0 : 1;
}

EXPORT CUresult cuLaunchHostFunc(void* stream, CUhostFn fn, void* data) {
  if (fn == NULL) return 1;
  return enqueue((uintptr_t)stream, fn, data, 0, 0, "cuLaunchHostFunc");
}

static CUresult failure_of(const char* function) {
  pthread_mutex_lock(&g_lock);
  CUresult rc = failure(function);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT CUresult cuCtxGetCurrent(void** context) {
  CUresult rc = failure_of("cuCtxGetCurrent");
  if (rc == 0) *context = g_no_context ? NULL : (void*)&g_context;
  return rc;
}

EXPORT CUresult cuModuleLoadData(void** module, const void* image) {
  CUresult rc = failure_of("cuModuleLoadData");
  if (rc != 0) return rc;
  if (module == NULL || image == NULL) return 1;
  struct module* m = (struct module*)calloc(1, sizeof *m);
  if (m == NULL || (m->image = strdup((const char*)image)) == NULL) {
    free(m);
    return 2;
  }
  *module = m;
  return 0;
}

EXPORT CUresult cuModuleUnload(void* module) {
  CUresult rc = failure_of("cuModuleUnload");
  if (rc != 0) return rc;
  struct module* m = (struct module*)module;
  if (m == NULL) return 400;
  free(m->image);
  free(m);
  return 0;
}

EXPORT CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  CUresult rc = failure_of("cuModuleGetFunction");
  if (rc != 0) return rc;
  const struct module* m = (const struct module*)module;
  if (m == NULL || name == NULL) return 1;
  char entry[160];
  snprintf(entry, sizeof entry, ".entry %s(", name);
  if (strstr(m->image, entry) == NULL) return 500;
  struct function* f = (struct function*)calloc(1, sizeof *f); /* leaked, as a module owns it */
  if (f == NULL) return 2;
  snprintf(f->name, sizeof f->name, "%s", name);
  *function = f;
  return 0;
}

EXPORT CUresult cuMemHostAlloc(void** pointer, size_t bytes, unsigned flags) {
  (void)flags;
  CUresult rc = failure_of("cuMemHostAlloc");
  if (rc != 0) return rc;
  *pointer = calloc(1, bytes);
  return *pointer ? 0 : 2;
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(unsigned long long* device, void* host,
                                             unsigned flags) {
  (void)flags;
  CUresult rc = failure_of("cuMemHostGetDevicePointer_v2");
  if (rc == 0) *device = (unsigned long long)(uintptr_t)host;
  return rc;
}

EXPORT CUresult cuMemFreeHost(void* host) {
  CUresult rc = failure_of("cuMemFreeHost");
  if (rc == 0) free(host);
  return rc;
}

EXPORT CUresult cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared_bytes, void* stream,
                               void** params, void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared_bytes, (void)extra;
  const struct function* f = (const struct function*)function;
  if (f == NULL) return 400;
  pthread_mutex_lock(&g_lock);
  CUresult rc = failure("cuLaunchKernel");
  if (rc == 0) {
    struct stream* s = find_stream((uintptr_t)stream, 1);
    struct item* it = (struct item*)calloc(1, sizeof *it);
    if (s == NULL || it == NULL) {
      free(it);
      rc = 2;
    } else {
      if (strcmp(f->name, "perseus_wait") == 0) {
        it->wait = 1;
        for (int i = 0; i < 3; ++i) it->args[i] = *(const uint64_t*)params[i];
      }
      if (s->tail) s->tail->next = it;
      else s->head = it;
      s->tail = it;
      ++s->pending;
      pthread_cond_broadcast(&s->changed);
    }
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* ---- Test hooks -------------------------------------------------------- */

EXPORT void fake_cuda_reload(void) {
  pthread_mutex_lock(&g_lock);
  configure();
  pthread_mutex_unlock(&g_lock);
}

EXPORT int fake_cuda_launch_kernel(uintptr_t stream, unsigned duration_us, unsigned id) {
  return enqueue(stream, NULL, NULL, duration_us, id, "fake_cuda_launch_kernel");
}

/* Waits until the stream has run everything queued; 0 on success, 1 on
 * timeout. */
EXPORT int fake_cuda_synchronize(uintptr_t stream, unsigned timeout_ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000u;
  deadline.tv_nsec += (long)(timeout_ms % 1000u) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  int rc = 0;
  pthread_mutex_lock(&g_lock);
  struct stream* s = find_stream(stream, 0);
  while (s != NULL && s->pending > 0 && rc == 0)
    if (pthread_cond_timedwait(&s->changed, &g_lock, &deadline) == ETIMEDOUT) rc = 1;
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* A paused stream holds its queue (like a GPU still busy with earlier work). */
EXPORT void fake_cuda_pause(uintptr_t stream, int paused) {
  pthread_mutex_lock(&g_lock);
  struct stream* s = find_stream(stream, 1);
  if (s) {
    s->paused = paused;
    pthread_cond_broadcast(&s->changed);
  }
  pthread_mutex_unlock(&g_lock);
}

EXPORT int fake_cuda_pending(uintptr_t stream) {
  pthread_mutex_lock(&g_lock);
  struct stream* s = find_stream(stream, 0);
  int n = s ? s->pending : 0;
  pthread_mutex_unlock(&g_lock);
  return n;
}
