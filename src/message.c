/* message.c — diagnostics. Formatting uses vsnprintf into a stack buffer
 * (no allocation), output goes through fw_os_write. */
#include "message.h"
#include "os.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int fw_snprintf(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = vsnprintf(buf, n, fmt, ap);
  va_end(ap);
  if (r < 0) r = 0;
  if ((size_t)r >= n) r = n ? (int)n - 1 : 0;
  return r;
}

static void fw_vmessage(const char *fmt, va_list ap) {
  char buf[512];
  memcpy(buf, "freeway: ", 9);
  int r = vsnprintf(buf + 9, sizeof buf - 9, fmt, ap);
  if (r < 0) return;
  size_t n = 9 + ((size_t)r < sizeof buf - 9 ? (size_t)r : sizeof buf - 10);
  fw_os_write(2, buf, n);
}

void fw_message(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fw_vmessage(fmt, ap);
  va_end(ap);
}

#define FW_WARNINGS_SHOWN 32
static _Atomic(unsigned) fw_warnings;

void fw_warning(const char *fmt, ...) {
  unsigned n = atomic_fetch_add_explicit(&fw_warnings, 1, memory_order_relaxed);
  if (n > FW_WARNINGS_SHOWN) return;
  if (n == FW_WARNINGS_SHOWN) {
    fw_message("further warnings of misuse are not shown\n");
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  fw_vmessage(fmt, ap);
  va_end(ap);
}

void fw_out_init(fw_out_t *o, int fd) {
  o->fd = fd;
  o->n = 0;
}

void fw_out_flush(fw_out_t *o) {
  fw_os_write(o->fd, o->buf, o->n);
  o->n = 0;
}

void fw_out_printf(fw_out_t *o, const char *fmt, ...) {
  for (int pass = 0; pass < 2; pass++) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(o->buf + o->n, sizeof o->buf - o->n, fmt, ap);
    va_end(ap);
    if (r < 0) return;
    if ((size_t)r < sizeof o->buf - o->n) {
      o->n += (size_t)r;
      return;
    }
    /* did not fit: flush and try once more; a piece longer than the
     * buffer is cut */
    if (pass == 0 && o->n) {
      fw_out_flush(o);
      continue;
    }
    o->n = sizeof o->buf - 1;
    return;
  }
}
