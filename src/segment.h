/* segment.h — segments: FW_SEGMENT_SIZE-aligned memory owned by one thread
 * (its tld), split into page slots of one kind; free slots, spans of slices,
 * and the purge of free slots after FREEWAY_PURGE_DELAY. */
#ifndef FW_SEGMENT_H
#define FW_SEGMENT_H
#include "types.h"

/* A fresh page slot of kind SMALL or MEDIUM from a segment of the thread
 * with a free slot; with map_new, from a new segment if none has one.
 * The descriptor comes back with area, block_size (the bytes available),
 * slices, kind and is_zero set. NULL: none free (or no memory). */
FW_HIDDEN fw_page_t *fw_segment_page_alloc(fw_tld_t *tld, int kind, bool map_new);
/* For a page just taken, of a size class that has filled a page of its
 * heap before: faults its memory in with one system call if it is fresh
 * (FREEWAY_POPULATE). */
FW_HIDDEN void fw_segment_page_fault_in(const fw_page_t *page);
/* A LARGE page of n slices (1..FW_SPAN_MAX_SLICES) in a span segment. */
FW_HIDDEN fw_page_t *fw_segment_span_alloc(fw_tld_t *tld, size_t n, bool map_new);
/* The owner is freeing a large block of more than FW_BIG_MIN (1 MiB): now
 * and then, looks at whether the thread writes such blocks through, which
 * decides whether its big blocks get huge pages (segment.c). */
#define FW_BIG_MIN ((size_t)1 << 20)
FW_HIDDEN void fw_segment_big_look(fw_tld_t *tld, const fw_page_t *page);
/* The looks have found the thread's big blocks written in part only (a
 * header and a trailer, a table touched here and there): such a block's
 * pages cost little resident memory while it waits for reuse (large.h). */
FW_INLINE bool fw_segment_big_sparse(const fw_tld_t *tld) { return tld->big_every != 0 && tld->big_whole == 0; }
/* A block of more than FW_BIG_MIN is about to be placed / was placed at
 * page: the early looks, before the thread has freed such a block. */
FW_HIDDEN void fw_segment_big_early(fw_tld_t *tld);
FW_HIDDEN void fw_segment_big_placed(fw_tld_t *tld, const fw_page_t *page);
/* A LARGE page in a segment of its own, holding size bytes at an address
 * aligned to align (any power of two). */
FW_HIDDEN fw_page_t *fw_segment_large_alloc(fw_tld_t *tld, size_t size, size_t align);
/* realloc in place for the block of a segment of its own: grows into the
 * free arena chunks after it, or gives back the chunks beyond size. */
FW_HIDDEN bool fw_segment_large_grow(fw_page_t *page, size_t size);
FW_HIDDEN bool fw_segment_large_shrink(fw_page_t *page, size_t size);
/* realloc in place: takes the free slices after a span page. */
FW_HIDDEN bool fw_segment_span_grow(fw_page_t *page, size_t size);
/* Gives a page's slot(s) back. tld is the owner's, or NULL for a segment
 * that no thread owns (abandoned, held for a moment by a freeing thread):
 * then the slots are purged at once, and the segment freed when empty. */
FW_HIDDEN void fw_segment_page_free(fw_tld_t *tld, fw_page_t *page);
/* The same for a page of a segment no thread owns, but its slots stay warm
 * (dirty) for whoever adopts the segment, until the segment's deadline
 * (the abandon layer's purge pass); emptied, the segment goes back to its
 * arena unpurged, where it waits a purge delay too. */
FW_HIDDEN void fw_segment_page_free_warm(fw_page_t *page);
/* Purges the thread's free slots whose delay is up (all with force) and
 * frees its empty segments kept past their delay. */
FW_HIDDEN void fw_segments_purge(fw_tld_t *tld, uint64_t now, bool force);

/* Whether the thread has room for a page of this kind in a segment it owns
 * (a free slot, free slices for a span): if not, its next page of the kind
 * takes a segment. Large blocks always get one of their own: true. */
FW_INLINE bool fw_segment_tld_has_room(const fw_tld_t *tld, int kind) {
  if (kind == FW_KIND_SPAN) return tld->span_binmap != 0;
  if (kind == FW_KIND_LARGE) return true;
  return tld->segments_free[kind] != NULL;
}

/* ---- ownership changes (the abandon layer) -------------------------------- */
/* Takes seg out of tld's lists: thread_id 0, no tld. */
FW_HIDDEN void fw_segment_detach(fw_tld_t *tld, fw_segment_t *seg);
/* Makes seg tld's: lists, thread id, purge deadline of its dirty slots. */
FW_HIDDEN void fw_segment_attach(fw_tld_t *tld, fw_segment_t *seg);
/* An owned segment with no page in use goes back to its arena / the OS;
 * purge: its memory is purged now, else its dirty slots stay warm in the
 * arena for a purge delay (for the next segment placed on the chunk). */
FW_HIDDEN void fw_segment_free_empty(fw_tld_t *tld, fw_segment_t *seg, bool purge);
/* Purges every free dirty slot of a segment nobody owns. */
FW_HIDDEN void fw_segment_purge_slots_now(fw_segment_t *seg);
/* Purges the free dirty slots of a segment but the lowest ones, up to keep
 * bytes of them: the slots a new owner, or a new segment on the same
 * memory, takes first. Runs of slots go in one call to the OS. */
FW_HIDDEN void fw_segment_purge_free(fw_segment_t *seg, size_t keep);
/* The deadline for an abandoned segment's warm free slots: 0 when none. */
FW_HIDDEN uint64_t fw_segment_abandon_due(fw_segment_t *seg);

#ifdef FW_DEBUG
FW_HIDDEN void fw_segment_validate(const fw_segment_t *seg);
#define FW_VALIDATE_SEGMENT(s) fw_segment_validate(s)
#else
#define FW_VALIDATE_SEGMENT(s) ((void)0)
#endif

FW_HIDDEN extern uint64_t fw_segment_cookie_key;
FW_INLINE uint64_t fw_segment_cookie(const fw_segment_t *s) {
  return (uint64_t)(uintptr_t)s ^ fw_segment_cookie_key;
}

#endif
