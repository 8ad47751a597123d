/* init.c — process and thread life cycle: lazy initialisation on the first
 * malloc of the process and of each thread, thread exit (abandoning
 * segments), fork handlers, and type-stable metadata. See alloc.c. */
#define _GNU_SOURCE
#include "internal.h"
#include <pthread.h>
#include <sched.h>
#include <string.h>

__thread fw_heap_t *fw_tls_heap __attribute__((tls_model("initial-exec"))) = &fw_heap_empty;
_Atomic(int) fw_process_state;

static pthread_key_t fw_thread_key;
static pthread_mutex_t fw_meta_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *fw_meta_cur, *fw_meta_end;   /* guarded by fw_meta_lock */
static fw_tld_t *fw_tld_pool;                /* guarded by fw_meta_lock */


/* Metadata (thread data, heap structs) is carved from 1 MiB mappings and
 * never returned: a late remote free may still read a recycled heap. */
void *fw_meta_alloc(size_t size) {
  size = fw_align_up(size, 64);
  pthread_mutex_lock(&fw_meta_lock);
  if (fw_meta_cur == NULL || (size_t)(fw_meta_end - fw_meta_cur) < size) {
    size_t chunk = size > ((size_t)1 << 20) ? fw_align_up(size, 4096) : ((size_t)1 << 20);
    uint8_t *m = fw_os_map(chunk, 4096);
    if (!m) { pthread_mutex_unlock(&fw_meta_lock); return NULL; }
    fw_stat_add(reserved, chunk);
    fw_stat_add(committed, chunk);
    fw_meta_cur = m;
    fw_meta_end = m + chunk;
  }
  void *p = fw_meta_cur;
  fw_meta_cur += size;
  pthread_mutex_unlock(&fw_meta_lock);
  return p;
}

static void fw_thread_done(void *arg);

static void fw_fork_prepare(void) {
  if (atomic_load(&fw_process_state) != 2) return;
  pthread_mutex_lock(&fw_meta_lock);
  fw_heap_fork_prepare();
  fw_segment_fork_prepare();
  fw_arena_fork_prepare();
}
static void fw_fork_parent(void) {
  if (atomic_load(&fw_process_state) != 2) return;
  fw_arena_fork_parent();
  fw_segment_fork_parent();
  fw_heap_fork_parent();
  pthread_mutex_unlock(&fw_meta_lock);
}
static void fw_fork_child(void) {
  if (atomic_load(&fw_process_state) != 2) return;
  fw_arena_fork_child();
  fw_segment_fork_child();
  fw_heap_fork_child();
  pthread_mutex_init(&fw_meta_lock, NULL);
}

void fw_process_init(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&fw_process_state, &expected, 1)) {
    while (atomic_load(&fw_process_state) != 2) sched_yield();
    return;
  }
  fw_options_init();
  fw_page_tables_init();
  fw_segment_cookie_key ^= (uint64_t)(uintptr_t)&expected ^ (fw_os_clock_ms() << 32);
  pthread_key_create(&fw_thread_key, fw_thread_done);
  fw_check_init();
  atomic_store(&fw_process_state, 2);
}

fw_heap_t *fw_thread_init(void) {
  if (atomic_load_explicit(&fw_process_state, memory_order_acquire) != 2) fw_process_init();
  pthread_mutex_lock(&fw_meta_lock);
  fw_tld_t *tld = fw_tld_pool;
  if (tld) fw_tld_pool = tld->pool_next;
  pthread_mutex_unlock(&fw_meta_lock);
  if (!tld) tld = fw_meta_alloc(sizeof(fw_tld_t));
  if (!tld) return NULL;
  memset(tld, 0, sizeof *tld);
  tld->thread_id = fw_thread_id();
  fw_heap_t *heap = fw_heap_alloc_struct(tld, true);
  if (!heap) return NULL;
  tld->heap_default = heap;
  fw_tls_heap = heap;
  pthread_setspecific(fw_thread_key, tld);
  fw_stat_add(threads, 1);
  fw_stat_add(threads_total, 1);
  return heap;
}

static void fw_thread_done(void *arg) {
  fw_tld_t *tld = arg;
  if (!tld || tld->done) return;
  /* From here on this thread's mallocs (from later destructors) build fresh
   * thread data, which the key's next round of destructors tears down. */
  fw_tls_heap = &fw_heap_empty;
  while (tld->heaps) {
    fw_heap_t *h = tld->heaps;
    fw_heap_release_all(h);
    fw_heap_struct_free(h);
  }
  fw_segments_abandon(tld);
  /* the segments this thread freed must not wait for another thread's
   * housekeeping to be purged */
  fw_arena_purge(fw_os_clock_ms(), false);
  tld->done = true;
  fw_stat_sub(threads, 1);
  pthread_mutex_lock(&fw_meta_lock);
  tld->pool_next = fw_tld_pool;
  fw_tld_pool = tld;
  pthread_mutex_unlock(&fw_meta_lock);
}

__attribute__((constructor)) static void fw_constructor(void) {
  fw_process_init();
  pthread_atfork(fw_fork_prepare, fw_fork_parent, fw_fork_child);
}


__attribute__((destructor)) static void fw_destructor(void) {
  if (fw_opt(LEAK_REPORT)) fw_leak_report();
  if (fw_opt(SHOW_STATS)) fw_stats_print(2);
}
