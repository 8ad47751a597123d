/* message.h — formatted diagnostics to standard error, through the OS layer.
 * Every report freeway makes starts with "freeway: ". */
#ifndef FW_MESSAGE_H
#define FW_MESSAGE_H
#include "base.h"

FW_HIDDEN void fw_message(const char *fmt, ...) FW_PRINTF(1, 2);
FW_HIDDEN int fw_snprintf(char *buf, size_t n, const char *fmt, ...) FW_PRINTF(3, 4);
/* A report of misuse that the default mode survives (the call is refused):
 * printed for the first few occurrences in the process only, so that a loop
 * of bad calls cannot flood standard error. */
FW_HIDDEN void fw_warning(const char *fmt, ...) FW_PRINTF(1, 2);

/* A buffered writer for reports: printf-style pieces gathered on the stack
 * and written to fd when the buffer fills and at fw_out_flush. */
typedef struct fw_out_s {
  int fd;
  size_t n;
  char buf[4096];
} fw_out_t;
FW_HIDDEN void fw_out_init(fw_out_t *o, int fd);
FW_HIDDEN void fw_out_printf(fw_out_t *o, const char *fmt, ...) FW_PRINTF(2, 3);
FW_HIDDEN void fw_out_flush(fw_out_t *o);

#endif
