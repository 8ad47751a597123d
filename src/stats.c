/* stats.c — process-wide counters (stats.def) and their report. Counters are
 * relaxed atomics touched only on slow paths. The reports built on them and on
 * a walk of the heap are in survey.c. */
#include "stats.h"
#include "options.h"
#include "message.h"
#include "os.h"
#include <string.h>

#define FW_STAT(name) _Atomic(size_t) fw_stat_##name;
#include "stats.def"
#undef FW_STAT

fw_counts_gone_t fw_counts_gone;

void fw_stat_commit(size_t n) {
  size_t now = atomic_fetch_add_explicit(&fw_stat_committed, n, memory_order_relaxed) + n;
  size_t peak = atomic_load_explicit(&fw_stat_committed_peak, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(&fw_stat_committed_peak, &peak, now,
                                                             memory_order_relaxed, memory_order_relaxed)) {
  }
}

void fw_counts_fold_page(size_t cls, uint64_t frees) {
  if (frees) atomic_fetch_add_explicit(&fw_counts_gone.frees[cls], frees, memory_order_relaxed);
}

void fw_counts_fold(const fw_counts_t *c) {
  for (size_t i = 0; i <= FW_CLASS_LARGE; i++) fw_counts_fold_page(i, fw_count_read(&c->frees[i]));
  atomic_fetch_add_explicit(&fw_counts_gone.large_allocs, fw_count_read(&c->large_allocs), memory_order_relaxed);
  atomic_fetch_add_explicit(&fw_counts_gone.remote_frees, fw_count_read(&c->remote_frees), memory_order_relaxed);
}

#define LOAD(name) atomic_load_explicit(&fw_stat_##name, memory_order_relaxed)

int fw_stats_get(fw_stats_t *out) {
  if (!out || out->size < sizeof(size_t) * 2) { errno = EINVAL; return -1; }
  fw_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  s.version = FREEWAY_VERSION;
  s.bytes_reserved = LOAD(reserved);
  s.bytes_committed = LOAD(committed);
  s.bytes_purged = LOAD(purged);
  s.segments = LOAD(segments);
  s.segments_abandoned = LOAD(abandoned);
  s.threads = LOAD(threads);
  s.threads_total = LOAD(threads_total);
  s.heaps = LOAD(heaps);
  s.huge_allocs = LOAD(huge);
  size_t n = out->size < sizeof s ? out->size : sizeof s;
  memcpy(out, &s, n);
  out->size = n;
  return 0;
}

const char *fw_version_string(void) {
#define FW_STR2(x) #x
#define FW_STR(x) FW_STR2(x)
  return FW_STR(FREEWAY_VERSION_MAJOR) "." FW_STR(FREEWAY_VERSION_MINOR) "." FW_STR(FREEWAY_VERSION_PATCH);
}
