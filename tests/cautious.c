/* cautious.c — cautious mode (FREEWAY_CAUTIOUS=1; ctest sets it for every
 * section). Each kind of misuse runs in a forked child that must die by
 * SIGABRT with the report's phrase (docs/cautious.md) on stderr, and with
 * the address of the block when the child knows it; the correct-program
 * sections must run to the end. operator new and delete are reached with
 * dlsym: where freeway does not provide them to this program (the static
 * flavour, libfreeway-fw.a), the C++ sections exit 77. */
#include "fwtest.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static void need_cautious(void) {
  CHECKF(X.option_get("cautious") == 1, "run this program with FREEWAY_CAUTIOUS=1 (cautious = %ld)",
         X.option_get("cautious"));
}

/* ---- operator new and delete, by their mangled names ----------------------- */
#if SIZE_MAX > 0xffffffffu
#define SZ "m"
#else
#define SZ "j"
#endif
typedef struct {
  void *(*new_)(size_t), *(*new_array)(size_t), *(*new_aligned)(size_t, size_t);
  void (*del)(void *), (*del_array)(void *), (*del_sized)(void *, size_t), (*del_array_sized)(void *, size_t);
  void (*del_aligned)(void *, size_t), (*del_sized_aligned)(void *, size_t, size_t);
} cxx_ops;
static cxx_ops C;

static void *sym(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  Dl_info info;
  /* only freeway's own operators are of interest */
  if (!f || !dladdr(f, &info) || !info.dli_fname || !strstr(info.dli_fname, "libfreeway")) return NULL;
  return f;
}
#define BINDC(field, name)                  \
  do {                                      \
    void *f_ = sym(name);                   \
    if (!f_) return false;                  \
    memcpy(&C.field, &f_, sizeof f_);       \
  } while (0)
static bool bind_cxx(void) {
  BINDC(new_, "_Znw" SZ);
  BINDC(new_array, "_Zna" SZ);
  BINDC(new_aligned, "_Znw" SZ "St11align_val_t");
  BINDC(del, "_ZdlPv");
  BINDC(del_array, "_ZdaPv");
  BINDC(del_sized, "_ZdlPv" SZ);
  BINDC(del_array_sized, "_ZdaPv" SZ);
  BINDC(del_aligned, "_ZdlPvSt11align_val_t");
  BINDC(del_sized_aligned, "_ZdlPv" SZ "St11align_val_t");
  return true;
}
static void need_cxx(void) {
  if (!bind_cxx()) {
    fwt_log("freeway's operator new and delete are not reachable from this program (flavour %s): skipped",
            fwt_flavour);
    exit(77);
  }
}

/* ---- running a misuse in a child --------------------------------------------- */
static char out[32768];

/* What the child tells the parent before its misuse: the address the report
 * must name. */
static void announce(const void *p) { fprintf(stderr, "fwt-addr: %p\n", p); }
static void announce_thread(void) { fprintf(stderr, "fwt-thread: %#lx\n", (unsigned long)pthread_self()); }

typedef void misuse_fn(void);

/* The child: the misuse must not return. */
static void run_misuse(void *arg) {
  misuse_fn *const *fn = arg;
  (*fn)();
  fprintf(stderr, "fwt: the misuse was not stopped\n");
  _exit(3);
}

/* Runs fn in a child; checks it was stopped by SIGABRT with one report that
 * names phrase (and the announced address). Returns the child's stderr. */
static const char *expect(const char *name, misuse_fn *fn, const char *phrase) {
  int st = fwt_child(run_misuse, &fn, out, sizeof out);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: the child ended with status %#x, not SIGABRT; stderr:\n%s",
         name, st, out);
  const char *rep = strstr(out, "freeway: cautious mode: ");
  CHECKF(rep != NULL, "%s: no cautious-mode report; stderr:\n%s", name, out);
  const char *eol = strchr(rep, '\n');
  size_t first = eol ? (size_t)(eol - rep) : strlen(rep);
  char line[1024];
  snprintf(line, sizeof line, "%.*s", (int)(first < sizeof line - 1 ? first : sizeof line - 1), rep);
  CHECKF(strstr(line, phrase) != NULL, "%s: the report does not say \"%s\":\n%s", name, phrase, out);
  CHECKF(strstr(out, "freeway: aborting") != NULL, "%s: no \"freeway: aborting\":\n%s", name, out);
  CHECKF(strstr(rep + 1, "freeway: cautious mode: ") == NULL, "%s: more than one report:\n%s", name, out);
  const char *a = strstr(out, "fwt-addr: ");
  if (a) {
    void *want = (void *)(uintptr_t)strtoull(a + 10, NULL, 16);
    char addr[64];
    snprintf(addr, sizeof addr, "address %p", want);
    CHECKF(strstr(line, addr) != NULL, "%s: the report does not name %s:\n%s", name, addr, out);
  }
  fwt_log("%s: %s", name, line + strlen("freeway: cautious mode: "));
  return out;
}

/* Writes through this are not dropped as dead stores before a free. */
static volatile char *vp(void *p) { return (volatile char *)p; }
/* Changes the byte at p[i], whatever it held (a fixed value might be the
 * one already there). */
static void flip(void *p, ptrdiff_t i) { vp(p)[i] = (char)~vp(p)[i]; }

/* ---- 1. tiny blocks freed by another thread into a full page ---------------- */
enum { TN = 20000 };
static void **tiny;
static void *free_all(void *arg) {
  size_t n = (size_t)(uintptr_t)arg;
  for (size_t i = 0; i < n; i++) A.free(tiny[i]);
  return NULL;
}
static void t_tiny_remote(void) {
  need_cautious();
  tiny = fwt_scratch(TN * sizeof *tiny);
  for (int round = 0; round < 3; round++) {
    /* every size under 16 bytes, enough to fill pages: the last blocks of
     * each go into full pages, whose remote frees take the heap's list */
    for (size_t i = 0; i < TN; i++) {
      size_t n = i % 16;
      tiny[i] = A.malloc(n);
      CHECK(tiny[i] != NULL);
      memset(tiny[i], (int)i, n);
      CHECK(A.usable_size(tiny[i]) == n);
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_all, (void *)(uintptr_t)TN) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    /* the owner takes the remotely freed blocks back, allocates and frees */
    for (size_t i = 0; i < TN; i++) {
      tiny[i] = A.malloc(i % 16);
      CHECK(tiny[i] != NULL);
    }
    for (size_t i = 0; i < TN; i++) A.free(tiny[i]);
  }
  fwt_scratch_free(tiny, TN * sizeof *tiny);
}

/* ---- 2. double frees, whichever threads free ---------------------------------- */
static void *remote_free(void *p) {
  A.free(p);
  return NULL;
}
static void free_in_thread(void *p) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, remote_free, p) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}
/* Each case keeps a block of the same size live, so that its page stays
 * in use: a page with no live block may be given to another size class at
 * once, and its memory handed out again (cautious mode keeps no
 * quarantine). */
static void m_double_local(void) {
  A.malloc(100);
  char *p = A.malloc(100);
  announce(p);
  A.free(p);
  A.free(p);
}
static void m_double_remote_first(void) {
  /* freed by another thread into this thread's page, then here */
  A.malloc(24);
  char *p = A.malloc(24);
  announce(p);
  free_in_thread(p);
  A.free(p);
}
static void m_double_remote_full(void) {
  /* the first free is remote into a full page (the heap's delayed list),
   * and the owner allocates in between */
  enum { N = 5000 };
  void **b = fwt_scratch(N * sizeof *b);
  for (size_t i = 0; i < N; i++) b[i] = A.malloc(8);
  char *p = b[10];
  announce(p);
  free_in_thread(p);
  for (size_t i = 0; i < 100; i++) A.free(A.malloc(8));
  A.free(p);
}
static void m_double_remote_second(void) {
  A.malloc(3333);
  char *p = A.malloc(3333);
  announce(p);
  A.free(p);
  free_in_thread(p);
}
static void m_double_large(void) {
  char *p = A.malloc(300 * 1024);
  announce(p);
  A.free(p);
  A.free(p);
}
static void m_double_huge(void) {
  /* a block with a segment of its own, unmapped or back in its arena
   * once freed */
  char *p = A.malloc((size_t)6 << 20);
  announce(p);
  A.free(p);
  A.free(p);
}
/* The block's page went back to its segment and a new page of the same
 * class took the slot: the block is a fresh one of the new page, with the
 * mark its free left. */
static char *recycled;
static void make_recycled(void) {
  /* the slot must keep its memory: no purge from now on, and none left
   * due from before (the collect purges what is free and clears the
   * deadlines) */
  CHECK(X.option_set("purge_delay", -1) == 0);
  X.collect(true);
  enum { N = 1000, SIZE = 200 };
  char **b = fwt_scratch(N * sizeof *b);
  for (size_t i = 0; i < N; i++) b[i] = A.malloc(SIZE);
  /* the blocks of one page (64 KiB slice), not the last page */
  uintptr_t slice = (uintptr_t)b[0] & ~(uintptr_t)0xffff;
  size_t first = N, n = 0;
  for (size_t i = 0; i < N; i++)
    if (((uintptr_t)b[i] & ~(uintptr_t)0xffff) == slice) {
      if (first == N) first = i;
      n++;
    }
  CHECKF(n > 8 && first + n < N, "the first page holds %zu blocks from %zu", n, first);
  recycled = b[first + 3];
  for (size_t i = first; i < first + n; i++) A.free(b[i]);
  /* more of the class until a new page takes the slot (free slots of
   * lower index, left by the process's earlier pages, go first) */
  char *q = NULL;
  for (size_t i = 0; i < 64 * N && !(q && ((uintptr_t)q & ~(uintptr_t)0xffff) == slice); i++) q = A.malloc(SIZE);
  CHECKF(((uintptr_t)q & ~(uintptr_t)0xffff) == slice, "no new page took the slot at %#lx", (unsigned long)slice);
  CHECKF(q < recycled, "the new page handed out %p, beyond the old block %p", (void *)q, (void *)recycled);
}
static void m_double_recycled(void) {
  make_recycled();
  announce(recycled);
  A.free(recycled);
}
static void t_double_free(void) {
  need_cautious();
  expect("double free", m_double_local, "double free");
  expect("double free, first by another thread", m_double_remote_first, "double free");
  expect("double free, first by another thread into a full page", m_double_remote_full, "double free");
  expect("double free, second by another thread", m_double_remote_second, "double free");
  expect("double free of a large block", m_double_large, "double free");
  expect("double free of a huge block", m_double_huge, "double free");
  expect("double free after the page was recycled", m_double_recycled, "double free");
}

/* ---- 3. interior pointers ---------------------------------------------------------- */
static void m_inside_1(void) {
  char *p = A.malloc(64);
  announce(p + 1);
  A.free(p + 1);
}
static void m_inside_16(void) {
  char *p = A.malloc(64);
  announce(p + 16);
  A.free(p + 16);
}
static void m_inside_large(void) {
  char *p = A.malloc(200 * 1024);
  announce(p + 4096);
  A.free(p + 4096);
}
static void m_inside_huge(void) {
  char *p = A.malloc((size_t)3 << 20);
  announce(p + (1 << 20));
  A.free(p + (1 << 20));
}
static void m_inside_aligned(void) {
  /* a page that has served an aligned block: the old checks took any
   * offset into it for a block start */
  char *q = A.aligned_alloc(256, 100);
  char *p = A.malloc(100);
  CHECK(q && p);
  announce(q + 16);
  A.free(q + 16);
}
static void m_inside_aligned_block(void) {
  char *q = A.aligned_alloc(4096, 5000);
  CHECK(q != NULL);
  announce(q + 64);
  A.free(q + 64);
}
static void t_interior(void) {
  need_cautious();
  expect("free(p + 1)", m_inside_1, "free of a pointer inside a block");
  expect("free(p + 16)", m_inside_16, "free of a pointer inside a block");
  expect("free(p + 4096), 200 KiB block", m_inside_large, "free of a pointer inside a block");
  expect("free(p + 1 MiB), 3 MiB block", m_inside_huge, "free of a pointer inside a block");
  expect("free(q + 16), a page with aligned blocks", m_inside_aligned, "free of a pointer inside a block");
  expect("free(q + 64), 4096-aligned block", m_inside_aligned_block, "free of a pointer inside a block");
}

/* ---- 4. realloc and malloc_usable_size of freed blocks ------------------------------- */
static void m_realloc_freed(void) {
  char *p = A.malloc(100);
  announce(p);
  A.free(p);
  /* small enough to stay in place */
  A.realloc(p, 90);
}
static void m_usable_freed(void) {
  char *p = A.malloc(100);
  announce(p);
  A.free(p);
  A.usable_size(p);
}
static void m_realloc_recycled(void) {
  make_recycled();
  announce(recycled);
  A.realloc(recycled, 150);
}
static void m_realloc_freed_large(void) {
  char *p = A.malloc(500 * 1024);
  announce(p);
  A.free(p);
  A.realloc(p, 400 * 1024);
}
static void t_realloc_freed(void) {
  need_cautious();
  expect("realloc of a freed block", m_realloc_freed, "realloc of a freed block");
  expect("malloc_usable_size of a freed block", m_usable_freed, "realloc of a freed block");
  expect("realloc after the page was recycled", m_realloc_recycled, "realloc of a freed block");
  expect("realloc of a freed large block", m_realloc_freed_large, "realloc of a freed block");
}

/* ---- 5. pointers freeway never handed out ------------------------------------------- */
static int a_global;
static void m_free_global(void) {
  announce(&a_global);
  A.free(&a_global);
}
static void m_free_stack(void) {
  int local[4];
  announce(&local[1]);
  A.free(&local[1]);
}
static void m_free_garbage(void) {
  announce((void *)(uintptr_t)0x12340);
  A.free((void *)(uintptr_t)0x12340);
}
static void m_free_mmap(void) {
  /* mapped memory at the 4 MiB-aligned base: read, found not ours */
  size_t size = (size_t)12 << 20;
  char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  char *base = (char *)(((uintptr_t)m + (4u << 20) - 1) & ~(uintptr_t)((4u << 20) - 1));
  memset(base, 0x5a, 1 << 16);
  announce(base + 4096);
  A.free(base + 4096);
}
static void m_free_unmapped(void) {
  size_t size = (size_t)12 << 20;
  char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  char *base = (char *)(((uintptr_t)m + (4u << 20) - 1) & ~(uintptr_t)((4u << 20) - 1));
  CHECK(munmap(base, 4096) == 0);  /* the base itself is not mapped */
  announce(base + 65536 + 64);
  A.free(base + 65536 + 64);
}
static void m_usable_global(void) {
  announce(&a_global);
  A.usable_size(&a_global);
}
static void m_realloc_stack(void) {
  int local[4];
  announce(&local[0]);
  A.realloc(&local[0], 100);
}
static void t_foreign(void) {
  need_cautious();
  const char *what = "free of a pointer freeway did not hand out";
  expect("free of a global", m_free_global, what);
  expect("free of a stack variable", m_free_stack, what);
  expect("free of a small integer", m_free_garbage, what);
  expect("free into a foreign mapping", m_free_mmap, what);
  expect("free with an unmapped segment base", m_free_unmapped, what);
  expect("malloc_usable_size of a global", m_usable_global, what);
  expect("realloc of a stack variable", m_realloc_stack, what);
}

/* ---- 6. blocks of 4 GiB and more --------------------------------------------------- */
static void t_big(void) {
  need_cautious();
  if (sizeof(size_t) < 8) {
    fwt_log("big: a 32-bit address space holds no 4 GiB block: skipped");
    exit(77);
  }
  size_t n = ((size_t)4 << 30) + 24;
  char *p = A.malloc(n);
  if (!p) {
    fwt_log("big: no 4 GiB block (errno %d): skipped", errno);
    exit(77);
  }
  CHECKF(A.usable_size(p) == n, "usable size %zu of a block of %zu bytes", A.usable_size(p), n);
  p[0] = 1;
  p[n - 1] = 2;
  /* stays in place: the size in the trailer is the new one */
  char *q = A.realloc(p, n - 8);
  CHECK(q == p);
  CHECK(A.usable_size(q) == n - 8);
  CHECK(q[0] == 1);
  q[n - 9] = 3;
  A.free(q);
  p = A.calloc(1, n);
  CHECK(p != NULL && A.usable_size(p) == n);
  p[n - 1] = 4;
  X.free_sized(p, n);
}

/* ---- 7. sized and aligned frees -------------------------------------------------------- */
static void m_sized_wrong(void) {
  char *p = A.malloc(100);
  announce(p);
  X.free_sized(p, 101);
}
static void m_sized_usable(void) {
  /* the block's size class is larger, but the request was 40 bytes */
  char *p = A.malloc(40);
  announce(p);
  X.free_sized(p, 48);
}
static void m_aligned_wrong(void) {
  char *p = A.aligned_alloc(64, 200);
  announce(p);
  X.free_aligned_sized(p, 32, 200);
}
static void m_aligned_size_wrong(void) {
  char *p = A.aligned_alloc(64, 200);
  announce(p);
  X.free_aligned_sized(p, 64, 100);
}
static void m_aligned_of_malloc(void) {
  char *p = A.malloc(200);
  announce(p);
  X.free_aligned(p, 128);
}
static void m_free_sized_std(void) {
  void (*fs)(void *, size_t) = NULL;
  void *f = sym("free_sized");
  CHECK(f != NULL);
  memcpy(&fs, &f, sizeof f);
  char *p = A.malloc(77);
  announce(p);
  fs(p, 76);
}
static void t_sized(void) {
  need_cautious();
  expect("free_sized with a larger size", m_sized_wrong, "sized free with the wrong size");
  expect("free_sized with the class's size", m_sized_usable, "sized free with the wrong size");
  expect("free_aligned_sized with another alignment", m_aligned_wrong, "aligned free with the wrong alignment");
  expect("free_aligned_sized with another size", m_aligned_size_wrong, "sized free with the wrong size");
  expect("fw_free_aligned of a malloc block", m_aligned_of_malloc, "aligned free with the wrong alignment");
  if (sym("free_sized")) expect("free_sized (standard name)", m_free_sized_std, "sized free with the wrong size");
}

/* ---- 8. new and delete ------------------------------------------------------------------- */
static void m_new_free(void) {
  void *p = C.new_(40);
  announce(p);
  A.free(p);
}
static void m_new_array_delete(void) {
  void *p = C.new_array(40);
  announce(p);
  C.del(p);
}
static void m_new_delete_array(void) {
  void *p = C.new_(40);
  announce(p);
  C.del_array(p);
}
static void m_malloc_delete(void) {
  void *p = A.malloc(40);
  announce(p);
  C.del(p);
}
static void m_new_realloc(void) {
  void *p = C.new_(40);
  announce(p);
  A.realloc(p, 80);
}
static void m_delete_sized_wrong(void) {
  void *p = C.new_(40);
  announce(p);
  C.del_sized(p, 48);
}
static void m_delete_array_sized_wrong(void) {
  void *p = C.new_array(96);
  announce(p);
  C.del_array_sized(p, 100);
}
static void m_delete_aligned_wrong(void) {
  void *p = C.new_aligned(100, 64);
  announce(p);
  C.del_aligned(p, 32);
}
static void m_delete_unaligned(void) {
  void *p = C.new_aligned(100, 64);
  announce(p);
  C.del(p);
}
static void m_delete_sized_aligned_wrong(void) {
  void *p = C.new_aligned(100, 128);
  announce(p);
  C.del_sized_aligned(p, 99, 128);
}
static void m_delete_twice(void) {
  void *p = C.new_(40);
  announce(p);
  C.del(p);
  C.del(p);
}
static void t_new_delete(void) {
  need_cautious();
  need_cxx();
  const char *mm = "mismatched new/delete";
  expect("free of new", m_new_free, mm);
  expect("delete of new[]", m_new_array_delete, mm);
  expect("delete[] of new", m_new_delete_array, mm);
  expect("delete of malloc", m_malloc_delete, mm);
  expect("realloc of new", m_new_realloc, mm);
  expect("sized delete, wrong size", m_delete_sized_wrong, "sized free with the wrong size");
  expect("sized delete[], wrong size", m_delete_array_sized_wrong, "sized free with the wrong size");
  expect("aligned delete, wrong alignment", m_delete_aligned_wrong, "aligned free with the wrong alignment");
  expect("plain delete of aligned new", m_delete_unaligned, "aligned free with the wrong alignment");
  expect("sized aligned delete, wrong size", m_delete_sized_aligned_wrong, "sized free with the wrong size");
  expect("delete twice", m_delete_twice, "double free");
}

/* ---- 9. writes past the end ------------------------------------------------------------- */
static void m_over_one(void) {
  /* 0xfd was once the one fixed canary byte */
  char *p = A.malloc(21);
  announce(p);
  vp(p)[21] = (char)(vp(p)[21] == (char)0xfd ? 0xfc : 0xfd);
  A.free(p);
}
static void m_over_zero(void) {
  char *p = A.malloc(37);
  announce(p);
  vp(p)[37] = 0;  /* a string terminator one too far */
  A.free(p);
}
static void m_over_trailer(void) {
  /* past the slack into the trailer, with a plausible size */
  size_t n = 100;
  char *p = A.malloc(n);
  announce(p);
  size_t sz = n;
  for (size_t i = n; i < n + 64; i += sizeof sz) memcpy((char *)p + i, &sz, sizeof sz);
  A.free(p);
}
static void m_over_large(void) {
  char *p = A.malloc(300000);
  announce(p);
  flip(p, 300000 + 100);
  A.free(p);
}
static void m_over_realloc(void) {
  char *p = A.malloc(50);
  announce(p);
  flip(p, 52);
  A.realloc(p, 5000);
}
static void t_overrun(void) {
  need_cautious();
  /* Every canary byte has its top bit set, so that no byte of text written
   * past the end can leave the canary as it was (1 time in 256 before). */
  for (int i = 0; i < 1000; i++) {
    size_t n = 1 + (size_t)i % 15; /* a block holds at least 16 bytes before its trailer: canary up to there */
    unsigned char *p = A.malloc(n);
    CHECK(p != NULL);
    for (size_t k = n; k < 16; k++)
      CHECKF(p[k] >= 0x80, "canary byte %zu of a %zu-byte block at %p is %#x: a text byte could match it", k - n,
             n, (void *)p, p[k]);
    A.free(p);
  }
  const char *w = "write past the end of the block";
  expect("one byte past the end (0xfd)", m_over_one, w);
  expect("a zero byte past the end", m_over_zero, w);
  expect("over the trailer", m_over_trailer, w);
  expect("past a large block", m_over_large, w);
  expect("found by realloc", m_over_realloc, w);
}

/* ---- 10. writes before the start ------------------------------------------------------- */
/* Two neighbours in a page, both live: of many blocks of one size, two
 * whose distance is the smallest there is (the block size). */
static char *left, *right;
static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (char *const *)a, y = (uintptr_t) * (char *const *)b;
  return x < y ? -1 : x > y;
}
static void neighbours(void) {
  enum { N = 64 };
  char *b[N];
  for (int i = 0; i < N; i++) b[i] = A.malloc(333);
  qsort(b, N, sizeof b[0], cmp_ptr);
  size_t best = SIZE_MAX;
  for (int i = 1; i < N; i++)
    if ((size_t)(b[i] - b[i - 1]) < best) {
      best = (size_t)(b[i] - b[i - 1]);
      left = b[i - 1];
      right = b[i];
    }
  CHECKF(best >= 333 && best < 1024, "no two neighbours among %d blocks of 333 bytes (closest %zu apart)", N, best);
}
static void m_under_free_right(void) {
  neighbours();
  announce(right);
  flip(right, -1);
  A.free(right);
}
static void m_under_free_left(void) {
  neighbours();
  announce(right);
  flip(right, -3);
  A.free(left);
}
static void m_under_pad(void) {
  /* an aligned block whose start is past its block's: the pad before it */
  char *p = NULL;
  for (int i = 0; i < 3; i++) p = A.aligned_alloc(256, 40);
  CHECK(p != NULL);
  announce(p);
  flip(p, -1);
  A.free(p);
}
/* The byte before a block is the last of its neighbour's trailer: with its
 * top bit set, a one-byte underrun of text always changes it (a byte of
 * the trailer's hash matched such a write in one run in 256 and let it
 * pass). Every neighbour of many blocks is looked at. */
static void t_underrun_edge(void) {
  enum { N = 256 };
  char *b[N];
  for (int i = 0; i < N; i++) {
    b[i] = A.malloc(333);
    CHECK(b[i] != NULL);
  }
  qsort(b, N, sizeof b[0], cmp_ptr);
  size_t best = SIZE_MAX;
  for (int i = 1; i < N; i++)
    if ((size_t)(b[i] - b[i - 1]) < best) best = (size_t)(b[i] - b[i - 1]);
  int seen = 0;
  for (int i = 1; i < N; i++) {
    if ((size_t)(b[i] - b[i - 1]) != best) continue;
    seen++;
    CHECKF(((unsigned char)b[i][-1] & 0x80) != 0, "the byte before block %p is 0x%02x: a one-byte underrun of text "
           "could leave it as it was", (void *)b[i], (unsigned char)b[i][-1]);
  }
  CHECKF(seen >= N / 2, "only %d of %d blocks of 333 bytes have a neighbour right before them", seen, N);
  for (int i = 0; i < N; i++) A.free(b[i]);
}
static void t_underrun(void) {
  need_cautious();
  t_underrun_edge();
  const char *w = "write before the start of the block";
  expect("found by its own free", m_under_free_right, w);
  expect("found by the free of the block before", m_under_free_left, w);
  expect("into an aligned block's pad", m_under_pad, w);
}

/* ---- 11. writes to freed blocks ---------------------------------------------------------- */
static void m_uaf(void) {
  char *p = A.malloc(100);
  announce(p);
  A.free(p);
  flip(p, 20);
  A.malloc(100);
}
static void m_uaf_end(void) {
  char *p = A.malloc(1000);
  announce(p);
  A.free(p);
  flip(p, 999);
  A.malloc(1000);
}
static void t_uaf(void) {
  need_cautious();
  expect("write after free, found by malloc", m_uaf, "write to a freed block");
  expect("write at the end after free", m_uaf_end, "write to a freed block");
}

/* ---- 12. what a report says ----------------------------------------------------------- */
static void m_report(void) {
  announce_thread();
  char *p = A.malloc(100);
  announce(p);
  A.free(p);
  A.free(p);
}
static void t_report(void) {
  need_cautious();
  const char *r = expect("the report of a double free", m_report, "double free");
  const char *t = strstr(r, "fwt-thread: ");
  CHECK(t != NULL);
  unsigned long tid = strtoul(t + 12, NULL, 16);
  char want[256];
  snprintf(want, sizeof want, "requested size 100, size class ");
  CHECKF(strstr(r, want) != NULL, "no \"%s\" in:\n%s", want, r);
  CHECKF(strstr(r, "-byte blocks), thread ") != NULL, "no block size or owner in:\n%s", r);
  snprintf(want, sizeof want, "allocated (malloc) by thread %#lx at:", tid);
  CHECKF(strstr(r, want) != NULL, "no \"%s\" in:\n%s", want, r);
  snprintf(want, sizeof want, "freed by thread %#lx at:", tid);
  CHECKF(strstr(r, want) != NULL, "no \"%s\" in:\n%s", want, r);
  snprintf(want, sizeof want, "found in free by thread %#lx at:", tid);
  CHECKF(strstr(r, want) != NULL, "no \"%s\" in:\n%s", want, r);
  /* the stacks are the program's: its frames come first */
  Dl_info self;
  CHECK(dladdr((void *)t_report, &self) && self.dli_fname);
  const char *base = strrchr(self.dli_fname, '/');
  base = base ? base + 1 : self.dli_fname;
  const char *s = strstr(r, "allocated (malloc) by thread");
  const char *frame = strstr(s, "\n    ");
  CHECK(frame != NULL);
  const char *end = strchr(frame + 1, '\n');
  char first[512];
  snprintf(first, sizeof first, "%.*s", (int)(end ? end - frame - 1 : 200), frame + 1);
  CHECKF(strstr(first, base) != NULL, "the allocation stack starts at \"%s\", not in %s:\n%s", first, base, r);
}

/* ---- correct programs run to the end ----------------------------------------------------- */
static void *worker(void *arg) {
  fwt_rng r;
  fwt_rng_init(&r, (uint64_t)(uintptr_t)arg);
  enum { N = 400 };
  blk b[N];
  memset(b, 0, sizeof b);
  for (size_t it = 0; it < fwt_scaled(40000); it++) {
    size_t i = fwt_next(&r) % N;
    if (b[i].p) {
      bcheck(&b[i]);
      switch (fwt_next(&r) % 4) {
      case 0: A.free(b[i].p); break;
      case 1: X.free_sized(b[i].p, b[i].n); break;
      case 2: {
        size_t n = fwt_random_size(&r, 1 << 20);
        char *q = A.realloc(b[i].p, n);
        CHECK(q != NULL);
        size_t keep = n < b[i].n ? n : b[i].n;
        CHECK_PATTERN(q, keep, bseed(&b[i]));
        b[i] = (blk){q, n, it};
        bfill(&b[i]);
        continue;
      }
      default: free_in_thread(b[i].p); break;
      }
      b[i].p = NULL;
      continue;
    }
    size_t n = fwt_random_size(&r, 1 << 20);
    switch (fwt_next(&r) % 5) {
    case 0: b[i].p = A.calloc(1, n); CHECK(b[i].p && fwt_find_nonzero(b[i].p, n) == SIZE_MAX); break;
    case 1: b[i].p = A.aligned_alloc((size_t)16 << (fwt_next(&r) % 9), n); break;
    case 2: CHECK(A.posix_memalign((void **)&b[i].p, (size_t)8 << (fwt_next(&r) % 10), n) == 0); break;
    default: b[i].p = A.malloc(n); break;
    }
    CHECK(b[i].p != NULL);
    CHECKF(A.usable_size(b[i].p) == n, "usable size %zu of a request of %zu", A.usable_size(b[i].p), n);
    b[i].n = n;
    b[i].salt = it;
    bfill(&b[i]);
  }
  for (size_t i = 0; i < N; i++)
    if (b[i].p) {
      bcheck(&b[i]);
      A.free(b[i].p);
    }
  return NULL;
}

static bool count_block(const void *p, size_t n, void *arg) {
  size_t *c = arg;
  c[0]++;
  c[1] += n;
  (void)p;
  return true;
}

static void t_correct(void) {
  need_cautious();
  /* every size near the edges of the trailer and of the classes */
  for (size_t n = 0; n < 3000; n++) {
    char *p = A.malloc(n);
    CHECK(p != NULL && A.usable_size(p) == n);
    memset(p, 0xfd, n);
    if (n % 3 == 0) X.free_sized(p, n);
    else A.free(p);
  }
  /* aligned allocation, freed by every form that names the alignment */
  for (size_t a = 1; a <= ((size_t)1 << 22); a <<= 1)
    for (size_t n = 0; n < 600; n += 37) {
      char *p = X.malloc_aligned(n, a);
      CHECK(p != NULL && fwt_aligned(p, a) && A.usable_size(p) == n);
      memset(p, 0x5c, n);
      if (n % 2) X.free_aligned_sized(p, a, n);
      else X.free_aligned(p, a);
    }
  char *q = A.aligned_alloc(16, 1);
  X.free_aligned_sized(q, 16, 1);
  q = A.aligned_alloc(8, 3);
  X.free_aligned_sized(q, 8, 3);
  q = A.valloc(100);
  CHECK(fwt_aligned(q, fwt_page_size()));
  A.free(q);
  q = A.pvalloc(100);
  CHECK(A.usable_size(q) == fwt_page_size());
  A.free(q);
  /* realloc up and down, in place and moving, large blocks growing */
  char *r = NULL;
  size_t have = 0;
  for (size_t n = 1; n < ((size_t)3 << 20); n = n * 3 / 2 + 1) {
    r = A.realloc(r, n);
    CHECK(r != NULL && A.usable_size(r) == n);
    for (size_t i = (have + 96) / 97 * 97; i < n; i += 97) r[i] = (char)i;
    for (size_t i = 0; i < have && i < n; i += 97) CHECK(r[i] == (char)i);
    have = n;
  }
  while (have > 1) {
    have /= 3;
    r = A.realloc(r, have);
    CHECK(r != NULL && A.usable_size(r) == have);
    for (size_t i = 0; i < have; i += 97) CHECK(r[i] == (char)i);
  }
  A.free(r);
  CHECK(A.realloc(A.malloc(10), 0) == NULL);
  A.free(NULL);
  /* threads: remote frees, sized frees, realloc */
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)(i + 1)) == 0);
  worker((void *)9);
  for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
  /* a heap's statistics and walk are in requested sizes */
  fw_heap_t *h = X.heap_new();
  size_t want = 0;
  void *hb[100];
  for (size_t i = 0; i < 100; i++) {
    hb[i] = X.heap_malloc(h, i * 7);
    want += i * 7;
    CHECK(X.heap_contains(h, hb[i]));
    CHECK(X.heap_usable_size(h, hb[i]) == i * 7);
  }
  fw_heap_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  CHECK(X.heap_stats(h, &s) == 0);
  CHECKF(s.blocks_live == 100 && s.bytes_live == want, "heap stats: %zu blocks, %zu bytes; want 100, %zu",
         s.blocks_live, s.bytes_live, want);
  size_t c[2] = {0, 0};
  X.heap_visit(h, count_block, c);
  CHECKF(c[0] == 100 && c[1] == want, "heap walk: %zu blocks, %zu bytes; want 100, %zu", c[0], c[1], want);
  free_in_thread(hb[5]);
  CHECK(!X.heap_contains(h, hb[5]));
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  CHECK(X.heap_stats(h, &s) == 0);
  CHECK(s.blocks_live == 99 && s.bytes_live == want - 35);
  int local;
  CHECK(!X.heap_contains(h, &local) && X.heap_usable_size(h, &local) == 0);
  X.heap_destroy(h);
}

static void *delete_it(void *p) {
  C.del(p);
  return NULL;
}

static void t_cxx_correct(void) {
  need_cautious();
  need_cxx();
  for (size_t n = 0; n < 2000; n += 7) {
    void *p = C.new_(n), *q = C.new_array(n), *r = C.new_aligned(n, 64), *s = C.new_aligned(n, 4096);
    CHECK(p && q && r && s && fwt_aligned(r, 64) && fwt_aligned(s, 4096));
    memset(p, 1, n);
    memset(q, 2, n);
    memset(r, 3, n);
    if (n % 2) {
      C.del_sized(p, n);
      C.del_array_sized(q, n);
      C.del_sized_aligned(r, n, 64);
    } else {
      C.del(p);
      C.del_array(q);
      C.del_aligned(r, 64);
    }
    C.del_aligned(s, 4096);
  }
  /* a thread deletes what this one made */
  void *p = C.new_(100);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, delete_it, p) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

static const fwt_section sections[] = {
  {"correct", t_correct},
  {"tiny_remote", t_tiny_remote},
  {"big", t_big},
  {"cxx_correct", t_cxx_correct},
  {"double_free", t_double_free},
  {"interior", t_interior},
  {"realloc_freed", t_realloc_freed},
  {"foreign", t_foreign},
  {"sized", t_sized},
  {"new_delete", t_new_delete},
  {"overrun", t_overrun},
  {"underrun", t_underrun},
  {"uaf", t_uaf},
  {"report", t_report},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
