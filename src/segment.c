/* segment.c — segments: FW_SEGMENT_SIZE-aligned memory owned by one thread,
 * split into pages of one kind (64 small pages of 64 KiB, 8 medium pages of
 * 512 KiB, spans of 1..32 slices holding one large block each, or one large
 * page holding a single block bigger than that). The header at the start
 * holds every page descriptor, so a pointer's page is found by masking.
 * Free pages stay "dirty" for FREEWAY_PURGE_DELAY ms, then their memory goes
 * back to the OS (or at once when no thread owns the segment). What happens
 * to a segment when its thread exits is the abandon layer's business
 * (abandon.c); this file only attaches and detaches. See alloc.c for the
 * whole design. */
#include "segment.h"
#include "arena.h"
#include "os.h"
#include "options.h"
#include "stats.h"
#include "message.h"
#include <string.h>

uint64_t fw_segment_cookie_key = 0x9e3779b97f4a7c15ull;

/* Cautious mode and the secure level check every free: their pages carry a
 * flag, which keeps the free fast path's one compare from matching. */
static uint8_t fw_checked_flag(void) { return (fw_opt(CAUTIOUS) || fw_secure) ? FW_PF_CHECKED : 0; }

/* The secure level ends every segment with an inaccessible OS page, so that
 * a write running off the end of the last block of a segment faults instead
 * of reaching the next segment's header. Its slot's pages are that much
 * shorter; spans never use the last slice; a large block's segment is made
 * that much longer. */
static size_t fw_guard_bytes(void) { return fw_secure ? fw_os_page_size() : 0; }

static void fw_segment_guard(fw_segment_t *seg, bool guard) {
  size_t g = fw_guard_bytes();
  if (g && !fw_os_guard((uint8_t *)seg + seg->size - g, g, guard) && guard)
    fw_message("warning: no guard page for the segment at %p (mprotect refused)\n", (void *)seg);
}

static size_t fw_slot_bytes(const fw_segment_t *seg) {
  return (size_t)seg->page_slices * FW_SLICE_SIZE;
}

/* What purging the page slots in bits takes from the committed memory:
 * whole slots, but for slot 0 the header, which stays. */
static size_t fw_slots_committed(const fw_segment_t *seg, uint64_t bits) {
  return (size_t)fw_popcount64(bits) * fw_slot_bytes(seg) - ((bits & 1) ? FW_SEGMENT_HEADER : 0);
}

/* The usable memory of page slot i (slot 0 starts after the header). */
static uint8_t *fw_slot_area(fw_segment_t *seg, size_t i, size_t *size) {
  uint8_t *start = (uint8_t *)seg + i * fw_slot_bytes(seg);
  size_t n = fw_slot_bytes(seg);
  if (i == 0) { start += FW_SEGMENT_HEADER; n -= FW_SEGMENT_HEADER; }
  if (i + 1 == seg->pages_total) n -= fw_guard_bytes();
  *size = n;
  return start;
}

/* Segments with free slots are listed for allocation: small and medium by
 * kind, span segments in bins by their longest run of free slices, so that
 * a span of n slices is found in the smallest bin >= n (best fit) without
 * visiting segments that cannot hold it. */
static fw_segment_t **fw_free_head(fw_tld_t *tld, fw_segment_t *seg) {
  return seg->kind == FW_KIND_SPAN ? &tld->span_bins[seg->span_bin] : &tld->segments_free[seg->kind];
}

static void fw_tld_unlink_free(fw_tld_t *tld, fw_segment_t *seg) {
  if (!seg->in_free_list) return;
  seg->in_free_list = 0;
  fw_segment_t **head = fw_free_head(tld, seg);
  if (seg->fprev) seg->fprev->fnext = seg->fnext;
  else *head = seg->fnext;
  if (seg->fnext) seg->fnext->fprev = seg->fprev;
  seg->fnext = seg->fprev = NULL;
  if (seg->kind == FW_KIND_SPAN && !*head) tld->span_binmap &= ~((uint64_t)1 << seg->span_bin);
}

/* Lists a segment with a free slot; a span segment moves to the bin of its
 * longest free run (call it after every change of its free slices). */
static void fw_tld_link_free(fw_tld_t *tld, fw_segment_t *seg) {
  if (seg->kind == FW_KIND_SPAN) {
    unsigned bin = fw_mask_longest_run(seg->free_mask);
    if (seg->in_free_list && seg->span_bin == bin) return;
    fw_tld_unlink_free(tld, seg);
    if (!bin) return;
    seg->span_bin = (uint8_t)bin;
    tld->span_binmap |= (uint64_t)1 << bin;
  } else if (seg->in_free_list) {
    return;
  }
  seg->in_free_list = 1;
  fw_segment_t **head = fw_free_head(tld, seg);
  seg->fprev = NULL;
  seg->fnext = *head;
  if (*head) (*head)->fprev = seg;
  *head = seg;
}

static void fw_tld_link(fw_tld_t *tld, fw_segment_t *seg) {
  if (seg->kind == FW_KIND_SMALL) tld->segments_small++;
  seg->tld = tld;
  seg->prev = NULL;
  seg->next = tld->segments;
  if (tld->segments) tld->segments->prev = seg;
  tld->segments = seg;
}

static void fw_tld_unlink(fw_tld_t *tld, fw_segment_t *seg) {
  if (seg->kind == FW_KIND_SMALL) tld->segments_small--;
  if (seg->prev) seg->prev->next = seg->next;
  else tld->segments = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  seg->next = seg->prev = NULL;
  fw_tld_unlink_free(tld, seg);
}

/* Address space for a segment: arena chunks when it fits an arena and needs
 * no alignment beyond a chunk's, else a mapping of its own placed so that
 * (memory + offset) is align-aligned. */
static uint8_t *fw_segment_memory(size_t chunks, size_t align, size_t offset, fw_arena_t **arena,
                                  uint32_t *chunk, bool *is_zero) {
  if (chunks <= FW_ARENA_MAX_CHUNKS && align <= FW_SEGMENT_SIZE) {
    uint8_t *mem = fw_arena_alloc(chunks, arena, chunk, is_zero);
    if (mem) return mem;
  }
  if (chunks > SIZE_MAX / FW_SEGMENT_SIZE) return NULL;
  if (align < FW_SEGMENT_SIZE) align = FW_SEGMENT_SIZE, offset = 0;
  size_t bytes = chunks * FW_SEGMENT_SIZE;
  uint8_t *mem = fw_os_map(bytes, align, offset);
  /* idle arenas may be what keeps the address space short (RLIMIT_AS) */
  if (!mem && fw_arena_release_unused()) mem = fw_os_map(bytes, align, offset);
  if (!mem) return NULL;
  *arena = NULL;
  *chunk = 0;
  *is_zero = true;
  fw_stat_add(reserved, bytes);
  fw_stat_commit(bytes);
  fw_stat_add(direct, bytes);
  fw_stat_add(huge, 1);
  return mem;
}

/* Transparent huge pages (FREEWAY_THP=2) for a new segment of small pages
 * once the thread holds FW_THP_AFTER of them already. A segment is made
 * only when every one the thread holds is full, so the thread has filled
 * that many (4 MiB) if it has carved them into blocks (which is checked:
 * fw_segment_small_dense); the rounding of huge pages (at most the 2 MiB
 * half segment being filled, whose pages would otherwise come in 4 KiB at
 * a time) is then small beside what it holds, while one fault brings in 512
 * pages, for far less kernel time per byte (measured on a 2-core VM: 100
 * MiB written once took 5 ms in huge pages, 35 to 45 ms in 4 KiB ones). A
 * thread below that keeps 4 KiB pages, so that a small program's RSS tracks
 * its use, but for the upper half of its first segment when it reaches it
 * piling blocks up (fw_segment_upper_wants_huge). (From the second segment
 * rather than the third: bench_frag's rows of 2 to 8 threads holding 5 to
 * 19 MB each took 0.65 to 0.98 of the time per loop, for up to 1.3 times
 * the RSS in the rows of 10 threads of 3.5 MB. Huge pages in the upper half
 * of every thread's first segment, once its lower half was in use, took
 * 0.65 to 0.78 in the rows of 8 to 12 threads too, but reached that half at
 * about 1 MB of blocks, spread over one page per size class: larson and
 * threadwave, whose threads hold 2 to 4 MB, had 1.5 to 2 times the RSS.)
 * Small pages only from the start: small blocks are touched as they are
 * carved (a link at the start of each), where a medium page's blocks (8 to
 * 128 KiB) may be calloc'd and left mostly untouched, and a huge page would
 * bring them in whole (tests/rss.c calloc_fresh); medium pages get them
 * only in the upper half of a segment (below). Not with a purge delay of 0, which
 * asks for every free page back at once: a huge page would be split by its
 * first purge. */
#define FW_THP_AFTER 1
/* A block above 4 MiB (a segment of two chunks or more) gets huge pages
 * too: such a buffer is written whole more often than not, and the rounding
 * (at most the 2 MiB page its end falls in) is under half of what it holds.
 * bench_bigchurn (blocks of 5 to 25 MiB) faulted its 100 MiB in 25,000
 * times in 4 KiB pages, 56 times in huge ones. A big block that is calloc'd
 * and then touched only here and there is the cost: each 2 MiB range
 * touched comes in whole, as with mimalloc, which uses huge pages for all
 * of its memory. */
#define FW_THP_LARGE_CHUNKS 2

/* Blocks of 1 to 4 MiB (spans of 17 to 32 slices, and segments of one
 * chunk of their own) get huge pages from a thread that has been seen to
 * write such blocks through. Whether it does cannot be told from its
 * requests, and the two kinds of program want opposite things: one that
 * fills its buffers of a few MiB and frees them, over and over (decoders,
 * compressors, batch and image processing), faults every 4 KiB of them in,
 * and again after each purge (bench_bigchurn --ops 2000 --min 1MiB --max
 * 4MiB, medians of 9 alternating runs: 6,200 faults and 40.9 ms, against
 * 13 to 17 faults and 15.1 to 16.0 ms for mimalloc 2.3 and 3.3, which back
 * all their memory with huge pages; with the looks below, 527 faults and
 * 17.9 ms, the faults being those of the first block, where two looks in a
 * row took the first two: 1,051 faults and 19.0 ms); one that
 * writes a header and a trailer, or callocs an array it touches here and
 * there, would have each such block brought in whole (bench_speed with 16
 * threads, 256 B to 2 MiB, first and last byte written: 74 MiB of peak RSS
 * in 4 KiB pages, 500 MiB in huge ones). So the owner's free of a big
 * block in 4 KiB pages now and then looks at how much of the block's first
 * MiB is resident (fw_os_resident, one mincore call): a look (FW_BIG_WHOLE
 * in a row) that finds 7/8 of it there makes the thread's new span segments and
 * one-chunk blocks huge, and each span of 1 MiB or more it places in a
 * segment of 4 KiB pages advises that segment (already resident pages stay
 * as they are; ranges not touched yet come in 2 MiB at a time). A look
 * that finds less puts the thread back. Looks that agree with the one
 * before come at twice the interval, up to one in FW_BIG_EVERY_MAX big
 * frees; one that disagrees brings the next one at once: a thread that
 * never writes its big blocks through pays a few dozen system calls at
 * most, then one per thousand frees. The look sees the block's memory,
 * not the block: a block placed on pages a block before it wrote counts as
 * written, which is what matters, since those pages are resident either
 * way.
 * A program that makes its first few big buffers before it frees any
 * (three slots filled, a list of tiles) would have them all in 4 KiB
 * pages, so until the first look at a free the thread's next big malloc
 * also looks at the block placed before it (FW_BIG_EARLY times at most):
 * one found written through counts as at a free; one not written yet says
 * nothing (its thread may fill it later), and is left to the frees. */
#define FW_BIG_LOOK ((size_t)1 << 20)
#define FW_BIG_WHOLE 1
#define FW_BIG_EVERY_MAX 1024
static bool fw_segment_big_whole(const fw_tld_t *tld) { return tld && tld->big_whole >= FW_BIG_WHOLE; }

#define FW_BIG_EARLY 4
/* A segment in 4 KiB pages that huge pages could be asked for: where a
 * look can see something, and where a decision can act. */
static bool fw_segment_big_looks(const fw_segment_t *seg) {
  return !seg->huge && seg->arena && fw_opt(THP) == FW_THP_AUTO && fw_opt(PURGE_DELAY) != 0;
}

/* 1: the first FW_BIG_LOOK bytes at p are written through, 0: not, -1: the
 * OS cannot tell. */
static int fw_segment_big_written(const uint8_t *p) {
  size_t res = fw_os_resident(p, FW_BIG_LOOK);
  return res == SIZE_MAX ? -1 : res >= FW_BIG_LOOK / 8 * 7;
}

void fw_segment_big_early(fw_tld_t *tld) {
  const uint8_t *last = tld->big_last;
  if (!last) return;
  tld->big_last = NULL;
  tld->big_early++;
  if (fw_segment_big_written(last) == 1 && tld->big_whole < UINT8_MAX) tld->big_whole++;
}

void fw_segment_big_placed(fw_tld_t *tld, const fw_page_t *page) {
  if (tld->big_every == 0 && tld->big_early < FW_BIG_EARLY && tld->big_whole < FW_BIG_WHOLE &&
      fw_segment_big_looks(fw_page_segment(page)))
    tld->big_last = page->area;
}

void fw_segment_big_look(fw_tld_t *tld, const fw_page_t *page) {
  FW_ASSERT(page->kind == FW_KIND_LARGE && page->block_size > FW_BIG_MIN);
  if (tld->big_last == page->area) tld->big_last = NULL;  /* looked at here instead */
  const fw_segment_t *seg = fw_page_segment(page);
  if (!fw_segment_big_looks(seg)) {
    /* Nothing to see in huge pages, so a decision would stand for good:
     * it lapses after FW_BIG_EVERY_MAX such frees, and the thread's next
     * big blocks go to 4 KiB pages (the segments purged in part since,
     * new ones) and are looked at again. */
    if (seg->huge && tld->big_whole >= FW_BIG_WHOLE && ++tld->big_huge >= FW_BIG_EVERY_MAX)
      tld->big_whole = 0, tld->big_every = 0, tld->big_wait = 0, tld->big_huge = 0;
    return;
  }
  if (tld->big_wait) {
    tld->big_wait--;
    return;
  }
  int written = fw_segment_big_written(page->area);
  if (written < 0) {
    tld->big_wait = UINT16_MAX;  /* the OS cannot tell: rarely ask again */
    return;
  }
  bool whole = written == 1, was = tld->big_whole > 0;
  if (!whole) tld->big_whole = 0;
  else if (tld->big_whole < UINT8_MAX) tld->big_whole++;
  unsigned every = whole == was && tld->big_every ? 2u * tld->big_every : 1u;
  tld->big_every = (uint16_t)(every < FW_BIG_EVERY_MAX ? every : FW_BIG_EVERY_MAX);
  tld->big_wait = (uint16_t)(tld->big_every - 1);
}

/* A new segment of small pages gets huge pages (FW_THP_AFTER, above) only
 * if the thread's newest segments of small pages (up to FW_THP_LOOK) have
 * FW_THP_CARVED_EIGHTHS of their bytes carved into blocks. Every slot
 * taken is not every byte written: a thread that keeps a few blocks of
 * each of many sizes takes a page for each (64 KiB) and carves little of
 * it, and its second segment in huge pages would be mostly memory it
 * never writes. Measured as the segment is made: a thread
 * piling blocks up has carved 0.77 to 0.96 of them (bench_churn,
 * bench_frag), bench_rptest's 16 threads 0.39 to 0.46, bench_xmalloc's
 * producers 0.34 to 0.41, bench_prodcons' 0.42 to 0.52. */
#define FW_THP_LOOK 2
#define FW_THP_CARVED_EIGHTHS 5
/* Whether the thread's newest FW_THP_LOOK segments of small pages have
 * FW_THP_CARVED_EIGHTHS of their bytes carved into blocks. */
static bool fw_segment_small_dense(const fw_tld_t *tld) {
  size_t n = 0, carved = 0;
  for (const fw_segment_t *seg = tld->segments; seg && n < FW_THP_LOOK; seg = seg->next) {
    if (seg->kind != FW_KIND_SMALL) continue;
    n++;
    for (uint64_t used = ~seg->free_mask & fw_mask_low(seg->pages_total); used; used &= used - 1) {
      const fw_page_t *pg = &seg->pages[fw_ctz64(used)];
      carved += (size_t)pg->capacity * pg->block_size;
    }
  }
  return carved >= n * FW_SEGMENT_SIZE / 8 * FW_THP_CARVED_EIGHTHS;
}

static bool fw_segment_wants_huge(const fw_tld_t *tld, int kind, size_t chunks) {
  if (fw_opt(PURGE_DELAY) == 0) return false;
  if (kind == FW_KIND_LARGE) return chunks >= FW_THP_LARGE_CHUNKS || fw_segment_big_whole(tld);
  if (kind == FW_KIND_SPAN) return fw_segment_big_whole(tld);
  return kind == FW_KIND_SMALL && tld->segments_small >= FW_THP_AFTER && fw_segment_small_dense(tld);
}
static void fw_segment_make_huge(fw_segment_t *seg);

/* The two kinds are counted apart, so that neither's empty segments count
 * against the other's cap, nor a span segment's reuse raises the cap of
 * segments of small blocks (rss.c's quiet_rounds_spans). */
static size_t *fw_segments_empty(fw_tld_t *tld, const fw_segment_t *seg) {
  return &tld->segments_empty[seg->kind == FW_KIND_SPAN];
}

/* A thread that needs a new segment of one chunk and keeps an empty one of
 * another kind gives that one back first, warm: the arena hands out warm
 * chunks first (arena.c), so the new segment takes the memory the empty one
 * had faulted in, where a fresh chunk would be faulted in anew while the
 * empty one stayed resident for a purge delay. A thread whose big blocks
 * alternate around 2 MiB (spans in span segments below, segments of their
 * own above) otherwise kept an emptied span segment and faulted in a new
 * chunk beside it: bench_bigchurn --min 1MiB --max 4MiB, peak RSS 24.5 MB
 * against 18 to 20 for mimalloc. */
static void fw_segment_rekind_empty(fw_tld_t *tld, int kind) {
  if (tld->segments_empty[0] + tld->segments_empty[1] == 0) return;
  for (fw_segment_t *seg = tld->segments; seg; seg = seg->next) {
    if (seg->pages_used == 0 && seg->kind != FW_KIND_LARGE && seg->kind != kind && !seg->direct &&
        seg->chunks == 1) {
      fw_segment_free_empty(tld, seg, false);
      return;
    }
  }
}

/* A block in huge pages that ends inside one would bring the whole of that
 * one in when its last bytes are written: malloc(4 MiB), which the header
 * pushes 12 KiB into a second chunk, took 6 MiB of RSS written through,
 * malloc(8 MiB) 10 (glibc and mimalloc: 4 and 8), and malloc(2,200,000)
 * 4 MiB (mimalloc, which packs big blocks side by side in its arenas: 2.25
 * MiB). So
 * the huge page the block ends in keeps 4 KiB pages (a block that realloc
 * grows in place into it takes 4 KiB pages there). The arena keeps the
 * advice with the chunk when the block is freed (fw_arena_set_tail): the
 * next block there, if it ends in the same huge page, takes no madvise
 * (bench_bigchurn --min 1MiB --max 4MiB: 1,376 madvise calls a run when
 * each block advised its tail and gave the advice back at its free). */
#define FW_HUGE_PAGE ((uintptr_t)2 << 20)
/* ... when the block fills at most this much of it: 128 faults at most
 * where a huge page would bring in 1.5 MiB or more it does not use.
 * malloc(2,200,000) 16 times, written through: 63,596 KiB of RSS before,
 * 34,680 since (mimalloc 3.3: 36,868). Medians of 11 interleaved runs of
 * bench_bigchurn --ops 2000 --min 1MiB --max 4MiB: 16.0 ms at 512 KiB,
 * 15.9 at 64 KiB, 16.7 at 1 MiB; --ops 300 --min 5MiB --max 25MiB (9
 * runs): 31.0, 30.9 and 34.4 ms. */
#define FW_HUGE_TAIL_MAX ((uintptr_t)512 << 10)
/* Other halves of the chunks advised 4 KiB pages for an earlier block get
 * the huge advice back only where their memory is fresh: in a warm chunk
 * the 4 KiB pages faulted in already keep the kernel from placing a huge
 * page there whatever the advice, and blocks of sizes that alternate (or
 * chunks that go from big blocks to spans and back) would make a madvise
 * pair each (bench_bigchurn --ops 2000 --min 1MiB --max 4MiB, FW_HUGE_TAIL_MAX
 * at 1 MiB: 815 madvise calls a run while span segments gave the advice
 * back on warm chunks too; 17 as landed, at 512 KiB). */
static void fw_segment_set_tail(fw_arena_t *arena, uint32_t chunk, size_t chunks, size_t end, bool fresh) {
  size_t keep = SIZE_MAX;
  size_t in = end % FW_HUGE_PAGE;
  if (end && in && in <= FW_HUGE_TAIL_MAX) keep = 2 * (size_t)chunk + end / FW_HUGE_PAGE;
  fw_arena_set_tail(arena, chunk, chunks, keep, fresh);
}

/* end: for a LARGE block, where it ends (from mem); 0 for other kinds. */
static fw_segment_t *fw_segment_new(fw_tld_t *tld, int kind, size_t chunks, size_t align, size_t offset,
                                    size_t end, bool *is_zero) {
  if (chunks == 1 && align <= FW_SEGMENT_SIZE) fw_segment_rekind_empty(tld, kind);
  fw_arena_t *arena = NULL;
  uint32_t chunk = 0;
  uint8_t *mem = fw_segment_memory(chunks, align, offset, &arena, &chunk, is_zero);
  if (!mem) return NULL;
  /* before the header is written: the kernel picks the page size at the
   * first touch */
  bool huge = false;
  long thp = fw_opt(THP);
  if (arena && thp == FW_THP_AUTO) huge = fw_arena_set_huge(arena, chunk, chunks, fw_segment_wants_huge(tld, kind, chunks));
  else if (arena && thp == FW_THP_ALWAYS) huge = true;
  else if (!arena && thp != FW_THP_NEVER && (thp == FW_THP_ALWAYS || fw_segment_wants_huge(tld, kind, chunks)))
    huge = fw_os_thp(mem, chunks * FW_SEGMENT_SIZE, true);  /* a mapping of its own: advised alone */
  if (huge && arena) fw_segment_set_tail(arena, chunk, chunks, end, *is_zero);
  fw_segment_t *seg = (fw_segment_t *)mem;
  /* Only the header part is written: a reused chunk keeps stale page
   * descriptors, which are all rewritten below before anyone reads them.
   * thread_id is left to its atomic store: another thread may be asking
   * whether a pointer it freed a moment ago (in this memory's previous
   * life) is still in one of its heaps (fw_page_of_pointer). */
  memset((uint8_t *)seg + sizeof seg->thread_id, 0, offsetof(fw_segment_t, pages) - sizeof seg->thread_id);
  seg->kind = (uint8_t)kind;
  seg->direct = arena == NULL;
  seg->arena = arena;
  seg->chunk = chunk;
  seg->chunks = (uint32_t)chunks;
  seg->size = chunks * FW_SEGMENT_SIZE;
  seg->cookie = fw_segment_cookie(seg);
  seg->huge = huge;
  if (kind == FW_KIND_LARGE) {
    seg->page_slices = FW_SLICES;
    seg->pages_total = 1;
  } else {
    seg->page_slices = kind == FW_KIND_MEDIUM ? FW_MEDIUM_PAGE_SLICES : 1;
    seg->pages_total = FW_SLICES / seg->page_slices;
    seg->free_mask = fw_mask_low(seg->pages_total);
    /* spans start on a slice boundary (64 KiB aligned): slot 0, which holds
     * the header, serves none */
    if (kind == FW_KIND_SPAN) seg->free_mask &= ~(uint64_t)1;
    if (kind == FW_KIND_SPAN && fw_guard_bytes()) seg->free_mask &= ~((uint64_t)1 << (FW_SLICES - 1));
    seg->dirty_mask = *is_zero ? 0 : seg->free_mask;
    if (*is_zero && arena && !huge) {
      /* The arena counted the whole chunk; its untouched page slots are not
       * committed until a page is set up in them (slot 0 holds the header).
       * Huge pages bring in the slots around the ones in use too. */
      seg->purged_mask = seg->free_mask & ~(uint64_t)1;
      fw_stat_sub(committed, fw_slots_committed(seg, seg->purged_mask));
    }
    uint8_t pf = fw_checked_flag();
    for (size_t i = 0; i < FW_SLICES; i++) {
      fw_page_t *pg = &seg->pages[i];
      size_t off = i % seg->page_slices;
      pg->slice_offset = (uint16_t)off;
      pg->flags = off ? (uint8_t)(FW_PF_REDIRECT | pf) : FW_PF_UNUSED;
      pg->tag = 0;
    }
  }
  fw_segment_guard(seg, true);
  atomic_store_explicit(&seg->thread_id, tld->thread_id, memory_order_release);
  fw_tld_link(tld, seg);
  fw_stat_add(segments, 1);
  if (kind != FW_KIND_LARGE) (*fw_segments_empty(tld, seg))++;  /* until its first page */
  return seg;
}

/* Back to the arena or the OS. purge_now: an empty segment beyond the
 * thread's cache (FREEWAY_SEGMENT_CACHE), or one no thread owns, gives its
 * memory back at once instead of waiting for a purge pass that a thread
 * gone quiet would never run. */
static void fw_segment_release(fw_segment_t *seg, bool purge_now) {
  /* the arena counts a released chunk as committed until it purges it */
  if (!seg->direct) fw_stat_add(committed, fw_slots_committed(seg, seg->purged_mask));
  fw_stat_sub(segments, 1);
  seg->cookie = 0;
  atomic_store_explicit(&seg->thread_id, 0, memory_order_relaxed);
  if (!seg->direct) fw_segment_guard(seg, false);  /* the arena hands the chunks out again */
  if (seg->direct) {
    fw_stat_sub(reserved, seg->size);
    fw_stat_sub(committed, seg->size);
    fw_stat_sub(direct, seg->size);
    fw_stat_sub(huge, 1);
    fw_os_unmap(seg, seg->size);
  } else if (seg->kind == FW_KIND_LARGE && !purge_now) {
    fw_arena_free_large(seg->arena, seg->chunk, seg->chunks);
  } else {
    fw_arena_free(seg->arena, seg->chunk, seg->chunks, purge_now);
  }
}

static void fw_segment_free_ex(fw_tld_t *tld, fw_segment_t *seg, bool purge_now) {
  fw_tld_unlink(tld, seg);
  fw_segment_release(seg, purge_now);
}

static void fw_segment_free(fw_tld_t *tld, fw_segment_t *seg) { fw_segment_free_ex(tld, seg, false); }

void fw_segment_free_empty(fw_tld_t *tld, fw_segment_t *seg, bool purge) {
  FW_ASSERT(seg->pages_used == 0);
  if (seg->kind != FW_KIND_LARGE) (*fw_segments_empty(tld, seg))--;
  fw_segment_free_ex(tld, seg, purge);
}

/* How many empty segments the thread keeps warm when seg empties. One of
 * small or medium blocks was written through (its free lists live in its
 * blocks), so keeping it holds its whole size in RSS: the thread keeps as
 * many of those as it has lately put to use again before the purge delay
 * was up, at least 2, at most FREEWAY_SEGMENT_CACHE. A thread that frees a
 * burst and then goes quiet (no slow path to run the purge: bench_churn's
 * settle) keeps only what its reuse has shown it needs: bench_churn
 * --threads 2 --total 256M --settle-ms 400 ended at 162 MiB with the
 * cache's 32 (medians of 5), 50 with a flat cap of 4, which cost
 * bench_larsonsized 1-8 threads about a tenth (its rounds empty segments
 * and fill them again), 34 with this one. A span segment's memory is what
 * the program wrote of its big blocks, often a little of each (rss.c's
 * exit_sparse): those keep FREEWAY_SEGMENT_CACHE. */
#define FW_SEGMENT_CACHE_MIN 2
static size_t fw_segment_cache_cap(const fw_tld_t *tld, const fw_segment_t *seg) {
  size_t cap = FW_SEGMENT_CACHE_MIN + tld->segments_reused, most = (size_t)fw_opt(SEGMENT_CACHE);
  return cap < most && seg->kind != FW_KIND_SPAN ? cap : most;
}

/* The segment's first page since it was empty; warm: its slots were not
 * purged meanwhile (is_zero false). */
static void fw_segment_unempty(fw_tld_t *tld, const fw_segment_t *seg, bool is_zero) {
  (*fw_segments_empty(tld, seg))--;
  if (!is_zero && seg->kind != FW_KIND_SPAN && tld->segments_reused < (size_t)fw_opt(SEGMENT_CACHE))
    tld->segments_reused++;
}

static void fw_page_slot_setup(fw_segment_t *seg, size_t slot, bool is_zero) {
  fw_page_t *pg = &seg->pages[slot * seg->page_slices];
  size_t size;
  memset(pg, 0, sizeof *pg);
  pg->area = fw_slot_area(seg, slot, &size);
  pg->block_size = size;  /* the page's span until fw_page_init sets the class */
  pg->slices = seg->page_slices;
  pg->kind = seg->kind;
  pg->is_zero = is_zero;
  fw_page_flags_set(pg, fw_checked_flag());
}

/* Takes the free slots in bits for a page: they are committed from now on. */
static bool fw_segment_take_slots(fw_segment_t *seg, uint64_t bits) {
  bool is_zero = !(seg->dirty_mask & bits);
  uint64_t purged = seg->purged_mask & bits;
  if (purged) {
    fw_stat_commit(fw_slots_committed(seg, purged));
    seg->purged_mask &= ~bits;
  }
  seg->free_mask &= ~bits;
  seg->dirty_mask &= ~bits;
  seg->dirty_young &= ~bits;
  if (seg->kind == FW_KIND_SPAN) fw_tld_link_free(seg->tld, seg);
  else if (!seg->free_mask) fw_tld_unlink_free(seg->tld, seg);
  return is_zero;
}

static void fw_span_redirect(fw_page_t *page, size_t from, size_t to) {
  uint8_t pf = fw_checked_flag();
  for (size_t k = from; k < to; k++) {
    page[k].slice_offset = (uint16_t)k;
    page[k].tag = 0;
    page[k].flags = (uint8_t)(FW_PF_REDIRECT | pf);
  }
}

/* A span in a huge segment that runs one slice past its middle (every
 * span of 2 MiB: the header's slice comes first) would bring the upper huge
 * page in whole for its last 64 KiB; the lower one is resident anyway, for
 * the header. So, as for a LARGE block's tail, that huge page keeps 4 KiB
 * pages while nothing else of it has been touched. malloc(2 MiB) 16 times,
 * written through: 63,500 KiB of RSS before, 33,740 since (mimalloc 3.3:
 * 34,820). Spans placed in the upper half later fault it in 4 KiB at
 * a time: the same memory, more faults. */
static void fw_segment_span_tail(fw_segment_t *seg, size_t start, size_t n) {
  const size_t half = FW_HUGE_PAGE / FW_SLICE_SIZE;
  if (!seg->huge || seg->direct || start >= half || start + n != half + 1) return;
  uint64_t rest = ~(uint64_t)0 << (half + 1);  /* the upper half but the span's slice */
  if (fw_guard_bytes()) rest &= ~((uint64_t)1 << (FW_SLICES - 1));
  if (rest & (~seg->free_mask | seg->dirty_mask)) return;  /* touched: resident already */
  fw_arena_set_tail(seg->arena, seg->chunk, 1, 2 * (size_t)seg->chunk + 1, false);
}

fw_page_t *fw_segment_span_alloc(fw_tld_t *tld, size_t n, bool map_new) {
  FW_ASSERT(n >= 1 && n <= FW_SPAN_MAX_SLICES);
  fw_segment_t *seg = NULL;
  int start = -1;
  uint64_t bins = tld->span_binmap & (~(uint64_t)0 << n);
  if (bins) {
    seg = tld->span_bins[fw_ctz64(bins)];
    /* warm slices first (freed, not purged yet: no page faults) */
    start = fw_mask_find_run(seg->free_mask & seg->dirty_mask, n);
    if (start < 0) start = fw_mask_find_run(seg->free_mask, n);
    FW_ASSERT(start >= 1);
  }
  if (start < 0) {
    if (!map_new) return NULL;
    bool fresh;
    seg = fw_segment_new(tld, FW_KIND_SPAN, 1, 0, 0, 0, &fresh);
    if (!seg) return NULL;
    start = 1;
  }
  /* a thread that writes its big blocks through (above) */
  if (n * FW_SLICE_SIZE >= FW_BIG_MIN && fw_segment_big_whole(tld) && fw_segment_big_looks(seg))
    fw_segment_make_huge(seg);
  fw_segment_span_tail(seg, (size_t)start, n);
  uint64_t bits = fw_mask_low(n) << start;
  bool is_zero = fw_segment_take_slots(seg, bits);
  if (seg->pages_used++ == 0) fw_segment_unempty(tld, seg, is_zero);
  fw_page_t *pg = &seg->pages[start];
  memset(pg, 0, sizeof *pg);
  pg->kind = FW_KIND_LARGE;
  pg->slices = (uint16_t)n;
  pg->area = (uint8_t *)seg + (size_t)start * FW_SLICE_SIZE;
  pg->block_size = n * FW_SLICE_SIZE;
  pg->is_zero = is_zero;
  fw_span_redirect(pg, 1, n);
  fw_page_flags_set(pg, fw_checked_flag());
  FW_VALIDATE_SEGMENT(seg);
  return pg;
}

bool fw_segment_span_grow(fw_page_t *page, size_t size) {
  fw_segment_t *seg = fw_page_segment(page);
  if (seg->kind != FW_KIND_SPAN || size > FW_SPAN_MAX_SLICES * FW_SLICE_SIZE) return false;
  size_t n = (size + FW_SLICE_SIZE - 1) / FW_SLICE_SIZE;
  size_t start = (size_t)(page - seg->pages);
  if (n <= page->slices) return false;
  if (start + n > FW_SLICES) return false;
  uint64_t bits = fw_mask_low(n - page->slices) << (start + page->slices);
  if ((seg->free_mask & bits) != bits) return false;
  fw_segment_take_slots(seg, bits);
  fw_span_redirect(page, page->slices, n);
  page->slices = (uint16_t)n;
  page->block_size = n * FW_SLICE_SIZE;
  return true;
}

/* The upper half of a segment of small blocks in 4 KiB pages takes huge
 * pages when the thread reaches it while it is piling blocks up:
 * FW_THP_AFTER waits for a full segment, so a thread that holds 2 to 4 MiB
 * would otherwise fault every 4 KiB of its first segment in one by one
 * (bench_frag's rows of 8 and 10 threads spent most of their first loop in
 * the kernel). The lower half is reached with far less than 2 MiB in use,
 * spread over a page per size class, by threads that grow and by threads
 * that stay at a steady size, whose upper half would then be resident
 * for a few pages in use. What tells them apart is full pages: a thread
 * that keeps what it allocates fills page after page, one that frees as it
 * goes leaves its pages partly free. At that moment bench_frag's threads
 * of 2 to 10 threads held 0.8 to 1.8 MB with 6 to 24 of the 32 pages full,
 * bench_speed's at 8 and 10 threads 0.5 to 1 MB with at most 3 full (and
 * went from 1.4 to 2.3 times the lowest peer's peak RSS when the bytes in
 * use alone decided), larson's at most 540 KB with one, and bench_frag's
 * 12 threads, which hold 1.25 MB each and would have most of a huge page
 * idle, 0.5 to 0.8 MB with 4 or 5. Only an upper half never touched: a
 * fault where 4 KiB pages were mapped before gets no huge page.
 * A segment of medium pages (four of 512 KiB a half; any, not only the
 * thread's first) takes them for its upper half when the lower half holds
 * 1 MiB of blocks in use, unless its thread has calloc'd a block of fresh
 * memory without writing it: blocks
 * of 8 KiB and more are written mostly whole when written at all, and a
 * thread with 1 MiB of them in use fills most of a huge page, where 4 KiB
 * pages would take 512 faults for it. bench_reallocgrow (buffers grown to
 * 64 KiB) took 0.71 to 0.90 of the time, with its faults from 1,740 to
 * 750; glibcbench's thread rows (8 B to 32 KiB) had 1.16 to 1.20 times
 * the peak RSS, still 1.25 to 1.65 times the lowest peer's. (From every
 * thread's second medium segment as well: rptest and glibcbench's thread
 * rows doubled their RSS, to 1.9 to 3.1 times the lowest peer's.) */
#define FW_THP_UPPER_USED ((size_t)640 << 10)
#define FW_THP_UPPER_FULL 6
#define FW_THP_UPPER_USED_MEDIUM ((size_t)1 << 20)
static bool fw_segment_upper_wants_huge(const fw_segment_t *seg) {
  size_t slots = FW_SLICES / seg->page_slices;
  const uint64_t upper = fw_mask_low(slots) & ~fw_mask_low(slots / 2);
  if (seg->huge || !seg->arena || fw_opt(THP) != FW_THP_AUTO || fw_opt(PURGE_DELAY) == 0) return false;
  if ((seg->purged_mask & upper) != upper || (seg->free_mask & ~upper) != 0) return false;
  size_t used = 0, full = 0, blocks = 0;
  for (size_t s = 0; s < slots / 2; s++) {
    const fw_page_t *pg = &seg->pages[s * seg->page_slices];
    /* A page of the heap profiler's sampled blocks counts as full, in
     * bytes too: it takes a slot for a few blocks, and with the profiler
     * sampling every 64 KiB a thread piling up 3.5 MB of blocks of 128 B
     * to 1.25 KiB reached the upper half with 654,688 bytes in use below
     * it in one run of 600, and 736 to 820 KB in the rest (thp.sampled.prof
     * failed 1 run in 150 on a loaded machine). */
    used += (size_t)(pg->prof_side ? pg->reserved : pg->used) * pg->block_size;
    blocks += pg->used;
    full += pg->used == pg->reserved || pg->prof_side;
  }
  /* Blocks that other threads free (a producer's, freed by its consumers)
   * are in use only while they travel: at the peak that reaches the upper
   * half, then back to a fraction of it, and the huge page stays resident.
   * A segment whose holder has taken back half as many blocks freed by
   * others as it has in use keeps 4 KiB pages (bench_xmalloc 4 producers
   * and 4 consumers, 8 B-16 KiB, medians of 5: a peak RSS of 60.8 MB
   * before, 54.5 MB with this test, 48.5 MB with no huge pages at all). */
  if (seg->remote_in * 2 >= blocks) return false;
  if (seg->kind == FW_KIND_MEDIUM) return used >= FW_THP_UPPER_USED_MEDIUM && seg->tld && !seg->tld->calloc_untouched;
  return used >= FW_THP_UPPER_USED && full >= FW_THP_UPPER_FULL;
}

/* The whole chunk is advised: the arena keeps one bit per chunk, which
 * puts the advice back to 4 KiB pages when the chunk is reused or purged
 * in part. The kernel's collapsing thread may then, in time, bring the
 * lower half's untouched pages in as well: at most 2 MiB more for a thread
 * that held 640 KiB there and was growing. The upper half's free slots are
 * committed from here, as in a segment that is huge from the start. */
static void fw_segment_make_huge(fw_segment_t *seg) {
  if (!fw_arena_set_huge(seg->arena, seg->chunk, seg->chunks, true)) return;
  seg->huge = 1;
  uint64_t up = seg->purged_mask & seg->free_mask;
  fw_stat_commit(fw_slots_committed(seg, up));
  seg->purged_mask &= ~up;
}

fw_page_t *fw_segment_page_alloc(fw_tld_t *tld, int kind, bool map_new) {
  FW_ASSERT(kind == FW_KIND_SMALL || kind == FW_KIND_MEDIUM);
  fw_segment_t *seg = tld->segments_free[kind];
  if (!seg) {
    if (!map_new) return NULL;
    bool is_zero;
    seg = fw_segment_new(tld, kind, 1, 0, 0, 0, &is_zero);
    if (!seg) return NULL;
    fw_tld_link_free(tld, seg);
  }
  FW_ASSERT(seg->free_mask != 0 && seg->kind == kind);
  uint64_t warm = seg->free_mask & seg->dirty_mask;
  size_t slot = fw_ctz64(warm ? warm : seg->free_mask);
  if (slot >= FW_SLICES / seg->page_slices / 2 && fw_segment_upper_wants_huge(seg)) fw_segment_make_huge(seg);
  bool is_zero = fw_segment_take_slots(seg, (uint64_t)1 << slot);
  if (seg->pages_used++ == 0) fw_segment_unempty(tld, seg, is_zero);
  fw_page_slot_setup(seg, slot, is_zero);
  FW_VALIDATE_SEGMENT(seg);
  return &seg->pages[slot * seg->page_slices];
}

/* A class that needs a fresh page after filling one (a program piling its
 * blocks up: one that frees as it goes finds room in its pages) will most
 * likely write this one through too, 4 KiB page after 4 KiB page, each a
 * fault: the kernel's entry and exit cost more than its clearing of the
 * page (on a 2-core VM, 64 MiB written once: 1.7 us per 4 KiB page
 * faulted one by one, 1.1 with each 64 KiB faulted in by one call, 0.45 in
 * huge pages). Small pages only: a medium page's blocks may be calloc'd and
 * left untouched (tests/rss.c calloc_fresh). A huge segment's memory comes
 * in 2 MiB at a time anyway; a dirty page is resident already. */
void fw_segment_page_fault_in(const fw_page_t *page) {
  if (page->kind != FW_KIND_SMALL || !page->is_zero || !fw_opt(POPULATE)) return;
  const fw_segment_t *seg = fw_page_segment(page);
  if (seg->huge) return;
  fw_os_populate(page->area, page->block_size);  /* the page's span, until fw_page_init */
}

/* ---- LARGE segments ----------------------------------------------------------
 * A block above 2 MiB gets a segment of its own: whole 4 MiB chunks, the
 * block right after the header. When it is freed the chunks go back to the
 * arena, where they stay dirty (warm) for FW_ARENA_LARGE_ROUNDS purge
 * delays rather than one, and where the next claim of several chunks looks
 * for warm ones first (arena.c): a program that fills and frees buffers of
 * a few MiB over and over finds the pages it wrote still there, instead of
 * faulting every one of them in again (a byte written per 4 KiB page costs
 * next to nothing; the fault, the kernel's clearing of the page and the
 * later purge cost a few microseconds each). A freed segment does not wait
 * with its thread for a request it fits: the arena's bitmap joins
 * neighbouring free chunks, so a freed 8 MiB block next to a freed 12 MiB
 * one serves a 20 MiB request, where a list of freed segments could only
 * hand each back whole or cut down (with 5-25 MiB blocks such a list
 * touched twice the memory and took twice the faults). The longer hold is
 * still a purge delay's multiple: RSS falls a fraction of a second after a
 * burst, and any thread's housekeeping purges the chunks, not only the
 * freeing thread's. */

/* The block starts at the first align-aligned offset after the header. An
 * alignment of half a segment or more would put that offset at the end of
 * the first chunk: the block then starts exactly one segment after the
 * header, at an address that is itself align-aligned (the mapping is placed
 * for it), and fw_ptr_segment's "p - 1" finds the header from it. */
fw_page_t *fw_segment_large_alloc(fw_tld_t *tld, size_t size, size_t align) {
  if (align < FW_MIN_ALIGN) align = FW_MIN_ALIGN;
  size_t offset = fw_align_up(FW_SEGMENT_HEADER, align < FW_SEGMENT_SIZE ? align : FW_SEGMENT_SIZE);
  if (size > SIZE_MAX - offset - FW_SEGMENT_SIZE) return NULL;
  /* a block of size 0 still needs a byte of its own: at a 4 MiB alignment
   * it would otherwise start at the segment's end, on the next one's header */
  if (size == 0) size = 1;
  size_t guard = fw_guard_bytes();
  if (size > SIZE_MAX - offset - FW_SEGMENT_SIZE - guard) return NULL;
  size_t chunks = (offset + size + guard + FW_SEGMENT_SIZE - 1) / FW_SEGMENT_SIZE;
  bool is_zero;
  fw_segment_t *seg = fw_segment_new(tld, FW_KIND_LARGE, chunks, align, offset, offset + size, &is_zero);
  if (!seg) return NULL;
  FW_ASSERT((((uintptr_t)seg + offset) & (align - 1)) == 0);
  seg->pages_used = 1;
  fw_page_t *pg = &seg->pages[0];
  memset(pg, 0, sizeof *pg);
  pg->kind = FW_KIND_LARGE;
  pg->slices = FW_SLICES;
  pg->area = (uint8_t *)seg + offset;
  pg->block_size = seg->size - offset - guard;
  pg->is_zero = is_zero;
  fw_page_flags_set(pg, fw_checked_flag());
  fw_page_t *sl = fw_ptr_slice(seg, pg->area);
  if (sl != pg) {
    /* the block starts beyond the first slice: make that slice point back */
    sl->flags = FW_PF_REDIRECT;
    sl->tag = 0;
    sl->slice_offset = (uint16_t)(sl - pg);
  }
  return pg;
}

/* realloc in place: a buffer that grows by doubling would otherwise be
 * copied at every step, and its old chunks freed right below the new ones. */
bool fw_segment_large_grow(fw_page_t *page, size_t size) {
  fw_segment_t *seg = fw_page_segment(page);
  if (seg->kind != FW_KIND_LARGE || seg->direct || fw_guard_bytes()) return false;
  size_t offset = (size_t)(page->area - (uint8_t *)seg);
  if (size <= page->block_size || size > FW_ARENA_MAX_CHUNKS * FW_SEGMENT_SIZE - offset) return false;
  size_t n = (offset + size + FW_SEGMENT_SIZE - 1) / FW_SEGMENT_SIZE;
  if (!fw_arena_extend(seg->arena, seg->chunk, seg->chunks, n - seg->chunks)) return false;
  /* the new chunks take the advice a block of the new size would get */
  if (fw_opt(THP) != FW_THP_NEVER) {
    uint32_t first = seg->chunk + seg->chunks;
    bool huge = fw_opt(THP) == FW_THP_ALWAYS ||
                fw_arena_set_huge(seg->arena, first, n - seg->chunks, fw_segment_wants_huge(NULL, FW_KIND_LARGE, n));
    if (huge)
      fw_segment_set_tail(seg->arena, first, n - seg->chunks, offset + size - seg->chunks * FW_SEGMENT_SIZE, true);
  }
  seg->chunks = (uint32_t)n;
  seg->size = n * FW_SEGMENT_SIZE;
  page->block_size = seg->size - offset;
  return true;
}

bool fw_segment_large_shrink(fw_page_t *page, size_t size) {
  fw_segment_t *seg = fw_page_segment(page);
  if (seg->kind != FW_KIND_LARGE || fw_guard_bytes()) return false;
  size_t offset = (size_t)(page->area - (uint8_t *)seg);
  size_t n = (offset + size + FW_SEGMENT_SIZE - 1) / FW_SEGMENT_SIZE;
  if (n == 0 || n >= seg->chunks) return false;
  size_t tail = seg->chunks - n;
  if (seg->direct) {
    fw_stat_sub(reserved, tail * FW_SEGMENT_SIZE);
    fw_stat_sub(committed, tail * FW_SEGMENT_SIZE);
    fw_stat_sub(direct, tail * FW_SEGMENT_SIZE);
    fw_os_unmap((uint8_t *)seg + n * FW_SEGMENT_SIZE, tail * FW_SEGMENT_SIZE);
  } else {
    fw_arena_free_large(seg->arena, seg->chunk + (uint32_t)n, tail);
  }
  seg->chunks = (uint32_t)n;
  seg->size = n * FW_SEGMENT_SIZE;
  page->block_size = seg->size - offset;
  return true;
}

/* Purges the n free slots from slot first with one call to the OS: each
 * call costs a TLB flush on every other CPU running the process. Slots the
 * OS would not purge (locked memory) stay dirty. */
static void fw_slots_purge(fw_segment_t *seg, size_t first, size_t n) {
  /* Purging part of a huge page splits it: only its free 4 KiB pages go.
   * From then on the segment keeps to 4 KiB pages, or the kernel's
   * collapsing thread (khugepaged) could fill the purged range again. */
  if (seg->huge && fw_opt(THP) == FW_THP_AUTO)
    seg->huge = fw_arena_set_huge(seg->arena, seg->chunk, seg->chunks, false);
  size_t size, last_size;
  uint8_t *area = fw_slot_area(seg, first, &size);
  /* from the first slot's area to the end of the last one's, which stops
   * short of the secure level's guard page */
  uint8_t *last = fw_slot_area(seg, first + n - 1, &last_size);
  size = (size_t)(last + last_size - area);
  if (!fw_os_purge(area, size)) return;
  uint64_t bits = fw_mask_low(n) << first;
  fw_stat_add(purged, size);
  fw_stat_sub(committed, fw_slots_committed(seg, bits));
  seg->purged_mask |= bits;
  seg->dirty_mask &= ~bits;
}

/* Purges the slots of bits, each run of them in one call. */
static void fw_segment_purge_mask(fw_segment_t *seg, uint64_t bits) {
  while (bits) {
    unsigned first = fw_ctz64(bits), n = fw_mask_run_at(bits, first);
    fw_slots_purge(seg, first, n);
    bits &= ~(fw_mask_low(n) << first);
  }
}

static void fw_segment_purge_slots(fw_segment_t *seg, bool all) {
  fw_segment_purge_mask(seg, seg->dirty_mask & seg->free_mask & (all ? ~(uint64_t)0 : ~seg->dirty_young));
  seg->dirty_young = 0;
  seg->purge_due = 0;
}

void fw_segment_purge_slots_now(fw_segment_t *seg) { fw_segment_purge_slots(seg, true); }

void fw_segment_purge_free(fw_segment_t *seg, size_t keep) {
  uint64_t dirty = seg->dirty_mask & seg->free_mask;
  for (size_t kept = fw_slot_bytes(seg); dirty && kept <= keep; kept += fw_slot_bytes(seg)) dirty &= dirty - 1;
  fw_segment_purge_mask(seg, dirty);
}

static void fw_segment_release_slots(fw_tld_t *tld, fw_segment_t *seg, uint64_t bits, bool warm) {
  seg->free_mask |= bits;
  seg->dirty_mask |= bits;
  long delay = fw_opt(PURGE_DELAY);
  if ((!tld && !warm) || delay == 0) {
    fw_segment_purge_mask(seg, bits);
    if (tld) fw_tld_link_free(tld, seg);
    return;
  }
  if (!tld) return;  /* an unowned segment's deadline is the abandon layer's */
  fw_tld_link_free(tld, seg);
  if (delay > 0) {
    if (seg->purge_due && (seg->dirty_mask & seg->free_mask & ~bits)) {
      /* the deadline was set for slots freed earlier and still waiting:
       * these wait a round */
      seg->dirty_young |= bits;
    } else {
      /* no slot waits on an older deadline (it may be stale: its slots
       * were taken again before it came) */
      seg->purge_due = fw_os_clock_ms() + (uint64_t)delay;
      seg->dirty_young &= ~bits;
    }
    /* the thread's pass runs only when its earliest deadline is due */
    if (!tld->purge_due || seg->purge_due < tld->purge_due) tld->purge_due = seg->purge_due;
  }
}

static void fw_segment_page_free_ex(fw_tld_t *tld, fw_page_t *page, bool warm) {
  fw_segment_t *seg = fw_page_segment(page);
  FW_ASSERT(!(page->flags & (FW_PF_UNUSED | FW_PF_REDIRECT)) && seg->pages_used > 0);
  FW_ASSERT(tld ? seg->tld == tld : seg->tld == NULL);
  atomic_store_explicit(&page->heap, NULL, memory_order_relaxed);
  atomic_store_explicit(&page->xfree, 0, memory_order_relaxed);
  /* the page's count goes to its owner's (with the blocks still live: a
   * destroyed heap frees them), or to the process's if it has none */
  size_t cls = page->cls <= FW_CLASS_LARGE ? page->cls : 0;
  uint64_t frees = page->frees + page->used;
  if (tld) fw_count_add(&tld->counts.frees[cls], frees);
  else fw_counts_fold_page(cls, frees);
  page->frees = 0;
  page->free = NULL;  /* fw_page_init sets up the list of a page put to use */
  page->used = 0;
  fw_page_flags_set(page, FW_PF_UNUSED);
  seg->pages_used--;
  FW_ASSERT(seg->kind == FW_KIND_LARGE || !(seg->free_mask & (uint64_t)1 << ((size_t)(page - seg->pages) / seg->page_slices)));
  if (seg->kind == FW_KIND_LARGE) {
    if (tld) fw_segment_free(tld, seg);
    else fw_segment_release(seg, true);
    return;
  }
  uint64_t bits;
  if (seg->kind == FW_KIND_SPAN) {
    size_t slot = (size_t)(page - seg->pages);
    size_t n = page->slices;
    for (size_t k = 1; k < n; k++) {
      page[k].flags = FW_PF_UNUSED;
      page[k].slice_offset = 0;
    }
    bits = fw_mask_low(n) << slot;
  } else {
    bits = (uint64_t)1 << ((size_t)(page - seg->pages) / seg->page_slices);
  }
  if (seg->pages_used == 0) {
    if (!tld) {
      fw_segment_release(seg, !warm);
      return;
    }
    /* An empty segment stays with the thread until the purge pass after its
     * delay (fw_segments_purge), so that memory freed and allocated again in
     * waves is not set up anew each time. */
    long delay = fw_opt(PURGE_DELAY);
    if (delay == 0 || (delay > 0 && *fw_segments_empty(tld, seg) >= fw_segment_cache_cap(tld, seg))) {
      fw_segment_free_ex(tld, seg, true);
      return;
    }
    (*fw_segments_empty(tld, seg))++;
  }
  fw_segment_release_slots(tld, seg, bits, warm);
  FW_VALIDATE_SEGMENT(seg);
}

void fw_segment_page_free(fw_tld_t *tld, fw_page_t *page) { fw_segment_page_free_ex(tld, page, false); }

void fw_segment_page_free_warm(fw_page_t *page) { fw_segment_page_free_ex(NULL, page, true); }

/* A slot is purged between one and two delays after its page was freed:
 * each segment keeps one deadline, and slots freed after it was set wait
 * for the next one, so memory freed and reused at once is never purged. */
void fw_segments_purge(fw_tld_t *tld, uint64_t now, bool force) {
  uint64_t next = 0;
  long delay = fw_opt(PURGE_DELAY);
  bool unused = false;
  for (fw_segment_t *seg = tld->segments, *nxt; seg; seg = nxt) {
    nxt = seg->next;
    if (seg->pages_used == 0 && seg->kind != FW_KIND_LARGE && (force || seg->purge_due <= now)) {
      /* kept empty for a delay: now it goes, and its memory with it (in the
       * arena it would stay committed for another delay) */
      unused |= seg->kind != FW_KIND_SPAN;
      fw_segment_free_empty(tld, seg, true);
      continue;
    }
    uint64_t dirty = seg->dirty_mask & seg->free_mask;
    if (!dirty) continue;
    if (!force && seg->purge_due > now) {
      if (!next || seg->purge_due < next) next = seg->purge_due;
      continue;
    }
    bool young = (seg->dirty_young & dirty) != 0;
    fw_segment_purge_slots(seg, force);
    if (young && !force && delay > 0) {
      seg->purge_due = now + (uint64_t)delay;
      if (!next || seg->purge_due < next) next = seg->purge_due;
    }
  }
  /* kept warm for nothing: keep fewer */
  if (unused) tld->segments_reused /= 2;
  tld->purge_due = next;
}

#ifdef FW_DEBUG
/* Internal consistency: slot masks, page descriptors and counts agree. */
void fw_segment_validate(const fw_segment_t *seg) {
  FW_ASSERT(seg->cookie == fw_segment_cookie(seg));
  FW_ASSERT(seg->size == (size_t)seg->chunks * FW_SEGMENT_SIZE);
  if (seg->kind == FW_KIND_LARGE) {
    FW_ASSERT(seg->pages_used <= 1 && seg->free_mask == 0);
    return;
  }
  uint64_t all = fw_mask_low(seg->pages_total);
  FW_ASSERT((seg->free_mask & ~all) == 0);
  FW_ASSERT((seg->dirty_mask & ~seg->free_mask) == 0);
  FW_ASSERT((seg->purged_mask & ~seg->free_mask) == 0);
  FW_ASSERT((seg->dirty_mask & seg->purged_mask) == 0);
  size_t used = 0;
  for (size_t slot = 0; slot < seg->pages_total;) {
    const fw_page_t *pg = &seg->pages[slot * seg->page_slices];
    bool is_free = (seg->free_mask >> slot) & 1;
    /* slot 0 holds the header; at the secure level the last one the guard */
    if (seg->kind == FW_KIND_SPAN && (slot == 0 || (slot + 1 == seg->pages_total && fw_guard_bytes()))) {
      FW_ASSERT(!is_free);
      slot++;
      continue;
    }
    if (is_free) {
      FW_ASSERT(pg->flags & FW_PF_UNUSED);
      slot++;
      continue;
    }
    FW_ASSERT(!(pg->flags & (FW_PF_UNUSED | FW_PF_REDIRECT)));
    used++;
    size_t n = seg->kind == FW_KIND_SPAN ? pg->slices : 1;
    FW_ASSERT(n >= 1 && slot + n <= seg->pages_total);
    for (size_t k = 1; k < n; k++) FW_ASSERT((pg[k].flags & FW_PF_REDIRECT) && pg[k].slice_offset == k);
    slot += n;
  }
  FW_ASSERT(used == seg->pages_used);
}
#endif

/* ---- ownership changes ------------------------------------------------------ */
uint64_t fw_segment_abandon_due(fw_segment_t *seg) {
  long delay = fw_opt(PURGE_DELAY);
  if (!(seg->dirty_mask & seg->free_mask) || delay <= 0) return 0;
  return seg->purge_due ? seg->purge_due : fw_os_clock_ms() + (uint64_t)delay;
}

void fw_segment_detach(fw_tld_t *tld, fw_segment_t *seg) {
  FW_ASSERT(seg->tld == tld && seg->pages_used > 0);
  fw_tld_unlink(tld, seg);
  seg->tld = NULL;
  atomic_store_explicit(&seg->thread_id, 0, memory_order_release);
}

void fw_segment_attach(fw_tld_t *tld, fw_segment_t *seg) {
  FW_ASSERT(seg->tld == NULL);
  FW_VALIDATE_SEGMENT(seg);
  seg->anext = seg->aprev = NULL;
  atomic_store_explicit(&seg->thread_id, tld->thread_id, memory_order_release);
  fw_tld_link(tld, seg);
  if (seg->free_mask) fw_tld_link_free(tld, seg);
  if ((seg->dirty_mask & seg->free_mask) && fw_opt(PURGE_DELAY) > 0) {
    if (!seg->purge_due) seg->purge_due = fw_os_clock_ms() + (uint64_t)fw_opt(PURGE_DELAY);
    if (!tld->purge_due || seg->purge_due < tld->purge_due) tld->purge_due = seg->purge_due;
  }
}
