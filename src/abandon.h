/* abandon.h — segments whose thread has exited: abandoned with their live
 * blocks, adopted by a thread that needs a segment or frees into one, and
 * purged by a process-wide pass while nobody holds them. */
#ifndef FW_ABANDON_H
#define FW_ABANDON_H
#include "types.h"

/* At thread exit, after every heap of the thread was released (pages with
 * live blocks detached from their heap): empty segments are freed, the rest
 * abandoned. */
FW_HIDDEN void fw_abandon_segments(fw_tld_t *tld);
/* Adopts any one abandoned segment into heap, which must be a thread's
 * default heap: a user heap holds only what it allocated. Never waits. */
FW_HIDDEN bool fw_abandon_reclaim_one(fw_heap_t *heap);
/* The same for seg, whose block the caller is freeing, for a thread that
 * has no room of seg's kind: true if the caller's thread owns seg now (the
 * free is then a local one). */
FW_HIDDEN bool fw_abandon_reclaim(fw_heap_t *heap, fw_segment_t *seg);
/* Frees block b of page in abandoned segment seg in place, holding the
 * segment for the moment it takes; the segment stays abandoned, for a
 * thread that needs memory to adopt (the caller has room of its own). warm:
 * a page left empty stays committed until the segment's deadline (for a
 * caller whose slow paths run the purge pass); else it is purged at once,
 * and the segment freed when empty (for a thread with no heap, which may
 * never run one). If another thread holds seg, the block is left for it
 * to take in as it puts seg back; if one owns seg again, for the owner. */
FW_HIDDEN void fw_abandon_free(fw_segment_t *seg, fw_page_t *page, fw_block_t *b, bool warm);
/* The same for the blocks another thread kept back for a batch (free.c),
 * count lists of pages of seg, each in the form of a list of remote frees
 * (head, n): one hold of the segment for all of them. */
FW_HIDDEN void fw_abandon_free_lists(fw_segment_t *seg, const fw_rfree_t *lists, size_t count, bool warm);
/* A holder of abandoned seg puts it back, due its purge deadline (0: none),
 * after taking in the frees other threads left for it meanwhile (warm as
 * for fw_abandon_free); the segment may be gone after it. */
FW_HIDDEN void fw_abandon_release(fw_segment_t *seg, uint64_t due, bool warm);
/* Purges the free slots of abandoned segments whose deadline has passed
 * (all with force); at most one pass every few ms, by any thread. */
FW_HIDDEN void fw_abandon_purge(uint64_t now, bool force);
FW_HIDDEN void fw_abandon_fork_prepare(void);
FW_HIDDEN void fw_abandon_fork_parent(void);
FW_HIDDEN void fw_abandon_fork_child(void);

#endif
