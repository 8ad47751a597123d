/* large.h — blocks above FW_MEDIUM_MAX (128 KiB): one block per LARGE page,
 * and the heap's cache of freed span pages for reuse. */
#ifndef FW_LARGE_H
#define FW_LARGE_H
#include "types.h"

/* Makes a LARGE page (from the segment layer or the cache) heap's live
 * block: in the full list, remote frees routed through the heap. */
FW_HIDDEN void *fw_large_take(fw_heap_t *heap, fw_page_t *page, size_t size);
/* The cache keeps span pages of up to this many slices (1 MiB): see large.c. */
#define FW_LCACHE_MAX_SLICES 16
/* page->ends: a bit for each 4 KiB of a large page's last slice */
#define FW_LCACHE_END_SHIFT 12
_Static_assert((FW_SLICE_SIZE >> FW_LCACHE_END_SHIFT) <= 32, "page->ends has a bit for each 4 KiB of a slice");
/* A freed span page (used 0, still in its heap's full list) waits in the
 * cache; false if it does not fit there, and the caller gives it back. */
FW_HIDDEN bool fw_large_cache_put(fw_heap_t *heap, fw_page_t *page);
/* A cached page for a block of size bytes made heap's live block (as
 * fw_large_take), or NULL. */
FW_HIDDEN void *fw_large_cache_alloc(fw_heap_t *heap, size_t size);
/* A request of size bytes the cache had nothing for: if it holds more than
 * FREEWAY_LARGE_CACHE, that much of it goes back to the segments. */
FW_HIDDEN void fw_large_cache_miss(fw_heap_t *heap, size_t size);
/* all: every cached page; else those already seen by the previous look */
FW_HIDDEN void fw_large_cache_flush(fw_heap_t *heap, bool all);
/* The cache emptied without a look at its pages: for a heap that has given
 * every page of its full list back already, cached ones with the rest. */
FW_HIDDEN void fw_large_cache_forget(fw_heap_t *heap);
/* realloc in place: the block grows into the free slices after it, cached
 * pages there giving way, or (a segment of its own) into the free chunks
 * after it. */
FW_HIDDEN bool fw_large_grow(fw_page_t *page, size_t size);
/* realloc in place: a block in a segment of its own gives back the chunks
 * beyond size; false for any other block, or nothing to give. */
FW_HIDDEN bool fw_large_shrink(fw_page_t *page, size_t size);

#endif
