/* meta.c — the metadata allocator: a bump pointer in 1 MiB mappings, under
 * one lock taken once per thread or heap creation. See meta.h. */
#include "meta.h"
#include "os.h"
#include "stats.h"

static fw_lock_t fw_meta_lock = FW_LOCK_INIT;
static uint8_t *fw_meta_cur, *fw_meta_end;   /* guarded by fw_meta_lock */

void *fw_meta_alloc(size_t size) {
  size = fw_align_up(size, 64);
  fw_lock_acquire(&fw_meta_lock);
  if (fw_meta_cur == NULL || (size_t)(fw_meta_end - fw_meta_cur) < size) {
    size_t chunk = size > ((size_t)1 << 20) ? fw_align_up(size, (size_t)1 << 20) : ((size_t)1 << 20);
    uint8_t *m = fw_os_map(chunk, 64, 0);
    if (!m) {
      fw_lock_release(&fw_meta_lock);
      return NULL;
    }
    fw_stat_add(reserved, chunk);
    fw_stat_commit(chunk);
    fw_stat_add(meta, chunk);
    fw_meta_cur = m;
    fw_meta_end = m + chunk;
  }
  void *p = fw_meta_cur;
  fw_meta_cur += size;
  fw_lock_release(&fw_meta_lock);
  return p;
}

void fw_meta_fork_prepare(void) { fw_lock_acquire(&fw_meta_lock); }
void fw_meta_fork_parent(void) { fw_lock_release(&fw_meta_lock); }
void fw_meta_fork_child(void) { fw_lock_reset(&fw_meta_lock); }
