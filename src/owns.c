/* owns.c — the tests of owns.h. A segment's header carries a cookie, its
 * address mixed with a random key: found at the segment base of p, it says
 * the segment is freeway's. Memory outside every arena may belong to
 * anyone and be unmapped at any moment, so its cookie is read without
 * trusting the address (fw_os_read). */
#include "owns.h"
#include "arena.h"
#include "os.h"
#include "page.h"
#include "segment.h"

bool fw_owns_memory(const void *p) {
  if (!p) return false;
  if (fw_arena_contains(p)) return true;
  const fw_segment_t *seg = fw_ptr_segment(p);
  uint64_t cookie;
  return fw_os_read(&seg->cookie, &cookie, sizeof cookie) && cookie == fw_segment_cookie(seg);
}

bool fw_owns_block(const void *p) { return fw_owns_memory(p) && fw_page_of_pointer(p, 0) != NULL; }
