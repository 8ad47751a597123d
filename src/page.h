/* page.h — blocks inside a page and the heap's page queues. */
#ifndef FW_PAGE_H
#define FW_PAGE_H
#include "types.h"

/* ---- free lists -------------------------------------------------------------
 * Every list of free blocks (a page's local list, its remote list xfree, a
 * heap's delayed list) links blocks through their first word, encoded so
 * that memory written by anyone but freeway cannot steer malloc:
 *
 *   link(b) = (next ^ b) * K        K: a secret odd number chosen at start-up
 *
 * Decoding gives t = next ^ b. For a genuine link of a page's list, next is
 * another block of the same 4 MiB segment, so t is non-zero, a multiple of 8
 * and below 4 MiB; FW_LINK_BAD tests all three with one subtract and one
 * mask. A word written by a use-after-free or an overflow into a free
 * neighbour decodes to noise (the multiply carries every changed bit into
 * the high bits) and passes with odds of 2^19 in 2^64 (2^-45; on 32-bit
 * builds 2^19 in 2^32, 2^-13); an immediate double
 * free makes a block its own successor (t == 0); a free of a misaligned
 * pointer makes t misaligned. A list ends at fw_list_end, a block in no
 * segment, so the end fails the test too: the fast path needs one test for
 * "empty or damaged", and the slow path tells the two apart
 * (fw_page_pop_checked). A heap's delayed list spans segments: its links
 * are next * K, and each block on it is looked up (fw_page_of_pointer)
 * before it is touched.
 *
 * Every pop leaves FW_LINK_TAKEN (1) in the block's link word, which
 * decodes to K^-1, an odd t that fails every check. That is what stops a
 * block from being handed out twice: a double free, however late and from
 * whichever threads, puts a block on the lists twice, so the pops reach it
 * twice; the first one marks it, and the second finds the mark (or the
 * program's data, written over it since) where a link should be, and stops
 * the process before the block is handed out again. It also means a fresh
 * block never shows the program an encoded link, from which K could be
 * worked out. The fast pop tests t without its "non-zero" part (t == 0 is
 * an immediate double free's self-link): the block is then handed out once,
 * its mark becomes its own successor's link, and the next pop stops; this
 * keeps the mark's store within the fast path's old instruction count. */
FW_HIDDEN extern uintptr_t fw_list_key, fw_list_key_inv;
FW_HIDDEN extern fw_block_t fw_list_end;
#define FW_LIST_END (&fw_list_end)
#define FW_LINK_MASK (~(uintptr_t)FW_SEGMENT_MASK | 7)
#define FW_LINK_BAD(t) ((((t) - 8) & FW_LINK_MASK) != 0)
/* The pops' tests, with the page's link_mask: FW_LINK_BAD, and also t's
 * bits below the block size's largest power-of-two factor, which are zero
 * between two blocks' starts (all congruent modulo it). A free of a pointer
 * inside a block at any other offset pushes it with a link that fails
 * this (a block of 64 bytes: offsets 8 to 56; of 48: 8, 24, 40), at the
 * pop that would hand it out; one onto an empty list is caught where the
 * list ends (fw_page_pop_checked). Subtracting the power of two, not 8,
 * keeps the test of t == 0 (above) without touching the low bits; the
 * fast pop's omits it, and a test with a mask in memory is as short as one
 * with a constant. */
#define FW_LINK_BAD_PAGE(t, page) \
  ((((t) - (((page)->link_mask & FW_SEGMENT_MASK) + 1)) & (page)->link_mask) != 0)
#define FW_LINK_BAD_FAST(t, page) fw_any_bits((t), &(page)->link_mask)
/* link_mask for a page of blocks of size bs. */
FW_INLINE uintptr_t fw_link_mask(size_t bs) { return FW_LINK_MASK | ((bs & (0 - bs)) - 1); }
/* What a pop leaves in a block's link word (see above). */
#define FW_LINK_TAKEN ((uintptr_t)1)
/* Chooses the secret; before any page exists. */
FW_HIDDEN void fw_list_init(void);

FW_INLINE uintptr_t fw_link_encode(const fw_block_t *b, const fw_block_t *next) {
  return ((uintptr_t)next ^ (uintptr_t)b) * fw_list_key;
}
/* t = next ^ b, the value FW_LINK_BAD tests. */
FW_INLINE uintptr_t fw_link_decode(const fw_block_t *b) { return b->link * fw_list_key_inv; }
/* The unchecked successor of b on a page list (walks of lists the owner
 * checks as it pops them). */
FW_INLINE fw_block_t *fw_block_next(const fw_block_t *b) {
  return (fw_block_t *)(fw_link_decode(b) ^ (uintptr_t)b);
}
FW_INLINE void fw_block_set_next(fw_block_t *b, fw_block_t *next) { b->link = fw_link_encode(b, next); }

/* The delayed list: links are next * K (NULL ends it); fw_delayed_next
 * validates the successor before anyone touches it. */
FW_INLINE void fw_delayed_set_next(fw_block_t *b, fw_block_t *next) { b->link = (uintptr_t)next * fw_list_key; }
FW_HIDDEN fw_block_t *fw_delayed_next(const fw_block_t *b);
/* Reports a link that failed its check, then aborts. */
FW_HIDDEN __attribute__((noreturn)) void fw_list_corrupt(const fw_page_t *page, const fw_block_t *b, uintptr_t t);

/* ---- the secure level's free mark -----------------------------------------
 * With FREEWAY_SECURE (options.h: fw_secure) every free block of a small or
 * medium page carries, in its second word, a mark computed from its address
 * and two secrets. Setting it is the free's one atomic exchange: of two
 * frees of one block, in any threads, exactly one sees the mark already
 * there, so every double free is seen, however late. The mark is checked
 * and cleared when the block is handed out again, so a block cannot leave a
 * list twice, and a write into a freed block's second word is seen there.
 * Blocks are at least two words in this level. */
FW_HIDDEN extern uintptr_t fw_mark_key;
FW_INLINE uintptr_t fw_free_mark(const fw_block_t *b) { return ((uintptr_t)b ^ fw_mark_key) * fw_list_key; }
FW_INLINE _Atomic(uintptr_t) *fw_mark_word(fw_block_t *b) { return (_Atomic(uintptr_t) *)((uintptr_t *)b + 1); }
FW_INLINE bool fw_block_marked(const fw_block_t *b) {
  return atomic_load_explicit(fw_mark_word((fw_block_t *)b), memory_order_relaxed) == fw_free_mark(b);
}
/* Marks b free; false if it was free already (a double free). */
FW_INLINE bool fw_block_mark(fw_block_t *b) {
  return atomic_exchange_explicit(fw_mark_word(b), fw_free_mark(b), memory_order_relaxed) != fw_free_mark(b);
}
/* A block leaves its list: it must carry the mark (else it was written to
 * while free, or was on the list twice); stops the process if not. */
FW_HIDDEN void fw_block_take(const fw_page_t *page, fw_block_t *b);

/* off, a small or medium page's offset from its area below 2^32, falls on
 * a block's start: no division (off * d < d is sizeclass.h's
 * off * d <= d - 1; every such page's block size is its class's). */
FW_INLINE bool fw_page_offset_at_block(const fw_page_t *page, size_t off) {
  uint64_t d = fw_class_divisor[page->cls];
  return (uint64_t)off * d < d;
}
/* p is the start of one of page's first n blocks. A p below the area
 * wraps to an offset far above the page's bytes. */
FW_INLINE bool fw_page_block_start_below(const fw_page_t *page, const void *p, size_t n) {
  size_t off = (size_t)((const uint8_t *)p - page->area);
  return off < n * page->block_size && fw_page_offset_at_block(page, off);
}
/* ... of the blocks it has reserved: the test any thread may make
 * (capacity is the owner's, still moving). */
FW_INLINE bool fw_page_reserved_block_start(const fw_page_t *page, const void *p) {
  return fw_page_block_start_below(page, p, page->reserved);
}
/* ... of its carved blocks. */
FW_INLINE bool fw_page_is_block_start(const fw_page_t *page, const fw_block_t *b) {
  return fw_page_block_start_below(page, b, page->capacity);
}

/* The fast pop: NULL if the list is empty or its head's link is damaged
 * (the caller's slow path then calls fw_page_pop_checked). */
FW_INLINE fw_block_t *fw_page_pop_fast(fw_page_t *page) {
  fw_block_t *b = page->free;
  uintptr_t t = fw_link_decode(b);
  if (fw_unlikely(FW_LINK_BAD_FAST(t, page))) return NULL;
  FW_RESULT_REG(b);
  page->used++;
  page->free = (fw_block_t *)((uintptr_t)b ^ t);
  b->link = FW_LINK_TAKEN;
  return b;
}
/* The pop of every other path: NULL only if the list is empty; a damaged
 * link stops the process. */
FW_INLINE fw_block_t *fw_page_pop_checked(fw_page_t *page) {
  fw_block_t *b = page->free;
  if (b == FW_LIST_END) return NULL;
  uintptr_t t = fw_link_decode(b);
  fw_block_t *next = (fw_block_t *)(t ^ (uintptr_t)b);
  if (fw_unlikely(FW_LINK_BAD_PAGE(t, page)) && (next != FW_LIST_END || !fw_page_is_block_start(page, b)))
    fw_list_corrupt(page, b, t);
  page->free = next;
  page->used++;
  b->link = FW_LINK_TAKEN;
  return b;
}
/* b's link fails its check and is not the list's end: what makes
 * fw_page_pop_checked stop the process. */
FW_INLINE bool fw_link_damaged(const fw_block_t *b) {
  uintptr_t t = fw_link_decode(b);
  return FW_LINK_BAD(t) && (fw_block_t *)(t ^ (uintptr_t)b) != FW_LIST_END;
}
/* b's first word is a valid link of a page list: the block is free (the
 * taken mark and zero fail the test, the program's data with odds of
 * 2^-45 on 64-bit builds and 2^-13 on 32-bit ones, see above). */
FW_INLINE bool fw_link_looks_free(const fw_block_t *b) {
  uintptr_t t = fw_link_decode(b);
  return !FW_LINK_BAD(t) || (fw_block_t *)(t ^ (uintptr_t)b) == FW_LIST_END;
}
/* Whether fw_link_looks_free may be taken as proof that a block the
 * program calls live was freed (a double free, a realloc of a freed
 * block): only where the odds of a live block passing are 2^-45. On 32-bit
 * builds one live block in 8192 would be taken for freed: there the
 * owner confirms it on the page's lists (fw_page_lists_hold). */
#define FW_LINK_PROOF (UINTPTR_MAX > 0xffffffffu)
/* Whether b is on page's local lists (free, later): for the page's owner
 * only, whose lists they are. A walk: for the rare block that looks free
 * where fw_link_looks_free is no proof. */
FW_HIDDEN bool fw_page_lists_hold(const fw_page_t *page, const fw_block_t *b);
/* Returns true when the page has no live block left. */
FW_INLINE bool fw_page_push_uncounted(fw_page_t *page, fw_block_t *b) {
  b->link = fw_link_encode(b, page->free);
  page->free = b;
  return --page->used == 0;
}
/* Every free but the default flavour's fast one counts on its page (the
 * ledger's frees, survey.c): a store the fast path leaves to the counting
 * flavour, libfreeway-prof.so. */
FW_INLINE bool fw_page_push(fw_page_t *page, fw_block_t *b) {
  page->frees++;
  return fw_page_push_uncounted(page, b);
}
FW_INLINE bool fw_page_has_free(const fw_page_t *page) { return page->free != FW_LIST_END; }

/* A page with no free block and no class: what direct[] names when a class
 * has no page, so that the fast path needs no test of its own. */
FW_HIDDEN extern fw_page_t fw_page_empty;
FW_HIDDEN void fw_page_tables_init(void);
/* Sets up a fresh slot (from the segment layer) for blocks of class cls and
 * carves its first blocks. */
FW_HIDDEN void fw_page_init(fw_page_t *page, fw_heap_t *heap, size_t cls, size_t block_size);
/* A block of page, which is in no class queue (the heap profiler's pages
 * of sampled blocks): remote frees folded in, more blocks carved if need
 * be; NULL if the page has no room. */
FW_HIDDEN fw_block_t *fw_page_take(fw_page_t *page);
/* Carves page's next blocks (it has no free block, and room for more) and
 * pops the first. */
FW_HIDDEN fw_block_t *fw_page_carve(fw_page_t *page);
/* A page that stays in its heap's full list (sampled blocks) after a free
 * from the heap's delayed list: the frees other threads made since folded
 * in, and the delayed bit set again, so that the next one reaches the heap
 * too. True if the page has no live block left. */
FW_HIDDEN bool fw_page_rearm(fw_page_t *page);
/* Folds the blocks other threads freed into the local free list. */
FW_HIDDEN void fw_page_collect(fw_page_t *page);
/* The secure level's free by the owner: onto page->later (see there).
 * Returns true when the page has no live block left. */
FW_HIDDEN bool fw_page_push_later(fw_page_t *page, fw_block_t *b);
FW_HIDDEN void fw_page_queue_push(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page);
FW_HIDDEN void fw_page_queue_push_front(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page);
FW_HIDDEN void fw_page_queue_remove(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page);
/* Empties q at once for a heap being released: its pages, still linked by
 * next, the head's extra count dropped; heap->direct[] is left naming the
 * old head, for the caller to reset whole. */
FW_HIDDEN fw_page_t *fw_page_queue_take_all(fw_heap_t *heap, fw_page_queue_t *q);
/* Every direct[] slot of heap to fw_page_empty. */
FW_HIDDEN void fw_direct_reset(fw_heap_t *heap);
/* The first page of class cls's queue with a free block (remote frees
 * folded in, more blocks carved), moved to the front; pages found
 * exhausted move to the full list. NULL if none. */
FW_HIDDEN fw_page_t *fw_page_queue_find(fw_heap_t *heap, size_t cls);
/* A full page (in heap->full) has room again: back to its class queue. */
FW_HIDDEN void fw_page_unfull(fw_heap_t *heap, fw_page_t *page);
/* Remote frees into the page stop going through its heap. */
FW_HIDDEN void fw_page_clear_delayed(fw_page_t *page);
FW_HIDDEN void fw_page_to_full(fw_heap_t *heap, fw_page_t *page);
/* Takes a page (in no list) into heap. False if the page had no live block
 * and went back to its segment (which may be gone now). */
FW_HIDDEN bool fw_page_adopt(fw_heap_t *heap, fw_page_t *page);
/* Before a new page of this kind is set up for class cls: an empty queue
 * head of another class gives its slot back. */
FW_HIDDEN void fw_page_retire_empty_head(fw_heap_t *heap, int kind, size_t cls);
/* A free by a thread that does not own the page: one compare-and-swap on
 * the page's list or, if the page is full, on its heap's delayed list. */
FW_HIDDEN void fw_page_free_remote(fw_page_t *page, fw_block_t *b);
/* Several blocks of page at once: the list head..tail of n blocks, linked
 * as the page's lists are (tail's link is set here), with one CAS (two
 * more if the page is full: the first block tells its heap). */
FW_HIDDEN void fw_page_free_remote_list(fw_page_t *page, fw_block_t *head, fw_block_t *tail, uint32_t n);
/* The page of a pointer freeway may not have handed out (validated: mapped,
 * a segment header of ours, a page in use, inside its carved blocks), or
 * NULL. With owner non-zero, the segment must be that thread's; this is
 * tested first, with an atomic load, so that a query about memory another
 * thread may be reusing reads nothing else of it. Slow: for cautious mode
 * and queries, never for plain frees. */
FW_HIDDEN fw_page_t *fw_page_of_pointer(const void *p, uintptr_t owner);
FW_HIDDEN fw_block_t *fw_page_block_start(const fw_page_t *page, const void *p);
FW_HIDDEN size_t fw_page_usable(const fw_page_t *page, const void *p);
/* Live blocks of a page, without the queue head's extra count. */
FW_HIDDEN size_t fw_page_live(const fw_page_t *page);
/* Before a small or medium page whose count says it has no live block goes
 * back to its segment: its lists must hold every block it carved, or a
 * double free has made the count lie and a live block would be handed out
 * again; that stops the process. */
FW_HIDDEN void fw_page_check_empty(const fw_page_t *page);

#ifdef FW_DEBUG
FW_HIDDEN void fw_page_validate(const fw_page_t *page);
FW_HIDDEN void fw_page_queue_validate(const fw_heap_t *heap, const fw_page_queue_t *q);
#define FW_VALIDATE_PAGE(p) fw_page_validate(p)
#else
#define FW_VALIDATE_PAGE(p) ((void)0)
#endif

#endif
