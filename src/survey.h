/* survey.h — a walk over all of freeway's memory, and the reports built on
 * it (docs/observability.md): the ledger (fw_stats_print and its JSON),
 * the heap map and the whole-process leak report. */
#ifndef FW_SURVEY_H
#define FW_SURVEY_H
#include "types.h"

/* The reports at exit that the options ask for (FREEWAY_SHOW_STATS,
 * FREEWAY_LEAK_REPORT, FREEWAY_HEAP_MAP, FREEWAY_REPORT_DIR). */
FW_HIDDEN void fw_survey_at_exit(void);
/* Installs the FREEWAY_DUMP_SIGNAL handler; once, at process start. */
FW_HIDDEN void fw_survey_init(void);

#endif
