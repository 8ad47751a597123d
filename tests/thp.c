/* thp.c — transparent huge pages (FREEWAY_THP), read from the advice the
 * kernel keeps for each mapping (the "hg" and "nh" flags of
 * /proc/self/smaps), which does not depend on huge pages being free:
 *   advice:  a thread that has filled a segment of small blocks gets
 *            huge pages for the next ones; its first one gets them once
 *            the thread reaches its upper half piling blocks up (pages
 *            full behind it); a thread with less than half a segment, or
 *            one that reaches the upper half with its pages mostly free,
 *            gets none, so a small or steady heap's RSS tracks its use;
 *   sparse:  nor does a thread's second segment once it has taken every
 *            slot of its first carving little of them;
 *   medium:  blocks of medium pages (8-128 KiB) written by a thread get
 *            them in the upper half of a segment of such pages once its
 *            lower half holds 1 MiB of blocks in use; a thread with less
 *            gets none, nor does one that has calloc'd such blocks and left
 *            them untouched (they must stay out of RSS);
 *   split:   a burst in huge pages, freed but for one block per 2 MiB and
 *            collected: RSS falls by most of it, and the segments that were
 *            purged in part have gone back to 4 KiB pages;
 *   large:   a block above 4 MiB gets them (in an arena and in a mapping
 *            of its own, above 256 MiB), written whole or not; a block of
 *            2 to 4 MiB keeps 4 KiB pages (the rounding would be too much);
 *   tail:    the huge page a block ends in keeps 4 KiB pages when the
 *            block fills at most 512 KiB of it, also for the next block;
 *            tail_maps: a bounded number of such pages, each a mapping;
 *   big_whole, big_ends: blocks of 1 to 4 MiB get them once their thread
 *            has been seen writing such blocks through (at their frees,
 *            or before any, at the next big malloc: big_early), and not
 *            from a thread that writes only their first and last bytes;
 *            the decision lapses after 1,024 frees in huge pages and is
 *            made again (big_lapse);
 *   sampled: a thread piling up small blocks of many sizes gets them for
 *            its first segment's upper half, also with the heap profiler
 *            on (thp.sampled.prof, libfreeway-prof.so);
 *   never:   with FREEWAY_THP=0, no mapping of the heap asks for them;
 *   delay0:  nor with FREEWAY_PURGE_DELAY=0.
 * The kernel must offer huge pages (not "[never]" in
 * /sys/kernel/mm/transparent_hugepage/enabled): else the sections are
 * skipped. */
#include "fwtest.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
static const size_t burst = 24 * MiB; /* six segments */

static bool thp_offered(void) {
  char buf[128];
  int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  return strstr(buf, "[never]") == NULL;
}

static void need_thp(long mode) {
  if (!thp_offered()) {
    fwt_log("the kernel offers no transparent huge pages here: skipped");
    exit(77);
  }
  long thp = X.option_get("thp");
  CHECKF(thp == mode, "option thp is %ld, expected %ld for this section", thp, mode);
}

/* The VmFlags line of the mapping that holds p, into flags (empty if none). */
static void vma_flags(const void *p, char *flags, size_t cap) {
  static char *buf;
  static const size_t size = 8 * MiB;
  if (!buf) buf = fwt_scratch(size);
  int fd = open("/proc/self/smaps", O_RDONLY);
  CHECK(fd >= 0);
  size_t len = 0;
  ssize_t n;
  while (len < size - 1 && (n = read(fd, buf + len, size - 1 - len)) > 0) len += (size_t)n;
  close(fd);
  CHECKF(len < size - 1, "/proc/self/smaps is larger than %zu bytes", size);
  buf[len] = 0;
  flags[0] = 0;
  bool in = false;
  for (char *line = buf; line && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next++ = 0;
    unsigned long start, end;
    char dash;
    if (sscanf(line, "%lx%c%lx", &start, &dash, &end) == 3 && dash == '-') {
      in = (uintptr_t)p >= start && (uintptr_t)p < end;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(flags, cap, "%s", line + 8);
      return;
    }
    line = next;
  }
}

static bool has_flag(const char *flags, const char *f) {
  size_t k = strlen(f);
  for (const char *s = flags; (s = strstr(s, f)) != NULL; s += k)
    if ((s == flags || s[-1] == ' ') && (s[k] == ' ' || s[k] == 0)) return true;
  return false;
}

typedef struct run {
  size_t size, n;
  char **v;
} run;

/* burst bytes of blocks of size: malloc'd and written whole, or calloc'd
 * and left untouched but for one byte each */
static void fill_by(run *r, size_t size, bool by_calloc) {
  r->size = size;
  r->n = burst / size;
  r->v = fwt_scratch(r->n * sizeof *r->v);
  for (size_t i = 0; i < r->n; i++) {
    r->v[i] = by_calloc ? A.calloc(1, size) : A.malloc(size);
    CHECK(r->v[i] != NULL);
    if (by_calloc) r->v[i][size / 2] = 1;
    else memset(r->v[i], (int)(i & 0x7f) | 1, size);
  }
}

static void fill(run *r, size_t size) { fill_by(r, size, false); }

static void release(run *r) {
  for (size_t i = 0; i < r->n; i++) A.free(r->v[i]);
  fwt_scratch_free(r->v, r->n * sizeof *r->v);
}

/* Each case runs on a thread of its own: a fresh heap, whatever the main
 * thread's has done. */
static void on_thread(void *(*fn)(void *)) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fn, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

static void *advice_thread(void *arg) {
  (void)arg;
  run r;
  fill(&r, 256);
  char first[512], last[512];
  vma_flags(r.v[0], first, sizeof first);
  vma_flags(r.v[r.n - 1], last, sizeof last);
  fwt_log("advice: %zu MiB of 256 B blocks: first block's mapping [%s], last block's [%s]", burst / MiB, first,
          last);
  CHECKF(has_flag(first, "hg"), "a thread that filled its first segment with blocks it keeps: no huge pages "
         "asked for it: flags [%s]", first);
  CHECKF(has_flag(last, "hg"), "a thread with %zu MiB of small blocks got no huge pages: flags [%s]", burst / MiB,
         last);
  /* the second segment: taken once the first was full */
  const uintptr_t seg_mask = 4 * MiB - 1, first_seg = (uintptr_t)r.v[0] & ~seg_mask;
  const char *second = NULL;
  for (size_t i = 0; i < r.n && !second; i++)
    if (((uintptr_t)r.v[i] & ~seg_mask) != first_seg) second = r.v[i];
  CHECKF(second != NULL, "%zu MiB of small blocks all in one segment", burst / MiB);
  char fl[512];
  vma_flags(second, fl, sizeof fl);
  CHECKF(has_flag(fl, "hg"), "the segment a thread takes after filling its first asks for no huge pages: "
         "block %p, flags [%s]", (const void *)second, fl);
  release(&r);
  return NULL;
}

/* Blocks kept, 1 KiB each: with 1.5 MiB the thread is still in the lower
 * half of its first segment, 4 KiB pages; at 3 MiB the upper half, reached
 * with the lower one's pages full, asks for huge pages. */
static void *advice_pile_thread(void *arg) {
  (void)arg;
  enum { N = 3072, HALF = 1536 };
  static char *v[N];
  for (size_t i = 0; i < N; i++) {
    if (i == HALF) {
      for (size_t k = 0; k < HALF; k += 256) {  /* smaps is read whole each time */
        char flags[512];
        vma_flags(v[k], flags, sizeof flags);
        CHECKF(!has_flag(flags, "hg"), "a thread with 1.5 MiB of small blocks got huge pages: block %zu at %p, "
               "flags [%s]", k, (void *)v[k], flags);
      }
    }
    v[i] = A.malloc(1024);
    CHECK(v[i] != NULL);
    memset(v[i], 1, 1024);
  }
  char flags[512];
  vma_flags(v[N - 1], flags, sizeof flags);
  fwt_log("advice: 3 MiB of 1 KiB blocks kept: the last one's mapping [%s]", flags);
  CHECKF(has_flag(flags, "hg"), "a thread piling up 3 MiB of small blocks got no huge pages: flags [%s]", flags);
  for (size_t i = 0; i < N; i++) A.free(v[i]);
  return NULL;
}

/* The pile's pattern, but the first 1.5 MiB of blocks were freed by
 * another thread (a producer's blocks, freed by its consumer) and taken
 * back before the thread piles up 3 MiB: blocks that travel are in use
 * only for a while, and reaching the upper half asks for no huge pages. */
enum { REMOTE_N = 3072, REMOTE_FIRST = 1536 };
static char *remote_v[REMOTE_N];
static void *remote_free_thread(void *arg) {
  (void)arg;
  for (size_t i = 0; i < REMOTE_FIRST; i++) A.free(remote_v[i]);
  return NULL;
}
/* n blocks of 1 KiB into v, written whole */
static void remote_fill(size_t n) {
  for (size_t i = 0; i < n; i++) {
    remote_v[i] = A.malloc(1024);
    CHECK(remote_v[i] != NULL);
    memset(remote_v[i], 1, 1024);
  }
}
static void *advice_remote_thread(void *arg) {
  (void)arg;
  remote_fill(REMOTE_FIRST);
  on_thread(remote_free_thread);
  remote_fill(REMOTE_N);
  char flags[512];
  vma_flags(remote_v[REMOTE_N - 1], flags, sizeof flags);
  fwt_log("remote: 1.5 MiB of 1 KiB blocks freed by another thread, then 3 MiB kept: the last one's mapping [%s]",
          flags);
  CHECKF(!has_flag(flags, "hg"), "a thread whose blocks other threads freed got huge pages for its upper half: "
         "flags [%s]", flags);
  for (size_t i = 0; i < REMOTE_N; i++) A.free(remote_v[i]);
  return NULL;
}

/* A steady heap spread over many sizes: 32 size classes, each page
 * filled to 70 % (1.5 MB in use, no page full), then a block of another
 * class, whose page is the first of the segment's upper half. */
static void *advice_spread_thread(void *arg) {
  (void)arg;
  static const size_t sizes[] = {576,  640,  704,  768,  832,  896,  960,  1024, 1152, 1280, 1408,
                                 1536, 1664, 1792, 1920, 2048, 2304, 2560, 2816, 3072, 3328, 3584,
                                 3840, 4096, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192};
  enum { CLASSES = sizeof sizes / sizeof sizes[0], MAX = 64 * 1024 / 576 };
  static char *v[CLASSES][MAX];
  size_t n[CLASSES], held = 0;
  for (size_t c = 0; c < CLASSES; c++) {
    n[c] = 64 * 1024 * 7 / 10 / sizes[c];
    for (size_t k = 0; k < n[c]; k++) {
      v[c][k] = A.malloc(sizes[c]);
      CHECK(v[c][k] != NULL);
      memset(v[c][k], 1, sizes[c]);
      held += sizes[c];
    }
  }
  char *p = A.malloc(512);
  CHECK(p != NULL);
  memset(p, 1, 512);
  CHECKF(((uintptr_t)p & (4 * MiB - 1)) >= 2 * MiB && ((uintptr_t)p & ~(4 * MiB - 1)) == ((uintptr_t)v[0][0] & ~(4 * MiB - 1)),
         "the block after %d classes' pages, %p, is not in the upper half of the thread's segment (first block %p)",
         CLASSES, (void *)p, (void *)v[0][0]);
  char flags[512];
  vma_flags(p, flags, sizeof flags);
  fwt_log("advice: %zu bytes over %d classes, no page full: the upper half's first block's mapping [%s]", held,
          CLASSES, flags);
  CHECKF(!has_flag(flags, "hg"), "a thread whose pages are partly free got huge pages: block %p, flags [%s]",
         (void *)p, flags);
  A.free(p);
  for (size_t c = 0; c < CLASSES; c++)
    for (size_t k = 0; k < n[c]; k++) A.free(v[c][k]);
  return NULL;
}

/* A thread that has taken every page slot of its first segment while
 * carving little of it: one block of each small size class (a page each,
 * a 4 KiB page or one block of it carved), then 64 B blocks, whose pages
 * fill, until one lands in a second segment. That segment asks for no
 * huge pages: most of what the thread took it never wrote (bench_rptest's
 * 16 threads, some 40 % carved, held 132 MiB with them and 109 without). */
static void *sparse_thread(void *arg) {
  (void)arg;
  enum { MAX_CLASSES = 128, MAX_SMALL = 40000 };
  static char *one[MAX_CLASSES], *small[MAX_SMALL];
  size_t classes = 0, n = 0;
  /* an eighth apart: a class each, or two sizes to a class (sizes taken
   * as they come, not from usable sizes, which cautious mode's trailers
   * make exact) */
  for (size_t sz = 16; sz <= 8192 && classes < MAX_CLASSES; sz += sz / 8 > 16 ? sz / 8 : 16) {
    char *p = A.malloc(sz);
    CHECK(p != NULL);
    p[0] = 1;
    one[classes++] = p;
  }
  const uintptr_t seg_mask = 4 * MiB - 1, first_seg = (uintptr_t)one[0] & ~seg_mask;
  const char *second = NULL;
  while (!second && n < MAX_SMALL) {
    char *p = A.malloc(64);
    CHECK(p != NULL);
    memset(p, 1, 64);
    small[n++] = p;
    if (((uintptr_t)p & ~seg_mask) != first_seg) second = p;
  }
  CHECKF(second != NULL, "%zu blocks of 64 B after one of each of %zu sizes: all in the first segment", n, classes);
  char fl[512];
  vma_flags(second, fl, sizeof fl);
  fwt_log("sparse: one block of each of %zu sizes, then %zu of 64 B: the second segment's mapping [%s]", classes, n,
          fl);
  CHECKF(!has_flag(fl, "hg"), "a thread that carved %zu KiB of 64 B blocks and one block of each of %zu sizes "
         "got huge pages for its second segment: block %p, flags [%s]", n * 64 / 1024, classes, (const void *)second,
         fl);
  for (size_t i = 0; i < n; i++) A.free(small[i]);
  for (size_t i = 0; i < classes; i++) A.free(one[i]);
  return NULL;
}

static void t_sparse(void) {
  need_thp(2);
  on_thread(sparse_thread);
}

/* A thread piling up 3.5 MB of blocks of 128 B to 1.25 KiB (bench_frag's
 * rows of 10 threads): the upper half of its first segment asks for huge
 * pages. Run by thp.sampled.prof with the heap profiler sampling too, a
 * sample per 64 KiB (some 55 of them): its pages of sampled blocks, a few
 * in the lower half and never full, once kept the count of full pages
 * there under the threshold (bench_frag 10T took 7,500 page faults with
 * the profiler on against 4,160 off; this section failed 5 runs of 5 with
 * that library). */
static void *sampled_thread(void *arg) {
  (void)arg;
  enum { N = 5000 };
  static char *v[N];
  uint32_t x = 12345;
  for (size_t i = 0; i < N; i++) {
    x = x * 1103515245u + 12345u;
    size_t size = 128 + (x >> 8) % (1280 - 128 + 1);
    v[i] = A.malloc(size);
    CHECK(v[i] != NULL);
    memset(v[i], 1, size);
  }
  const uintptr_t seg_mask = 4 * MiB - 1, first_seg = (uintptr_t)v[0] & ~seg_mask;
  const char *upper = NULL;
  for (size_t i = 0; i < N && !upper; i++)
    if (((uintptr_t)v[i] & ~seg_mask) == first_seg && ((uintptr_t)v[i] & seg_mask) >= 2 * MiB) upper = v[i];
  CHECKF(upper != NULL, "no block of the 3.5 MB in the upper half of the first one's segment");
  char fl[512];
  vma_flags(upper, fl, sizeof fl);
  fwt_log("sampled: 3.5 MB of 128 B-1.25 KiB blocks kept (profiler %s): first segment's upper half [%s]",
          getenv("FREEWAY_PROFILE") ? getenv("FREEWAY_PROFILE") : "off", fl);
  CHECKF(has_flag(fl, "hg"), "a thread piling up 3.5 MB of small blocks got no huge pages for the upper half of "
         "its first segment: block %p, flags [%s]", (const void *)upper, fl);
  for (size_t i = 0; i < N; i++) A.free(v[i]);
  return NULL;
}

static void t_sampled(void) {
  need_thp(2);
  on_thread(sampled_thread);
}

static void t_advice(void) {
  need_thp(2);
  on_thread(advice_thread);
}

/* Each in a process of its own: on memory another thread has touched
 * before, the upper half gets no huge page at a fault anyway, and none is
 * asked for. */
static void t_pile(void) {
  need_thp(2);
  on_thread(advice_pile_thread);
}

static void t_remote(void) {
  need_thp(2);
  on_thread(advice_remote_thread);
}
static void t_spread(void) {
  need_thp(2);
  on_thread(advice_spread_thread);
}

/* The first block of r in the upper half of the segment its first block
 * is in, or NULL. */
static const char *upper_half_block(const run *r) {
  const uintptr_t seg_mask = 4 * MiB - 1, first_seg = (uintptr_t)r->v[0] & ~seg_mask;
  for (size_t i = 0; i < r->n; i++)
    if (((uintptr_t)r->v[i] & ~seg_mask) == first_seg && ((uintptr_t)r->v[i] & seg_mask) >= 2 * MiB) return r->v[i];
  return NULL;
}

static void *medium_thread(void *arg) {
  (void)arg;
  /* a small block calloc'd from fresh memory says nothing of the medium ones */
  char *small = A.calloc(1, 2048);
  CHECK(small != NULL && small[0] == 0);
  /* 512 KiB of them: a quarter of the first segment's lower half */
  enum { FEW = 32 };
  static char *few[FEW];
  for (int i = 0; i < FEW; i++) {
    few[i] = A.malloc(16 * 1024);
    CHECK(few[i] != NULL);
    memset(few[i], 1, 16 * 1024);
  }
  char fl[512];
  vma_flags(few[FEW - 1], fl, sizeof fl);
  CHECKF(!has_flag(fl, "hg"), "a thread with 512 KiB of medium blocks got huge pages: flags [%s]", fl);
  for (int i = 0; i < FEW; i++) A.free(few[i]);
  run r;
  fill(&r, 16 * 1024);
  const char *upper = upper_half_block(&r);
  CHECKF(upper != NULL, "no block of %zu MiB of 16 KiB blocks in the upper half of the first one's segment",
         burst / MiB);
  char up[512];
  vma_flags(upper, up, sizeof up);
  fwt_log("medium: 512 KiB of 16 KiB blocks: [%s]; %zu MiB: first segment's upper half [%s]", fl, burst / MiB, up);
  CHECKF(has_flag(up, "hg"), "a thread that wrote 2 MiB of medium blocks got no huge pages for the upper half "
         "of its first segment: block %p, flags [%s]", (const void *)upper, up);
  release(&r);
  A.free(small);
  return NULL;
}

/* The same blocks, calloc'd and left untouched but for one byte each. */
static void *medium_calloc_thread(void *arg) {
  (void)arg;
  run r;
  fill_by(&r, 16 * 1024, true);
  const char *upper = upper_half_block(&r);
  CHECK(upper != NULL);
  char up[512];
  vma_flags(upper, up, sizeof up);
  fwt_log("medium_calloc: %zu MiB of 16 KiB blocks calloc'd: first segment's upper half [%s]", burst / MiB, up);
  CHECKF(!has_flag(up, "hg"), "a thread that calloc'd medium blocks and left them untouched got huge pages: "
         "block %p, flags [%s]", (const void *)upper, up);
  release(&r);
  return NULL;
}

static void t_medium_calloc(void) {
  need_thp(2);
  if (X.option_get("cautious")) {
    fwt_log("cautious mode clears every calloc'd block: skipped");
    exit(77);
  }
  on_thread(medium_calloc_thread);
}

static void t_medium(void) {
  need_thp(2);
  on_thread(medium_thread);
}

static void *split_thread(void *arg) {
  (void)arg;
  run r;
  size_t r0 = fwt_rss();
  fill(&r, 256);
  size_t r1 = fwt_rss();
  /* one survivor per 2 MiB: every huge page keeps a block */
  size_t every = 2 * MiB / r.size;
  char before[512];
  vma_flags(r.v[r.n - every], before, sizeof before);
  /* (a purge may come while these frees run, if they take longer than the
   * purge delay) */
  for (size_t i = 0; i < r.n; i++)
    if (i % every != 0) A.free(r.v[i]);
  X.collect(true);
  size_t r2 = fwt_rss();
  char after[512];
  vma_flags(r.v[r.n - every], after, sizeof after);
  fwt_log("split: rss %zu MiB before, %zu MiB with the burst, %zu MiB with one block per 2 MiB left, collected; "
          "mapping of a late survivor [%s] before the frees, [%s] after the collect",
          r0 / MiB, r1 / MiB, r2 / MiB, before, after);
  CHECKF(has_flag(before, "hg"), "the late blocks of the burst got no huge pages: flags [%s]", before);
  CHECKF(r1 >= r0 + burst * 3 / 4, "RSS rose only from %zu to %zu MiB for a %zu MiB burst", r0 / MiB, r1 / MiB,
         burst / MiB);
  CHECKF(r2 <= r0 + (r1 - r0) / 4, "RSS stayed at %zu MiB (%zu before the burst, %zu with it) with one block per 2 MiB left",
         r2 / MiB, r0 / MiB, r1 / MiB);
  CHECKF(!has_flag(after, "hg"), "a segment purged in part still asks for huge pages: flags [%s]", after);
  for (size_t i = 0; i < r.n; i += every) A.free(r.v[i]);
  fwt_scratch_free(r.v, r.n * sizeof *r.v);
  return NULL;
}

static void t_split(void) {
  need_thp(2);
  on_thread(split_thread);
}

/* Sizes of blocks with a segment of their own, and whether each gets huge
 * pages under the default policy. */
static const struct {
  size_t size;
  bool huge;
} large_cases[] = {
  {3 * MiB, false},
  {5 * MiB, true},
  {20 * MiB, true},
  {300 * MiB, true}, /* beyond an arena's largest run: a mapping of its own */
};

static void large_check(bool policy) {
  for (size_t i = 0; i < sizeof large_cases / sizeof large_cases[0]; i++) {
    size_t size = large_cases[i].size;
    bool want = policy && large_cases[i].huge;
    char *p = A.malloc(size);
    CHECK(p != NULL);
    p[0] = 1;
    p[size - 1] = 1;
    /* its first byte: the huge page it ends in keeps 4 KiB pages when the
     * block fills only part of it (segment.c fw_segment_set_tail) */
    char flags[512];
    vma_flags(p, flags, sizeof flags);
    fwt_log("large: a block of %zu MiB: mapping of its first byte [%s]", size / MiB, flags);
    CHECKF(has_flag(flags, "hg") == want, "a block of %zu MiB %s huge pages: flags [%s]", size / MiB,
           want ? "got no" : "asks for", flags);
    A.free(p);
  }
}

static void *large_thread(void *arg) {
  (void)arg;
  large_check(true);
  return NULL;
}

static void t_large(void) {
  need_thp(2);
  on_thread(large_thread);
}

static void *none_thread(void *arg) {
  (void)arg;
  run r;
  fill(&r, 256);
  char last[512];
  vma_flags(r.v[r.n - 1], last, sizeof last);
  fwt_log("%zu MiB of 256 B blocks: last block's mapping [%s]", burst / MiB, last);
  CHECKF(!has_flag(last, "hg"), "huge pages asked for: flags [%s]", last);
  release(&r);
  if (X.option_get("thp") == 0) large_check(false);
  return NULL;
}

/* A block in huge pages that fills at most 512 KiB of the huge page it
 * ends in keeps 4 KiB pages there (segment.c fw_segment_set_tail), the
 * rest of it huge; the chunks keep that advice when the block is freed, and
 * the next block of that size, in the same chunks, finds it. */
static void *tail_thread(void *arg) {
  (void)arg;
  const size_t size = 6 * MiB + 256 * 1024;
  for (int round = 0; round < 2; round++) {
    char *p = A.malloc(size);
    CHECK(p != NULL);
    memset(p, round + 1, size);
    char first[512], last[512];
    vma_flags(p, first, sizeof first);
    vma_flags(p + size - 1, last, sizeof last);
    fwt_log("tail: a block of %zu KiB (round %d): first byte [%s], last byte [%s]", size / 1024, round, first, last);
    CHECKF(has_flag(first, "hg"), "a block of %zu KiB got no huge pages: flags [%s]", size / 1024, first);
    CHECKF(has_flag(last, "nh"), "the last 256 KiB of a block of %zu KiB ask for a huge page: flags [%s]",
           size / 1024, last);
    A.free(p);
  }
  return NULL;
}

static void t_tail(void) {
  need_thp(2);
  on_thread(tail_thread);
}

/* Halves advised apart split the heap's mappings (each is a mapping of its
 * own to the kernel), and vm.max_map_count bounds how many a process may
 * have: big blocks of many sizes, replaced over and over, must leave no
 * more than FREEWAY_THP_TAILS (16 for this section: two mappings each, and
 * as many again for other splits) however many blocks come and go. With no
 * limit, 166 more. Nothing is written: the advice is given at malloc. */
static size_t map_count(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL);
  size_t n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

static void *tail_maps_thread(void *arg) {
  (void)arg;
  if (X.option_get("secure")) {
    /* the secure level's guard page at each segment's end is a mapping of
     * its own too (docs/hardening.md): 96 blocks took 42 to 264 mappings */
    fwt_log("tail_maps: the secure level's guard pages split the heap's mappings: skipped");
    exit(77);
  }
  enum { LIVE = 96, ROUNDS = 4 };
  char *v[LIVE] = {0};
  fwt_rng r;
  fwt_rng_init(&r, 17);
  size_t m0 = map_count(), most = m0;
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < LIVE; i++) {
      A.free(v[i]);
      v[i] = A.malloc(fwt_range(&r, 4 * MiB + 64 * 1024, 12 * MiB));
      CHECK(v[i] != NULL);
    }
    size_t m = map_count();
    if (m > most) most = m;
  }
  for (int i = 0; i < LIVE; i++) A.free(v[i]);
  fwt_log("tail_maps: %d blocks of 4-12 MiB replaced %d times: %zu mappings at the start, %zu at most", LIVE, ROUNDS,
          m0, most);
  long tails = X.option_get("thp_tails");
  CHECKF(most - m0 <= (size_t)tails * 4, "the heap's mappings went from %zu to %zu (thp_tails %ld)", m0, most, tails);
  return NULL;
}

static void t_tail_maps(void) {
  need_thp(2);
  on_thread(tail_maps_thread);
}

static void t_never(void) {
  need_thp(0);
  on_thread(none_thread);
}

static void t_delay0(void) {
  need_thp(2);
  CHECK(X.option_get("purge_delay") == 0);
  on_thread(none_thread);
}

/* Blocks of 1 to 4 MiB (spans, and one-chunk segments of their own) get
 * huge pages once their thread has been seen writing such blocks through
 * (segment.c, fw_segment_big_look); a thread that writes only their ends
 * keeps 4 KiB pages. Three slots replaced 64 times, then one block of each
 * kind is looked at. */
static void big_round(bool whole, const char *what) {
  enum { LIVE = 3, OPS = 64 };
  char *v[LIVE] = {0};
  fwt_rng r;
  fwt_rng_init(&r, 9);
  for (int i = 0; i < OPS; i++) {
    size_t j = (size_t)(fwt_next(&r) % LIVE);
    A.free(v[j]);
    size_t len = fwt_range(&r, MiB + MiB / 4, 3 * MiB);
    v[j] = A.malloc(len);
    CHECK(v[j] != NULL);
    if (whole) memset(v[j], 1, len);
    v[j][0] = v[j][len - 1] = 2;
  }
  static const size_t sizes[] = {MiB + MiB / 2, 3 * MiB};
  for (size_t k = 0; k < 2; k++) {
    char *p = A.malloc(sizes[k]);
    CHECK(p != NULL);
    p[0] = p[sizes[k] - 1] = 1;
    char flags[512];
    vma_flags(p, flags, sizeof flags);
    fwt_log("%s: after %d blocks of 1.25-3 MiB, a block of %zu KiB: mapping [%s]", what, OPS, sizes[k] >> 10, flags);
    CHECKF(has_flag(flags, "hg") == whole, "%s: a block of %zu KiB %s huge pages: flags [%s]", what, sizes[k] >> 10,
           whole ? "got no" : "asks for", flags);
    A.free(p);
  }
  for (size_t j = 0; j < LIVE; j++) A.free(v[j]);
}

/* Before any big free: three blocks of 1.5-3 MiB written through, kept;
 * the fourth gets huge pages (the next mallocs looked at the blocks before
 * them). */
static void big_early(void) {
  static const size_t sizes[] = {3 * MiB, MiB + MiB / 2, 2 * MiB + MiB / 4, MiB + MiB / 2};
  char *v[4];
  for (size_t k = 0; k < 4; k++) {
    v[k] = A.malloc(sizes[k]);
    CHECK(v[k] != NULL);
    memset(v[k], 1, sizes[k]);
  }
  char flags[512];
  vma_flags(v[3], flags, sizeof flags);
  fwt_log("big_early: the fourth block of %zu KiB, none freed yet: mapping [%s]", sizes[3] >> 10, flags);
  CHECKF(has_flag(flags, "hg"), "big_early: the fourth block written through got no huge pages: flags [%s]", flags);
  for (size_t k = 0; k < 4; k++) A.free(v[k]);
}

/* One block written through is enough: the next big malloc looks at it
 * and gets huge pages (two looks were asked for before, and a program that
 * fills a few buffers of some MiB faulted the first two in 4 KiB at a
 * time: bench_bigchurn 1-4 MiB x 2000, 1,051 page faults against 527). */
static void big_second(void) {
  char *a = A.malloc(3 * MiB);
  CHECK(a != NULL);
  memset(a, 1, 3 * MiB);
  char *b = A.malloc(MiB + MiB / 2);
  CHECK(b != NULL);
  memset(b, 1, MiB + MiB / 2);
  char flags[512];
  vma_flags(b, flags, sizeof flags);
  fwt_log("big_second: the second block, after one of 3 MiB written through: mapping [%s]", flags);
  CHECKF(has_flag(flags, "hg"), "big_second: the block after one written through got no huge pages: flags [%s]", flags);
  A.free(b);
  A.free(a);
}

/* A decision lapses: blocks of 3 MiB (a chunk of their own each), their
 * first MiB and last byte written, one live at a time. After the first
 * looks they ask for huge pages; after FW_BIG_EVERY_MAX (1,024) frees in
 * huge pages one asks for none, and is looked at again, and the blocks
 * after it ask for huge pages again. */
static void big_lapse(void) {
  enum { OPS = 1100 };
  const size_t size = 3 * MiB;
  int first_hg = -1, lapse = -1, again = -1;
  for (int i = 0; i < OPS && again < 0; i++) {
    char *p = A.malloc(size);
    CHECK(p != NULL);
    memset(p, 1, MiB);
    p[size - 1] = 1;
    if (first_hg < 0 || i >= 1000) {
      char flags[512];
      vma_flags(p, flags, sizeof flags);
      bool hg = has_flag(flags, "hg");
      if (hg && first_hg < 0) first_hg = i;
      else if (!hg && first_hg >= 0 && lapse < 0) lapse = i;
      else if (hg && lapse >= 0) again = i;
    }
    A.free(p);
  }
  fwt_log("big_lapse: huge pages from block %d, none at block %d, again from block %d", first_hg, lapse, again);
  CHECKF(first_hg >= 0 && first_hg <= 4, "no huge pages for the first blocks written through (from block %d)", first_hg);
  CHECKF(lapse >= first_hg + 1024, "huge pages stopped at block %d, %d blocks after they started", lapse,
         lapse - first_hg);
  CHECKF(again > lapse, "no huge pages after the lapse at block %d", lapse);
}

/* The big-block sections run on a thread of their own, which starts with
 * no decision made. */
#define BIG_SECTION(name, call)               \
  static void *name##_thread(void *arg) {     \
    (void)arg;                                \
    call;                                     \
    return NULL;                              \
  }                                           \
  static void t_##name(void) {                \
    need_thp(2);                              \
    on_thread(name##_thread);                 \
  }
BIG_SECTION(big_whole, big_round(true, "big_whole"))
BIG_SECTION(big_ends, big_round(false, "big_ends"))
BIG_SECTION(big_early, big_early())
BIG_SECTION(big_second, big_second())
BIG_SECTION(big_lapse, big_lapse())

static const fwt_section sections[] = {
  {"advice", t_advice},
  {"pile", t_pile},
  {"spread", t_spread},
  {"remote", t_remote},
  {"sparse", t_sparse},
  {"medium", t_medium},
  {"medium_calloc", t_medium_calloc},
  {"split", t_split},
  {"large", t_large},
  {"tail", t_tail},
  {"tail_maps", t_tail_maps},
  {"big_whole", t_big_whole},
  {"big_ends", t_big_ends},
  {"big_early", t_big_early},
  {"big_second", t_big_second},
  {"big_lapse", t_big_lapse},
  {"sampled", t_sampled},
  {"_never", t_never},
  {"_delay0", t_delay0},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
