/* misuse.c — the bad-input suite: one misuse of the allocator per case,
 * selected by name (`misuse <case>`; `misuse list` prints the names).
 *
 * A case is one process's worth of work: run_badinput.py starts it as a
 * child, in cautious mode (FREEWAY_CAUTIOUS=1) and in the default mode, and
 * holds the outcome each case must have in each mode (the spec table).
 * The program itself never decides whether being stopped was right: after
 * the misuse it carries on and checks that whatever the allocator did was
 * harmless, so that a case which is not stopped ends either with exit 0
 * (harmless, verified) or with a failed CHECK (harm done). The runner then
 * judges that against the table.
 *
 * Lines a case writes to stderr for the runner (write(2), no allocation):
 *   fwt-mode: cautious|secure|default   the mode the allocator says it is in
 *   fwt-addr: 0x...              an address a report may name (several:
 *                                any of them will do)
 *   fwt-note: base-unmapped      the 4 MiB-aligned base below the pointer
 *                                is not mapped (a fault there may be fine)
 *   fwt-misuse: <what>           the misuse comes next
 *   fwt-mark: <step>             the program got past <step> after the
 *                                misuse, so a report due by then was late
 */
#include "fwtest.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(FWT_STD) && !defined(FWT_STATIC)
#include <dlfcn.h>
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define SEG (4 * MiB) /* segments are this size and aligned to it */

static bool cautious;

/* ---- what the runner reads ------------------------------------------------ */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n <= 0) return;
  size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
  ssize_t w = write(2, buf, len);
  (void)w;
}
static void addr(const void *p) { say("fwt-addr: %p\n", p); }
static void misuse(const char *what) { say("fwt-misuse: %s\n", what); }
static void mark(const char *step) { say("fwt-mark: %s\n", step); }

/* Byte writes the compiler cannot see through or drop: they are the misuse. */
static void poke(void *p, unsigned char c, size_t n) {
  volatile unsigned char *b = p;
  for (size_t i = 0; i < n; i++) b[i] = c;
}
static void poke_ptr(void *at, const void *value) {
  volatile unsigned char *b = at;
  const unsigned char *v = (const unsigned char *)&value;
  for (size_t i = 0; i < sizeof value; i++) b[i] = v[i];
}

/* ---- object pools (not in fwtest's tables) --------------------------------- */
static struct {
  fw_pool_t *(*create)(size_t, size_t, const fw_pool_options_t *);
  void *(*alloc)(fw_pool_t *);
  void (*free)(fw_pool_t *, void *);
  void (*destroy)(fw_pool_t *);
} P;

#if defined(FWT_STD) && !defined(FWT_STATIC)
#define POOL_BIND(field, name)                                             \
  do {                                                                     \
    void *f_ = dlsym(RTLD_DEFAULT, #name);                                 \
    CHECKF(f_ != NULL, "%s not found: is freeway preloaded?", #name);      \
    memcpy(&P.field, &f_, sizeof f_);                                      \
  } while (0)
#else
#define POOL_BIND(field, name) (P.field = name)
#endif

static void bind_pool(void) {
  POOL_BIND(create, fw_pool_new);
  POOL_BIND(alloc, fw_pool_alloc);
  POOL_BIND(free, fw_pool_free);
  POOL_BIND(destroy, fw_pool_destroy);
}

/* ---- the harmless outcome --------------------------------------------------- */
/* Memory the case holds after the misuse: its own blocks and buffers, which
 * nothing handed out may overlap, and every block check_fresh got, which
 * keeps its pattern to the end. */
typedef struct held {
  uintptr_t lo, hi;
  uint64_t seed;
  bool filled;
} held;
enum { HELD_MAX = 65536 };
static held *H;
static size_t nheld;

static void hold_span(uintptr_t lo, uintptr_t hi, uint64_t seed, bool filled) {
  if (!H) H = fwt_scratch(HELD_MAX * sizeof *H);
  CHECK(nheld < HELD_MAX);
  H[nheld++] = (held){lo, hi, seed, filled};
}
/* The case still uses [p, p + n): nothing may be handed out inside it. */
static void hold(const void *p, size_t n) { hold_span((uintptr_t)p, (uintptr_t)p + n, 0, false); }

static int cmp_held(const void *a, const void *b) {
  uintptr_t x = ((const held *)a)->lo, y = ((const held *)b)->lo;
  return x < y ? -1 : x > y;
}
static int cmp_uptr(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* Enough blocks of n bytes to go through every free block of the size a
 * misuse could have left behind (several pages' worth). */
static size_t fresh_count(size_t n) {
  size_t k = 16 * MiB / n;
  return k < 16 ? 16 : k > 4096 ? 4096 : k;
}

/* What "nothing bad came of it" means after a misuse: k new blocks of n
 * bytes are aligned, live blocks of the calling thread's default heap (so
 * inside freeway's memory), disjoint from each other and from everything
 * the case holds (blocks of earlier calls, of any size, included), and each
 * keeps what is written to it. The blocks stay allocated: freeing them
 * could only add reports that have nothing to do with the misuse. */
static void check_fresh(size_t n, size_t k) {
  size_t align = fwt_min_align(n), first = nheld;
  for (size_t i = 0; i < k; i++) {
    char *p = A.malloc(n);
    CHECKF(p != NULL, "malloc(%zu) failed after the misuse (block %zu of %zu)", n, i, k);
    CHECKF(fwt_aligned(p, align), "malloc(%zu) returned %p, not %zu-byte aligned", n, (void *)p, align);
    hold_span((uintptr_t)p, (uintptr_t)p + n, 0xf7e5 + first + i, false);
  }
  /* Before anything is written: a block handed out twice, or overlapping
   * another, is reported here rather than spoil the check. */
  held *c = fwt_scratch(nheld * sizeof *c);
  memcpy(c, H, nheld * sizeof *c);
  qsort(c, nheld, sizeof *c, cmp_held);
  for (size_t i = 1; i < nheld; i++)
    CHECKF(c[i - 1].hi <= c[i].lo,
           "malloc(%zu) handed out memory still in use: [%p, %p) and [%p, %p) overlap (the same block twice?)", n,
           (void *)c[i - 1].lo, (void *)c[i - 1].hi, (void *)c[i].lo, (void *)c[i].hi);
  fwt_scratch_free(c, nheld * sizeof *c);
  fw_heap_t *def = X.heap_get_default();
  for (size_t i = first; i < nheld; i++) {
    const void *p = (const void *)H[i].lo;
    CHECKF(X.heap_contains(def, p), "malloc(%zu) returned %p, which is not a live block of freeway's", n, p);
    CHECKF(X.usable_size(p) >= n, "malloc(%zu) returned %p with usable size %zu", n, p, X.usable_size(p));
  }
  for (size_t i = first; i < nheld; i++) {
    fwt_fill((void *)H[i].lo, n, H[i].seed);
    H[i].filled = true;
  }
  for (size_t i = 0; i < nheld; i++)
    if (H[i].filled) CHECK_PATTERN((const void *)H[i].lo, (size_t)(H[i].hi - H[i].lo), H[i].seed);
}

/* check_fresh for n and its neighbours in size: a block counted free twice
 * may come back as part of a larger one, or hold a smaller one. */
static void check_fresh_sizes(size_t n) {
  check_fresh(n, fresh_count(n));
  check_fresh(2 * n, fresh_count(2 * n));
  if (n >= 16) check_fresh(n / 2, fresh_count(n / 2));
}

/* Two blocks of n bytes next to each other, x below y, allocated among
 * others that all stay live; [x, x + reach) lies in one 64 KiB-aligned
 * window, so inside one page of freeway's and mapped. */
static void adjacent_pair(size_t n, size_t reach, char **x, char **y) {
  enum { M = 64 };
  uintptr_t a[M];
  for (size_t i = 0; i < M; i++) {
    a[i] = (uintptr_t)A.malloc(n);
    CHECK(a[i] != 0);
  }
  qsort(a, M, sizeof *a, cmp_uptr);
  uintptr_t gap = UINTPTR_MAX;
  for (size_t i = 1; i < M; i++)
    if (a[i] - a[i - 1] < gap) gap = a[i] - a[i - 1];
  CHECKF(gap >= n, "blocks of %zu bytes only %zu bytes apart", n, (size_t)gap);
  for (size_t i = 1; i < M; i++) {
    if (a[i] - a[i - 1] == gap && (a[i - 1] >> 16) == ((a[i - 1] + reach - 1) >> 16)) {
      *x = (char *)a[i - 1];
      *y = (char *)a[i];
      return;
    }
  }
  CHECKF(0, "no two of %d blocks of %zu bytes are neighbours", (int)M, n);
}

/* ---- double free ---------------------------------------------------------- */
enum df_how {
  DF_NOW,          /* free(p); free(p) */
  DF_LATER,        /* free(p); other frees of the size; free(p) */
  DF_XTHREAD,      /* allocated on A, freed twice on B */
  DF_SPLIT,        /* freed on A, then on B */
  DF_REMOTE_OWNER, /* freed on B, then on A (the owner) */
};

typedef struct df_job {
  char *p;
  int frees;      /* how many times thread B frees p */
  int misuse_at;  /* the free (0-based) that is the misuse, or -1 */
} df_job;

static void *df_thread(void *arg) {
  df_job *j = arg;
  void *own = A.malloc(48); /* B has a heap of its own, as a real thread would */
  CHECK(own != NULL);
  for (int i = 0; i < j->frees; i++) {
    if (i == j->misuse_at) misuse("second free, on another thread");
    A.free(j->p);
    if (i == j->misuse_at) mark("second_free");
  }
  A.free(own);
  return NULL;
}

static void df_on_thread(char *p, int frees, int misuse_at) {
  df_job j = {p, frees, misuse_at};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, df_thread, &j) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

static void double_free(size_t n, enum df_how how) {
  /* A live block of the size next to p: a page whose count of live blocks
   * a double free throws off must not be taken for empty and recycled
   * under it. */
  char *keep = A.malloc(n);
  char *p = A.malloc(n);
  CHECK(keep != NULL && p != NULL);
  fwt_fill(keep, n, 0x4b);
  fwt_fill(p, n, 1);
  addr(p);
  switch (how) {
  case DF_NOW:
    A.free(p);
    misuse("second free, right after the first");
    A.free(p);
    mark("second_free");
    break;
  case DF_LATER: {
    /* p ends up under other free blocks of its size, with other sizes
     * allocated and freed in between: not at the head of any list. */
    char *o[8];
    for (size_t i = 0; i < 8; i++) {
      o[i] = A.malloc(n);
      CHECK(o[i] != NULL);
    }
    A.free(p);
    for (size_t i = 0; i < 8; i++) A.free(o[i]);
    for (size_t i = 0; i < 64; i++) {
      void *q = A.malloc(24 + i * 40);
      CHECK(q != NULL);
      A.free(q);
    }
    misuse("second free, after other frees of the size");
    A.free(p);
    mark("second_free");
    break;
  }
  case DF_XTHREAD:
    df_on_thread(p, 2, 1);
    break;
  case DF_SPLIT:
    A.free(p);
    df_on_thread(p, 1, 0);
    break;
  case DF_REMOTE_OWNER:
    df_on_thread(p, 1, -1);
    misuse("second free, by the owner after another thread's");
    A.free(p);
    mark("second_free");
    break;
  }
  char *q = A.malloc(n);
  CHECK(q != NULL);
  mark("next_malloc");
  hold(q, n);
  hold(keep, n);
  check_fresh_sizes(n);
  CHECK_PATTERN(keep, n, 0x4b);
}

#define DF_CASE(name, how, n) \
  static void t_##name(void) { double_free((n), (how)); }
DF_CASE(double_free_now_32, DF_NOW, 32)
DF_CASE(double_free_now_1k, DF_NOW, KiB)
DF_CASE(double_free_now_64k, DF_NOW, 64 * KiB)
DF_CASE(double_free_now_1m, DF_NOW, MiB)
DF_CASE(double_free_later_32, DF_LATER, 32)
DF_CASE(double_free_later_1k, DF_LATER, KiB)
DF_CASE(double_free_later_64k, DF_LATER, 64 * KiB)
DF_CASE(double_free_later_1m, DF_LATER, MiB)
DF_CASE(double_free_xthread_32, DF_XTHREAD, 32)
DF_CASE(double_free_xthread_1k, DF_XTHREAD, KiB)
DF_CASE(double_free_xthread_64k, DF_XTHREAD, 64 * KiB)
DF_CASE(double_free_xthread_1m, DF_XTHREAD, MiB)
DF_CASE(double_free_split_32, DF_SPLIT, 32)
DF_CASE(double_free_split_1k, DF_SPLIT, KiB)
DF_CASE(double_free_split_64k, DF_SPLIT, 64 * KiB)
DF_CASE(double_free_split_1m, DF_SPLIT, MiB)
DF_CASE(double_free_remote_owner_32, DF_REMOTE_OWNER, 32)
DF_CASE(double_free_remote_owner_1k, DF_REMOTE_OWNER, KiB)
DF_CASE(double_free_remote_owner_64k, DF_REMOTE_OWNER, 64 * KiB)
DF_CASE(double_free_remote_owner_1m, DF_REMOTE_OWNER, MiB)

/* ---- frees of pointers inside a block --------------------------------------- */
static void free_inside(size_t n, size_t off) {
  char *p = A.malloc(n);
  CHECK(p != NULL);
  fwt_fill(p, n, 2);
  addr(p + off); /* the pointer freed, or its block: either names the misuse */
  addr(p);
  misuse("free of a pointer inside a live block");
  A.free(p + off);
  mark("free");
  /* p is still the program's: nothing handed out may overlap it. */
  hold(p, n);
  check_fresh_sizes(n);
  CHECK_PATTERN(p, n, 2);
}
/* realloc of a pointer inside a live block, to a size its block holds: a
 * realloc that took it for the block would hand the program memory that
 * runs past the block's end. */
static void realloc_inside(size_t n, size_t off, size_t m) {
  char *p = A.malloc(n);
  CHECK(p != NULL);
  fwt_fill(p, n, 2);
  addr(p + off);
  addr(p);
  misuse("realloc of a pointer inside a live block");
  char *q = A.realloc(p + off, m);
  mark("realloc");
  /* Never stopped: p stays the program's, and a block handed out for the
   * call must lie clear of it. */
  CHECKF(q == NULL || q + m <= p || q >= p + n, "realloc(p + %zu, %zu) returned %p, inside the block %p", off, m,
         (void *)q, (void *)p);
  if (q) hold(q, m);
  hold(p, n);
  check_fresh_sizes(n);
  CHECK_PATTERN(p, n, 2);
}
static void t_realloc_p16(void) { realloc_inside(64, 16, 40); }
static void t_realloc_interior(void) { realloc_inside(1000, 512, 600); }
static void t_realloc_interior_1m(void) { realloc_inside(MiB, 300 * KiB + 48, 600 * KiB); }

static void t_free_p1(void) { free_inside(64, 1); }
static void t_free_p16(void) { free_inside(64, 16); }
static void t_free_interior(void) { free_inside(1000, 512); }
/* blocks whose size has an odd factor: 96 = 32 x 3 (16 is no multiple of
 * 32: the pops' link test sees it), 48 = 16 x 3 (it is: that test cannot) */
static void t_free_p16_96(void) { free_inside(96, 16); }
static void t_free_p16_48(void) { free_inside(48, 16); }
/* The same when the free list is empty: a new thread's first page of 64 B
 * blocks carves 64 at a time (one 4 KiB page), so that the 64th malloc
 * takes the last, and the interior pointer becomes the list's only block,
 * linked to the list's end, where no neighbour's address can tell it. */
static void *listend_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 63; i++) {
    char *q = A.malloc(64);
    CHECK(q != NULL);
    hold(q, 64);
  }
  free_inside(64, 16);
  return NULL;
}
static void t_free_p16_listend(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, listend_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}
static void t_free_interior_1m(void) { free_inside(MiB, 300 * KiB + 48); }

/* ---- frees of memory freeway never handed out --------------------------------- */
/* Whether the page holding a is mapped readable, from /proc/self/maps (read
 * without allocating, and without touching a: near the stack that could
 * grow the stack). */
static bool readable(uintptr_t a) {
  int fd = open("/proc/self/maps", O_RDONLY);
  CHECK(fd >= 0);
  char buf[4096], line[512];
  size_t ll = 0;
  bool found = false;
  ssize_t got;
  while (!found && (got = read(fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < got && !found; i++) {
      if (buf[i] != '\n') {
        if (ll < sizeof line - 1) line[ll++] = buf[i];
        continue;
      }
      line[ll] = 0;
      ll = 0;
      unsigned long long lo, hi;
      char perm[8];
      if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perm) == 3 && a >= lo && a < hi && perm[0] == 'r')
        found = true;
    }
  }
  close(fd);
  return found;
}

/* The 16 KiB at the 4 MiB-aligned base below p, where freeway would look
 * for a segment header: the pages mapped there are copied, to show
 * afterwards that nothing was written. */
enum { PROBE = 16 * 1024 };
typedef struct probe {
  uintptr_t base;
  size_t page;
  bool mapped[PROBE / 4096];
  unsigned char copy[PROBE];
} probe;

static void probe_take(probe *pr, const void *p) {
  pr->base = ((uintptr_t)p - 1) & ~(uintptr_t)(SEG - 1);
  pr->page = fwt_page_size();
  CHECK(pr->page <= PROBE && PROBE % pr->page == 0);
  for (size_t i = 0; i < PROBE / pr->page; i++) {
    pr->mapped[i] = readable(pr->base + i * pr->page);
    if (pr->mapped[i]) memcpy(pr->copy + i * pr->page, (const void *)(pr->base + i * pr->page), pr->page);
  }
  if (!pr->mapped[0]) say("fwt-note: base-unmapped\n");
}

static void probe_check(const probe *pr) {
  for (size_t i = 0; i < PROBE / pr->page; i++) {
    const unsigned char *at = (const unsigned char *)(pr->base + i * pr->page);
    if (pr->mapped[i]) {
      CHECKF(memcmp(at, pr->copy + i * pr->page, pr->page) == 0,
             "memory at the 4 MiB-aligned base %p changed", (const void *)at);
    } else if (readable((uintptr_t)at)) {
      /* mapped since (the stack grows on a touch): zero unless written */
      CHECKF(fwt_find_nonzero(at, pr->page) == SIZE_MAX, "memory at %p, mapped by the free, was written",
             (const void *)at);
    }
  }
}

/* The harmless outcome for a foreign pointer: nothing written, neither at
 * the pointer nor where its segment header would be, and nothing handed
 * out inside the foreign memory. With resize, the call is realloc(p, 48),
 * a size a small block would hold in place. */
static void foreign_call(unsigned char *mem, size_t len, unsigned char *p, const char *what, bool resize) {
  fwt_fill(mem, len, 3);
  probe *pr = fwt_scratch(sizeof *pr);
  probe_take(pr, p);
  addr(p);
  misuse(what);
  if (resize) {
    unsigned char *q = A.realloc(p, 48);
    mark("realloc");
    CHECKF(q == NULL || q + 48 <= mem || q >= mem + len, "realloc returned %p, inside the foreign memory",
           (void *)q);
    if (q) hold(q, 48);
  } else {
    A.free(p);
    mark("free");
  }
  CHECK_PATTERN(mem, len, 3);
  probe_check(pr);
  hold(mem, len);
  check_fresh(64, fresh_count(64));
  check_fresh(1000, 256);
  CHECK_PATTERN(mem, len, 3);
  fwt_scratch_free(pr, sizeof *pr);
}

static void free_foreign(unsigned char *mem, size_t len, unsigned char *p, const char *what) {
  foreign_call(mem, len, p, what, false);
}

static void t_free_stack(void) {
  _Alignas(64) unsigned char buf[512];
  free_foreign(buf, sizeof buf, buf + 128, "free of a stack address");
}

static _Alignas(64) unsigned char global_buf[4096];
static void t_free_global(void) {
  free_foreign(global_buf, sizeof global_buf, global_buf + 1024, "free of a global's address");
}
static void t_realloc_global(void) {
  foreign_call(global_buf, sizeof global_buf, global_buf + 1024, "realloc of a global's address", true);
}

/* A private mapping with a whole 4 MiB-aligned window in it, and the
 * address 3 slices and 256 bytes into that window: where a small block of
 * a segment would be. */
static unsigned char *foreign_map(size_t *len, unsigned char **window) {
  *len = 3 * SEG;
  unsigned char *m = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  *window = (unsigned char *)(((uintptr_t)m + SEG - 1) & ~(uintptr_t)(SEG - 1));
  return m;
}

/* The window's base is mapped: a lookup of the segment header reads the
 * program's memory rather than faulting. fill: the byte the window holds
 * outside the block (0: as a fresh mapping, as a header would that was never
 * written; 4: every word a header could hold is 0x0404..., so an offset read
 * from it before the header is proved freeway's points far away). With
 * resize, the call is realloc(p, 48), a size a small block would hold in
 * place. */
static void foreign_window(unsigned char *m, size_t len, unsigned char *w, unsigned char fill, bool resize,
                           const char *what) {
  unsigned char *p = w + 3 * 64 * KiB + 256;
  probe *pr = fwt_scratch(sizeof *pr);
  CHECK(readable((uintptr_t)w));
  memset(m, fill, len);
  probe_take(pr, p);
  CHECK(pr->mapped[0]);
  fwt_fill(p, 256, 4);
  addr(p);
  misuse(what);
  if (resize) {
    unsigned char *q = A.realloc(p, 48);
    mark("realloc");
    CHECKF(q == NULL || q + 48 <= m || q >= m + len, "realloc returned %p, inside the foreign memory", (void *)q);
    if (q) hold(q, 48);
  } else {
    A.free(p);
    mark("free");
  }
  CHECK_PATTERN(p, 256, 4);
  for (size_t i = 0; i < (size_t)(p - m); i++) CHECKF(m[i] == fill, "foreign memory below the pointer was written");
  for (size_t i = (size_t)(p + 256 - m); i < len; i++)
    CHECKF(m[i] == fill, "foreign memory above the pointer was written");
  probe_check(pr);
  hold(m, len);
  check_fresh(64, fresh_count(64));
  check_fresh(1000, 256);
  CHECK_PATTERN(p, 256, 4);
  fwt_scratch_free(pr, sizeof *pr);
}
static void foreign_mapped(unsigned char fill, bool resize, const char *what) {
  size_t len;
  unsigned char *w, *m = foreign_map(&len, &w);
  foreign_window(m, len, w, fill, resize, what);
}
/* Bytes 0x04, with nothing mapped in the 4 MiB below the window: each
 * descriptor the header would hold reads as a later slice (flags 4) of a
 * page 0x0404 slices back, 128 KiB below the window. Any read there before
 * the header is proved freeway's faults (the owner's medium free, tested
 * first, reads back only as far as the slice's own index). */
static void t_free_foreign_redirect(void) {
  size_t len = 4 * SEG;
  unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  unsigned char *w = (unsigned char *)((((uintptr_t)m + SEG - 1) & ~(uintptr_t)(SEG - 1)) + SEG);
  CHECK(munmap(m, (size_t)(w - m)) == 0);
  CHECK(!readable((uintptr_t)w - 128 * KiB));
  foreign_window(w, (size_t)(m + len - w), w, 4, false,
                 "free of an address in a foreign mapping (bytes 0x04, nothing mapped below it)");
}
static void t_free_foreign_mapped(void) {
  foreign_mapped(0, false, "free of an address in a foreign mapping (its 4 MiB base mapped)");
}
static void t_free_foreign_filled(void) {
  foreign_mapped(4, false, "free of an address in a foreign mapping (its 4 MiB base mapped, bytes 0x04)");
}
static void t_realloc_foreign_mapped(void) {
  foreign_mapped(0, true, "realloc of an address in a foreign mapping (its 4 MiB base mapped)");
}
static void t_realloc_foreign_filled(void) {
  foreign_mapped(4, true, "realloc of an address in a foreign mapping (its 4 MiB base mapped, bytes 0x04)");
}

/* The same with the window's first 64 KiB (where the header would be)
 * unmapped: the pointer itself is mapped memory. */
static void t_free_foreign_unmapped(void) {
  size_t len;
  unsigned char *w, *m = foreign_map(&len, &w);
  CHECK(munmap(w, 64 * KiB) == 0);
  unsigned char *p = w + 3 * 64 * KiB + 256;
  unsigned char *hi = w + 64 * KiB; /* the mapped part from the pointer's side */
  size_t hlen = len - (size_t)(hi - m);
  free_foreign(hi, hlen, p, "free of an address in a foreign mapping (its 4 MiB base unmapped)");
}

/* ---- writes past the end, before the start, after free ------------------------- */
/* x overflows by k bytes into y, its free neighbour: in the default mode
 * that is y's free-list link. Cautious mode must see it when x is freed. */
static void overflow(size_t k) {
  const size_t n = 64;
  char *x, *y;
  adjacent_pair(n, n + k, &x, &y);
  fwt_fill(x, n, 5);
  A.free(y);
  addr(x);
  addr(y);  /* the default mode names the block whose link was damaged */
  misuse("write past the end of a block, into its free neighbour");
  poke(x + n, 0x41, k);
  A.free(x);
  mark("free");
  check_fresh_sizes(n);
}
static void t_overflow_1(void) { overflow(1); }
static void t_overflow_8(void) { overflow(8); }
static void t_overflow_16(void) { overflow(16); }
static void t_overflow_64(void) { overflow(64); }
static void t_overflow_128(void) { overflow(128); }

/* y underflows by k bytes into the end of x, its live neighbour. */
static void underflow(size_t k) {
  const size_t n = 64;
  char *x, *y;
  adjacent_pair(n, n, &x, &y);
  addr(y);
  misuse("write before the start of a block");
  poke(y - k, 0x41, k);
  A.free(y);
  mark("free");
  hold(x, n);
  check_fresh_sizes(n);
}
static void t_underflow_1(void) { underflow(1); }
static void t_underflow_4(void) { underflow(4); }
static void t_underflow_8(void) { underflow(8); }

enum uaf_kind {
  UAF_GARBAGE,       /* bytes over the first 16 of the freed block */
  UAF_CHOSEN_GLOBAL, /* the first word := the address of a global */
  UAF_CHOSEN_LIVE,   /* the first word := a live block of the same size */
  UAF_TAIL,          /* bytes in the middle, clear of the first word */
};

static _Alignas(64) unsigned char uaf_victim[1024];

static void use_after_free(enum uaf_kind kind) {
  const size_t n = 64;
  char *z = A.malloc(n); /* live, same size: a link an attacker would pick */
  char *x = A.malloc(n);
  CHECK(z != NULL && x != NULL);
  fwt_fill(z, n, 6);
  fwt_fill(uaf_victim, sizeof uaf_victim, 7);
  A.free(x);
  addr(x);
  misuse("write to a freed block");
  switch (kind) {
  case UAF_GARBAGE: poke(x, 0x41, 16); break;
  case UAF_CHOSEN_GLOBAL: poke_ptr(x, uaf_victim + 256); break;
  case UAF_CHOSEN_LIVE: poke_ptr(x, z); break;
  case UAF_TAIL: poke(x + 32, 0x41, 16); break;
  }
  mark("write");
  hold(z, n);
  hold(uaf_victim, sizeof uaf_victim);
  check_fresh_sizes(n);
  CHECK_PATTERN(z, n, 6);
  CHECK_PATTERN(uaf_victim, sizeof uaf_victim, 7);
}
static void t_uaf_write(void) { use_after_free(UAF_GARBAGE); }
static void t_uaf_chosen_global(void) { use_after_free(UAF_CHOSEN_GLOBAL); }
static void t_uaf_chosen_live(void) { use_after_free(UAF_CHOSEN_LIVE); }
static void t_uaf_write_tail(void) { use_after_free(UAF_TAIL); }

/* ---- calls on a freed block ---------------------------------------------------- */
static void realloc_freed(size_t n, size_t m) {
  char *keep = A.malloc(n); /* as in double_free: p's page is not left empty */
  char *p = A.malloc(n);
  CHECK(keep != NULL && p != NULL);
  fwt_fill(keep, n, 0x4b);
  fwt_fill(p, n, 8);
  A.free(p);
  addr(p);
  misuse("realloc of a freed block");
  char *q = A.realloc(p, m);
  mark("realloc");
  /* If it returned a block, that block is the program's now. */
  if (q) hold(q, m);
  hold(keep, n);
  check_fresh_sizes(n);
  check_fresh(m, fresh_count(m) < 256 ? fresh_count(m) : 256);
  CHECK_PATTERN(keep, n, 0x4b);
}
static void t_realloc_freed_inplace(void) { realloc_freed(100, 80); }
static void t_realloc_freed_move(void) { realloc_freed(100, 100000); }
static void t_realloc_freed_1m(void) { realloc_freed(MiB, 3 * MiB); }

static void t_usable_freed(void) {
  char *p = A.malloc(100);
  CHECK(p != NULL);
  A.free(p);
  addr(p);
  misuse("malloc_usable_size of a freed block");
  size_t u = A.usable_size(p);
  mark("usable_size");
  (void)u;
  check_fresh_sizes(100);
}

/* ---- frees that state the wrong size or alignment ------------------------------ */
static void free_sized_wrong(size_t n, size_t wrong) {
  char *p = A.malloc(n);
  CHECK(p != NULL);
  fwt_fill(p, n, 9);
  addr(p);
  misuse("free_sized with a size the block was not allocated with");
  X.free_sized(p, wrong);
  mark("free");
  check_fresh_sizes(n);
  check_fresh(wrong, 256);
}
/* Valid sizes run from the requested size to the usable size. */
static void t_free_sized_smaller(void) { free_sized_wrong(100, 40); }
static void t_free_sized_larger(void) { free_sized_wrong(100, 5000); }

static void t_free_aligned_wrong(void) {
  char *p = A.aligned_alloc(64, 256);
  CHECK(p != NULL);
  fwt_fill(p, 256, 10);
  addr(p);
  misuse("free_aligned_sized with an alignment the block was not allocated with");
  X.free_aligned_sized(p, 4096, 256);
  mark("free");
  check_fresh_sizes(256);
}

/* ---- C++: operator delete (misuse_cxx.cpp) ------------------------------------- */
void cxx_delete_sized_wrong(void);
void cxx_delete_aligned_of_plain_new(void);
void cxx_delete_of_new_array(void);
void cxx_delete_array_of_new(void);
void cxx_free_of_new(void);

/* The C side of those cases. */
void fwt_cxx_misuse(const char *what, const void *p);
void fwt_cxx_mark(const char *step);
void fwt_cxx_owned(const void *p, size_t n);
void fwt_cxx_fresh(size_t n);
void fwt_cxx_free(void *p);

void fwt_cxx_misuse(const char *what, const void *p) {
  addr(p);
  misuse(what);
}
void fwt_cxx_mark(const char *step) { mark(step); }
/* operator new must be freeway's, or the case tests another allocator. */
void fwt_cxx_owned(const void *p, size_t n) {
  CHECKF(p != NULL && X.heap_contains(X.heap_get_default(), p),
         "operator new returned %p, not a block of freeway's: is operator new freeway's?", p);
  CHECK(X.usable_size(p) >= n);
}
void fwt_cxx_fresh(size_t n) { check_fresh_sizes(n); }
void fwt_cxx_free(void *p) { A.free(p); }

/* ---- object pools ---------------------------------------------------------------- */
static void t_pool_wrong_pool(void) {
  fw_pool_t *a = P.create(64, 16, NULL), *b = P.create(64, 16, NULL);
  CHECK(a != NULL && b != NULL);
  void *o = P.alloc(a);
  void *keep = P.alloc(b);
  CHECK(o != NULL && keep != NULL);
  addr(o);
  misuse("object of pool A freed into pool B");
  P.free(b, o);
  mark("free");
  /* o is still pool A's: once A is gone, B handing it out would hand out
   * released memory. */
  P.destroy(a);
  enum { K = 4096 };
  uintptr_t *got = fwt_scratch(K * sizeof *got);
  for (size_t i = 0; i < K; i++) {
    void *q = P.alloc(b);
    CHECKF(q != NULL, "fw_pool_alloc failed after the misuse");
    CHECKF(q != o, "pool B handed out %p, an object of the destroyed pool A", q);
    CHECKF(q != keep, "pool B handed out %p, which is live", q);
    got[i] = (uintptr_t)q;
  }
  qsort(got, K, sizeof *got, cmp_uptr);
  for (size_t i = 1; i < K; i++)
    CHECKF(got[i] != got[i - 1], "pool B handed out %p twice", (void *)got[i]);
  fwt_scratch_free(got, K * sizeof *got);
}

static void t_pool_double_free(void) {
  fw_pool_t *pool = P.create(64, 16, NULL);
  CHECK(pool != NULL);
  void *o = P.alloc(pool);
  CHECK(o != NULL);
  P.free(pool, o);
  addr(o);
  misuse("object freed twice into its pool");
  P.free(pool, o);
  mark("second_free");
  enum { K = 4096 };
  uintptr_t *got = fwt_scratch(K * sizeof *got);
  for (size_t i = 0; i < K; i++) {
    got[i] = (uintptr_t)P.alloc(pool);
    CHECKF(got[i] != 0, "fw_pool_alloc failed after the misuse");
  }
  qsort(got, K, sizeof *got, cmp_uptr);
  for (size_t i = 1; i < K; i++) CHECKF(got[i] != got[i - 1], "the pool handed out %p twice", (void *)got[i]);
  fwt_scratch_free(got, K * sizeof *got);
}

/* ---- heaps: calls from a thread that does not own the heap ------------------------ */
typedef struct heap_job {
  fw_heap_t *h;
  bool destroy; /* fw_heap_destroy, else fw_heap_malloc */
} heap_job;

static void *heap_foreign_thread(void *arg) {
  heap_job *j = arg;
  if (j->destroy) {
    misuse("fw_heap_destroy of another thread's heap");
    errno = 0;
    X.heap_destroy(j->h);
    int e = errno;
    mark("call");
    CHECKF(e == EPERM, "fw_heap_destroy of another thread's heap: errno %d, not EPERM", e);
  } else {
    misuse("fw_heap_malloc on another thread's heap");
    errno = 0;
    void *r = X.heap_malloc(j->h, 64);
    int e = errno;
    mark("call");
    CHECKF(r == NULL && e == EPERM, "fw_heap_malloc on another thread's heap returned %p (errno %d)", r, e);
  }
  return NULL;
}

static void heap_foreign(bool destroy) {
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  blk b[16];
  for (size_t i = 0; i < 16; i++) {
    b[i] = (blk){X.heap_malloc(h, 100 + i * 300), 100 + i * 300, 11};
    CHECK(b[i].p != NULL);
    bfill(&b[i]);
  }
  addr(h);
  heap_job j = {h, destroy};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, heap_foreign_thread, &j) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  /* Refused, so the heap is as it was and still the owner's to use. */
  for (size_t i = 0; i < 16; i++) {
    bcheck(&b[i]);
    CHECK(X.heap_contains(h, b[i].p));
  }
  void *q = X.heap_malloc(h, 200);
  CHECK(q != NULL && X.heap_contains(h, q));
  X.heap_destroy(h);
}
static void t_heap_foreign_malloc(void) { heap_foreign(false); }
static void t_heap_foreign_destroy(void) { heap_foreign(true); }

/* ---- sizes no allocation can have, alignments that are not ----------------------- */
/* A request that must fail: NULL with errno ENOMEM. */
#define CHECK_ENOMEM(call, what)                                                              \
  do {                                                                                        \
    errno = 0;                                                                                \
    void *r_ = (call);                                                                        \
    int e_ = errno;                                                                           \
    CHECKF(r_ == NULL && e_ == ENOMEM, "%s returned %p with errno %d, not NULL with ENOMEM", \
           what, r_, e_);                                                                     \
  } while (0)

/* After the failures the allocator still serves. */
static void still_serves(void) {
  for (size_t n = 1; n <= 4 * MiB; n *= 4) {
    char *p = A.malloc(n);
    CHECKF(p != NULL, "malloc(%zu) after the failed requests", n);
    memset(p, 0x5a, n);
    A.free(p);
  }
}

static void t_huge_malloc(void) {
  misuse("malloc of sizes no address space holds");
  CHECK_ENOMEM(A.malloc(SIZE_MAX), "malloc(SIZE_MAX)");
  CHECK_ENOMEM(A.malloc(SIZE_MAX - 15), "malloc((size_t)-16)");
  CHECK_ENOMEM(A.malloc(SIZE_MAX - 4095), "malloc((size_t)-4096)");
  CHECK_ENOMEM(A.malloc(SIZE_MAX / 2 + 1), "malloc((size_t)-1 / 2 + 1)");
  /* (size_t)-1 / 2 is PTRDIFF_MAX: no 64-bit address space has room for it;
   * a 32-bit process may have 2 GiB free, and then it must be usable. */
  errno = 0;
  char *p = A.malloc(SIZE_MAX / 2);
  int e = errno;
  if (sizeof(size_t) > 4 || p == NULL) {
    CHECKF(p == NULL && e == ENOMEM, "malloc((size_t)-1 / 2) returned %p with errno %d", (void *)p, e);
  } else {
    p[0] = 1;
    p[SIZE_MAX / 2 - 1] = 2;
    A.free(p);
  }
  mark("calls");
  still_serves();
}

static void t_huge_realloc(void) {
  char *p = A.malloc(100);
  CHECK(p != NULL);
  fwt_fill(p, 100, 12);
  misuse("realloc to sizes no address space holds");
  CHECK_ENOMEM(A.realloc(p, SIZE_MAX), "realloc(p, SIZE_MAX)");
  CHECK_ENOMEM(A.realloc(p, SIZE_MAX - 15), "realloc(p, (size_t)-16)");
  CHECK_ENOMEM(A.realloc(p, SIZE_MAX / 2 + 1), "realloc(p, (size_t)-1 / 2 + 1)");
  mark("calls");
  /* A failed realloc leaves the block as it was. */
  CHECK_PATTERN(p, 100, 12);
  CHECK(A.usable_size(p) >= 100);
  A.free(p);
  still_serves();
}

static void t_calloc_overflow(void) {
  misuse("calloc whose count * size overflows");
  CHECK_ENOMEM(A.calloc(FWT_HALF, FWT_HALF + 1), "calloc(2^(bits/2), 2^(bits/2) + 1)");
  CHECK_ENOMEM(A.calloc(SIZE_MAX, 2), "calloc(SIZE_MAX, 2)");
  CHECK_ENOMEM(A.calloc(2, SIZE_MAX), "calloc(2, SIZE_MAX)");
  CHECK_ENOMEM(A.calloc(FWT_THIRD, 3), "calloc(SIZE_MAX / 3 + 1, 3)");
  CHECK_ENOMEM(A.calloc(65537, FWT_WRAP65537), "calloc(65537, n) wrapping to 65536");
  mark("calls");
  still_serves();
}

static void t_reallocarray_overflow(void) {
  char *p = A.malloc(100);
  CHECK(p != NULL);
  fwt_fill(p, 100, 13);
  misuse("reallocarray whose count * size overflows");
  CHECK_ENOMEM(A.reallocarray(p, FWT_HALF, FWT_HALF + 1), "reallocarray(p, 2^(bits/2), 2^(bits/2) + 1)");
  CHECK_ENOMEM(A.reallocarray(p, 65537, FWT_WRAP65537), "reallocarray(p, 65537, n) wrapping to 65536");
  CHECK_ENOMEM(A.reallocarray(NULL, SIZE_MAX, 2), "reallocarray(NULL, SIZE_MAX, 2)");
  mark("calls");
  CHECK_PATTERN(p, 100, 13);
  A.free(p);
  still_serves();
}

/* A request that must fail with EINVAL: the alignment is not one. */
#define CHECK_EINVAL(call, what)                                                              \
  do {                                                                                        \
    errno = 0;                                                                                \
    void *r_ = (call);                                                                        \
    int e_ = errno;                                                                           \
    CHECKF(r_ == NULL && e_ == EINVAL, "%s returned %p with errno %d, not NULL with EINVAL", \
           what, r_, e_);                                                                     \
  } while (0)

static void t_aligned_alloc_bad(void) {
  misuse("aligned_alloc with invalid alignments and sizes");
  CHECK_EINVAL(A.aligned_alloc(0, 64), "aligned_alloc(0, 64)");
  CHECK_EINVAL(A.aligned_alloc(3, 64), "aligned_alloc(3, 64)");
  CHECK_EINVAL(A.aligned_alloc(24, 96), "aligned_alloc(24, 96)");
  CHECK_EINVAL(A.aligned_alloc(SIZE_MAX, 64), "aligned_alloc(SIZE_MAX, 64)");
  CHECK_ENOMEM(A.aligned_alloc(64, SIZE_MAX), "aligned_alloc(64, SIZE_MAX)");
  CHECK_ENOMEM(A.aligned_alloc(4096, SIZE_MAX - 4095), "aligned_alloc(4096, (size_t)-4096)");
  /* A power of two no address space can place: too big, not invalid. */
  errno = 0;
  void *r = A.aligned_alloc(SIZE_MAX / 2 + 1, 64);
  int e = errno;
  CHECKF(r == NULL && (e == ENOMEM || e == EINVAL), "aligned_alloc(2^(bits-1), 64) returned %p with errno %d", r,
         e);
  mark("calls");
  still_serves();
}

static void t_posix_memalign_bad(void) {
  misuse("posix_memalign with invalid alignments and sizes");
  struct {
    size_t align, size;
    int want;
  } c[] = {
    {0, 64, EINVAL},
    {3, 64, EINVAL},
    {24, 64, EINVAL},
    {sizeof(void *) / 2, 64, EINVAL}, /* a power of two, but not a multiple of sizeof(void *) */
    {SIZE_MAX, 64, EINVAL},
    {64, SIZE_MAX, ENOMEM},
    {4096, SIZE_MAX - 4095, ENOMEM},
  };
  for (size_t i = 0; i < FWT_COUNT(c); i++) {
    void *out = &c[i]; /* a value the call must leave alone or set to NULL */
    int rc = A.posix_memalign(&out, c[i].align, c[i].size);
    CHECKF(rc == c[i].want, "posix_memalign(%zu, %zu) returned %d, not %d", c[i].align, c[i].size, rc, c[i].want);
    CHECKF(out == (void *)&c[i] || out == NULL, "posix_memalign(%zu, %zu) failed but set the pointer to %p",
           c[i].align, c[i].size, out);
  }
  mark("calls");
  still_serves();
}

/* ---- the case table ------------------------------------------------------------- */
#define CASE(name) {#name, t_##name}
static void t_delete_sized_wrong(void) { cxx_delete_sized_wrong(); }
static void t_delete_aligned_of_plain_new(void) { cxx_delete_aligned_of_plain_new(); }
static void t_delete_of_new_array(void) { cxx_delete_of_new_array(); }
static void t_delete_array_of_new(void) { cxx_delete_array_of_new(); }
static void t_free_of_new(void) { cxx_free_of_new(); }

static const fwt_section cases[] = {
  CASE(double_free_now_32),
  CASE(double_free_now_1k),
  CASE(double_free_now_64k),
  CASE(double_free_now_1m),
  CASE(double_free_later_32),
  CASE(double_free_later_1k),
  CASE(double_free_later_64k),
  CASE(double_free_later_1m),
  CASE(double_free_xthread_32),
  CASE(double_free_xthread_1k),
  CASE(double_free_xthread_64k),
  CASE(double_free_xthread_1m),
  CASE(double_free_split_32),
  CASE(double_free_split_1k),
  CASE(double_free_split_64k),
  CASE(double_free_split_1m),
  CASE(double_free_remote_owner_32),
  CASE(double_free_remote_owner_1k),
  CASE(double_free_remote_owner_64k),
  CASE(double_free_remote_owner_1m),
  CASE(free_p1),
  CASE(free_p16),
  CASE(free_interior),
  CASE(free_p16_96),
  CASE(free_p16_48),
  CASE(free_p16_listend),
  CASE(free_interior_1m),
  CASE(free_stack),
  CASE(free_global),
  CASE(free_foreign_mapped),
  CASE(free_foreign_unmapped),
  CASE(free_foreign_filled),
  CASE(free_foreign_redirect),
  CASE(realloc_p16),
  CASE(realloc_interior),
  CASE(realloc_interior_1m),
  CASE(realloc_global),
  CASE(realloc_foreign_mapped),
  CASE(realloc_foreign_filled),
  CASE(overflow_1),
  CASE(overflow_8),
  CASE(overflow_16),
  CASE(overflow_64),
  CASE(overflow_128),
  CASE(underflow_1),
  CASE(underflow_4),
  CASE(underflow_8),
  CASE(uaf_write),
  CASE(uaf_chosen_global),
  CASE(uaf_chosen_live),
  CASE(uaf_write_tail),
  CASE(realloc_freed_inplace),
  CASE(realloc_freed_move),
  CASE(realloc_freed_1m),
  CASE(usable_freed),
  CASE(free_sized_smaller),
  CASE(free_sized_larger),
  CASE(free_aligned_wrong),
  CASE(delete_sized_wrong),
  CASE(delete_aligned_of_plain_new),
  CASE(delete_of_new_array),
  CASE(delete_array_of_new),
  CASE(free_of_new),
  CASE(pool_wrong_pool),
  CASE(pool_double_free),
  CASE(heap_foreign_malloc),
  CASE(heap_foreign_destroy),
  CASE(huge_malloc),
  CASE(huge_realloc),
  CASE(calloc_overflow),
  CASE(reallocarray_overflow),
  CASE(aligned_alloc_bad),
  CASE(posix_memalign_bad),
};

static void (*chosen)(void);

static void run_case(void) {
  cautious = X.option_get("cautious") == 1;
  say("fwt-mode: %s\n", cautious ? "cautious" : X.option_get("secure") == 1 ? "secure" : "default");
  bind_pool();
  chosen();
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "list") == 0) {
    for (size_t i = 0; i < FWT_COUNT(cases); i++) printf("%s\n", cases[i].name);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: %s <case> | list\n", argv[0]);
    return 2;
  }
  for (size_t i = 0; i < FWT_COUNT(cases); i++) {
    if (strcmp(argv[1], cases[i].name) == 0) {
      chosen = cases[i].run;
      fwt_section one = {cases[i].name, run_case};
      return fwt_main(argc, argv, &one, 1);
    }
  }
  fprintf(stderr, "unknown case '%s' (try 'list')\n", argv[1]);
  return 2;
}
