/* page.h — blocks inside a page and the heap's page queues. */
#ifndef FW_PAGE_H
#define FW_PAGE_H
#include "types.h"

/* A page with no free block and no class: what direct[] names when a class
 * has no page, so that the fast path needs no test of its own. */
FW_HIDDEN extern fw_page_t fw_page_empty;
FW_HIDDEN void fw_page_tables_init(void);
/* Sets up a fresh slot (from the segment layer) for blocks of class cls and
 * carves its first blocks. */
FW_HIDDEN void fw_page_init(fw_page_t *page, fw_heap_t *heap, size_t cls, size_t block_size);
/* Folds the blocks other threads freed into the local free list. */
FW_HIDDEN void fw_page_collect(fw_page_t *page);
FW_HIDDEN void fw_page_queue_push(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page);
FW_HIDDEN void fw_page_queue_push_front(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page);
FW_HIDDEN void fw_page_queue_remove(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page);
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

#ifdef FW_DEBUG
FW_HIDDEN void fw_page_validate(const fw_page_t *page);
FW_HIDDEN void fw_page_queue_validate(const fw_heap_t *heap, const fw_page_queue_t *q);
#define FW_VALIDATE_PAGE(p) fw_page_validate(p)
#else
#define FW_VALIDATE_PAGE(p) ((void)0)
#endif

#endif
