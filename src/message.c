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
