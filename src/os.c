/* os.c — the only file that talks to the kernel (Linux and other POSIX
 * systems). Contracts are in os.h; the design is at the top of alloc.c. */
#define _GNU_SOURCE
#include "os.h"
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>

#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

static size_t fw_page_size_real;
size_t fw_os_page = 4096;

void fw_os_init(void) {
  if (fw_page_size_real) return;
  long v = sysconf(_SC_PAGESIZE);
  fw_page_size_real = v > 0 && fw_is_pow2((size_t)v) ? (size_t)v : 4096;
  fw_os_page = fw_page_size_real;
}

void fw_os_page_size_override(size_t size) {
  fw_os_init();
  fw_os_page = size >= fw_page_size_real && fw_is_pow2(size) ? size : fw_page_size_real;
}

static void *fw_mmap(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* The exact size first: the kernel often places it aligned already. If not,
 * over-map by align and unmap the head and tail, so that the kernel keeps
 * one mapping per call and neighbouring calls can merge. */
void *fw_os_map(size_t size, size_t align, size_t offset) {
  if (!fw_page_size_real) fw_os_init();
  if (size == 0) return NULL;
  size = fw_align_up(size, fw_page_size_real);
  if (align < fw_page_size_real) align = fw_page_size_real;
  /* the result is page-aligned, so no placement could align an offset
   * that is not a whole number of pages */
  if (offset & (fw_page_size_real - 1)) return NULL;
  offset &= align - 1;
  uint8_t *p = fw_mmap(size);
  if (!p) return NULL;
  if ((((uintptr_t)p + offset) & (align - 1)) == 0) return p;
  munmap(p, size);
  size_t over = size + align;
  if (over < size) return NULL;
  uint8_t *q = fw_mmap(over);
  if (!q) return NULL;
  uint8_t *a = (uint8_t *)(fw_align_up((uintptr_t)q + offset, align) - offset);
  if (a < q) a += align;
  size_t head = (size_t)(a - q);
  size_t tail = over - head - size;
  if (head) munmap(q, head);
  if (tail) munmap(a + size, tail);
  return a;
}

void fw_os_unmap(void *p, size_t size) {
  if (p && size) munmap(p, size);
}

/* MADV_DONTNEED rather than MADV_FREE: RSS falls at once (users watch it) and
 * the memory reads as zero afterwards, which calloc relies on. It does not
 * split mappings, so purging keeps vm.max_map_count safe. It fails on locked
 * memory (mlock, mlockall): then nothing is zeroed and the caller is told. */
bool fw_os_purge(void *p, size_t size) {
  if (!size) return true;
  size_t page = fw_os_page_size();
  uintptr_t start = (uintptr_t)p, end = start + size;
  uintptr_t in_start = fw_align_up(start, page), in_end = fw_align_down(end, page);
  if (in_start < in_end) {
    if (madvise((void *)in_start, in_end - in_start, MADV_DONTNEED) != 0) return false;
  } else {
    in_start = in_end = end;
  }
  /* the partial pages at the ends are shared with memory still in use */
  if (in_start > start) memset(p, 0, in_start - start);
  if (end > in_end && in_end >= in_start) memset((void *)in_end, 0, end - in_end);
  return true;
}

void fw_os_thp_disable(void *p, size_t size) {
#ifdef MADV_NOHUGEPAGE
  madvise(p, size, MADV_NOHUGEPAGE);
#else
  (void)p; (void)size;
#endif
}

bool fw_os_is_mapped(const void *p) {
  unsigned char vec;
  void *page = (void *)((uintptr_t)p & ~(uintptr_t)(fw_page_size_real ? fw_page_size_real - 1 : 4095));
  return mincore(page, 1, &vec) == 0;
}

uint64_t fw_os_clock_ms(void) {
  struct timespec ts;
  /* the coarse clock is a plain memory read (vDSO): cheap enough to consult
   * whenever a page is freed; its few ms of granularity suit purge delays */
#ifdef CLOCK_MONOTONIC_COARSE
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
  clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void fw_os_sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

void fw_os_write(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

const char *fw_os_getenv(const char *name) { return getenv(name); }

void fw_os_abort(void) { abort(); }

/* ---- locks: a recursive spin-then-yield lock on one word ------------------ */
void fw_lock_acquire(fw_lock_t *l) {
  uintptr_t me = fw_thread_id();
  if (atomic_load_explicit(&l->owner, memory_order_relaxed) == me) {
    l->depth++;
    return;
  }
  for (unsigned spin = 0;; spin++) {
    uintptr_t expected = 0;
    if (atomic_compare_exchange_weak_explicit(&l->owner, &expected, me, memory_order_acquire,
                                              memory_order_relaxed))
      return;
    if (spin >= 64) sched_yield();
  }
}

void fw_lock_release(fw_lock_t *l) {
  if (l->depth) {
    l->depth--;
    return;
  }
  atomic_store_explicit(&l->owner, 0, memory_order_release);
}

void fw_lock_reset(fw_lock_t *l) {
  l->depth = 0;
  atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
}

void fw_os_assert_fail(const char *file, int line, const char *cond) {
  char buf[256];
  size_t n = 0;
  const char *parts[] = {"freeway: internal check failed: ", cond, " at ", file, ":"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    for (const char *c = parts[i]; *c && n < sizeof buf - 16; c++) buf[n++] = *c;
  char digits[12];
  int k = 0;
  unsigned v = (unsigned)line;
  do { digits[k++] = (char)('0' + v % 10); v /= 10; } while (v && k < 11);
  while (k) buf[n++] = digits[--k];
  buf[n++] = '\n';
  fw_os_write(2, buf, n);
  abort();
}

void fw_os_random(void *buf, size_t n) {
  uint8_t *out = buf;
  size_t got = 0;
#ifdef SYS_getrandom
  /* the raw system call: no library call that could allocate, and
   * GRND_NONBLOCK (1) so that early boot never blocks a malloc */
  while (got < n) {
    long r = syscall(SYS_getrandom, out + got, n - got, 1);
    if (r <= 0) break;
    got += (size_t)r;
  }
#endif
  if (got == n) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&ts ^
               ((uint64_t)(uintptr_t)buf << 17) ^ (uint64_t)getpid();
  for (size_t i = got; i < n; i++) {
    /* splitmix64 steps */
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    out[i] = (uint8_t)(z ^ (z >> 31));
  }
}
