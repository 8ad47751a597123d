/* os_purge.c — fw_os_purge (os.h), the same on every platform but for how
 * whole pages are given back (fw_os_purge_pages, os.c / os_win.c). */
#include "os.h"
#include <string.h>

bool fw_os_purge(void *p, size_t size) {
  if (!size) return true;
  fw_os_count(FW_OSC_PURGE);
  size_t page = fw_os_page_size();
  uintptr_t start = (uintptr_t)p, end = start + size;
  uintptr_t in_start = fw_align_up(start, page), in_end = fw_align_down(end, page);
  if (in_start < in_end) {
    if (!fw_os_purge_pages((void *)in_start, in_end - in_start)) return false;
  } else {
    in_start = in_end = end;
  }
  /* the partial pages at the ends are shared with memory still in use */
  if (in_start > start) memset(p, 0, in_start - start);
  if (end > in_end && in_end >= in_start) memset((void *)in_end, 0, end - in_end);
  return true;
}
