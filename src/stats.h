/* stats.h — process-wide counters (one row each in stats.def), bumped on
 * slow paths only, and the public fw_stats_get / fw_stats_print. */
#ifndef FW_STATS_H
#define FW_STATS_H
#include "base.h"

#define FW_STAT(name) FW_HIDDEN extern _Atomic(size_t) fw_stat_##name;
#include "stats.def"
#undef FW_STAT
#define fw_stat_add(name, n) atomic_fetch_add_explicit(&fw_stat_##name, (size_t)(n), memory_order_relaxed)
#define fw_stat_sub(name, n) atomic_fetch_sub_explicit(&fw_stat_##name, (size_t)(n), memory_order_relaxed)

#endif
