/* Shared helpers for the freeway benchmark programs.
 *
 * Header only, usable from C11 and C++17. Every benchmark program:
 *   - takes its parameters as `--name value` pairs on the command line,
 *   - calls nothing but the standard allocation functions (the allocator
 *     under test is swapped in with LD_PRELOAD, the binary stays the same),
 *   - prints exactly one JSON object on the last line of stdout.
 *
 * On Windows (MinGW-w64) the same programs build twice instead, once per
 * allocator (bench/wine.py); the OS-dependent helpers below have Win32
 * versions there, and threads come from MinGW's static winpthreads.
 */
#ifndef FW_BENCH_COMMON_H
#define FW_BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#include <windows.h>
#include <psapi.h>
#else
#include <dlfcn.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors and memory ---------------------------------------------------- */

static inline void bench_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(2);
}

/* A run that cannot get its own bookkeeping memory has nothing to report. */
static inline void *bench_calloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p) bench_die("out of memory");
  return p;
}

/* Memory straight from the OS (extra: more MAP_* flags), for the programs'
 * own tables, so that they do not weigh on the allocator being measured.
 * Give it back with bench_unmap. */
#ifndef _WIN32
static inline void *bench_map(size_t bytes, int extra) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
  if (p == MAP_FAILED) bench_die("mmap failed");
  return p;
}

static inline void bench_unmap(void *p, size_t bytes) { munmap(p, bytes); }

/* The function of that name in this process (the preloaded library's), or
 * NULL: how the programs see whether freeway is there without linking it. */
static inline void *bench_lookup(const char *name) { return dlsym(RTLD_DEFAULT, name); }
#else
/* Committed memory counts against the commit limit, but pages are backed
 * only when touched: what MAP_NORESERVE asks for on Linux. */
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

static inline void *bench_map(size_t bytes, int extra) {
  (void)extra;
  void *p = VirtualAlloc(NULL, bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
  if (!p) bench_die("VirtualAlloc failed");
  return p;
}

static inline void bench_unmap(void *p, size_t bytes) {
  (void)bytes;
  VirtualFree(p, 0, MEM_RELEASE);
}

/* The program linked with libfreeway.a exports freeway's fw_* names (they
 * are declared dllexport); a program of the C runtime's allocator may still
 * have freeway through its DLLs. */
static inline void *bench_lookup(const char *name) {
  static const char *const modules[] = {NULL, "freeway.dll", "freeway-redirect.dll"};
  for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
    HMODULE m = GetModuleHandleA(modules[i]);
    FARPROC f = m ? GetProcAddress(m, name) : NULL;
    void *p;
    memcpy(&p, &f, sizeof p); /* a function's address as data: PE has one address space */
    if (p) return p;
  }
  return NULL;
}
#endif

/* ---- time and resource usage ------------------------------------------- */

#ifndef _WIN32
static inline double bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
#else
static inline double bench_now_ms(void) {
  LARGE_INTEGER f, c;
  QueryPerformanceFrequency(&f);
  QueryPerformanceCounter(&c);
  return (double)c.QuadPart * 1e3 / (double)f.QuadPart;
}
#endif

typedef struct bench_cpu {
  double wall_ms;
  double user_ms;
  double sys_ms;
  long long minflt; /* minor page faults: first touches of fresh memory */
} bench_cpu_t;

#ifndef _WIN32
static inline double bench_tv_ms(struct timeval tv) {
  return (double)tv.tv_sec * 1e3 + (double)tv.tv_usec / 1e3;
}

/* Snapshot of wall clock and process CPU time (all threads). */
static inline bench_cpu_t bench_cpu_now(void) {
  bench_cpu_t c;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  c.wall_ms = bench_now_ms();
  c.user_ms = bench_tv_ms(ru.ru_utime);
  c.sys_ms = bench_tv_ms(ru.ru_stime);
  c.minflt = (long long)ru.ru_minflt;
  return c;
}
#else
static inline double bench_filetime_ms(FILETIME t) {
  return (double)(((uint64_t)t.dwHighDateTime << 32) | t.dwLowDateTime) / 1e4; /* 100 ns units */
}

static inline PROCESS_MEMORY_COUNTERS bench_memory_counters(void) {
  PROCESS_MEMORY_COUNTERS pmc;
  memset(&pmc, 0, sizeof pmc);
  if (!GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc)) memset(&pmc, 0, sizeof pmc);
  return pmc;
}

/* Snapshot of wall clock and process CPU time (all threads). Windows counts
 * every page fault together, soft and hard: minflt is that count. */
static inline bench_cpu_t bench_cpu_now(void) {
  bench_cpu_t c;
  FILETIME created, exited, kernel, user;
  memset(&c, 0, sizeof c);
  if (GetProcessTimes(GetCurrentProcess(), &created, &exited, &kernel, &user)) {
    c.user_ms = bench_filetime_ms(user);
    c.sys_ms = bench_filetime_ms(kernel);
  }
  c.wall_ms = bench_now_ms();
  c.minflt = (long long)bench_memory_counters().PageFaultCount;
  return c;
}
#endif

static inline bench_cpu_t bench_cpu_diff(bench_cpu_t end, bench_cpu_t start) {
  bench_cpu_t d;
  d.wall_ms = end.wall_ms - start.wall_ms;
  d.user_ms = end.user_ms - start.user_ms;
  d.sys_ms = end.sys_ms - start.sys_ms;
  d.minflt = end.minflt - start.minflt;
  return d;
}

/* CPUs this process may run on. */
#ifndef _WIN32
static inline int bench_ncpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
#else
static inline int bench_ncpus(void) {
  DWORD_PTR mine = 0, all = 0;
  if (GetProcessAffinityMask(GetCurrentProcess(), &mine, &all) && mine) {
    int n = 0;
    for (; mine; mine &= mine - 1) n++;
    return n;
  }
  SYSTEM_INFO si;
  GetSystemInfo(&si);
  return si.dwNumberOfProcessors > 0 ? (int)si.dwNumberOfProcessors : 1;
}
#endif

/* CPU usage as (user + sys) / (wall x cores): 100% means every core busy. */
static inline double bench_cpu_util(bench_cpu_t d) {
  if (d.wall_ms <= 0) return 0;
  return (d.user_ms + d.sys_ms) / (d.wall_ms * bench_ncpus());
}

#ifndef _WIN32
/* Resident set size now, in bytes, from /proc/self/statm. */
static inline size_t bench_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  if (!f) return 0;
  if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
  fclose(f);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Peak resident set size of the process so far, in KiB: VmHWM from
 * /proc/self/status, which belongs to this program's address space alone.
 * (ru_maxrss also keeps the high-water mark of whatever the process was
 * before its exec, such as a forked runner.) */
static inline long bench_peak_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  if (f) {
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "VmHWM:", 6) == 0) {
        kb = strtol(line + 6, NULL, 10);
        break;
      }
    }
    fclose(f);
  }
  return kb;
}

static inline long bench_maxrss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}
#else
/* The working set: the process's pages in memory, Windows' resident set. */
static inline size_t bench_rss_bytes(void) { return (size_t)bench_memory_counters().WorkingSetSize; }

static inline long bench_peak_rss_kb(void) { return (long)(bench_memory_counters().PeakWorkingSetSize >> 10); }

/* No exec on Windows leaves an earlier high-water mark behind: the same. */
static inline long bench_maxrss_kb(void) { return bench_peak_rss_kb(); }
#endif

/* ---- random numbers ------------------------------------------------------ */

typedef struct bench_rng {
  uint64_t s;
} bench_rng_t;

static inline void bench_rng_seed(bench_rng_t *r, uint64_t seed) {
  r->s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  if (r->s == 0) r->s = 1;
}

/* xorshift64* */
static inline uint64_t bench_rng_next(bench_rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi]. */
static inline size_t bench_rng_range(bench_rng_t *r, size_t lo, size_t hi) {
  if (hi <= lo) return lo;
  return lo + (size_t)(bench_rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* Log-uniform in [lo, hi] (lo >= 1): every power-of-two range is equally
 * likely, so small sizes are common and large ones rare but present, as in
 * the size histograms of real programs. */
static inline size_t bench_rng_logsize(bench_rng_t *r, size_t lo, size_t hi) {
  if (hi <= lo) return lo;
  int lo_bits = 0, hi_bits = 0;
  while (((size_t)1 << (lo_bits + 1)) <= lo) lo_bits++;
  while (((size_t)1 << (hi_bits + 1)) <= hi) hi_bits++;
  int b = (int)bench_rng_range(r, (size_t)lo_bits, (size_t)hi_bits);
  size_t a = (size_t)1 << b;
  size_t z = b == hi_bits ? hi : (a << 1) - 1;
  return bench_rng_range(r, a < lo ? lo : a, z);
}

/* ---- command line -------------------------------------------------------- */

static inline const char *bench_arg_raw(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++) {
    if (argv[i][0] == '-' && argv[i][1] == '-' && strcmp(argv[i] + 2, name) == 0) return argv[i + 1];
  }
  return NULL;
}

/* A number with an optional suffix. Counts (binary = 0) take k, M, G as
 * powers of 1000; sizes (binary = 1) take k/K/KiB, M/MiB, G/GiB as powers of
 * 1024. Fractions are allowed ("1.5k"). */
static inline double bench_parse_number(const char *s, int binary) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno != 0) bench_die("bad number: %s", s);
  double unit = binary ? 1024.0 : 1000.0;
  switch (*end) {
    case '\0': return v;
    case 'k': case 'K': v *= unit; end++; break;
    case 'm': case 'M': v *= unit * unit; end++; break;
    case 'g': case 'G': v *= unit * unit * unit; end++; break;
    case 'B': case 'b': end++; break;
    default: bench_die("bad suffix in: %s", s);
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') bench_die("bad suffix in: %s", s);
  return v;
}

static inline long long bench_arg_count(int argc, char **argv, const char *name, long long def) {
  const char *s = bench_arg_raw(argc, argv, name);
  return s ? (long long)(bench_parse_number(s, 0) + 0.5) : def;
}

static inline size_t bench_arg_size(int argc, char **argv, const char *name, size_t def) {
  const char *s = bench_arg_raw(argc, argv, name);
  return s ? (size_t)(bench_parse_number(s, 1) + 0.5) : def;
}

static inline double bench_arg_double(int argc, char **argv, const char *name, double def) {
  const char *s = bench_arg_raw(argc, argv, name);
  return s ? bench_parse_number(s, 0) : def;
}

static inline const char *bench_arg_str(int argc, char **argv, const char *name, const char *def) {
  const char *s = bench_arg_raw(argc, argv, name);
  return s ? s : def;
}

/* ---- the result line ----------------------------------------------------- */

/* A JSON object built in a fixed buffer; printed on one line at the end. */
typedef struct bench_json {
  char buf[8192];
  size_t len;
} bench_json_t;

static inline void bench_json_raw(bench_json_t *j, const char *fmt, ...) {
  if (j->len >= sizeof j->buf) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(j->buf + j->len, sizeof j->buf - j->len, fmt, ap);
  va_end(ap);
  if (n > 0) j->len += (size_t)n;
  if (j->len >= sizeof j->buf) j->len = sizeof j->buf - 1;
}

static inline void bench_json_begin(bench_json_t *j, const char *bench) {
  j->len = 0;
  j->buf[0] = '\0';
  bench_json_raw(j, "{\"bench\":\"%s\"", bench);
}

static inline void bench_json_int(bench_json_t *j, const char *key, long long v) {
  bench_json_raw(j, ",\"%s\":%lld", key, v);
}

static inline void bench_json_num(bench_json_t *j, const char *key, double v) {
  bench_json_raw(j, ",\"%s\":%.6g", key, v);
}

/* Strings written here are program-chosen identifiers: no escaping needed. */
static inline void bench_json_str(bench_json_t *j, const char *key, const char *v) {
  bench_json_raw(j, ",\"%s\":\"%s\"", key, v);
}

static inline void bench_json_bool(bench_json_t *j, const char *key, int v) {
  bench_json_raw(j, ",\"%s\":%s", key, v ? "true" : "false");
}

/* A JSON array of numbers. */
static inline void bench_json_array(bench_json_t *j, const char *key, const double *v, size_t n) {
  bench_json_raw(j, ",\"%s\":[", key);
  for (size_t i = 0; i < n; i++) bench_json_raw(j, "%s%.6g", i ? "," : "", v[i]);
  bench_json_raw(j, "]");
}

/* The fields every timed benchmark reports. */
static inline void bench_json_cpu(bench_json_t *j, bench_cpu_t d) {
  bench_json_num(j, "wall_ms", d.wall_ms);
  bench_json_num(j, "user_ms", d.user_ms);
  bench_json_num(j, "sys_ms", d.sys_ms);
  bench_json_num(j, "cpu_util", bench_cpu_util(d));
  bench_json_int(j, "minflt", d.minflt);
}

/* Under freeway, the cautious mode in effect (fw_option_get, looked up so
 * that the programs run under any allocator): every run's result says which
 * mode it measured. */
static inline void bench_json_fw_mode(bench_json_t *j) {
  long (*get)(const char *);
  *(void **)&get = bench_lookup("fw_option_get");
  if (get) {
    bench_json_int(j, "fw_cautious", get("cautious"));
    bench_json_int(j, "fw_secure", get("secure"));
  }
}

static inline void bench_json_end(bench_json_t *j) {
  bench_json_fw_mode(j);
  bench_json_int(j, "ncpus", bench_ncpus());
  bench_json_int(j, "peak_rss_kb", bench_peak_rss_kb());
  bench_json_int(j, "maxrss_kb", bench_maxrss_kb());
  bench_json_raw(j, "}");
  fflush(stdout);
  printf("%s\n", j->buf);
  fflush(stdout);
}

/* ---- threads ---------------------------------------------------------------- */

/* Keeps values alive so the compiler cannot drop the work producing them. */
static volatile uint64_t bench_sink;

/* Thread functions started by bench_run_threads must call bench_start_wait()
 * before their timed work, so that thread creation stays out of the time. */
static pthread_barrier_t bench_start_barrier;

static inline void bench_start_wait(void) { pthread_barrier_wait(&bench_start_barrier); }

/* Creates n threads running fn(args + i * arg_size). */
static inline void bench_spawn(pthread_t *tids, int n, void *(*fn)(void *), void *args, size_t arg_size) {
  for (int i = 0; i < n; i++) {
    if (pthread_create(&tids[i], NULL, fn, (char *)args + (size_t)i * arg_size) != 0)
      bench_die("pthread_create failed");
  }
}

static inline void bench_join(const pthread_t *tids, int n) {
  for (int i = 0; i < n; i++) pthread_join(tids[i], NULL);
}

/* Starts n threads running fn(arg_i) with arg_i = args + i * arg_size, lets
 * them all start together, and returns the wall and CPU time from the start
 * signal until the last one has finished. */
static inline bench_cpu_t bench_run_threads(int n, void *(*fn)(void *), void *args, size_t arg_size) {
  pthread_t *tids = (pthread_t *)bench_calloc((size_t)n, sizeof *tids);
  pthread_barrier_init(&bench_start_barrier, NULL, (unsigned)n + 1);
  bench_spawn(tids, n, fn, args, arg_size);
  bench_cpu_t start = bench_cpu_now();
  pthread_barrier_wait(&bench_start_barrier);
  bench_join(tids, n);
  bench_cpu_t end = bench_cpu_now();
  pthread_barrier_destroy(&bench_start_barrier);
  free(tids);
  return bench_cpu_diff(end, start);
}

/* The first member of a per-thread argument struct used with the
 * bench_workers_* functions: what every worker has and reports. */
typedef struct bench_worker {
  int id;            /* the thread's index, 0 to n-1 */
  long long bad;     /* failed allocations or corrupted blocks it saw */
  uint64_t checksum; /* of the bytes it read, folded into bench_sink */
} bench_worker_t;

/* n copies of *proto (arg_size bytes, beginning with a bench_worker_t), each
 * with its own id; free() them when done. */
static inline void *bench_workers_new(int n, const void *proto, size_t arg_size) {
  char *args = (char *)bench_calloc((size_t)n, arg_size);
  for (int i = 0; i < n; i++) {
    bench_worker_t *w = (bench_worker_t *)(void *)(args + (size_t)i * arg_size);
    memcpy(w, proto, arg_size);
    w->id = i;
  }
  return args;
}

/* Folds the workers' checksums into bench_sink; returns the sum of their
 * bad counts. */
static inline long long bench_workers_fold(const void *args, int n, size_t arg_size) {
  long long bad = 0;
  for (int i = 0; i < n; i++) {
    const bench_worker_t *w = (const bench_worker_t *)(const void *)((const char *)args + (size_t)i * arg_size);
    bad += w->bad;
    bench_sink += w->checksum;
  }
  return bad;
}

typedef struct bench_team {
  bench_cpu_t cpu; /* from the start signal until the last worker ended */
  long long bad;   /* summed over the workers */
} bench_team_t;

/* Runs n threads of fn together, each on its own copy of *proto (see
 * bench_workers_new). The copies are freed, unless keep is given: then
 * *keep receives them, for results beyond the worker's own. */
static inline bench_team_t bench_run_workers(int n, void *(*fn)(void *), const void *proto, size_t arg_size,
                                             void **keep) {
  void *args = bench_workers_new(n, proto, arg_size);
  bench_team_t t;
  t.cpu = bench_run_threads(n, fn, args, arg_size);
  t.bad = bench_workers_fold(args, n, arg_size);
  if (keep)
    *keep = args;
  else
    free(args);
  return t;
}

/* ---- statistics ------------------------------------------------------------- */

static inline int bench_cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Median of v[0..n), n > 0; sorts v. */
static inline double bench_median(double *v, size_t n) {
  qsort(v, n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#ifdef __cplusplus
}

#include <vector>
#ifndef _WIN32
#include <thread>

/* The C++ programs run their workers on std::thread, as C++ code does.
 * body(t) runs on thread t, must call bench_start_wait() before its timed
 * work, and returns a checksum that is folded into bench_sink. Returns the
 * time from the start signal until the last thread ended. */
template <class Body>
bench_cpu_t bench_run_team(int n, Body body) {
  // A cache line apart, so the stores at the end do not share lines.
  std::vector<uint64_t> sums(static_cast<size_t>(n) * 8, 0);
  std::vector<std::thread> workers;
  pthread_barrier_init(&bench_start_barrier, nullptr, static_cast<unsigned>(n) + 1);
  for (int t = 0; t < n; t++) workers.emplace_back([&, t] { sums[static_cast<size_t>(t) * 8] = body(t); });
  bench_cpu_t start = bench_cpu_now();
  bench_start_wait();
  for (auto &w : workers) w.join();
  bench_cpu_t end = bench_cpu_now();
  pthread_barrier_destroy(&bench_start_barrier);
  for (auto s : sums) bench_sink += s;
  return bench_cpu_diff(end, start);
}
#else
/* MinGW's C++ runtime of the win32 thread model has no std::thread: the
 * workers are the C programs' threads, each given its index and the body. */
template <class Body>
struct bench_team_slot {
  Body *body;
  int t;
  uint64_t sum;
  char pad[64]; /* the sums a cache line apart */
};

template <class Body>
void *bench_team_main(void *p) {
  bench_team_slot<Body> *s = static_cast<bench_team_slot<Body> *>(p);
  s->sum = (*s->body)(s->t);
  return nullptr;
}

template <class Body>
bench_cpu_t bench_run_team(int n, Body body) {
  std::vector<bench_team_slot<Body>> slots(static_cast<size_t>(n));
  for (int t = 0; t < n; t++) slots[static_cast<size_t>(t)] = bench_team_slot<Body>{&body, t, 0, {0}};
  bench_cpu_t d = bench_run_threads(n, bench_team_main<Body>, slots.data(), sizeof slots[0]);
  for (auto &s : slots) bench_sink += s.sum;
  return d;
}
#endif
#endif /* __cplusplus */

#endif /* FW_BENCH_COMMON_H */
