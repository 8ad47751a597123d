/* fwtest.c — see fwtest.h. */
#include "fwtest.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

fwt_std_api A;
fwt_ext_api X;
atomic_ulong fwt_checks;
#if defined(FWT_STD) && defined(FWT_STATIC)
const char *fwt_flavour = "static";
#elif defined(FWT_STD)
const char *fwt_flavour = "preload";
#else
const char *fwt_flavour = "fw";
#endif

void fwt_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  int e = errno;
  char msg[512] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
  }
  /* One write, so that lines of concurrent failures do not interleave. */
  char out[1024];
  int len = snprintf(out, sizeof out, "FAIL %s:%d: CHECK(%s)%s%s [errno %d: %s] (pid %d, flavour %s)\n",
                     file, line, cond, msg[0] ? ": " : "", msg, e, strerror(e), (int)getpid(),
                     fwt_flavour);
  if (len > 0) {
    ssize_t w = write(2, out, (size_t)len < sizeof out ? (size_t)len : sizeof out - 1);
    (void)w;
  }
  abort();
}

void fwt_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
}

/* ---- patterns ------------------------------------------------------------ */
#define FWT_STEP 0x9e3779b97f4a7c15ull

void fwt_fill(void *p, size_t n, uint64_t seed) {
  unsigned char *b = p;
  size_t words = n / 8, i;
  uint64_t w = seed;
  for (i = 0; i < words; i++, w += FWT_STEP) memcpy(b + i * 8, &w, 8);
  for (size_t k = words * 8; k < n; k++) b[k] = (unsigned char)(w >> (8 * (k & 7)));
}

size_t fwt_verify(const void *p, size_t n, uint64_t seed) {
  const unsigned char *b = p;
  size_t words = n / 8, i;
  uint64_t w = seed, got;
  for (i = 0; i < words; i++, w += FWT_STEP) {
    memcpy(&got, b + i * 8, 8);
    if (got != w) {
      for (size_t k = 0; k < 8; k++)
        if (b[i * 8 + k] != (unsigned char)(w >> (8 * k))) return i * 8 + k;
    }
  }
  for (size_t k = words * 8; k < n; k++)
    if (b[k] != (unsigned char)(w >> (8 * (k & 7)))) return k;
  return SIZE_MAX;
}

size_t fwt_find_nonzero(const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    if (w) break;
  }
  for (; i < n; i++)
    if (b[i]) return i;
  return SIZE_MAX;
}

size_t fwt_min_align(size_t n) {
  size_t a = 1;
  while (a * 2 <= n && a * 2 <= _Alignof(max_align_t)) a *= 2;
  return a;
}

size_t fwt_random_size(fwt_rng *r, size_t max_large) {
  uint64_t x = fwt_next(r) % 1000;
  if (x < 700) return fwt_range(r, 1, 256);
  if (x < 900) return fwt_range(r, 257, 4096);
  if (x < 980) return fwt_range(r, 4097, 65536);
  if (x < 998 || max_large <= 512 * 1024) return fwt_range(r, 65537, 512 * 1024);
  return fwt_range(r, 512 * 1024 + 1, max_large);
}

/* ---- process facts --------------------------------------------------------- */
size_t fwt_page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static void statm(size_t *size, size_t *resident) {
  FILE *f = fopen("/proc/self/statm", "r");
  CHECKF(f != NULL, "cannot open /proc/self/statm");
  unsigned long s = 0, r = 0;
  CHECK(fscanf(f, "%lu %lu", &s, &r) == 2);
  fclose(f);
  *size = (size_t)s * fwt_page_size();
  *resident = (size_t)r * fwt_page_size();
}
size_t fwt_rss(void) {
  size_t s, r;
  statm(&s, &r);
  return r;
}
size_t fwt_vm_size(void) {
  size_t s, r;
  statm(&s, &r);
  return s;
}

size_t fwt_scaled(size_t n) {
  const char *s = getenv("FWT_SCALE");
  long pct = s ? strtol(s, NULL, 10) : 100;
  if (pct <= 0) pct = 100;
  size_t v = (size_t)((double)n * (double)pct / 100.0);
  return v ? v : 1;
}

void fwt_stats(fw_stats_t *out) {
  memset(out, 0, sizeof *out);
  out->size = sizeof *out;
  CHECK(X.stats_get(out) == 0);
}

size_t fwt_json_size(const char *report, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *at = strstr(report, pat);
  CHECKF(at != NULL, "no %s in the report:\n%.300s", key, report);
  return (size_t)strtoull(at + strlen(pat), NULL, 10);
}

void fwt_stats_json(char *buf, size_t cap) {
  char path[] = "/tmp/fw-stats-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  X.stats_print_json(fd);
  ssize_t got = pread(fd, buf, cap - 1, 0);
  close(fd);
  CHECK(got > 0);
  buf[got] = 0;
}

void *fwt_scratch(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECKF(p != MAP_FAILED, "mmap of %zu scratch bytes", bytes);
  return p;
}
void fwt_scratch_free(void *p, size_t bytes) { munmap(p, bytes); }

/* ---- child processes --------------------------------------------------------- */
int fwt_child(void (*fn)(void *), void *arg, char *out, size_t cap) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    /* kept across an exec */
    alarm(120);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  size_t got = 0;
  char drop[512];
  for (;;) {
    bool keep = got + 1 < cap;
    ssize_t k = keep ? read(fds[0], out + got, cap - 1 - got) : read(fds[0], drop, sizeof drop);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    if (keep) got += (size_t)k;
  }
  if (cap) out[got] = 0;
  close(fds[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  return st;
}

typedef struct {
  const char *section;
  const char *const *set;
} fwt_exec_args;

static bool env_named(const char *var, const char *assignment) {
  size_t n = strcspn(assignment, "=");
  return strncmp(var, assignment, n) == 0 && var[n] == '=';
}

static void exec_self(void *arg) {
  const fwt_exec_args *a = arg;
  size_t n = 0, s = 0;
  while (environ[n]) n++;
  while (a->set && a->set[s]) s++;
  /* allocated after the fork: the child's own allocator, whichever it is */
  char **env = calloc(n + s + 1, sizeof *env);
  if (!env) _exit(7);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    bool replaced = false;
    for (size_t j = 0; j < s && !replaced; j++) replaced = env_named(environ[i], a->set[j]);
    if (!replaced) env[m++] = environ[i];
  }
  for (size_t j = 0; j < s; j++) env[m++] = (char *)a->set[j];
  env[m] = NULL;
  char *argv[] = {program_invocation_short_name, (char *)a->section, NULL};
  execve("/proc/self/exe", argv, env);
  _exit(8);
}

int fwt_child_exec(const char *section, const char *const *set, char *out, size_t cap) {
  fwt_exec_args a = {section, set};
  return fwt_child(exec_self, &a, out, cap);
}

/* ---- binding the allocator ------------------------------------------------- */
#if defined(FWT_STD)
static size_t std_usable_size(const void *p) { return malloc_usable_size((void *)p); }

static void bind_std(void) {
  A.malloc = malloc;
  A.calloc = calloc;
  A.realloc = realloc;
  A.reallocarray = reallocarray;
  A.free = free;
  A.usable_size = std_usable_size;
  A.aligned_alloc = aligned_alloc;
  A.posix_memalign = posix_memalign;
  A.memalign = memalign;
  A.valloc = valloc;
  A.pvalloc = pvalloc;
}

/* Every standard name the program uses must come from freeway: from the
 * preloaded libfreeway.so, or (static flavour) from the program itself. */
static void check_standard_names(void) {
  struct { const char *name; void *addr; } names[] = {
    {"malloc", (void *)malloc}, {"calloc", (void *)calloc}, {"realloc", (void *)realloc},
    {"reallocarray", (void *)reallocarray}, {"free", (void *)free},
    {"malloc_usable_size", (void *)malloc_usable_size}, {"aligned_alloc", (void *)aligned_alloc},
    {"posix_memalign", (void *)posix_memalign}, {"memalign", (void *)memalign},
    {"valloc", (void *)valloc}, {"pvalloc", (void *)pvalloc},
  };
#if defined(FWT_STATIC)
  Dl_info self;
  CHECK(dladdr((void *)fwt_main, &self) != 0);
#endif
  for (size_t i = 0; i < FWT_COUNT(names); i++) {
    Dl_info info;
    CHECKF(dladdr(names[i].addr, &info) != 0, "dladdr(%s) failed", names[i].name);
#if defined(FWT_STATIC)
    CHECKF(info.dli_fbase == self.dli_fbase,
           "%s comes from %s, not from the program linked with libfreeway.a", names[i].name,
           info.dli_fname ? info.dli_fname : "?");
#else
    CHECKF(info.dli_fname && strstr(info.dli_fname, "libfreeway") != NULL,
           "%s comes from %s, not from libfreeway: is LD_PRELOAD set?", names[i].name,
           info.dli_fname ? info.dli_fname : "?");
#endif
  }
}
#endif

#if defined(FWT_STD) && !defined(FWT_STATIC)
static void *need(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  CHECKF(f != NULL, "%s not found: freeway is not preloaded (LD_PRELOAD=%s)", name,
         getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "(unset)");
  return f;
}
#define BIND(field, name)                    \
  do {                                       \
    void *f_ = need(#name);                  \
    memcpy(&X.field, &f_, sizeof f_);        \
  } while (0)
#else
#define BIND(field, name) (X.field = name)
#endif

static void bind_ext(void) {
  BIND(malloc, fw_malloc);
  BIND(free, fw_free);
  BIND(free_sized, fw_free_sized);
  BIND(free_aligned, fw_free_aligned);
  BIND(free_aligned_sized, fw_free_aligned_sized);
  BIND(usable_size, fw_malloc_usable_size);
  BIND(malloc_aligned, fw_malloc_aligned);
  BIND(max_alignment, fw_max_alignment);
  BIND(heap_new, fw_heap_new);
  BIND(heap_delete, fw_heap_delete);
  BIND(heap_destroy, fw_heap_destroy);
  BIND(heap_malloc, fw_heap_malloc);
  BIND(heap_calloc, fw_heap_calloc);
  BIND(heap_realloc, fw_heap_realloc);
  BIND(heap_malloc_aligned, fw_heap_malloc_aligned);
  BIND(heap_usable_size, fw_heap_usable_size);
  BIND(heap_collect, fw_heap_collect);
  BIND(heap_get_default, fw_heap_get_default);
  BIND(heap_contains, fw_heap_contains);
  BIND(heap_stats, fw_heap_stats);
  BIND(heap_visit, fw_heap_visit);
  BIND(collect, fw_collect);
  BIND(stats_get, fw_stats_get);
  BIND(stats_print, fw_stats_print);
  BIND(stats_print_json, fw_stats_print_json);
  BIND(heap_map_json, fw_heap_map_json);
  BIND(leak_report_json, fw_leak_report_json);
  BIND(option_get, fw_option_get);
  BIND(option_set, fw_option_set);
  BIND(version_string, fw_version_string);
}

#if !defined(FWT_STD)
static void bind_fw(void) {
  A.malloc = fw_malloc;
  A.calloc = fw_calloc;
  A.realloc = fw_realloc;
  A.reallocarray = fw_reallocarray;
  A.free = fw_free;
  A.usable_size = fw_malloc_usable_size;
  A.aligned_alloc = fw_aligned_alloc;
  A.posix_memalign = fw_posix_memalign;
  A.memalign = fw_memalign;
  A.valloc = fw_valloc;
  A.pvalloc = fw_pvalloc;
}
#endif

int fwt_main(int argc, char **argv, const fwt_section *sections, size_t count) {
  setvbuf(stdout, NULL, _IOLBF, 0);
#if defined(FWT_STD)
  bind_std();
  check_standard_names();
#else
  bind_fw();
#endif
  bind_ext();
  /* Give the main thread its heap up front in every flavour (in the fw
   * flavour stdio does not go through freeway), so that counts taken by a
   * test do not include the thread's own start-up. */
  void *warm = X.malloc(1);
  CHECK(warm != NULL);
  X.free(warm);
  const char *want = argc > 1 ? argv[1] : "all";
  if (strcmp(want, "list") == 0) {
    for (size_t i = 0; i < count; i++) printf("%s\n", sections[i].name);
    return 0;
  }
  size_t ran = 0;
  for (size_t i = 0; i < count; i++) {
    /* Sections whose name starts with '_' are helpers run only by name. */
    if (strcmp(want, sections[i].name) != 0 &&
        (strcmp(want, "all") != 0 || sections[i].name[0] == '_'))
      continue;
    unsigned long before = atomic_load(&fwt_checks);
    fwt_log("[%s] %s ...", fwt_flavour, sections[i].name);
    sections[i].run();
    fwt_log("[%s] %s: ok (%lu checks)", fwt_flavour, sections[i].name,
            atomic_load(&fwt_checks) - before);
    ran++;
  }
  if (ran == 0) {
    fprintf(stderr, "unknown section '%s' (try 'list')\n", want);
    return 2;
  }
  return 0;
}
