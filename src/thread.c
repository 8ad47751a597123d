/* thread.c — process and thread life cycle. A thread's data (its tld and
 * default heap) is built by its first allocation and torn down by a
 * thread-exit hook (os.h: a pthread key destructor, or a Windows fibre-local
 * storage callback) at exit: heaps released, live segments abandoned. Key
 * destructors run in rounds, and one that allocates in the last round runs
 * after ours with no round left to undo it; so once a thread's teardown has
 * run, each further allocation builds the data, is served, and tears it
 * down again at once (slow, but only in a dying thread). See alloc.c. */
#define _GNU_SOURCE
#include "thread.h"
#include "survey.h"
#include "prof.h"
#include "front.h"
#include "heap.h"
#include "abandon.h"
#include "arena.h"
#include "segment.h"
#include "page.h"
#include "meta.h"
#include "check.h"
#include "options.h"
#include "stats.h"
#include "os.h"
#include <string.h>

static _Atomic(int) fw_process_state; /* 0 none, 1 initialising, 2 ready */
static fw_os_tkey_t fw_thread_key;
static fw_lock_t fw_tld_lock = FW_LOCK_INIT;
static fw_tld_t *fw_tld_pool;                /* guarded by fw_tld_lock */
/* Every tld ever made, for reports that read the counts of live threads
 * without a lock (a signal may come while a thread holds fw_tld_lock).
 * Pushed at the front only and never freed, so a walk always ends; a tld
 * in the pool has counted nothing (its counts went to fw_counts_gone). */
static _Atomic(fw_tld_t *) fw_tld_all;
static FW_THREAD_LOCAL uint8_t fw_tls_exited;

static void fw_thread_done(void *arg);

static void fw_fork_prepare(void) {
  if (atomic_load(&fw_process_state) != 2) return;
  fw_lock_acquire(&fw_tld_lock);
  fw_meta_fork_prepare();
  fw_heap_fork_prepare();
  fw_abandon_fork_prepare();
  fw_arena_fork_prepare();
  fw_prof_fork_prepare();
}
static void fw_fork_parent(void) {
  if (atomic_load(&fw_process_state) != 2) return;
  fw_prof_fork_parent();
  fw_arena_fork_parent();
  fw_abandon_fork_parent();
  fw_heap_fork_parent();
  fw_meta_fork_parent();
  fw_lock_release(&fw_tld_lock);
}
static void fw_fork_child(void) {
  if (atomic_load(&fw_process_state) != 2) return;
  fw_prof_fork_child();
  fw_arena_fork_child();
  fw_abandon_fork_child();
  fw_heap_fork_child();
  fw_meta_fork_child();
  fw_lock_reset(&fw_tld_lock);
}

void fw_process_init(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&fw_process_state, &expected, 1)) {
    while (atomic_load(&fw_process_state) != 2) fw_os_sleep_ms(0);
    return;
  }
  fw_os_init();
  fw_options_init();
  fw_page_tables_init();
  fw_list_init();
  uint64_t k;
  fw_os_random(&k, sizeof k);
  fw_segment_cookie_key ^= k;
  fw_os_tkey_create(&fw_thread_key, fw_thread_done);
  fw_check_init();
  fw_prof_init();
  atomic_store(&fw_process_state, 2);
}

static fw_heap_t *fw_thread_setup(void) {
  if (atomic_load_explicit(&fw_process_state, memory_order_acquire) != 2) fw_process_init();
  fw_lock_acquire(&fw_tld_lock);
  fw_tld_t *tld = fw_tld_pool;
  if (tld) fw_tld_pool = tld->pool_next;
  fw_lock_release(&fw_tld_lock);
  bool fresh = tld == NULL;
  if (fresh) tld = fw_meta_alloc(sizeof(fw_tld_t));
  if (!tld) return NULL;
  fw_tld_t *all_next = tld->all_next;
  void *prof_cache = tld->prof_cache;
  memset(tld, 0, sizeof *tld);
  if (prof_cache) {
    /* another thread's walks: they name its stack */
    fw_prof_cache_reset(prof_cache);
    tld->prof_cache = prof_cache;
  }
  if (fresh) {
    fw_tld_t *head = atomic_load_explicit(&fw_tld_all, memory_order_relaxed);
    do tld->all_next = head;
    while (!atomic_compare_exchange_weak_explicit(&fw_tld_all, &head, tld, memory_order_release,
                                                  memory_order_relaxed));
  } else {
    tld->all_next = all_next;
  }
  tld->thread_id = fw_thread_id();
  fw_heap_t *heap = fw_heap_struct_new(tld, true);
  if (!heap) {
    fw_lock_acquire(&fw_tld_lock);
    tld->pool_next = fw_tld_pool;
    fw_tld_pool = tld;
    fw_lock_release(&fw_tld_lock);
    return NULL;
  }
  tld->heap_default = heap;
  FW_TLS(fw_tls_heap) = heap;
  if (!FW_TLS(fw_tls_exited)) fw_os_tkey_set(fw_thread_key, tld);
  fw_stat_add(threads, 1);
  fw_stat_add(threads_total, 1);
  return heap;
}

void fw_thread_free_late(void) {
  for (fw_block_t *b = fw_heap_pool_take_delayed(), *next; b; b = next) {
    next = fw_delayed_next(b);
    fw_free_unchecked(b);
  }
}

static void fw_thread_teardown(fw_tld_t *tld) {
  fw_free_remote_flush(tld);
  /* From here on this thread's frees take the no-heap way */
  FW_TLS(fw_tls_heap) = &fw_heap_empty;
  while (tld->heaps) {
    fw_heap_t *h = tld->heaps;
    fw_heap_release(h, NULL, false);
    fw_heap_struct_free(h);
  }
  fw_abandon_segments(tld);
  /* zeroed first: a report made meanwhile misses them rather than counting
   * them twice */
  fw_counts_t counts = tld->counts;
  memset(&tld->counts, 0, sizeof tld->counts);
  fw_counts_fold(&counts);
  /* the segments this thread freed must not wait for another thread's
   * housekeeping to be purged */
  uint64_t now = fw_os_clock_ms();
  fw_arena_purge(now, false);
  fw_abandon_purge(now, false);
  fw_stat_sub(threads, 1);
  fw_lock_acquire(&fw_tld_lock);
  tld->pool_next = fw_tld_pool;
  fw_tld_pool = tld;
  fw_lock_release(&fw_tld_lock);
  fw_thread_free_late();
}

static void fw_thread_done(void *arg) {
  fw_tld_t *tld = arg;
  FW_TLS(fw_tls_exited) = 1;
  if (!tld || FW_TLS(fw_tls_heap) == &fw_heap_empty || FW_TLS(fw_tls_heap)->tld != tld) return;
  fw_thread_teardown(tld);
}

void *fw_malloc_slow(size_t size, fw_heap_t *heap) {
  if (fw_size_in_cdirect(size)) {
    void *b = fw_malloc_class_fast(heap, size);  /* fw_heap_empty's name fw_page_empty */
    if (fw_likely(b != NULL)) return b;
  }
  if (fw_unlikely(heap == &fw_heap_empty)) return fw_thread_alloc(FW_OP_MALLOC, NULL, size, 0);
  return fw_malloc_generic(size, heap);
}

/* A thread that only frees (a consumer) has no heap, and so nowhere to
 * hold other threads' blocks for a batch (free.c): it is set up once it
 * has freed FW_FREES_BEFORE_SETUP blocks it could have held, so that one
 * that frees a few costs no set-up and teardown, and one that frees many
 * batches them. Frees into exited threads' segments do not count: a
 * thread with no heap gives what they empty back at once, where one with
 * a heap would wait for slow paths this one may never take. */
#define FW_FREES_BEFORE_SETUP 16

void fw_free_slow(void *p) {
  if (fw_likely(FW_TLS(fw_tls_heap) != &fw_heap_empty)) {
    fw_free_generic(p);
    return;
  }
  fw_free_generic(p);
  if (FW_TLS(fw_tls_rfree_heapless) == FW_FREES_BEFORE_SETUP && !FW_TLS(fw_tls_exited)) {
    FW_TLS(fw_tls_rfree_heapless)++;
    int saved = errno;
    fw_thread_setup();
    errno = saved;
  }
}

void *fw_thread_alloc(int op, void *p, size_t size, size_t align) {
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  if (heap == &fw_heap_empty) {
    heap = fw_thread_setup();
    if (!heap) return fw_enomem();
  }
  void *r;
  switch (op) {
  case FW_OP_MALLOC: r = fw_heap_malloc_fast(heap, size); break;
  case FW_OP_ZERO: r = fw_heap_malloc_zero(heap, size, true); break;
  case FW_OP_ALIGNED: r = fw_heap_malloc_aligned_ex(heap, size, align, false); break;
  default: r = fw_realloc_ex(heap, p, size); break;
  }
  if (fw_unlikely(FW_TLS(fw_tls_exited))) {
    int saved = errno;
    fw_thread_teardown(heap->tld);
    errno = saved;
  }
  return r;
}

void fw_thread_visit(void (*fn)(const fw_tld_t *tld, void *arg), void *arg) {
  for (fw_tld_t *t = atomic_load_explicit(&fw_tld_all, memory_order_acquire); t; t = t->all_next) fn(t, arg);
}

fw_heap_t *fw_thread_heap(void) {
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  if (heap != &fw_heap_empty) return heap;
  if (FW_TLS(fw_tls_exited)) return NULL;
  return fw_thread_setup();
}

__attribute__((constructor)) static void fw_constructor(void) {
  fw_process_init();
  fw_os_atfork(fw_fork_prepare, fw_fork_parent, fw_fork_child);
  fw_survey_init();
}

__attribute__((destructor)) static void fw_destructor(void) {
  fw_survey_at_exit();
}
