/* heap_api.c — the public heap API (fw_heap_*) and fw_collect.
 *
 * The contract (freeway.h): a heap belongs to the thread that made it, and
 * every fw_heap_* call on it but fw_heap_usable_size must come from that
 * thread. A call from any other thread, or on a heap whose thread has
 * exited, is refused and changes nothing: reported (rate-limited) with
 * errno = EPERM in the default mode, reported and aborted in cautious mode.
 * Checking costs one load and compare per call; without it such a call
 * would edit the owner's page lists unsynchronised and lose live blocks. */
#include "fast.h"
#include "abandon.h"
#include "arena.h"
#include "check.h"
#include "message.h"
#include "options.h"
#include <string.h>

FW_COLD static bool fw_heap_misuse(const fw_heap_t *heap, const char *call) {
  if (fw_opt(CAUTIOUS)) {
    char what[160];
    fw_snprintf(what, sizeof what, "%s on a heap that belongs to another thread (or to one that has exited)", call);
    fw_check_fail(what, heap, 0);
  }
  fw_warning("%s: heap %p belongs to another thread (or to one that has exited); call refused\n", call,
             (const void *)heap);
  errno = EPERM;
  return false;
}

/* NULL and the empty heap (a thread's before its first allocation) are
 * refused quietly with EINVAL. */
FW_INLINE bool fw_heap_owned(const fw_heap_t *heap, const char *call) {
  if (fw_unlikely(!heap || heap == &fw_heap_empty)) {
    errno = EINVAL;
    return false;
  }
  if (fw_likely(atomic_load_explicit(&((fw_heap_t *)heap)->thread_id, memory_order_relaxed) == fw_thread_id()))
    return true;
  return fw_heap_misuse(heap, call);
}

fw_heap_t *fw_heap_new(void) {
  fw_heap_t *def = fw_thread_heap();
  if (!def) return fw_enomem();
  fw_heap_t *heap = fw_heap_struct_new(def->tld, false);
  if (!heap) return fw_enomem();
  return heap;
}

fw_heap_t *fw_heap_get_default(void) { return fw_thread_heap(); }

void fw_heap_delete(fw_heap_t *heap) {
  if (!fw_heap_owned(heap, "fw_heap_delete")) return;
  if (heap->is_default) return;
  fw_heap_release(heap, heap->tld->heap_default, false);
  fw_heap_struct_free(heap);
}

void fw_heap_destroy(fw_heap_t *heap) {
  if (!fw_heap_owned(heap, "fw_heap_destroy")) return;
  if (heap->is_default) {
    fw_warning("fw_heap_destroy: the default heap cannot be destroyed; call refused\n");
    errno = EPERM;
    return;
  }
  /* its blocks go without their frees: their samples go with them */
  if (fw_prof_on) fw_prof_forget_heap(heap);
  fw_heap_release(heap, NULL, true);
  fw_heap_struct_free(heap);
}

/* fw_heap_malloc's hit leaves only by tail calls, as malloc's does, so that
 * it needs no stack frame: a refusal and a miss are calls of their own.
 * (bench_heapfree --blocks 100000 --rounds 1 under callgrind: fw_heap_malloc
 * 5.18M instructions with the frame, 4.58M without; the profiling flavour
 * 6.20M, and 4.66M with its misses.) */
static FW_NOINLINE FW_COLD void *fw_heap_malloc_refused(const fw_heap_t *heap) {
  if (!heap || heap == &fw_heap_empty) errno = EINVAL;
  else fw_heap_misuse(heap, "fw_heap_malloc");
  return NULL;
}

#if FW_PROF_ENTRIES
static FW_NOINLINE void *fw_heap_malloc_miss(fw_heap_t *heap, size_t size) {
  void *p = fw_malloc_generic(size, heap);
  FW_PROF_ACCOUNT_HEAP(heap, p, size);
  return p;
}
#endif

void *fw_heap_malloc(fw_heap_t *heap, size_t size) {
  if (fw_unlikely(!heap || heap == &fw_heap_empty ||
                  atomic_load_explicit(&heap->thread_id, memory_order_relaxed) != fw_thread_id()))
    return fw_heap_malloc_refused(heap);
#if FW_PROF_ENTRIES
  FW_PROF_HIT(heap, size);
  return fw_heap_malloc_miss(heap, size);
#else
  return fw_heap_malloc_fast(heap, size);
#endif
}

void *fw_heap_calloc(fw_heap_t *heap, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) return fw_enomem();
  if (!fw_heap_owned(heap, "fw_heap_calloc")) return NULL;
  void *p = fw_heap_malloc_zero(heap, total, true);
  FW_PROF_ACCOUNT_HEAP(heap, p, total);
  return p;
}

void *fw_heap_realloc(fw_heap_t *heap, void *p, size_t size) {
  if (!fw_heap_owned(heap, "fw_heap_realloc")) return NULL;
  if (p && fw_realloc_fits(p, size)) return p;
  void *q = fw_realloc_ex(heap, p, size);
  if (q != p) FW_PROF_ACCOUNT_HEAP(heap, q, size);
  return q;
}

void *fw_heap_malloc_aligned(fw_heap_t *heap, size_t size, size_t alignment) {
  if (!fw_heap_owned(heap, "fw_heap_malloc_aligned")) return NULL;
  void *p = fw_heap_malloc_aligned_ex(heap, size, alignment, false);
  FW_PROF_ACCOUNT_HEAP(heap, p, size);
  return p;
}

size_t fw_heap_usable_size(const fw_heap_t *heap, const void *p) {
  if (!p || !heap) return 0;
  /* cautious mode: nothing is read through p before it is validated */
  if (fw_unlikely(fw_opt(CAUTIOUS))) return fw_check_heap_usable(heap, p);
  if (atomic_load_explicit(&fw_ptr_page(p)->heap, memory_order_relaxed) != heap) return 0;
  return fw_usable_size(p);
}

void fw_heap_collect(fw_heap_t *heap, bool force) {
  if (!fw_heap_owned(heap, "fw_heap_collect")) return;
  fw_free_remote_flush_if(heap->tld);
  fw_heap_collect_internal(heap, force);
}

bool fw_heap_contains(const fw_heap_t *heap, const void *p) {
  if (!fw_heap_owned(heap, "fw_heap_contains")) return false;
  if (fw_unlikely(fw_opt(CAUTIOUS))) return p && fw_check_heap_contains(heap, p);
  return p && fw_heap_contains_block(heap, p);
}

int fw_heap_stats(const fw_heap_t *heap, fw_heap_stats_t *out) {
  if (!heap || !out || out->size < sizeof(size_t)) {
    errno = EINVAL;
    return -1;
  }
  fw_heap_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  if (heap != &fw_heap_empty) {
    if (!fw_heap_owned(heap, "fw_heap_stats")) return -1;
    if (fw_unlikely(fw_opt(CAUTIOUS))) fw_check_heap_stats((fw_heap_t *)heap, &s);
    else fw_heap_stats_of((fw_heap_t *)heap, &s);
  }
  size_t n = out->size < sizeof s ? out->size : sizeof s;
  memcpy(out, &s, n);
  out->size = n;
  return 0;
}

void fw_heap_visit(const fw_heap_t *heap, fw_block_visitor_t *visit, void *arg) {
  if (!visit || !fw_heap_owned(heap, "fw_heap_visit")) return;
  if (fw_unlikely(fw_opt(CAUTIOUS))) fw_check_heap_visit(heap, visit, arg);
  else fw_heap_visit_blocks(heap, visit, arg);
}

void fw_collect(bool force) {
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  uint64_t now = fw_os_clock_ms();
  if (heap != &fw_heap_empty) {
    fw_free_remote_flush_if(heap->tld);
    /* adopt what exited threads left, so their freed blocks can go back too */
    if (force && fw_opt(RECLAIM))
      for (int i = 0; i < 100000 && fw_abandon_reclaim_one(heap->tld->heap_default); i++) {
      }
    for (fw_heap_t *h = heap->tld->heaps; h; h = h->next) fw_heap_collect_internal(h, force);
  } else {
    fw_arena_purge(now, force);
    fw_abandon_purge(now, force);
  }
  fw_thread_free_late();
}
