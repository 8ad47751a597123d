/* front.h — the malloc/free front end: every variant of the malloc family
 * on a heap that is ready (a thread's heap or a user heap; never
 * fw_heap_empty: the layers above make sure of that), and free of any
 * pointer. Cautious mode's checks are hooks called from here. */
#ifndef FW_FRONT_H
#define FW_FRONT_H
#include "options.h"
#include "page.h"
#include "segment.h"
#include "os.h"

/* Everything the fast path below does not do. (size, heap): the order the
 * malloc fast path has them in, so that its miss reaches this with a
 * compare and a jump. */
FW_HIDDEN void *fw_malloc_generic(size_t size, fw_heap_t *heap);
FW_HIDDEN void *fw_heap_malloc_zero(fw_heap_t *heap, size_t size, bool zero);
FW_HIDDEN void *fw_heap_malloc_aligned_ex(fw_heap_t *heap, size_t size, size_t align, bool zero);
FW_HIDDEN void *fw_realloc_ex(fw_heap_t *heap, void *p, size_t size);
/* free of anything but the fast path's case; p may be NULL. */
FW_HIDDEN void fw_free_generic(void *p);
/* The owner's free of p into page, whose descriptor carries the calling
 * thread's tag (no flag stops the fast path's push), as the free fast
 * path does it (fast.h), out of line. */
FW_HIDDEN void fw_free_local_push(fw_page_t *page, void *p);
/* A free in cautious mode: how is the form of allocation the call expects
 * (check.h) and whether size and align were given; p may be NULL. */
FW_HIDDEN void fw_free_checked(void *p, unsigned how, size_t size, size_t align);
FW_HIDDEN size_t fw_usable_size(const void *p);
/* Frees a block that was checked already (a late remote free found on a
 * recycled heap struct): routed like any other free. */
FW_HIDDEN void fw_free_unchecked(fw_block_t *b);
/* Hands over the blocks of other threads' pages this thread freed and holds
 * for a batch (free.c): on its slow path, when it collects, at its exit. */
FW_HIDDEN void fw_free_remote_flush(fw_tld_t *tld);
/* Frees by this thread, while it had no heap, that would have been held
 * for a batch (blocks of live threads' default heaps): the thread layer
 * sets such a thread up once it has made a few (thread.c fw_free_slow). */
FW_HIDDEN extern FW_THREAD_LOCAL uint32_t fw_tls_rfree_heapless;
FW_INLINE void fw_free_remote_flush_if(fw_tld_t *tld) {
  if (fw_unlikely(tld->rfree_used)) fw_free_remote_flush(tld);
}
FW_HIDDEN void *fw_enomem(void);
/* Stops the process with a report if p is not a live block of page (b: its
 * block start); freed names what a block found free already means. */
FW_HIDDEN void fw_block_check(fw_segment_t *seg, fw_page_t *page, const void *p, const fw_block_t *b,
                              const char *freed);
/* The report of fw_block_check: what happened to p, then abort. */
FW_HIDDEN __attribute__((noreturn)) void fw_block_report(fw_segment_t *seg, const fw_page_t *page, const void *p,
                                                         const char *what);
/* A block whose first word looks like a list link is freed (free.c). */
FW_HIDDEN bool fw_block_freed_32(fw_segment_t *seg, const fw_page_t *page, const fw_block_t *b);
/* fw_block_check where the segment's cookie was checked already. */
FW_INLINE void fw_block_check_in(fw_segment_t *seg, fw_page_t *page, const void *p, const fw_block_t *b,
                                 const char *freed) {
  const char *what = NULL;
  if (fw_page_flags(page) & FW_PF_UNUSED) what = freed;
  else if (page->kind == FW_KIND_LARGE) {
    if ((const void *)b != p && !(fw_page_flags(page) & FW_PF_ALIGNED)) what = "free of a pointer inside a block";
    else if (page->used == 0) what = freed;
  } else {
    /* the block-start test needs no division (sizeclass.h), as every free
     * of the secure level comes here */
    if (!fw_page_reserved_block_start(page, b))
      what = "free of a pointer inside a block";
    else if (fw_secure ? fw_block_marked(b) : fw_link_looks_free(b) && fw_block_freed_32(seg, page, b))
      what = freed;
  }
  if (fw_likely(what == NULL)) return;
  fw_block_report(seg, page, p, what);
}

/* realloc's move of a block of page, a small or medium page of this
 * thread's with no flag (its slice's tag is the thread's: the free fast
 * path's one test), to size bytes (0 < size <= FW_MEDIUM_MAX), kept in
 * place if they fit it (fw_realloc keeps most of those without the call);
 * not in cautious mode. Such a page is in use, small or medium, and not
 * the secure level's (every flag clears the tag): of fw_block_check_in's
 * tests, the block's start and the looks-freed one are all that is left
 * (fw_realloc makes them too). The new block comes from heap's direct
 * pages as malloc's fast path takes it, and the copy and free after it by
 * tail calls: malloc(64), realloc to 128 and free, 182 instructions (callgrind
 * bench_apipath realloc 64; 237 through fw_realloc_ex, 210 with the move
 * inline, mimalloc 3.3.2's 184.9). */
FW_HIDDEN void *fw_realloc_own(fw_heap_t *heap, fw_segment_t *seg, fw_page_t *page, void *p, size_t size);

/* realloc's in-place hit for a block that is not this thread's plain one
 * (fw_realloc tests those first: fw_realloc_own), with no heap and no call:
 * true when p's block holds size bytes and would not be more than half
 * empty (fw_realloc_ex's rule) and p passes what fw_block_check asks of a
 * pointer, in the same order: a segment header of freeway's first, then a
 * page in use (UNUSED), then the start of one of its carved blocks that
 * does not hold a free list's link (page.h), or a live large block.
 * Pages with any flag but FULL (aligned blocks) are left to fw_realloc_ex,
 * as is anything that fails, so that the slow path reports it. Cautious
 * mode reads nothing through p before it has validated p (check.c).
 * Nothing is written: the block may be any thread's. */
FW_INLINE bool fw_realloc_fits(const void *p, size_t size) {
  if (fw_unlikely(fw_cautious)) return false;
  fw_segment_t *seg = fw_ptr_segment(p);
  if (fw_unlikely(seg->cookie != fw_segment_cookie(seg))) return false;
  fw_page_t *page = fw_ptr_slice(seg, p);
  /* the heap profiler's flags are about frees: a block that stays where it
   * is keeps its sample */
  const unsigned in_place = FW_PF_FULL | FW_PF_SAMPLED | FW_PF_SAMPLES;
  if (fw_page_flags(page) & ~in_place) {
    /* a later slice of a medium page or of a large block */
    if (fw_page_flags(page) != FW_PF_REDIRECT) return false;
    page -= page->slice_offset;
    if (fw_page_flags(page) & ~in_place) return false;
  }
  size_t bs = page->block_size;
  if (size > bs || size < bs / 2) return false;
  if (page->kind == FW_KIND_LARGE) return p == (const void *)page->area && page->used != 0;
  /* a block that looks freed goes to fw_realloc_ex, whose check tells */
  return fw_page_reserved_block_start(page, p) && !fw_link_looks_free((const fw_block_t *)p);
}

/* A block of 1 to 128 KiB (size must be in that range) from the page
 * cdirect[] names for its class, or NULL: what direct[] gives the sizes
 * below, after a computation of the class. Such a block may be calloc'd,
 * which clears only blocks handed out before (page->fresh). Every 64th
 * call still goes the long way (fw_malloc_generic: its count of slow calls
 * runs the heap's housekeeping, and folds in other threads' frees into its
 * full pages), so that a loop over blocks of one such size gives back the
 * pages of classes it no longer uses (tests/heap.c idle). The counter is
 * written only after a pop, which fw_heap_empty's table never gives.
 * The pop is the slow path's (fw_page_pop_checked): the fast path's test
 * lets an immediate double free's self-link through, which for these
 * sizes must stop the next malloc (tests/badinput), and the list's last
 * block is handed out here too. */
FW_INLINE void *fw_malloc_class_fast(fw_heap_t *heap, size_t size) {
  uint64_t n = heap->slow_count + 1;
  if (fw_unlikely((n & 63) == 0)) return NULL;
  fw_page_t *page = heap->cdirect[fw_size_class(size)];
  fw_block_t *b = fw_page_pop_checked(page);
  if (!b) return NULL;
  heap->slow_count = n;
  if ((uint8_t *)b >= page->fresh) page->fresh = (uint8_t *)b + page->block_size;
  return b;
}
FW_INLINE bool fw_size_in_cdirect(size_t size) { return size - (FW_DIRECT_MAX + 1) < FW_MEDIUM_MAX - FW_DIRECT_MAX; }

/* The malloc fast path on a ready heap: pop the free list of the page that
 * direct[size] names. */
FW_INLINE void *fw_heap_malloc_fast(fw_heap_t *heap, size_t size) {
  if (fw_likely(size <= FW_DIRECT_MAX)) {
    fw_block_t *b = fw_page_pop_fast(heap->direct[size]);
    if (fw_likely(b != NULL)) return b;
  } else if (fw_size_in_cdirect(size)) {
    fw_block_t *b = fw_malloc_class_fast(heap, size);
    if (fw_likely(b != NULL)) return b;
  }
  return fw_malloc_generic(size, heap);
}

#endif
