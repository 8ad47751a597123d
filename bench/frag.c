/* Allocate without freeing, in loops (seed 000, "robustness vs memory
 * fragmentation").
 *
 * Each loop: T threads each allocate N blocks of random sizes in [min, max]
 * (first and last byte written) and keep them all; then one block of
 * --probe bytes (8 MiB) is requested and its success recorded; then every
 * block is freed (by the thread that allocated it, or with --free-by main by
 * the main thread). The next loop starts from that state.
 *
 *   bench_frag --threads 2 --ptrs 2M --min 128 --max 256 --loops 20
 *
 * Reports the allocation time per loop (mean, as the seed's "average time",
 * and median), the free time per loop, RSS after allocating and after
 * freeing, how many probes succeeded, and the peak RSS. For the address
 * space experiment (a 32-bit build, where the space runs out): the loop whose
 * probe first failed and the first loop where a small block could not be
 * had (0: never), each loop's probe outcome and address space in use
 * (VmSize, less what --space reserved), and
 * with --maps PREFIX copies of /proc/self/maps: PREFIX-fail.maps at the first
 * failed probe, PREFIX-live.maps just before the last loop's probe (every
 * block live) and PREFIX-end.maps after the last free-all. --allow-fail 1 makes failed
 * allocations a result rather than an error (exit status 0).
 *
 * --heap-map PREFIX: the allocator's own picture of its heap at the same two
 * moments, PREFIX-live.json and PREFIX-end.json, from freeway's
 * fw_heap_map_json (format freeway-map, docs/observability.md), found with
 * dlsym at run time: the program is not linked against freeway, and under
 * an allocator without it nothing is written. The result line says which
 * (heap_map: 1 written, 0 not available). The heap is walked while the
 * other threads wait at a barrier, so the map is exact; it is taken outside
 * the timed phases.
 *
 * --space SIZE (32-bit builds): the process gets only the addresses below
 * SIZE, as a 32-bit Windows process gets 2 GiB; the free ranges above are
 * reserved (PROT_NONE) before any library's constructor runs, so that every
 * allocator starts from the same smaller space. The libraries and the main
 * thread's stack stay where the kernel put them, above the limit.
 *
 * On Windows there is no --space, --maps nor --heap-map (a 32-bit Windows
 * process has its 2 GiB, or 4 GiB when large-address-aware, already; there
 * is no maps file; freeway's map writer takes its own descriptors, not the C
 * runtime's); the address space in use is the total virtual space less the
 * available (GlobalMemoryStatusEx).
 */
#include "bench_common.h"
#include "freeway.h"

#ifndef _WIN32
#include <fcntl.h>
#include <sys/personality.h>
#endif

static double space_reserved_mib; /* what the limit took away */

#ifndef _WIN32
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

static double space_limit_mib;    /* --space, 0 when not given */

static uintptr_t parse_hex(const char **p) {
  uintptr_t v = 0;
  for (;; (*p)++) {
    char c = **p;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return v;
    v = v * 16 + (uintptr_t)d;
  }
}

static void reserve(uintptr_t from, uintptr_t to) {
  if (to <= from) return;
  void *want = (void *)from;
  void *got = mmap(want, to - from, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
  if (got == MAP_FAILED) return; /* e.g. past the top of the space */
  if (got != want) {
    munmap(got, to - from);
    bench_die("--space: the kernel does not honour MAP_FIXED_NOREPLACE");
  }
  space_reserved_mib += (double)(to - from) / 1048576.0;
}

/* Runs from the executable's preinit array: before the constructors of the
 * libraries (the allocator's among them), after the loader mapped them. */
static void limit_space(int argc, char **argv, char **envp) {
  (void)envp;
  const char *arg = bench_arg_raw(argc, argv, "space");
  if (!arg) return;
  if (sizeof(void *) > 4) bench_die("--space is for 32-bit builds");
  double limit = bench_parse_number(arg, 1);
  if (limit < 64.0 * 1048576.0 || limit > 4294967296.0) bench_die("--space: from 64 MiB to 4 GiB");
  space_limit_mib = limit / 1048576.0;
  char buf[65536];
  size_t len = 0;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) bench_die("--space: cannot read /proc/self/maps");
  ssize_t n;
  while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)n;
  close(fd);
  buf[len] = '\0';
  uintptr_t lo = limit >= 4294967296.0 ? UINTPTR_MAX : (uintptr_t)limit;
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t next = lo; /* start of the range not yet covered */
  for (const char *p = buf; *p;) {
    uintptr_t start = parse_hex(&p);
    if (*p++ != '-') break;
    uintptr_t end = parse_hex(&p);
    const char *eol = strchr(p, '\n');
    /* Room for the main thread's stack to grow by a little over the kernel's
     * 1 MiB guard gap: the benchmark's main thread uses little stack. */
    uintptr_t room = eol && eol - p > 7 && strncmp(eol - 7, "[stack]", 7) == 0 ? 2u << 20 : 0;
    if (end > next) {
      if (start > next) reserve(next, start - room > next ? start - room : next);
      next = end;
    }
    if (!eol) break;
    p = eol + 1;
  }
  reserve(next, (uintptr_t)0 - page);
}

__attribute__((section(".preinit_array"), used)) static void (*frag_preinit)(int, char **, char **) = limit_space;

/* Copied with plain system calls: when the probe fails, memory is short and
 * stdio would want a buffer from malloc. */
static void copy_maps(const char *prefix, const char *moment) {
  char path[4096];
  if (!prefix || snprintf(path, sizeof path, "%s-%s.maps", prefix, moment) >= (int)sizeof path) return;
  int in = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  char buf[8192];
  ssize_t n;
  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
    if (write(out, buf, (size_t)n) != n) break;
  if (in >= 0) close(in);
  if (out >= 0) close(out);
}

/* PREFIX-MOMENT.json from fw_heap_map_json when the allocator has it. */
static void write_heap_map(__typeof__(&fw_heap_map_json) map_json, const char *prefix, const char *moment) {
  char path[4096];
  if (!map_json || !prefix || snprintf(path, sizeof path, "%s-%s.json", prefix, moment) >= (int)sizeof path)
    return;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) bench_die("--heap-map: cannot create the file");
  map_json(fd);
  close(fd);
}

/* Address space mapped now (VmSize), read without stdio for the same reason. */
static double vm_mib(void) {
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  char buf[128];
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return (double)strtoull(buf, NULL, 10) * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

/* The top of the user address space: what a 32-bit process on a 64-bit
 * kernel gets (4 GiB, or 3 GiB under the ADDR_LIMIT_3GB personality, e.g.
 * setarch --3gb), 0 on a 64-bit process (not needed there). */
static double space_top_mib(void) {
  if (sizeof(void *) > 4) return 0;
  if (space_limit_mib > 0) return space_limit_mib;
  int pers = personality(0xffffffff);
  return pers != -1 && (pers & ADDR_LIMIT_3GB) ? 3072.0 : 4096.0;
}
#else
/* main refuses --maps and --heap-map here: these only keep its calls. */
static void copy_maps(const char *prefix, const char *moment) {
  (void)prefix;
  (void)moment;
}

static void write_heap_map(void (*map_json)(int), const char *prefix, const char *moment) {
  (void)map_json;
  (void)prefix;
  (void)moment;
}

static MEMORYSTATUSEX memory_status(void) {
  MEMORYSTATUSEX ms;
  memset(&ms, 0, sizeof ms);
  ms.dwLength = sizeof ms;
  if (!GlobalMemoryStatusEx(&ms)) memset(&ms, 0, sizeof ms);
  return ms;
}

static double vm_mib(void) {
  MEMORYSTATUSEX ms = memory_status();
  return (double)(ms.ullTotalVirtual - ms.ullAvailVirtual) / 1048576.0;
}

/* The top of the user address space: 2 GiB for a 32-bit program (4 GiB when
 * large-address-aware on a 64-bit system), 0 on a 64-bit one as on Linux. */
static double space_top_mib(void) {
  if (sizeof(void *) > 4) return 0;
  return (double)memory_status().ullTotalVirtual / 1048576.0;
}
#endif

typedef struct {
  bench_worker_t w; /* bad: failed allocations */
  size_t ptrs, min, max;
  uint64_t seed;
  int loops;
  int free_by_main;
  unsigned char **blocks;
} frag_arg_t;

static pthread_barrier_t phase;

static void *frag_thread(void *p) {
  frag_arg_t *a = (frag_arg_t *)p;
  bench_rng_t rng;
  bench_rng_seed(&rng, a->seed + (uint64_t)a->w.id * 104729u);
  for (int loop = 0; loop < a->loops; loop++) {
    pthread_barrier_wait(&phase); /* start allocating */
    for (size_t i = 0; i < a->ptrs; i++) {
      size_t size = bench_rng_range(&rng, a->min, a->max);
      unsigned char *q = (unsigned char *)malloc(size);
      if (q) {
        q[0] = (unsigned char)i;
        q[size - 1] = (unsigned char)loop;
      } else {
        a->w.bad++;
      }
      a->blocks[i] = q;
    }
    pthread_barrier_wait(&phase); /* allocation done */
    pthread_barrier_wait(&phase); /* start freeing */
    if (!a->free_by_main) {
      for (size_t i = 0; i < a->ptrs; i++) {
        if (a->blocks[i]) a->w.checksum += a->blocks[i][0];
        free(a->blocks[i]);
      }
    }
    pthread_barrier_wait(&phase); /* freeing done */
  }
  pthread_barrier_wait(&phase); /* the main thread's pictures of the end taken */
  return NULL;
}

int main(int argc, char **argv) {
  int threads = (int)bench_arg_count(argc, argv, "threads", 2);
  size_t ptrs = (size_t)bench_arg_count(argc, argv, "ptrs", 100000);
  size_t min = bench_arg_size(argc, argv, "min", 128);
  size_t max = bench_arg_size(argc, argv, "max", 256);
  int loops = (int)bench_arg_count(argc, argv, "loops", 3);
  size_t probe = bench_arg_size(argc, argv, "probe", (size_t)8 << 20);
  const char *free_by = bench_arg_str(argc, argv, "free-by", "owner");
  uint64_t seed = (uint64_t)bench_arg_count(argc, argv, "seed", 1);
  const char *maps = bench_arg_str(argc, argv, "maps", NULL);
  const char *heap_map = bench_arg_str(argc, argv, "heap-map", NULL);
  int allow_fail = (int)bench_arg_count(argc, argv, "allow-fail", 0);
  if (threads < 1 || loops < 1 || min < 1 || max < min || loops > 1000) bench_die("bad arguments");
  int free_by_main = strcmp(free_by, "main") == 0;
#ifdef _WIN32
  if (maps || heap_map || bench_arg_raw(argc, argv, "space")) bench_die("--space, --maps, --heap-map: not on Windows");
#endif
  __typeof__(&fw_heap_map_json) map_json = NULL;
  if (heap_map) map_json = (__typeof__(&fw_heap_map_json))bench_lookup("fw_heap_map_json");

  frag_arg_t proto = {
      .ptrs = ptrs, .min = min, .max = max, .seed = seed, .loops = loops, .free_by_main = free_by_main};
  frag_arg_t *args = (frag_arg_t *)bench_workers_new(threads, &proto, sizeof proto);
  double *alloc_ms = (double *)bench_calloc((size_t)loops, sizeof(double));
  double *free_ms = (double *)bench_calloc((size_t)loops, sizeof(double));
  double *sorted = (double *)bench_calloc((size_t)loops, sizeof(double));
  double *vm_at_probe = (double *)bench_calloc((size_t)loops, sizeof(double));
  char *probe_by_loop = (char *)bench_calloc((size_t)loops + 1, 1);
  pthread_t *tids = (pthread_t *)bench_calloc((size_t)threads, sizeof *tids);
  for (int i = 0; i < threads; i++) args[i].blocks = (unsigned char **)bench_map(ptrs * sizeof(void *) + 1, 0);
  pthread_barrier_init(&phase, NULL, (unsigned)threads + 1);
  bench_spawn(tids, threads, frag_thread, args, sizeof *args);

  int probes_ok = 0, probe_first_fail = 0, alloc_first_fail = 0;
  long long bad_before = 0;
  size_t rss_alloc_max = 0, rss_free_last = 0;
  bench_cpu_t total_start = bench_cpu_now();
  for (int loop = 0; loop < loops; loop++) {
    double t0 = bench_now_ms();
    pthread_barrier_wait(&phase);
    pthread_barrier_wait(&phase);
    double t1 = bench_now_ms();
    alloc_ms[loop] = t1 - t0;
    long long bad_now = 0; /* the barrier orders the workers' counts before this read */
    for (int i = 0; i < threads; i++) bad_now += args[i].w.bad;
    if (bad_now > bad_before && !alloc_first_fail) alloc_first_fail = loop + 1;
    bad_before = bad_now;
    size_t rss = bench_rss_bytes();
    if (rss > rss_alloc_max) rss_alloc_max = rss;
    vm_at_probe[loop] = vm_mib() - space_reserved_mib;
    /* The picture the probe meets: every block of the loop live. */
    if (loop == loops - 1) {
      copy_maps(maps, "live");
      write_heap_map(map_json, heap_map, "live");
    }
    unsigned char *big = (unsigned char *)malloc(probe);
    probe_by_loop[loop] = big ? '1' : '0';
    if (!big && !probe_first_fail) {
      probe_first_fail = loop + 1;
      copy_maps(maps, "fail");
    }
    if (big) {
      big[0] = 1;
      big[probe - 1] = 2;
      bench_sink += big[0];
      probes_ok++;
      free(big);
    }
    double t2 = bench_now_ms();
    pthread_barrier_wait(&phase);
    if (free_by_main) {
      for (int i = 0; i < threads; i++)
        for (size_t k = 0; k < ptrs; k++) free(args[i].blocks[k]);
    }
    pthread_barrier_wait(&phase);
    free_ms[loop] = bench_now_ms() - t2;
    rss_free_last = bench_rss_bytes();
  }
  /* The workers wait, their heaps quiet, until these are taken. */
  copy_maps(maps, "end");
  write_heap_map(map_json, heap_map, "end");
  double vm_end = vm_mib() - space_reserved_mib;
  pthread_barrier_wait(&phase);
  bench_cpu_t total = bench_cpu_diff(bench_cpu_now(), total_start);
  bench_join(tids, threads);
  long long failed = bench_workers_fold(args, threads, sizeof *args);
  for (int i = 0; i < threads; i++) bench_unmap(args[i].blocks, ptrs * sizeof(void *) + 1);
  pthread_barrier_destroy(&phase);

  double mean = 0;
  for (int i = 0; i < loops; i++) mean += alloc_ms[i];
  mean /= loops;
  memcpy(sorted, alloc_ms, (size_t)loops * sizeof(double));
  double median = bench_median(sorted, (size_t)loops);

  bench_json_t j;
  bench_json_begin(&j, "frag");
  bench_json_int(&j, "threads", threads);
  bench_json_int(&j, "ptrs", (long long)ptrs);
  bench_json_int(&j, "min", (long long)min);
  bench_json_int(&j, "max", (long long)max);
  bench_json_int(&j, "loops", loops);
  bench_json_str(&j, "free_by", free_by_main ? "main" : "owner");
  bench_json_num(&j, "loop_ms", mean);
  bench_json_num(&j, "loop_ms_median", median);
  /* 128 loops of three arrays fit the result line's buffer. */
  size_t shown = (size_t)loops > 128 ? 128 : (size_t)loops;
  bench_json_array(&j, "alloc_ms", alloc_ms, shown);
  bench_json_array(&j, "free_ms", free_ms, shown);
  bench_json_array(&j, "vm_mib_at_probe", vm_at_probe, shown);
  probe_by_loop[shown] = '\0';
  bench_json_str(&j, "probe_by_loop", probe_by_loop);
  bench_json_int(&j, "probe_bytes", (long long)probe);
  bench_json_int(&j, "probes_ok", probes_ok);
  bench_json_int(&j, "probe_first_fail", probe_first_fail);
  bench_json_int(&j, "alloc_first_fail", alloc_first_fail);
  bench_json_int(&j, "failed", failed);
  bench_json_num(&j, "vm_end_mib", vm_end);
  bench_json_int(&j, "pointer_bits", (long long)(8 * sizeof(void *)));
  bench_json_num(&j, "space_top_mib", space_top_mib());
  bench_json_num(&j, "space_reserved_mib", space_reserved_mib);
  bench_json_num(&j, "rss_alloc_mib", (double)rss_alloc_max / 1048576.0);
  bench_json_num(&j, "rss_free_mib", (double)rss_free_last / 1048576.0);
  if (heap_map) bench_json_int(&j, "heap_map", map_json != NULL);
  bench_json_cpu(&j, total);
  bench_json_end(&j);
  free(args);
  free(alloc_ms);
  free(free_ms);
  free(sorted);
  free(vm_at_probe);
  free(probe_by_loop);
  free(tids);
  return failed && !allow_fail ? 1 : 0;
}
