/* purgefail.c — calloc hands out zeroed memory even when giving memory back
 * to the OS fails. Under mlockall(MCL_CURRENT | MCL_FUTURE) every page is
 * locked and madvise(MADV_DONTNEED) refuses them (EINVAL): memory the
 * allocator believes purged keeps whatever was written there, so a block
 * taken as "fresh from the OS" and not cleared again reads as garbage.
 *
 * Each section locks its whole process, so each runs as its own ctest entry:
 *   _calloc_delay0:  FREEWAY_PURGE_DELAY=0 (pages, segments and large blocks
 *                    are purged the moment they are freed);
 *   _calloc_collect: the default purge delay, with fw_collect(true) forcing
 *                    the purge.
 * Both exit 77 when the system refuses mlockall. */
#include "fwtest.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static const size_t sizes[] = {16, 1 * KiB, 4 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 8 * MiB};
enum { REPEAT = 4, BATCH = 8 };

static void *(*fwcalloc)(size_t, size_t);

static void lock_all(void) {
  if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
    fwt_log("mlockall refused (%s): cannot run this case here", strerror(errno));
    exit(77);
  }
  /* Purging really fails from here on: otherwise the case proves nothing. */
  void *probe = fwt_scratch(fwt_page_size());
  memset(probe, 0xab, fwt_page_size());
  int rc = madvise(probe, fwt_page_size(), MADV_DONTNEED);
  bool kept = ((unsigned char *)probe)[0] == 0xab;
  fwt_scratch_free(probe, fwt_page_size());
  if (rc == 0 && !kept) {
    fwt_log("madvise(MADV_DONTNEED) still purges locked memory here: cannot run this case");
    exit(77);
  }
}

static void bind_fw_calloc(void) {
#if defined(FWT_STD) && !defined(FWT_STATIC)
  void *f = dlsym(RTLD_DEFAULT, "fw_calloc");
  CHECK(f != NULL);
  memcpy(&fwcalloc, &f, sizeof f);
#else
  fwcalloc = fw_calloc;
#endif
}

/* Every byte of a block that calloc returned must be zero. A dirty block is
 * reported with how much of it was left dirty, and the run goes on, so that
 * one run shows every size and path that fails. */
static size_t failures;

static void expect_zero(const void *p, size_t n, const char *how) {
  atomic_fetch_add_explicit(&fwt_checks, 1, memory_order_relaxed);
  size_t first = fwt_find_nonzero(p, n);
  if (first == SIZE_MAX) return;
  const unsigned char *b = p;
  size_t dirty = 0;
  for (size_t i = first; i < n; i++) dirty += b[i] != 0;
  if (failures++ < 40)
    fprintf(stderr, "%s of %zu bytes returned %p with %zu non-zero bytes (first at offset %zu: %#x)\n", how,
            n, p, dirty, first, b[first]);
}

static void dirty_free(void *p, size_t n) {
  CHECK(p != NULL);
  memset(p, 0xab, n);
  A.free(p);
}

static void calloc_rounds(size_t n, bool delay0) {
  char how[96];
  /* 1. A block written and freed, then calloc of the same size, again and again. */
  dirty_free(A.malloc(n), n);
  for (int k = 0; k < REPEAT; k++) {
    void *p = A.calloc(1, n);
    CHECK(p != NULL);
    snprintf(how, sizeof how, "calloc(1, %zu) #%d after a dirty free%s", n, k, delay0 ? " (purge delay 0)" : "");
    expect_zero(p, n, how);
    dirty_free(p, n);
  }
  /* 2. The same through fw_calloc. */
  for (int k = 0; k < REPEAT; k++) {
    void *p = fwcalloc(n, 1);
    CHECK(p != NULL);
    snprintf(how, sizeof how, "fw_calloc(%zu, 1) #%d after a dirty free", n, k);
    expect_zero(p, n, how);
    dirty_free(p, n);
  }
  /* 3. Whole pages and segments left dirty, fw_collect(true) "purging" them,
   * then calloc: with the purge refused, nothing here is fresh memory. */
  void *v[BATCH];
  for (int i = 0; i < BATCH; i++) {
    v[i] = A.malloc(n);
    CHECK(v[i] != NULL);
    memset(v[i], 0xab, n);
  }
  for (int i = 0; i < BATCH; i++) A.free(v[i]);
  X.collect(true);
  for (int i = 0; i < BATCH; i++) {
    v[i] = A.calloc(n, 1);
    CHECK(v[i] != NULL);
    snprintf(how, sizeof how, "calloc(%zu, 1) #%d after fw_collect(true)", n, i);
    expect_zero(v[i], n, how);
  }
  for (int i = 0; i < BATCH; i++) dirty_free(v[i], n);
  X.collect(true);
  for (int k = 0; k < REPEAT; k++) {
    void *p = fwcalloc(1, n);
    CHECK(p != NULL);
    snprintf(how, sizeof how, "fw_calloc(1, %zu) #%d after fw_collect(true)", n, k);
    expect_zero(p, n, how);
    dirty_free(p, n);
    X.collect(true);
  }
  /* 4. A heap of this thread takes pages from the same segments. */
  fw_heap_t *h = X.heap_new();
  CHECK(h != NULL);
  for (int k = 0; k < REPEAT; k++) {
    void *p = X.heap_calloc(h, 1, n);
    CHECK(p != NULL);
    snprintf(how, sizeof how, "fw_heap_calloc(h, 1, %zu) #%d", n, k);
    expect_zero(p, n, how);
    dirty_free(p, n);
    if (k & 1) X.heap_collect(h, true);
  }
  X.heap_delete(h);
  X.collect(true);
}

static void run(bool delay0) {
  bind_fw_calloc();
  lock_all();
  for (size_t i = 0; i < FWT_COUNT(sizes); i++) {
    size_t before = failures;
    calloc_rounds(sizes[i], delay0);
    fwt_log("%zu bytes: %zu calloc'd blocks were not zero", sizes[i], failures - before);
  }
  /* Sizes in between, largest first, so that big dirty blocks are carved
   * up by the smaller requests that follow. */
  for (size_t i = FWT_COUNT(sizes); i-- > 1;) calloc_rounds(sizes[i] - sizes[i] / 3, delay0);
  CHECKF(failures == 0, "%zu blocks from calloc, fw_calloc or fw_heap_calloc were not zero (purging refused "
         "under mlockall)", failures);
}

static void t_calloc_delay0(void) {
  const char *e = getenv("FREEWAY_PURGE_DELAY");
  CHECKF(e != NULL && strcmp(e, "0") == 0, "run this section with FREEWAY_PURGE_DELAY=0");
  CHECKF(X.option_get("purge_delay") == 0, "FREEWAY_PURGE_DELAY=0 in the environment, but purge_delay is %ld",
         X.option_get("purge_delay"));
  run(true);
}

static void t_calloc_collect(void) {
  long pd = X.option_get("purge_delay");
  CHECKF(pd > 0, "run this section with the default purge delay (purge_delay is %ld)", pd);
  run(false);
}

static const fwt_section sections[] = {
  {"_calloc_delay0", t_calloc_delay0},
  {"_calloc_collect", t_calloc_collect},
};

int main(int argc, char **argv) { return fwt_main(argc, argv, sections, FWT_COUNT(sections)); }
