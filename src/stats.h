/* stats.h — process-wide counters (one row each in stats.def), bumped on
 * slow paths only, and the public fw_stats_get / fw_stats_print. */
#ifndef FW_STATS_H
#define FW_STATS_H
#include "base.h"
#include "types.h"

#define FW_STAT(name) FW_HIDDEN extern _Atomic(size_t) fw_stat_##name;
#include "stats.def"
#undef FW_STAT
#define fw_stat_add(name, n) atomic_fetch_add_explicit(&fw_stat_##name, (size_t)(n), memory_order_relaxed)
#define fw_stat_sub(name, n) atomic_fetch_sub_explicit(&fw_stat_##name, (size_t)(n), memory_order_relaxed)
/* Memory committed: the count, and its peak. */
FW_HIDDEN void fw_stat_commit(size_t n);

/* The ledger's counts (fw_counts_t, types.h) of threads that have exited,
 * and of pages given back by no owner (abandoned segments). Live threads
 * keep their own; a report adds all. */
typedef struct {
  _Atomic(uint64_t) frees[FW_CLASS_LARGE + 1];
  _Atomic(uint64_t) large_allocs, remote_frees;
} fw_counts_gone_t;
FW_HIDDEN extern fw_counts_gone_t fw_counts_gone;
FW_HIDDEN void fw_counts_fold(const fw_counts_t *c);
FW_HIDDEN void fw_counts_fold_page(size_t cls, uint64_t frees);

#endif
