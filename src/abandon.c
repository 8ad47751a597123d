/* abandon.c — the registry of abandoned segments.
 *
 * A segment from an arena is marked by one bit at its first chunk (arena.c):
 * whoever clears the bit owns the segment, so claiming is one atomic
 * operation, with no list to link, no lock and no ABA. The rare segments
 * with a mapping of their own (huge blocks and huge alignments, one block
 * each) wait on a list under a lock instead. A marked segment is never
 * unmapped: only its holder can free it.
 *
 * A thread that needs a segment adopts one whole (fw_abandon_reclaim_one),
 * with its free pages and the free blocks of its pages; so does a thread
 * that frees a block into one and has no room of that kind itself
 * (fw_abandon_reclaim). Any other frees the block in place and puts the
 * segment back (fw_abandon_free; the blocks it kept back for a batch, of
 * all the segment's pages at once: fw_abandon_free_lists), so that the
 * memory goes to a thread that needs it: one that took the segment over
 * because it freed into it would hold its free pages without using them.
 * A free that finds the segment held leaves its blocks on their pages as
 * remote frees and sets the chunk's park bit (arena.h); every holder takes
 * such blocks in as it puts the segment back (fw_abandon_release), so that
 * no page's last blocks wait for an adopter that may never come. The
 * purge pass takes in too what threads that saw the owner alive freed as
 * it left: every abandoned segment gets a deadline, for one look at least.
 * When its thread leaves, a segment's free pages
 * are purged but for a few (FW_EXIT_WARM); those, and the pages that frees
 * empty later, stay warm for an adopter until the segment's deadline, when
 * the purge pass purges them. See alloc.c for the whole design. */
#include "abandon.h"
#include "segment.h"
#include "arena.h"
#include "page.h"
#include "os.h"
#include "options.h"
#include "stats.h"

static fw_lock_t fw_abandoned_lock = FW_LOCK_INIT;
static fw_segment_t *fw_abandoned_direct;          /* guarded by fw_abandoned_lock */
static _Atomic(size_t) fw_abandoned_direct_count;  /* read without the lock as a hint */
static _Atomic(uint64_t) fw_abandon_next_purge;

static void fw_direct_push(fw_segment_t *seg) {
  fw_lock_acquire(&fw_abandoned_lock);
  seg->aprev = NULL;
  seg->anext = fw_abandoned_direct;
  if (seg->anext) seg->anext->aprev = seg;
  fw_abandoned_direct = seg;
  seg->abandoned = 1;
  fw_lock_release(&fw_abandoned_lock);
  atomic_fetch_add_explicit(&fw_abandoned_direct_count, 1, memory_order_relaxed);
}

/* seg NULL: any one. */
static fw_segment_t *fw_direct_take(fw_segment_t *seg) {
  if (atomic_load_explicit(&fw_abandoned_direct_count, memory_order_relaxed) == 0) return NULL;
  fw_lock_acquire(&fw_abandoned_lock);
  if (!seg) seg = fw_abandoned_direct;
  if (seg && seg->abandoned) {
    if (seg->aprev) seg->aprev->anext = seg->anext;
    else fw_abandoned_direct = seg->anext;
    if (seg->anext) seg->anext->aprev = seg->aprev;
    seg->anext = seg->aprev = NULL;
    seg->abandoned = 0;
    atomic_fetch_sub_explicit(&fw_abandoned_direct_count, 1, memory_order_relaxed);
  } else {
    seg = NULL;
  }
  fw_lock_release(&fw_abandoned_lock);
  return seg;
}

static bool fw_abandon_claim(fw_segment_t *seg) {
  if (seg->direct) return fw_direct_take(seg) != NULL;
  return fw_arena_unmark(seg->arena, seg->chunk);
}

static uint64_t fw_due_min(uint64_t a, uint64_t b) { return !a ? b : !b ? a : a < b ? a : b; }

/* The deadline the held segment was put back with last time (0: none). */
static uint64_t fw_abandon_held_due(fw_segment_t *seg) {
  return seg->direct ? 0 : fw_arena_due(seg->arena, seg->chunk);
}

/* With seg held: gives back a page with no live block left; true if the
 * segment went with it (then touch nothing more). warm: see abandon.h. */
static bool fw_abandon_page_free(fw_segment_t *seg, fw_page_t *page, bool warm) {
  bool last = seg->pages_used == 1;
  if (warm) fw_segment_page_free_warm(page);
  else fw_segment_page_free(NULL, page);  /* purged at once: nobody may run a pass for it */
  if (last) fw_stat_sub(abandoned, 1);
  return last;
}

/* With seg held: takes in the remote frees waiting on its pages, and gives
 * back the pages that leaves empty; true if the segment went. Remote frees
 * wait there when their thread found the segment held (fw_abandon_park)
 * or its owner still alive as it was leaving: without this, a page's last
 * blocks so freed would keep the page and its segment until an adopter or
 * a later free into that page came. */
static bool fw_abandon_collect(fw_segment_t *seg, bool warm) {
  for (size_t i = 0; i < FW_SLICES; i += seg->page_slices) {
    fw_page_t *pg = &seg->pages[i];
    if (pg->flags & (FW_PF_UNUSED | FW_PF_REDIRECT)) continue;
    if (FW_XFREE_LIST(atomic_load_explicit(&pg->xfree, memory_order_acquire)) == NULL) continue;
    fw_page_collect(pg);
    if (pg->used == 0 && fw_abandon_page_free(seg, pg, warm)) return true;
  }
  return false;
}

void fw_abandon_release(fw_segment_t *seg, uint64_t due, bool warm) {
  if (seg->direct) {
    fw_direct_push(seg);
    return;
  }
  fw_arena_t *a = seg->arena;
  uint32_t chunk = seg->chunk;
  for (;;) {
    if (fw_arena_take_parked(a, chunk)) {
      if (fw_abandon_collect(seg, warm)) return;
      due = fw_due_min(due, fw_segment_abandon_due(seg));
    }
    fw_arena_mark(a, chunk, due);
    /* a thread may have parked work after the look above and failed to
     * hold the segment before the mark went back (fw_arena_park) */
    if (!fw_arena_parked(a, chunk) || !fw_arena_unmark(a, chunk)) return;
    due = fw_arena_due(a, chunk);
  }
}

/* For a thread that could not hold seg (another thread holds it, or owns
 * it again): the lists go onto their pages as remote frees, and the park
 * bit asks the holder to take them in as it puts the segment back (or this
 * thread holds it now, and does so itself). An owner takes them in as any
 * remote frees, and its segment's bit is left for a later holder, which
 * finds nothing to do. */
static void fw_abandon_park(fw_segment_t *seg, const fw_rfree_t *lists, size_t count, bool warm) {
  /* read before the lists go: the segment may go with them */
  bool direct = seg->direct;
  fw_arena_t *a = seg->arena;
  uint32_t chunk = seg->chunk;
  for (size_t k = 0; k < count; k++)
    fw_page_free_remote_list(lists[k].page, lists[k].head, lists[k].tail, lists[k].n);
  if (direct) return;  /* held only by an adopter, who owns it from then on */
  fw_arena_park(a, chunk);
  /* Held: it is a segment at seg's place, this one or one made there since */
  if (fw_arena_unmark(a, chunk)) fw_abandon_release(seg, fw_arena_due(a, chunk), warm);
}

/* The free memory an exiting thread leaves warm in a segment: in one with
 * live blocks, for the thread that adopts it and sets up its next pages
 * there (1 MiB: 16 small pages); in an empty one, which goes back to the
 * arena, for the next segment placed on the chunk, which takes its header
 * and first slots first. A medium segment with live blocks keeps all its
 * free pages: a medium block brings in only the 4 KiB pages its owner
 * touches, so a free medium page holds little resident memory, while its
 * reuse saves page faults. Chosen on bench_threadwave (waves of 2 and 8
 * threads): more costs RSS, less costs page faults. */
#define FW_EXIT_WARM (16 * FW_SLICE_SIZE)
#define FW_EXIT_WARM_EMPTY (4 * FW_SLICE_SIZE)

static size_t fw_exit_warm(const fw_segment_t *seg) {
  if (seg->pages_used == 0) return FW_EXIT_WARM_EMPTY;
  return seg->kind == FW_KIND_MEDIUM ? FW_SEGMENT_SIZE : FW_EXIT_WARM;
}

/* An empty segment with little resident memory in all (a quarter of what
 * an empty one keeps warm; one mincore call to tell) stays warm whole: its
 * purge would give back little, and the next segment placed on its chunk
 * finds every page it touched still there. That is a segment of big
 * buffers whose owner wrote only their first and last pages: bench_objects
 * at 1 MiB on 4 threads (2 cores: the later threads start as the first
 * ones exit) took 536 to 622 page faults, against 207 on one thread and
 * rpmalloc's 224 to 378 on 4, its threads' blocks placed on memory just
 * purged. */
/* The empty span segments of one thread hold big blocks of one program,
 * alike as a rule: once FW_EXIT_LOOKS of them agree, the rest take their
 * verdict unlooked. Each look is a walk of 4 MiB of page tables in the
 * kernel: an exiting thread that held 23 empty segments of blocks of 1 MiB
 * spent about 0.1 ms in them (bench_objects --total 64 --size 1048576,
 * perf: mincore's walk 3.9 % of the process's samples; 0.73 ms a run,
 * 0.60 with no looks at all). */
#define FW_EXIT_LOOKS 4
typedef struct fw_exit_looks_s {
  unsigned looked, sparse;
} fw_exit_looks_t;

static bool fw_exit_sparse(const fw_segment_t *seg, fw_exit_looks_t *looks) {
  if (seg->pages_used != 0 || seg->direct || fw_opt(PURGE_DELAY) <= 0) return false;
  bool span = seg->kind == FW_KIND_SPAN;
  if (span && looks->looked >= FW_EXIT_LOOKS && (looks->sparse == 0 || looks->sparse == looks->looked))
    return looks->sparse != 0;
  size_t res = fw_os_resident(seg, FW_SEGMENT_SIZE);
  bool sparse = res != SIZE_MAX && res <= FW_EXIT_WARM_EMPTY / 4;
  if (span) looks->looked++, looks->sparse += sparse;
  return sparse;
}

void fw_abandon_segments(fw_tld_t *tld) {
  /* The free memory of an exiting thread goes back to the OS now, but for a
   * little in each segment: waiting for its purge delay, it would stay
   * committed until some other thread's purge pass, while threads that
   * come and go faster than the delay (a pool torn down and rebuilt, a
   * thread per task) touch new memory meanwhile. A purge delay of -1 asks
   * for none. */
  bool purge = fw_opt(PURGE_DELAY) >= 0;
  fw_exit_looks_t looks = {0, 0};
  fw_segment_t *seg = tld->segments;
  while (seg) {
    fw_segment_t *next = seg->next;
    if (purge && !fw_exit_sparse(seg, &looks)) fw_segment_purge_free(seg, fw_exit_warm(seg));
    if (seg->pages_used == 0) {
      fw_segment_free_empty(tld, seg, false);
      seg = next;
      continue;
    }
    /* A thread that saw this one alive may still free into the segment
     * after it is put back: the purge pass looks at it once, whatever its
     * free pages (fw_abandon_collect). */
    uint64_t due = fw_segment_abandon_due(seg);
    if (!due && fw_opt(PURGE_DELAY) > 0) due = fw_os_clock_ms() + (uint64_t)fw_opt(PURGE_DELAY);
    fw_segment_detach(tld, seg);
    for (size_t i = 0; i < FW_SLICES; i += seg->page_slices) {
      fw_page_t *pg = &seg->pages[i];
      if (pg->flags & (FW_PF_UNUSED | FW_PF_REDIRECT)) continue;
      FW_ASSERT(atomic_load_explicit(&pg->heap, memory_order_relaxed) == NULL && !(pg->flags & FW_PF_FULL));
      pg->next = pg->prev = NULL;
      /* a thread that gets this thread's pointer later must not take the
       * free fast path into this page */
      __atomic_store_n(&pg->tag, 0, __ATOMIC_RELAXED);
    }
    fw_stat_add(abandoned, 1);
    fw_stat_add(abandoned_total, 1);
    fw_abandon_release(seg, due, true);
    seg = next;
  }
}

/* Takes a segment the caller now holds into heap. Pages with no live
 * block go back at once, and with them possibly the whole segment. */
static void fw_abandon_adopt(fw_heap_t *heap, fw_segment_t *seg) {
  FW_ASSERT(heap->is_default);
  fw_stat_sub(abandoned, 1);
  fw_stat_add(adopted_total, 1);
  fw_segment_attach(heap->tld, seg);
  bool large = seg->kind == FW_KIND_LARGE;
  for (size_t i = 0; i < FW_SLICES; i += seg->page_slices) {
    fw_page_t *pg = &seg->pages[i];
    if (pg->flags & (FW_PF_UNUSED | FW_PF_REDIRECT)) continue;
    bool last = seg->pages_used == 1;
    /* with its last page freed the segment is gone: touch nothing more */
    if (!fw_page_adopt(heap, pg) && last) break;
    if (large) break;
  }
}

bool fw_abandon_reclaim_one(fw_heap_t *heap) {
  fw_segment_t *seg = fw_arena_unmark_any();
  if (!seg) seg = fw_direct_take(NULL);
  if (!seg) return false;
  fw_abandon_adopt(heap, seg);
  return true;
}

bool fw_abandon_reclaim(fw_heap_t *heap, fw_segment_t *seg) {
  if (!fw_abandon_claim(seg)) return false;
  fw_abandon_adopt(heap, seg);
  return true;
}

/* With the segment held: n blocks of page, linked as remote frees link
 * them (one alone: n = 1), into the page. True if that leaves it empty,
 * which it can only at the last block: the list's blocks count as live. */
static bool fw_abandon_push(fw_page_t *page, fw_block_t *b, uint32_t n) {
  fw_page_collect(page);
  bool empty = false;
  while (n--) {
    fw_block_t *next = NULL;
    if (n) {
      /* another thread's list: its links are checked as an owner checks
       * the remote frees it takes */
      uintptr_t t = fw_link_decode(b);
      next = (fw_block_t *)(t ^ (uintptr_t)b);
      if (fw_unlikely(FW_LINK_BAD_PAGE(t, page))) fw_list_corrupt(page, b, t);
    }
    empty = fw_page_push(page, b);
    b = next;
  }
  return empty;
}

void fw_abandon_free_lists(fw_segment_t *seg, const fw_rfree_t *lists, size_t count, bool warm) {
  if (!fw_abandon_claim(seg)) {
    fw_abandon_park(seg, lists, count, warm);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    fw_page_t *page = lists[i].page;
    if (!fw_abandon_push(page, lists[i].head, lists[i].n)) continue;
    /* the segment goes with its last page; the lists' other pages hold
     * live blocks until their turn, so only the last list's can be that */
    if (fw_abandon_page_free(seg, page, warm)) {
      FW_ASSERT(i + 1 == count);
      return;
    }
  }
  fw_abandon_release(seg, fw_due_min(fw_abandon_held_due(seg), fw_segment_abandon_due(seg)), warm);
}

void fw_abandon_free(fw_segment_t *seg, fw_page_t *page, fw_block_t *b, bool warm) {
  fw_rfree_t one = {.page = page, .head = b, .tail = b, .n = 1, .limit = 1};
  fw_abandon_free_lists(seg, &one, 1, warm);
}

void fw_abandon_purge(uint64_t now, bool force) {
  if (fw_arena_marked() == 0) return;
  if (!force) {
    uint64_t next = atomic_load_explicit(&fw_abandon_next_purge, memory_order_relaxed);
    if (now < next) return;
    if (!atomic_compare_exchange_strong(&fw_abandon_next_purge, &next, now + 5)) return;
  }
  size_t cursor = 0;
  fw_segment_t *seg;
  while ((seg = fw_arena_unmark_due(now, force, &cursor)) != NULL) {
    if (fw_abandon_collect(seg, false)) continue;
    fw_segment_purge_slots_now(seg);
    fw_abandon_release(seg, 0, false);
  }
}

void fw_abandon_fork_prepare(void) { fw_lock_acquire(&fw_abandoned_lock); }
void fw_abandon_fork_parent(void) { fw_lock_release(&fw_abandoned_lock); }
void fw_abandon_fork_child(void) { fw_lock_reset(&fw_abandoned_lock); }
