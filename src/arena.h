/* arena.h — address space in FW_SEGMENT_SIZE (4 MiB) chunks. Arenas are
 * large reservations whose chunks are claimed and released with one atomic
 * operation on a bitmap word; nothing here knows what a segment is. Each
 * chunk also carries a "mark" bit and a deadline for the layer above (the
 * abandoned-segment registry): setting and taking a mark is one atomic too. */
#ifndef FW_ARENA_H
#define FW_ARENA_H
#include "types.h"

/* chunks * FW_SEGMENT_SIZE bytes, FW_SEGMENT_SIZE-aligned; *is_zero tells
 * whether the memory is known to read as zero. NULL: no address space. */
FW_HIDDEN void *fw_arena_alloc(size_t chunks, fw_arena_t **arena, uint32_t *chunk, bool *is_zero);
/* Claims the more chunks right after [chunk, chunk + chunks), which the
 * caller holds, if they are free (and in the same bitmap word); false if
 * not. They may be dirty: nothing says they read as zero. */
FW_HIDDEN bool fw_arena_extend(fw_arena_t *arena, uint32_t chunk, size_t chunks, size_t more);
/* Transparent huge pages for chunks the caller holds (huge), or none; a
 * madvise only where their state changes. An arena starts with none but
 * under FREEWAY_THP=1. Before the chunks are touched: the kernel decides at
 * the first fault in each 2 MiB. Returns whether they are advised huge now. */
FW_HIDDEN bool fw_arena_set_huge(fw_arena_t *arena, uint32_t chunk, size_t chunks, bool huge);
/* Of chunks the caller holds advised huge: the half (2 MiB, one huge page)
 * numbered keep (2 * chunk + 0 or 1; SIZE_MAX for none) is advised 4 KiB
 * pages; with others_back, every other half of them that was advised so
 * apart gets the huge advice back. The record stays with the chunks when
 * they are given back, so that a chunk whose next block ends where the
 * last one did takes no madvise (the layer above's big blocks, churned). */
FW_HIDDEN void fw_arena_set_tail(fw_arena_t *arena, uint32_t chunk, size_t chunks, size_t keep,
                                 bool others_back);
/* purge_now: purge at once instead of after FREEWAY_PURGE_DELAY. Any run of
 * chunks the caller holds may be given back, not only a whole claim. */
FW_HIDDEN void fw_arena_free(fw_arena_t *arena, uint32_t chunk, size_t chunks, bool purge_now);
/* The chunks of a block above 2 MiB: they stay warm for FW_ARENA_LARGE_ROUNDS
 * purge delays (see fw_segment_large_alloc for why). */
#define FW_ARENA_LARGE_ROUNDS 10
FW_HIDDEN void fw_arena_free_large(fw_arena_t *arena, uint32_t chunk, size_t chunks);
/* The process-wide pass over free dirty chunks whose delay is up (all of
 * them with force); one thread at a time, others skip it. */
FW_HIDDEN void fw_arena_purge(uint64_t now, bool force);
FW_HIDDEN bool fw_arena_contains(const void *p);
/* Unmaps every arena with no chunk in use (for a request that needs address
 * space of its own); their table slots are reused by later arenas. */
FW_HIDDEN size_t fw_arena_release_unused(void);
FW_HIDDEN void *fw_arena_chunk_addr(const fw_arena_t *arena, uint32_t chunk);
/* Calls fn for every mapped arena with a snapshot of its chunk bitmaps
 * (bit i of word i / 64: chunk i), for the reports (survey.c); the state
 * may have moved on by the time fn looks. */
typedef void fw_arena_visit_fn(uint8_t *base, uint32_t chunks, const uint64_t *inuse, const uint64_t *dirty,
                               void *arg);
FW_HIDDEN void fw_arena_visit(fw_arena_visit_fn *fn, void *arg);

/* ---- marks ---------------------------------------------------------------- */
FW_HIDDEN void fw_arena_mark(fw_arena_t *arena, uint32_t chunk, uint64_t due);
/* The deadline a chunk was last marked with; for the chunk's holder. */
FW_HIDDEN uint64_t fw_arena_due(fw_arena_t *arena, uint32_t chunk);
/* Clears the mark if set; true: this caller cleared it. */
FW_HIDDEN bool fw_arena_unmark(fw_arena_t *arena, uint32_t chunk);
/* Clears any one mark; returns its chunk's address, or NULL. */
FW_HIDDEN void *fw_arena_unmark_any(void);
/* Clears the next mark (from *cursor on) whose deadline is set and past
 * (any set deadline with force); returns its chunk's address, or NULL at the
 * end. *cursor starts at 0. */
FW_HIDDEN void *fw_arena_unmark_due(uint64_t now, bool force, size_t *cursor);
FW_HIDDEN size_t fw_arena_marked(void);
/* A chunk's "park" bit: a thread that could not take the mark (someone holds
 * the chunk) left work for the holder. fw_arena_park sets it; a holder that
 * has put the mark back and then finds it set takes the mark again if it
 * can (fw_arena_parked, then fw_arena_unmark), and clears it while holding
 * (fw_arena_take_parked: true if it was set). Ordered so that either the
 * parking thread's next unmark or the holder's look succeeds (arena.c). */
FW_HIDDEN void fw_arena_park(fw_arena_t *arena, uint32_t chunk);
FW_HIDDEN bool fw_arena_parked(fw_arena_t *arena, uint32_t chunk);
FW_HIDDEN bool fw_arena_take_parked(fw_arena_t *arena, uint32_t chunk);

FW_HIDDEN void fw_arena_fork_prepare(void);
FW_HIDDEN void fw_arena_fork_parent(void);
FW_HIDDEN void fw_arena_fork_child(void);

#endif
