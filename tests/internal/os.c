/* os.c — the OS layer's contracts (os.h): fw_os_map's placement, fw_os_purge
 * (zero over exactly the range, whole pages dropped, partial pages cleared
 * by writing, nothing done on locked memory) including a pretended 64 KiB
 * page, the recursive lock, the quick stack walk (the same frames as
 * the unwinder's, or a refusal), and the list of executable mappings (the
 * same as stdio reads from /proc/self/maps, with paths of 4 and 20 KiB)
 * with the loaded objects' build IDs (the same as the file's notes), and
 * fw_os_resident's count of resident bytes. */
#include "itest.h"
#include "os.h"
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

static size_t real_page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Offset of the first byte of [p, p+n) that is not c, or SIZE_MAX. */
static size_t first_not(const uint8_t *p, size_t n, uint8_t c) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != c) return i;
  return SIZE_MAX;
}

/* Whether the real OS page holding p is resident (mincore). */
static bool resident(const void *p) {
  unsigned char v = 0;
  uintptr_t pg = (uintptr_t)p & ~(uintptr_t)(real_page() - 1);
  CHECK(mincore((void *)pg, 1, &v) == 0);
  return v & 1;
}

/* ---- fw_os_map ------------------------------------------------------------ */
static void map_case(size_t size, size_t align, size_t offset) {
  uint8_t *p = fw_os_map(size, align, offset);
  CHECKF(p != NULL, "fw_os_map(%zu, %zu, %zu)", size, align, offset);
  size_t a = align < real_page() ? real_page() : align;
  CHECKF((((uintptr_t)p + offset) & (a - 1)) == 0, "fw_os_map(%zu, %zu, %zu) = %p", size, align, offset,
         (void *)p);
  /* a mapping of its own: every page of it is there, and reads as zero */
  for (size_t off = 0; off < size; off += real_page()) CHECK(fw_os_is_mapped(p + off));
  CHECK(fw_os_is_mapped(p + size - 1));
  CHECKF(first_not(p, size, 0) == SIZE_MAX, "fw_os_map(%zu, %zu, %zu): not zero", size, align, offset);
  p[0] = 1;
  p[size - 1] = 2;
  fw_os_unmap(p, size);
  CHECKF(!fw_os_is_mapped(p) && !fw_os_is_mapped(p + size - 1), "fw_os_unmap(%p, %zu) left it mapped",
         (void *)p, size);
}

static void t_os_map(void) {
  fw_os_init();
  CHECK(fw_os_page_size() == real_page());
  CHECK(fw_os_map(0, 0, 0) == NULL);
  const size_t page = real_page();
  const size_t sizes[] = {1, page, 3 * page + 5, (size_t)1 << 20, ((size_t)4 << 20) + page};
  const size_t aligns[] = {1, page, 2 * page, (size_t)64 << 10, (size_t)1 << 20, (size_t)4 << 20,
                           (size_t)32 << 20};
  for (size_t s = 0; s < IT_COUNT(sizes); s++)
    for (size_t a = 0; a < IT_COUNT(aligns); a++) {
      size_t al = aligns[a];
      /* offsets that are whole pages (what the segment layer asks for):
       * none, one page, half the alignment, the alignment less a page, and
       * beyond the alignment (taken modulo it) */
      size_t offs[] = {0, page, al / 2, al > page ? al - page : 0, al + page, 3 * al};
      for (size_t o = 0; o < IT_COUNT(offs); o++)
        if (offs[o] % page == 0) map_case(sizes[s], al, offs[o]);
    }
}

/* os.h allows any offset: (result + offset) is a multiple of align. With an
 * offset that is not a multiple of the page size the result cannot be a
 * page boundary, and the mapping must still be usable as a whole. */
/* Mapped pages of the process, from /proc/self/statm (no allocation). */
static size_t vm_pages(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  return (size_t)strtoull(buf, NULL, 10);
}

/* A mapping starts on a page, so an offset that is not a whole number of
 * pages can never be aligned: refused, and nothing is left mapped. */
static void t_os_map_subpage_offset(void) {
  fw_os_init();
  const size_t page = real_page();
  const size_t cases[][3] = {{page, 0, 16}, {page, (size_t)64 << 10, 16}, {3 * page, (size_t)1 << 20, 256},
                             {page, (size_t)1 << 20, page + 8}};
  for (size_t i = 0; i < IT_COUNT(cases); i++) {
    size_t size = cases[i][0], align = cases[i][1], offset = cases[i][2];
    size_t vm0 = vm_pages();
    uint8_t *p = fw_os_map(size, align, offset);
    CHECKF(p == NULL, "fw_os_map(%zu, %zu, %zu) = %p: a sub-page offset cannot be aligned", size, align, offset,
           (void *)p);
    CHECKF(vm_pages() == vm0, "fw_os_map(%zu, %zu, %zu) left %zu pages mapped", size, align, offset,
           vm_pages() - vm0);
  }
}

/* ---- fw_os_purge ---------------------------------------------------------- */
/* Fills region with 0xa5, purges [region + from, region + to) and checks
 * every byte of the region: zero inside, 0xa5 outside. */
static void purge_case(uint8_t *region, size_t len, size_t from, size_t to) {
  memset(region, 0xa5, len);
  CHECK(fw_os_purge(region + from, to - from));
  const size_t page = fw_os_page_size(), real = real_page();
  /* the whole (possibly pretended) pages inside the range were dropped:
   * not resident before anyone reads them */
  size_t in_start = fw_align_up((uintptr_t)region + from, page) - (uintptr_t)region;
  size_t in_end = fw_align_down((uintptr_t)region + to, page) - (uintptr_t)region;
  for (size_t off = in_start; off + real <= in_end; off += real)
    CHECKF(!resident(region + off), "purge [%zu, %zu): page at %zu still resident", from, to, off);
  for (size_t i = 0; i < len; i++) {
    uint8_t want = i >= from && i < to ? 0 : 0xa5;
    CHECKF(region[i] == want, "purge [%zu, %zu) of a %zu-byte region (page %zu): byte %zu is %#x", from, to,
           len, page, i, region[i]);
  }
}

static void t_os_purge(void) {
  fw_os_init();
  const size_t page = real_page(), len = 16 * page;
  uint8_t *region = fw_os_map(len, page, 0);
  CHECK(region != NULL);
  purge_case(region, len, 2 * page, 6 * page);                 /* whole pages */
  purge_case(region, len, 2 * page + 100, 9 * page - 300);     /* both ends inside pages */
  purge_case(region, len, 2 * page, 5 * page + 1);             /* start aligned, end inside */
  purge_case(region, len, page - 1, 4 * page);                 /* end aligned */
  purge_case(region, len, 5 * page + 8, 5 * page + 1000);      /* inside one page */
  purge_case(region, len, 3 * page - 100, 3 * page + 200);     /* across one boundary, no whole page */
  purge_case(region, len, 0, len);                             /* everything */
  purge_case(region, len, 1, 2);                               /* one byte */
  memset(region, 0xa5, len);
  CHECK(fw_os_purge(region + 7, 0));
  CHECK(first_not(region, len, 0xa5) == SIZE_MAX);
  fw_os_unmap(region, len);
}

/* A pretended 64 KiB page: only 64 KiB-aligned whole pages are dropped, the
 * partial 64 KiB pages at the ends are cleared by writing. */
static void t_os_purge_64k(void) {
  fw_os_init();
  const size_t big = (size_t)64 << 10, len = 4 * big;
  if (real_page() > big) it_skip("the OS page (%zu) is larger than 64 KiB", real_page());
  fw_os_page_size_override(big);
  CHECK(fw_os_page_size() == big);
  uint8_t *region = fw_os_map(len, big, 0);
  CHECK(region != NULL && ((uintptr_t)region & (big - 1)) == 0);
  purge_case(region, len, 8448, 3 * big + 1000);
  /* the partial 64 KiB pages were written, not dropped */
  memset(region, 0xa5, len);
  CHECK(fw_os_purge(region + 8448, 3 * big + 1000 - 8448));
  CHECK(resident(region + 8448) && resident(region + big - 1));
  CHECK(resident(region + 3 * big));
  CHECK(!resident(region + big) && !resident(region + 3 * big - 1));
  purge_case(region, len, 8448, big + 4096);   /* no whole 64 KiB page at all */
  purge_case(region, len, big, 2 * big + 100);
  purge_case(region, len, 100, len - 100);
  fw_os_unmap(region, len);

  /* sizes that are not powers of two, or below the real page, are refused */
  fw_os_page_size_override(3 * big);
  CHECK(fw_os_page_size() == real_page());
  fw_os_page_size_override(big);
  fw_os_page_size_override(real_page() / 2);
  CHECK(fw_os_page_size() == real_page());
  fw_os_page_size_override(big);
  fw_os_page_size_override(0);
  CHECK(fw_os_page_size() == real_page());
}

/* fw_os_populate brings in the whole OS pages inside its range, none
 * around them, without a write; a range with no whole page, or one that
 * does not start on a page, must not turn it off for the calls after
 * (the kernel refuses an unaligned start with the EINVAL an unknown advice
 * gets). With a pretended 64 KiB page: 64 KiB pages only. */
static void t_os_populate(void) {
  fw_os_init();
  const size_t page = real_page(), big = (size_t)64 << 10, len = 4 * big;
  if (page > big) it_skip("the OS page (%zu) is larger than 64 KiB", page);
  uint8_t *region = fw_os_map(len, big, 0);
  CHECK(region != NULL && ((uintptr_t)region & (big - 1)) == 0);
  if (!fw_os_populate(region, page)) it_skip("the kernel does not populate (MADV_POPULATE_WRITE, Linux 5.14)");
  CHECK(resident(region) && !resident(region + page));
  CHECK(!fw_os_populate(region + page + 10, 100)); /* no whole page */
  CHECK(fw_os_populate(region + page + 100, 2 * page)); /* one whole page inside */
  CHECK(!resident(region + page) && resident(region + 2 * page) && !resident(region + 3 * page));
  fw_os_page_size_override(big);
  CHECK(fw_os_populate(region + big + 4096, 2 * big));
  CHECK(!resident(region + big + 4096) && resident(region + 2 * big) && resident(region + 3 * big - 1));
  CHECK(!resident(region + 3 * big));
  fw_os_page_size_override(0);
  CHECK(fw_os_populate(region + 3 * big, page));
  CHECK(resident(region + 3 * big));
  for (size_t k = 0; k < len; k++) CHECK(region[k] == 0);
  fw_os_unmap(region, len);
}

/* Locked memory cannot be dropped: fw_os_purge refuses and leaves every
 * byte as it was (the partial pages too), so the caller keeps it dirty. */
static void t_os_purge_locked(void) {
  fw_os_init();
  const size_t page = real_page(), len = 8 * page;
  uint8_t *region = fw_os_map(len, page, 0);
  CHECK(region != NULL);
  memset(region, 0xa5, len);
  /* the system call itself: the sanitizers' runtimes turn mlock() into a
   * no-op */
  if (syscall(SYS_mlock, region, len) != 0) it_skip("mlock of %zu bytes refused", len);
  CHECK(!fw_os_purge(region + page, 4 * page));
  CHECK(first_not(region, len, 0xa5) == SIZE_MAX);
  CHECK(!fw_os_purge(region + page + 100, 4 * page));
  CHECKF(first_not(region, len, 0xa5) == SIZE_MAX, "byte %zu changed", first_not(region, len, 0xa5));
  CHECK(!fw_os_purge(region, len));
  CHECK(first_not(region, len, 0xa5) == SIZE_MAX);
  /* a range with no whole page needs no help from the OS */
  CHECK(fw_os_purge(region + 3 * page + 10, 20));
  CHECK(first_not(region + 3 * page + 10, 20, 0) == SIZE_MAX);
  CHECK(region[3 * page + 9] == 0xa5 && region[3 * page + 30] == 0xa5);
  CHECK(syscall(SYS_munlock, region, len) == 0);
  purge_case(region, len, page, 4 * page);
  fw_os_unmap(region, len);
}

/* ---- the lock ------------------------------------------------------------- */
static fw_lock_t lock = FW_LOCK_INIT;
static volatile unsigned long counter;
static _Atomic int entered;
enum { ROUNDS = 200000 };

static void *count_thread(void *arg) {
  (void)arg;
  for (unsigned i = 0; i < ROUNDS; i++) {
    fw_lock_acquire(&lock);
    if (i % 64 == 0) fw_lock_acquire(&lock); /* recursion inside the critical section */
    unsigned long v = counter;
    if (i % 4096 == 0) sched_yield();  /* widen the window a broken lock would lose in */
    counter = v + 1;
    if (i % 64 == 0) fw_lock_release(&lock);
    fw_lock_release(&lock);
  }
  return NULL;
}

static void *enter_thread(void *arg) {
  (void)arg;
  fw_lock_acquire(&lock);
  atomic_store(&entered, 1);
  fw_lock_release(&lock);
  return NULL;
}

static _Atomic int holder_ready, holder_go;
static void *holder_thread(void *arg) {
  (void)arg;
  fw_lock_acquire(&lock);
  fw_lock_acquire(&lock);
  atomic_store(&holder_ready, 1);
  while (!atomic_load(&holder_go)) sched_yield();
  fw_lock_release(&lock);
  fw_lock_release(&lock);
  return NULL;
}

static void t_lock(void) {
  /* recursion by the holder */
  fw_lock_acquire(&lock);
  CHECK(atomic_load(&lock.owner) == fw_thread_id());
  fw_lock_acquire(&lock);
  fw_lock_acquire(&lock);
  CHECK(lock.depth == 2);
  fw_lock_release(&lock);
  fw_lock_release(&lock);
  CHECK(atomic_load(&lock.owner) == fw_thread_id() && lock.depth == 0);

  /* another thread waits while this one holds it */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, enter_thread, NULL) == 0);
  for (int i = 0; i < 200; i++) sched_yield();
  usleep(20000);
  CHECK(atomic_load(&entered) == 0);
  fw_lock_release(&lock);  /* the waiter may take it at once */
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(atomic_load(&entered) == 1);
  CHECK(atomic_load(&lock.owner) == 0);

  /* exclusion: a plain counter incremented under the lock ends exact */
  pthread_t a, b;
  CHECK(pthread_create(&a, NULL, count_thread, NULL) == 0);
  CHECK(pthread_create(&b, NULL, count_thread, NULL) == 0);
  CHECK(pthread_join(a, NULL) == 0 && pthread_join(b, NULL) == 0);
  CHECKF(counter == 2ul * ROUNDS, "counter %lu, expected %lu", counter, 2ul * ROUNDS);
  CHECK(atomic_load(&lock.owner) == 0 && lock.depth == 0);

  /* fw_lock_reset in a fork child: the lock was held (twice) by a thread
   * that does not exist there; after the reset it is free and a single
   * acquire/release leaves it free again */
  CHECK(pthread_create(&t, NULL, holder_thread, NULL) == 0);
  while (!atomic_load(&holder_ready)) sched_yield();
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    alarm(20);  /* a deadlock fails the test instead of hanging it */
    int rc = 0;
    if (atomic_load(&lock.owner) == 0) rc = 10;
    fw_lock_reset(&lock);
    if (atomic_load(&lock.owner) != 0 || lock.depth != 0) rc = 11;
    fw_lock_acquire(&lock);
    if (atomic_load(&lock.owner) != fw_thread_id()) rc = 12;
    fw_lock_release(&lock);
    if (atomic_load(&lock.owner) != 0) rc = 13;
    fw_lock_acquire(&lock);
    fw_lock_acquire(&lock);
    fw_lock_release(&lock);
    fw_lock_release(&lock);
    if (atomic_load(&lock.owner) != 0) rc = 14;
    _exit(rc);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child: status %#x (exit %d, signal %d)", status,
         WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  atomic_store(&holder_go, 1);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(atomic_load(&lock.owner) == 0);
}

/* ---- call stacks ------------------------------------------------------------ */
/* The quick walk (fw_os_backtrace_quick) must give exactly the frames the
 * unwinder gives (fw_os_backtrace), or refuse (SIZE_MAX) where a frame's
 * rule is beyond it; both the first time a return address is seen (its
 * rule decoded) and later (its rule kept). */
enum { BT_MAX = 64 };
static unsigned bt_compared, bt_refused;
static bool bt_allow_refusal;

__attribute__((noinline)) static void bt_compare(void) {
  uintptr_t slow[BT_MAX], quick[BT_MAX], again[BT_MAX];
  size_t m = fw_os_backtrace(slow, BT_MAX, 0, 0, 0);
  size_t n = fw_os_backtrace_quick(quick, BT_MAX, 0, 0);
  size_t n2 = fw_os_backtrace_quick(again, BT_MAX, 0, 0);
  CHECKF(n == n2, "the quick walk gave %zu frames, then %zu", n, n2);
  if (n == SIZE_MAX) {
    CHECKF(bt_allow_refusal, "the quick walk refused a stack of %zu frames", m);
    bt_refused++;
    return;
  }
  /* the unwinder's first frame is its own caller, fw_os_backtrace; the
   * quick walk starts at this function */
  CHECKF(m >= 2 && n == m - 1, "the unwinder found %zu frames, the quick walk %zu", m, n);
  Dl_info a, b;
  CHECK(dladdr((void *)(slow[1] - 1), &a) && dladdr((void *)(quick[0] - 1), &b));
  CHECKF(a.dli_saddr == b.dli_saddr, "first frames %#lx and %#lx are in different functions",
         (unsigned long)slow[1], (unsigned long)quick[0]);
  for (size_t i = 1; i < n; i++) {
    CHECKF(quick[i] == slow[i + 1], "frame %zu: the unwinder says %#lx, the quick walk %#lx", i,
           (unsigned long)slow[i + 1], (unsigned long)quick[i]);
    CHECKF(again[i] == quick[i], "frame %zu: %#lx, then %#lx", i, (unsigned long)quick[i], (unsigned long)again[i]);
  }
  bt_compared++;
}

static volatile int bt_sink;

/* d frames, then leaf */
__attribute__((noinline)) static int bt_rec_to(int d, void (*leaf)(void)) {
  if (d == 0) {
    leaf();
    return 1;
  }
  volatile int x = d;
  int r = bt_rec_to(d - 1, leaf);
  return r + x;
}

static int bt_rec(int d) { return bt_rec_to(d, bt_compare); }

/* a frame whose CFA is kept by the frame pointer (the stack pointer moves
 * by a size only known at run time) */
__attribute__((noinline)) static int bt_vla(int n, int d) {
  volatile char buf[n];
  buf[0] = (char)d;
  buf[n - 1] = 1;
  int r = bt_rec(d);
  return r + buf[0] + buf[n - 1];
}

/* a frame that realigns the stack: its CFA is a word the frame pointer
 * points near (a DWARF expression) */
__attribute__((noinline)) static int bt_realign(int n, int d) {
  volatile char buf[n];
  _Alignas(64) volatile char a[64];
  a[0] = (char)d;
  buf[0] = 1;
  int r = bt_rec(d);
  return r + a[0] + buf[0];
}

/* a frame much larger than a page */
__attribute__((noinline)) static int bt_big(int d) {
  volatile char big[200000];
  big[0] = (char)d;
  big[sizeof big - 1] = 2;
  int r = d & 1 ? bt_vla(d * 8 + 1, d) : bt_rec(d);
  return r + big[0] + big[sizeof big - 1];
}

/* frames of the C library in between */
static int bt_cmp(const void *a, const void *b) {
  static bool done;
  if (!done) {
    done = true;
    bt_rec(2);
  }
  return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static void *bt_thread(void *arg) {
  (void)arg;
  bt_rec(3);
  bt_vla(100, 2);
  return NULL;
}

static void bt_signal(int sig) {
  (void)sig;
  bt_rec(1);
}

static void t_os_backtrace(void) {
  /* before set-up: always refused */
  uintptr_t pcs[4];
  CHECK(fw_os_backtrace_quick(pcs, 4, 0, 0) == SIZE_MAX);
  fw_os_backtrace_init();
  CHECK(fw_os_backtrace_quick(pcs, 0, 0, 0) == 0);
  for (int d = 0; d < 24; d++) bt_rec(d);
  for (int d = 0; d < 6; d++) bt_vla(16 + 40 * d, d);
  for (int d = 0; d < 4; d++) bt_big(d);
  for (int d = 0; d < 3; d++) bt_realign(20 + d, d);
  int v[64];
  for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
  qsort(v, 64, sizeof v[0], bt_cmp);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, bt_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  /* the frames of a signal handler's caller: the quick walk may refuse */
  bt_allow_refusal = true;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = bt_signal;
  CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
  raise(SIGUSR1);
  CHECK(sigaction(SIGUSR1, &old, NULL) == 0);
  bt_allow_refusal = false;
  printf("stacks compared: %u, refused: %u\n", bt_compared, bt_refused);
  CHECK(bt_compared >= 24 + 6 + 4 + 3 + 1 + 2);
}

/* Leading frames in the skipped range are left out by both walks alike. */
__attribute__((noinline)) static void bt_skip_leaf(uintptr_t lo, uintptr_t hi) {
  uintptr_t slow[BT_MAX], quick[BT_MAX];
  size_t m = fw_os_backtrace(slow, 3, lo, hi, 0);
  size_t n = fw_os_backtrace_quick(quick, 3, lo, hi);
  CHECKF(m == 3 && n == 3, "%zu and %zu frames", m, n);
  for (size_t i = 0; i < 3; i++)
    CHECKF(slow[i] == quick[i], "frame %zu: the unwinder says %#lx, the quick walk %#lx", i, (unsigned long)slow[i],
           (unsigned long)quick[i]);
  bt_sink++;
}
__attribute__((noinline)) static void bt_skip_mid(uintptr_t lo, uintptr_t hi) {
  bt_skip_leaf(lo, hi);
  bt_sink++;
}

int main(int argc, char **argv);

static void t_os_backtrace_skip(void) {
  fw_os_backtrace_init();
  /* this object's code: every leading frame of it is left out */
  Dl_info self;
  CHECK(dladdr((void *)bt_skip_leaf, &self));
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  const void *fns[] = {(const void *)bt_skip_leaf, (const void *)bt_skip_mid, (const void *)t_os_backtrace_skip,
                       (const void *)fw_os_backtrace, (const void *)fw_os_backtrace_quick, (const void *)main};
  for (size_t i = 0; i < IT_COUNT(fns); i++) {
    if ((uintptr_t)fns[i] < lo) lo = (uintptr_t)fns[i];
    if ((uintptr_t)fns[i] > hi) hi = (uintptr_t)fns[i];
  }
  hi += 4096;
  bt_skip_mid(lo, hi);
  bt_skip_mid(lo, hi);
}

/* The cache of walks (fw_os_backtrace_cached): a stack seen before is the
 * entry kept for it, tag and all; a way is read only while its valid bit
 * is set, so that a cache emptied with one store (the profiler's, when a
 * thread's data passes to a new thread) finds nothing of what it held,
 * although its entries still hold the old stacks word for word. */
__attribute__((noinline)) static fw_bt_walk_t *bt_cached_leaf(fw_bt_cache_t *c, uintptr_t *quick, size_t *nq) {
  *nq = fw_os_backtrace_quick(quick, FW_BT_FRAMES, 0, 0);
  fw_bt_walk_t *w = fw_os_backtrace_cached(c, 0, 0);
  bt_sink++;
  return w;
}

static void bt_cached_same(const fw_bt_walk_t *w, const uintptr_t *quick, size_t nq) {
  CHECK(w != NULL);
  CHECKF(nq != SIZE_MAX && w->npcs == nq, "the cache's walk has %u frames, the quick walk %zu", w->npcs, nq);
  /* the first frame is each call's own return address */
  for (size_t i = 1; i < nq; i++)
    CHECKF(w->pcs[i] == quick[i], "frame %zu: %#lx in the cache, %#lx walked", i, (unsigned long)w->pcs[i],
           (unsigned long)quick[i]);
}

static void t_os_backtrace_cached(void) {
  static fw_bt_cache_t c;
  fw_os_backtrace_init();
  fw_bt_walk_t *w[3];
  for (int i = 0; i < 3; i++) {
    uintptr_t quick[FW_BT_FRAMES];
    size_t nq;
    w[i] = bt_cached_leaf(&c, quick, &nq);
    bt_cached_same(w[i], quick, nq);
    CHECKF(w[i]->sp != 0, "walk %d through this program's code was not kept", i);
    if (i == 0) w[0]->tag = 7;
    if (i == 1) {
      CHECKF(w[1] == w[0] && w[1]->tag == 7, "the same stack again: entry %p tag %u, first %p",
             (void *)w[1], w[1]->tag, (void *)w[0]);
      c.valid = 0;
    }
  }
  CHECKF(w[2]->tag == 0, "an emptied cache found its old walk (tag %u)", w[2]->tag);
}

/* Threads that start at once meet the same new return addresses and decode
 * their rules side by side: each walk must still be the unwinder's. */
enum { BT_THREADS = 8 };
static pthread_barrier_t bt_start;

__attribute__((noinline)) static void bt_compare_quiet(void) {
  uintptr_t slow[BT_MAX], quick[BT_MAX];
  size_t m = fw_os_backtrace(slow, BT_MAX, 0, 0, 0);
  size_t n = fw_os_backtrace_quick(quick, BT_MAX, 0, 0);
  CHECKF(n != SIZE_MAX && m >= 2 && n == m - 1, "the unwinder found %zu frames, the quick walk %zu", m, n);
  for (size_t i = 1; i < n; i++)
    CHECKF(quick[i] == slow[i + 1], "frame %zu: the unwinder says %#lx, the quick walk %#lx", i,
           (unsigned long)slow[i + 1], (unsigned long)quick[i]);
}

static void *bt_racer(void *arg) {
  (void)arg;
  pthread_barrier_wait(&bt_start);
  for (int d = 0; d < 12; d++) bt_rec_to(d, bt_compare_quiet);
  return NULL;
}

static void t_os_backtrace_threads(void) {
  fw_os_backtrace_init();
  CHECK(pthread_barrier_init(&bt_start, NULL, BT_THREADS) == 0);
  pthread_t t[BT_THREADS];
  for (int i = 0; i < BT_THREADS; i++) CHECK(pthread_create(&t[i], NULL, bt_racer, NULL) == 0);
  for (int i = 0; i < BT_THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
  pthread_barrier_destroy(&bt_start);
}

/* ---- the loaded code ------------------------------------------------------- */
typedef struct {
  uintptr_t start, end, offset;
  char *path;
} map_entry;

typedef struct {
  map_entry *e;
  size_t n;
} map_list;

static void map_add(map_list *l, uintptr_t start, uintptr_t end, uintptr_t offset, const char *path) {
  l->e = realloc(l->e, (l->n + 1) * sizeof *l->e);
  CHECK(l->e != NULL);
  l->e[l->n++] = (map_entry){start, end, offset, strdup(path)};
}

static void map_collect(uintptr_t start, uintptr_t end, uintptr_t offset, const char *path, void *arg) {
  map_add(arg, start, end, offset, path);
}

static void map_list_free(map_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->e[i].path);
  free(l->e);
  l->e = NULL;
  l->n = 0;
}

/* The same list read with stdio: executable mappings of a file. */
static map_list maps_by_stdio(void) {
  map_list l = {NULL, 0};
  FILE *f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL);
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] == '\n') line[--len] = 0;
    unsigned long long start, end, offset;
    char perms[8];
    int at = 0;
    CHECK(sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &start, &end, perms, &offset, &at) == 4);
    if (perms[2] != 'x' || line[at] != '/') continue;
    map_add(&l, (uintptr_t)start, (uintptr_t)end, (uintptr_t)offset, line + at);
  }
  free(line);
  fclose(f);
  return l;
}

static bool map_same(const map_entry *a, const map_entry *b) {
  return a->start == b->start && a->end == b->end && a->offset == b->offset && strcmp(a->path, b->path) == 0;
}

/* A file whose path is about len bytes long, made of nested directories
 * under dir, mapped executable; NULL if the file system refuses to map it
 * so. *path receives the path. */
static void *long_path_map(const char *dir, size_t len, char **path) {
  int home = open(".", O_RDONLY | O_DIRECTORY);
  CHECK(home >= 0);
  CHECK(chdir(dir) == 0);
  size_t cap = len + 512, n = (size_t)snprintf(*path = malloc(cap), cap, "%s", dir);
  char comp[201];
  memset(comp, 'd', 200);
  comp[200] = 0;
  while (n + 202 < len) {
    CHECK(mkdir(comp, 0700) == 0 && chdir(comp) == 0);
    n += (size_t)snprintf(*path + n, cap - n, "/%s", comp);
  }
  int fd = open("f", O_RDWR | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0);
  snprintf(*path + n, cap - n, "/f");
  CHECK(ftruncate(fd, (off_t)real_page()) == 0);
  void *p = mmap(NULL, real_page(), PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
  close(fd);
  CHECK(fchdir(home) == 0);
  close(home);
  return p == MAP_FAILED ? NULL : p;
}

/* Removes what long_path_map made under dir. */
static void long_path_remove(const char *dir) {
  int home = open(".", O_RDONLY | O_DIRECTORY);
  CHECK(home >= 0 && chdir(dir) == 0);
  size_t depth = 0;
  char comp[201];
  memset(comp, 'd', 200);
  comp[200] = 0;
  while (chdir(comp) == 0) depth++;
  unlink("f");
  for (; depth; depth--) CHECK(chdir("..") == 0 && rmdir(comp) == 0);
  CHECK(fchdir(home) == 0);
  close(home);
}

/* The GNU build ID in the notes of the ELF file at path, read from the
 * file; its length (0: none). */
static size_t file_build_id(const char *path, uint8_t *id, size_t max) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  CHECK(fseek(f, 0, SEEK_END) == 0);
  long size = ftell(f);
  CHECK(size > 0 && fseek(f, 0, SEEK_SET) == 0);
  uint8_t *b = malloc((size_t)size);
  CHECK(b && fread(b, 1, (size_t)size, f) == (size_t)size);
  fclose(f);
  const ElfW(Ehdr) *eh = (const void *)b;
  size_t got = 0;
  for (size_t i = 0; i < eh->e_phnum && !got; i++) {
    const ElfW(Phdr) *ph = (const void *)(b + eh->e_phoff + i * eh->e_phentsize);
    if (ph->p_type != PT_NOTE) continue;
    size_t align = ph->p_align == 8 ? 8 : 4;
    for (size_t at = 0; at + sizeof(ElfW(Nhdr)) <= ph->p_filesz && !got;) {
      const ElfW(Nhdr) *nh = (const void *)(b + ph->p_offset + at);
      size_t name = at + sizeof *nh, desc = (name + nh->n_namesz + align - 1) / align * align;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(b + ph->p_offset + name, "GNU", 4) == 0) {
        got = nh->n_descsz < max ? nh->n_descsz : max;
        memcpy(id, b + ph->p_offset + desc, got);
      }
      at = (desc + nh->n_descsz + align - 1) / align * align;
    }
  }
  free(b);
  return got;
}

static void t_os_mappings(void) {
  fw_os_init();
  /* a path of 4 KiB (a line read in pieces) and one of 20 KiB (a line
   * longer than the buffer: left out, and the lines after it still read) */
  const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char dir[4][512];
  char *long_path[2] = {NULL, NULL};
  void *long_map[2] = {NULL, NULL};
  const size_t long_len[2] = {4000, 20000};
  for (int i = 0; i < 2; i++) {
    snprintf(dir[i], sizeof dir[i], "%s/fw-maps-XXXXXX", tmp);
    CHECK(mkdtemp(dir[i]) != NULL);
    long_map[i] = long_path_map(dir[i], long_len[i], &long_path[i]);
    if (!long_map[i]) printf("note: %s refuses executable mappings; no long paths checked\n", tmp);
  }

  map_list mine = {NULL, 0};
  CHECK(fw_os_mappings(map_collect, &mine));
  map_list ref = maps_by_stdio();
  size_t j = 0;
  bool seen_long[2] = {false, false};
  for (size_t i = 0; i < ref.n; i++) {
    bool too_long = strlen(ref.e[i].path) > 8 << 10;  /* the 20 KiB one */
    for (int k = 0; k < 2; k++) seen_long[k] |= long_path[k] && strcmp(ref.e[i].path, long_path[k]) == 0;
    if (too_long) continue;
    CHECKF(j < mine.n && map_same(&ref.e[i], &mine.e[j]), "mapping %zu: %s %#lx-%#lx, fw_os_mappings: %s", i,
           ref.e[i].path, (unsigned long)ref.e[i].start, (unsigned long)ref.e[i].end,
           j < mine.n ? mine.e[j].path : "(none)");
    j++;
  }
  CHECKF(j == mine.n, "fw_os_mappings gave %zu mappings, /proc/self/maps has %zu", mine.n, j);
  for (int k = 0; k < 2; k++)
    CHECKF(!long_map[k] || seen_long[k], "the mapping of %zu-byte path is not in /proc/self/maps", long_len[k]);

  /* this program's code, under the path of /proc/self/exe */
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  CHECK(n > 0);
  exe[n] = 0;
  uintptr_t here = (uintptr_t)t_os_mappings;
  bool found = false;
  for (size_t i = 0; i < mine.n; i++)
    if (here >= mine.e[i].start && here < mine.e[i].end) {
      CHECKF(strcmp(mine.e[i].path, exe) == 0, "%s holds this program's code, not %s", mine.e[i].path, exe);
      found = true;
    }
  CHECK(found);
  map_list_free(&mine);
  map_list_free(&ref);
  for (int k = 0; k < 2; k++) {
    if (long_map[k]) munmap(long_map[k], real_page());
    long_path_remove(dir[k]);
    CHECK(rmdir(dir[k]) == 0);
    free(long_path[k]);
  }

  /* the objects: the program and its build ID, a library, no object */
  uint8_t id[64], want[64];
  size_t id_len = 99;
  bool is_main = false;
  CHECK(fw_os_object_at(here, &is_main, id, sizeof id, &id_len));
  CHECK(is_main);
  size_t want_len = file_build_id(exe, want, sizeof want);
  CHECKF(id_len == want_len && memcmp(id, want, id_len) == 0, "build ID of %zu bytes, the file's has %zu", id_len,
         want_len);
  void *lib_fn = dlsym(RTLD_DEFAULT, "write");
  CHECK(lib_fn != NULL);
  CHECK(fw_os_object_at((uintptr_t)lib_fn, &is_main, id, sizeof id, &id_len));
  CHECK(!is_main);
  CHECK(id_len <= sizeof id);
  int local = 0;
  CHECK(!fw_os_object_at((uintptr_t)&local, &is_main, id, sizeof id, &id_len));
}

/* ---- fw_os_resident --------------------------------------------------------
 * The bytes of the whole OS pages inside the range that are resident: a
 * mapping with some of its pages written, looked at from page-aligned and
 * unaligned starts, and purged again. */
static void t_os_resident(void) {
  size_t ps = real_page(), len = 64 * ps;
  uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  madvise(p, len, MADV_NOHUGEPAGE);
  CHECK(fw_os_resident(p, len) == 0);
  static const size_t written[] = {0, 1, 2, 7, 30, 63};
  for (size_t i = 0; i < sizeof written / sizeof written[0]; i++) p[written[i] * ps + ps / 2] = 1;
  CHECK(fw_os_resident(p, len) == 6 * ps);
  /* from one byte in: page 0 is not whole inside the range any more */
  CHECK(fw_os_resident(p + 1, len - 1) == 5 * ps);
  /* pages 1 and 2 */
  CHECK(fw_os_resident(p + ps, 2 * ps) == 2 * ps);
  CHECK(fw_os_resident(p + 3 * ps, 4 * ps) == 0);
  /* less than a whole page inside: the OS cannot be asked */
  CHECK(fw_os_resident(p + 1, ps) == SIZE_MAX);
  CHECK(fw_os_purge(p, len));
  CHECK(fw_os_resident(p, len) == 0);
  CHECK(munmap(p, len) == 0);
}

int main(int argc, char **argv) {
  static const it_section s[] = {
    {"os_resident", t_os_resident},
    {"os_map", t_os_map},           {"os_map_subpage_offset", t_os_map_subpage_offset},
    {"os_purge", t_os_purge},       {"os_purge_64k", t_os_purge_64k},
    {"os_purge_locked", t_os_purge_locked}, {"os_populate", t_os_populate}, {"lock", t_lock},
    {"os_backtrace", t_os_backtrace}, {"os_backtrace_skip", t_os_backtrace_skip},
    {"os_backtrace_cached", t_os_backtrace_cached}, {"os_backtrace_threads", t_os_backtrace_threads},
    {"os_mappings", t_os_mappings},
  };
  return it_main(argc, argv, s, IT_COUNT(s));
}
