/* os.c — the only file that talks to the kernel: mapping, purging, time and
 * writing diagnostics. Everything above it sees memory as "mapped" (address
 * space that reads as zero until touched) and "purged" (given back, reads as
 * zero again). See alloc.c for how the pieces fit. */
#define _GNU_SOURCE
#include "internal.h"
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <signal.h>

#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

size_t fw_os_page_size(void) {
  static size_t page;
  if (!page) {
    long v = sysconf(_SC_PAGESIZE);
    page = v > 0 ? (size_t)v : 4096;
  }
  return page;
}

/* Maps size bytes aligned to align (a power of two, at least a page). The
 * over-mapped head and tail are unmapped again, so the kernel keeps one
 * mapping per call and neighbouring calls can merge. */
void *fw_os_map(size_t size, size_t align) {
  int prot = PROT_READ | PROT_WRITE;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (align <= fw_os_page_size()) {
    void *p = mmap(NULL, size, prot, flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  /* Try the exact size first: the kernel often places it aligned already. */
  void *p = mmap(NULL, size, prot, flags, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (((uintptr_t)p & (align - 1)) == 0) return p;
  munmap(p, size);
  size_t over = size + align;
  if (over < size) return NULL;
  uint8_t *q = mmap(NULL, over, prot, flags, -1, 0);
  if (q == MAP_FAILED) return NULL;
  uint8_t *aligned = (uint8_t *)fw_align_up((uintptr_t)q, align);
  size_t head = (size_t)(aligned - q);
  size_t tail = over - head - size;
  if (head) munmap(q, head);
  if (tail) munmap(aligned + size, tail);
  return aligned;
}

void fw_os_unmap(void *p, size_t size) {
  if (p && size) munmap(p, size);
}

/* MADV_DONTNEED rather than MADV_FREE: RSS falls at once (users watch it) and
 * the memory reads as zero afterwards, which calloc relies on. It does not
 * split mappings, so purging keeps vm.max_map_count safe. */
void fw_os_purge(void *p, size_t size) {
  if (size) madvise(p, size, MADV_DONTNEED);
}

void fw_os_thp_disable(void *p, size_t size) {
#ifdef MADV_NOHUGEPAGE
  madvise(p, size, MADV_NOHUGEPAGE);
#else
  (void)p; (void)size;
#endif
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

void fw_os_write(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

void fw_os_abort(void) {
  abort();
}

bool fw_os_is_mapped(const void *p) {
  unsigned char vec;
  void *page = (void *)((uintptr_t)p & ~(fw_os_page_size() - 1));
  return mincore(page, 1, &vec) == 0;
}
