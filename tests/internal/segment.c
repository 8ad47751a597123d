/* segment.c — the segment layer (segment.h) on a tld of its own: spans and
 * the best-fit bins of span segments, growing a span in place, page slots
 * given back (free, dirty and purged masks, the purge deadline and the
 * round that late frees wait), empty segments kept in the thread's cache
 * until a purge pass frees them, what a thread's exit leaves warm, pages of
 * segments no thread owns, and the blocks of segments of their own
 * (reuse of freed ones' chunks, growth and shrinking in place). */
#include "itest.h"
#include "segment.h"
#include "arena.h"
#include "meta.h"
#include "thread.h"
#include "os.h"
#include "options.h"

#define SLICE FW_SLICE_SIZE

static fw_tld_t *test_tld(void) {
  fw_process_init();
  /* chunks freed by an earlier section (when all run in one process) are
   * dirty: purge them, so that fresh segments read as zero */
  fw_arena_purge(0, true);
  fw_tld_t *tld = fw_meta_alloc(sizeof *tld);
  CHECK(tld != NULL);
  tld->thread_id = fw_thread_id();
  return tld;
}

static size_t live_segments(void) { return it_stats().segments; }

/* The thread's empty segments of both kinds (types.h, segments_empty). */
static size_t empties(const fw_tld_t *tld) { return tld->segments_empty[0] + tld->segments_empty[1]; }

static bool owns(const fw_tld_t *tld, const fw_segment_t *seg) {
  for (const fw_segment_t *s = tld->segments; s; s = s->next)
    if (s == seg) return true;
  return false;
}

static uint64_t bits(size_t from, size_t to) { /* bits from .. to-1 */
  return (to - from >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << (to - from)) - 1)) << from;
}

/* The bins: every span segment of the tld with a free slice is in the bin
 * of its longest free run and nowhere else; the bitmap names exactly the
 * bins that are not empty. */
static void check_bins(const fw_tld_t *tld) {
  size_t listed = 0;
  for (size_t k = 0; k < FW_SLICES; k++) {
    const fw_segment_t *prev = NULL;
    for (const fw_segment_t *s = tld->span_bins[k]; s; prev = s, s = s->fnext) {
      CHECK(s->kind == FW_KIND_SPAN && s->in_free_list && s->fprev == prev);
      CHECKF(s->span_bin == k && fw_mask_longest_run(s->free_mask) == k,
             "segment %p in bin %zu: span_bin %u, longest free run %u", (const void *)s, k, s->span_bin,
             fw_mask_longest_run(s->free_mask));
      CHECK(owns(tld, s));
      listed++;
    }
    CHECKF(((tld->span_binmap >> k) & 1) == (tld->span_bins[k] != NULL), "bin %zu: bitmap says %d", k,
           (int)((tld->span_binmap >> k) & 1));
  }
  size_t want = 0;
  for (const fw_segment_t *s = tld->segments; s; s = s->next)
    if (s->kind == FW_KIND_SPAN) {
      CHECK(s->in_free_list == (s->free_mask != 0));
      want += s->free_mask != 0;
    }
  CHECK(listed == want);
}

/* A span page as fw_segment_span_alloc describes it. */
static void check_span(fw_page_t *pg, fw_segment_t *seg, size_t slot, size_t n) {
  CHECK(pg == &seg->pages[slot] && fw_page_segment(pg) == seg);
  CHECKF(pg->slices == n && pg->kind == FW_KIND_LARGE && pg->block_size == n * SLICE,
         "span at %zu: %u slices, block %zu", slot, pg->slices, pg->block_size);
  CHECK(pg->area == (uint8_t *)seg + slot * SLICE);
  CHECK(fw_page_flags(pg) == 0 && pg->tag == fw_thread_id());
  CHECK((seg->free_mask & bits(slot, slot + n)) == 0);
  for (size_t k = 1; k < n; k++) {
    CHECK(seg->pages[slot + k].flags & FW_PF_REDIRECT);
    CHECK(seg->pages[slot + k].slice_offset == k);
  }
  for (size_t k = 0; k < n; k++) {
    CHECK(fw_ptr_page(pg->area + k * SLICE) == pg);
    CHECK(fw_ptr_page(pg->area + k * SLICE + SLICE - 1) == pg);
  }
}

static fw_page_t *span(fw_tld_t *tld, size_t n, fw_segment_t *seg_want, size_t slot_want) {
  fw_page_t *pg = fw_segment_span_alloc(tld, n, true);
  CHECK(pg != NULL);
  fw_segment_t *seg = fw_page_segment(pg);
  CHECK(seg->kind == FW_KIND_SPAN && seg->tld == tld && owns(tld, seg));
  if (seg_want) CHECKF(seg == seg_want, "span of %zu: segment %p, expected %p", n, (void *)seg, (void *)seg_want);
  check_span(pg, seg, slot_want, n);
  check_bins(tld);
  return pg;
}

static void span_free(fw_tld_t *tld, fw_page_t *pg) {
  fw_segment_t *seg = fw_page_segment(pg);
  size_t slot = (size_t)(pg - seg->pages), n = pg->slices;
  fw_segment_page_free(tld, pg);
  CHECK(seg->free_mask & bits(slot, slot + n));
  for (size_t k = 0; k < n; k++) CHECK(seg->pages[slot + k].flags == FW_PF_UNUSED);
  check_bins(tld);
}

static void t_segment_span(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_tld_t *tld = test_tld();
  CHECK(fw_segment_span_alloc(tld, 4, false) == NULL);
  CHECK(tld->segments == NULL);

  fw_page_t *a = fw_segment_span_alloc(tld, 4, true);
  CHECK(a != NULL);
  fw_segment_t *s1 = fw_page_segment(a);
  CHECK(((uintptr_t)s1 & FW_SEGMENT_MASK) == 0);
  check_span(a, s1, 1, 4);   /* slot 0 holds the header and serves no span */
  CHECK(a->is_zero);
  CHECK(s1->free_mask == bits(5, 64) && s1->pages_used == 1 && empties(tld) == 0);
  CHECK(fw_page_flags(&s1->pages[5]) & FW_PF_UNUSED);
  check_bins(tld);
  CHECK(s1->span_bin == 59);

  /* first fit inside a segment: consecutive runs to its end */
  fw_page_t *b = span(tld, 3, s1, 5);
  fw_page_t *c = span(tld, 2, s1, 8);
  fw_page_t *d = span(tld, 32, s1, 10);
  fw_page_t *e = span(tld, 22, s1, 42);
  CHECK(s1->free_mask == 0 && tld->span_binmap == 0 && !s1->in_free_list);
  CHECK(s1->pages_used == 5);
  memset(b->area, 0x11, 3 * SLICE);
  memset(d->area, 0x22, 4096);

  /* holes of 3 (5..7) and 32 (10..41): the segment is in bin 32 */
  span_free(tld, b);
  span_free(tld, d);
  CHECK(s1->span_bin == 32 && s1->pages_used == 3);
  CHECK((s1->dirty_mask & bits(5, 8)) == bits(5, 8) && (s1->dirty_mask & bits(10, 42)) == bits(10, 42));
  fw_page_t *f = span(tld, 10, s1, 10);  /* dirty slices: no page faults, not zero */
  CHECK(!f->is_zero);
  CHECK(f->area[0] == 0x22);
  CHECK(s1->span_bin == 22);             /* 20..41 */

  /* no bin holds 30: a new segment; it is left in bin 33 (31..63) */
  fw_page_t *g = span(tld, 30, NULL, 1);
  fw_segment_t *s2 = fw_page_segment(g);
  CHECK(s2 != s1 && g->is_zero && s2->span_bin == 33);

  /* best fit: 20 goes to bin 22 (s1), not 33 (s2) */
  fw_page_t *h = span(tld, 20, s1, 20);
  CHECK(s1->span_bin == 3);              /* 5..7 and 40..41 left */
  fw_page_t *i = span(tld, 25, s2, 31);  /* only s2 holds 25 */
  CHECK(s2->span_bin == 8);              /* 56..63 */
  fw_page_t *j = span(tld, 3, s1, 5);    /* bin 3 (s1) before bin 8 (s2) */
  CHECK(!j->is_zero && j->area[0] == 0x11);
  CHECK(s1->span_bin == 2);              /* 40..41 */
  fw_page_t *k = span(tld, 5, s2, 56);
  fw_page_t *l = span(tld, 2, s1, 40);   /* bin 2 (s1) before bin 3 (s2: 61..63) */
  CHECK(s1->free_mask == 0 && s2->span_bin == 3);
  fw_page_t *m = span(tld, 3, s2, 61);
  CHECK(tld->span_binmap == 0);
  CHECK(fw_segment_span_alloc(tld, 1, false) == NULL);

  /* warm slices before a lower run that was purged */
  fw_page_t *w1 = span(tld, 4, NULL, 1);
  fw_segment_t *s3 = fw_page_segment(w1);
  fw_page_t *w2 = span(tld, 32, s3, 5);
  fw_page_t *w3 = span(tld, 27, s3, 37);
  span_free(tld, w1);
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(s3->dirty_mask == 0 && (s3->purged_mask & bits(1, 5)) == bits(1, 5));
  memset(w2->area, 0x33, 8 * SLICE);
  span_free(tld, w2);
  CHECK(s3->span_bin == 36);
  fw_page_t *w4 = span(tld, 4, s3, 5);
  fw_page_t *w5 = span(tld, 4, s3, 9);
  CHECK(!w4->is_zero && !w5->is_zero && w4->area[0] == 0x33 && w5->area[0] == 0x33);
  /* once purged, the run is handed out as zero, first fit */
  span_free(tld, w4);
  span_free(tld, w5);
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(s3->dirty_mask == 0);
  fw_page_t *w6 = span(tld, 4, s3, 1);
  CHECK(w6->is_zero && w6->area[0] == 0);
  fw_page_t *w7 = span(tld, 8, s3, 5);
  CHECK(w7->is_zero && w7->area[0] == 0 && w7->area[4 * SLICE] == 0);

  /* everything back: the segments empty, kept until a forced purge */
  fw_page_t *all[] = {a, c, e, f, g, h, i, j, k, l, m, w3, w6, w7};
  for (size_t x = 0; x < IT_COUNT(all); x++) span_free(tld, all[x]);
  CHECK(s1->free_mask == bits(1, 64) && s2->free_mask == bits(1, 64) && s3->free_mask == bits(1, 64));
  CHECK(s1->pages_used == 0 && s2->pages_used == 0 && s3->pages_used == 0 && empties(tld) == 3);
  CHECK(owns(tld, s1) && owns(tld, s2) && owns(tld, s3));
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(tld->segments == NULL && empties(tld) == 0 && tld->span_binmap == 0);
  check_bins(tld);
}

static void t_segment_span_grow(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_tld_t *tld = test_tld();
  fw_page_t *p = span(tld, 2, NULL, 1);
  fw_segment_t *seg = fw_page_segment(p);
  fw_page_t *q = span(tld, 2, seg, 3);

  CHECK(!fw_segment_span_grow(p, 3 * SLICE));   /* slot 3 is q's */
  check_span(p, seg, 1, 2);
  CHECK(!fw_segment_span_grow(q, 2 * SLICE));   /* not larger */
  CHECK(!fw_segment_span_grow(q, SLICE));
  CHECK(fw_segment_span_grow(q, 4 * SLICE + 1)); /* rounds up to 5 slices */
  check_span(q, seg, 3, 5);
  CHECK(seg->free_mask == bits(8, 64));
  check_bins(tld);
  CHECK(seg->span_bin == 56);

  CHECK(!fw_segment_span_grow(q, FW_SPAN_MAX_SLICES * SLICE + 1));
  check_span(q, seg, 3, 5);
  CHECK(fw_segment_span_grow(q, FW_SPAN_MAX_SLICES * SLICE));
  check_span(q, seg, 3, FW_SPAN_MAX_SLICES);  /* slots 3..34 */
  check_bins(tld);
  fw_page_t *r = span(tld, 29, seg, 35);      /* 35..63: to the end */
  CHECK(!fw_segment_span_grow(r, 30 * SLICE)); /* past the segment's end */
  check_span(r, seg, 35, 29);

  /* room for one more slice but not two */
  span_free(tld, p);
  fw_page_t *v = span(tld, 1, seg, 1);
  CHECK(!fw_segment_span_grow(v, 3 * SLICE));
  check_span(v, seg, 1, 1);
  CHECK(seg->free_mask == bits(2, 3));
  CHECK(fw_segment_span_grow(v, 2 * SLICE));
  check_span(v, seg, 1, 2);
  CHECK(seg->free_mask == 0);
  check_bins(tld);

  /* only span pages grow */
  fw_page_t *small = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  CHECK(small != NULL && !fw_segment_span_grow(small, 2 * SLICE));
  fw_page_t *large = fw_segment_large_alloc(tld, 3 * SLICE, 16);
  CHECK(large != NULL && !fw_segment_span_grow(large, 4 * SLICE));

  fw_segment_page_free(tld, small);
  fw_segment_page_free(tld, large);
  span_free(tld, v);
  span_free(tld, q);
  span_free(tld, r);
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(tld->segments == NULL);
}

/* ---- page slots ---------------------------------------------------------------- */
static size_t first_nonzero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return i;
  return SIZE_MAX;
}

static void t_segment_page_free(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_tld_t *tld = test_tld();
  CHECK(fw_segment_page_alloc(tld, FW_KIND_SMALL, false) == NULL);
  fw_page_t *pages[FW_SLICES];
  fw_segment_t *s = NULL;
  for (size_t i = 0; i < FW_SLICES; i++) {
    pages[i] = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
    CHECK(pages[i] != NULL);
    if (!s) s = fw_page_segment(pages[i]);
    CHECK(pages[i] == &s->pages[i]);   /* the lowest free slot */
    size_t hdr = i == 0 ? FW_SEGMENT_HEADER : 0;
    CHECK(pages[i]->area == (uint8_t *)s + i * SLICE + hdr && pages[i]->block_size == SLICE - hdr);
    CHECK(pages[i]->slices == 1 && pages[i]->kind == FW_KIND_SMALL && pages[i]->is_zero);
    CHECK(fw_page_flags(pages[i]) == 0);
    CHECK(s->free_mask == (i == 63 ? 0 : bits(i + 1, 64)) && s->pages_used == i + 1);
  }
  CHECK(s->kind == FW_KIND_SMALL && s->pages_total == FW_SLICES);
  CHECK(tld->segments_free[FW_KIND_SMALL] == NULL);
  CHECK(fw_segment_page_alloc(tld, FW_KIND_SMALL, false) == NULL);

  /* a freed slot: free and dirty, the segment listed again, and the next
   * page takes it warm (not zero, contents still there) */
  memset(pages[5]->area, 0x55, 4096);
  fw_segment_page_free(tld, pages[5]);
  CHECK(fw_page_flags(pages[5]) & FW_PF_UNUSED);
  CHECK(atomic_load(&pages[5]->heap) == NULL);
  CHECK(s->free_mask == bits(5, 6) && s->dirty_mask == bits(5, 6) && s->pages_used == 63);
  CHECK(tld->segments_free[FW_KIND_SMALL] == s && s->in_free_list);
  CHECK(s->purge_due != 0 && tld->purge_due == s->purge_due);
  const uint64_t due1 = s->purge_due;
  fw_page_t *again = fw_segment_page_alloc(tld, FW_KIND_SMALL, false);
  CHECK(again == pages[5] && !again->is_zero && again->area[0] == 0x55);
  CHECK(s->free_mask == 0 && s->dirty_mask == 0 && tld->segments_free[FW_KIND_SMALL] == NULL);

  /* slot 9 freed when no slot waits on the old deadline (slot 5 was taken
   * back before it came): a deadline of its own, not a round later. The
   * thread's pass may still be due at the old one, which now stands before
   * the segment's (the coarse clock has moved on: made sure of by the
   * sleep, which under load came by itself now and then): that pass finds
   * nothing due and takes the segment's deadline as the next. */
  memset(pages[9]->area, 0x99, 4096);
  fw_os_sleep_ms(10);
  fw_segment_page_free(tld, pages[9]);
  CHECK(s->purge_due > due1 && !(s->dirty_young & bits(9, 10)) && tld->purge_due == due1);
  fw_segments_purge(tld, due1, false);
  CHECK(s->dirty_mask == bits(9, 10) && s->purged_mask == 0 && tld->purge_due == s->purge_due);
  const uint64_t due2 = s->purge_due;
  /* slot 5 freed while 9 waits: young, it waits a round */
  memset(pages[5]->area, 0x56, 4096);
  fw_segment_page_free(tld, pages[5]);
  CHECK(s->purge_due == due2 && (s->dirty_young & bits(5, 6)));
  fw_segments_purge(tld, due2 - 1, false);   /* before the deadline: nothing */
  CHECK(s->dirty_mask == (bits(5, 6) | bits(9, 10)) && s->purged_mask == 0);
  uint64_t now = due2 + 1;
  fw_segments_purge(tld, now, false);        /* 9 now, 5 a round later */
  CHECK(s->dirty_mask == bits(5, 6) && s->purged_mask == bits(9, 10));
  CHECK(pages[9]->area[0] == 0 && pages[5]->area[0] == 0x56);
  CHECK(s->purge_due == now + 100000 && tld->purge_due == s->purge_due);
  fw_segments_purge(tld, fw_os_clock_ms(), true);  /* force: everything */
  CHECK(s->dirty_mask == 0 && s->purged_mask == (bits(5, 6) | bits(9, 10)));
  CHECK(owns(tld, s));                       /* it has pages: it stays */

  /* purged slots come back zero */
  fw_page_t *z5 = fw_segment_page_alloc(tld, FW_KIND_SMALL, false);
  fw_page_t *z9 = fw_segment_page_alloc(tld, FW_KIND_SMALL, false);
  CHECK(z5 == pages[5] && z9 == pages[9] && z5->is_zero && z9->is_zero);
  CHECK(first_nonzero(z5->area, 8192) == SIZE_MAX && first_nonzero(z9->area, 8192) == SIZE_MAX);
  CHECK(s->purged_mask == 0 && s->free_mask == 0);

  /* medium pages: 8 slots of 8 slices */
  fw_page_t *m0 = fw_segment_page_alloc(tld, FW_KIND_MEDIUM, true);
  fw_page_t *m1 = fw_segment_page_alloc(tld, FW_KIND_MEDIUM, true);
  fw_segment_t *ms = fw_page_segment(m0);
  CHECK(ms != s && fw_page_segment(m1) == ms && ms->kind == FW_KIND_MEDIUM && ms->pages_total == 8);
  CHECK(m0 == &ms->pages[0] && m1 == &ms->pages[FW_MEDIUM_PAGE_SLICES]);
  CHECK(m1->slices == FW_MEDIUM_PAGE_SLICES && m1->block_size == FW_MEDIUM_PAGE_SLICES * SLICE);
  CHECK(m0->block_size == FW_MEDIUM_PAGE_SLICES * SLICE - FW_SEGMENT_HEADER);
  CHECK(m1->area == (uint8_t *)ms + FW_MEDIUM_PAGE_SLICES * SLICE);
  CHECK(fw_ptr_page(m1->area + 5 * SLICE + 3) == m1 && fw_ptr_page(m0->area + 7 * SLICE - 1) == m0);
  CHECK(ms->free_mask == bits(2, 8));
  fw_segment_page_free(tld, m1);
  CHECK(ms->free_mask == bits(1, 8) && ms->dirty_mask == bits(1, 2) && ms->pages_used == 1);
  fw_page_t *m1b = fw_segment_page_alloc(tld, FW_KIND_MEDIUM, false);
  CHECK(m1b == m1 && !m1b->is_zero);          /* warm first */
  fw_segment_page_free(tld, m1b);
  fw_segment_page_free(tld, m0);
  CHECK(ms->pages_used == 0 && ms->free_mask == bits(0, 8) && owns(tld, ms));

  for (size_t i = 0; i < FW_SLICES; i++) fw_segment_page_free(tld, pages[i]);
  CHECK(s->pages_used == 0 && s->free_mask == ~(uint64_t)0 && empties(tld) == 2);
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(tld->segments == NULL && empties(tld) == 0);
  CHECK(tld->segments_free[FW_KIND_SMALL] == NULL && tld->segments_free[FW_KIND_MEDIUM] == NULL);
}

/* What fw_heap_housekeeping does with the thread's segments: a pass only
 * when the tld's deadline (the earliest of its dirty slots) has come. */
static void housekeep(fw_tld_t *tld, uint64_t now) {
  if (tld->purge_due && tld->purge_due <= now) fw_segments_purge(tld, now, false);
}

/* A slot freed after its segment's deadline was set waits one more round,
 * but it is purged in the end: the tld's deadline must then still be set.
 * Here the segment's deadline is left over from a slot that was freed and
 * taken again before the pass that came after it. */
static void t_segment_purge_deadline(void) {
  const long delay = 1000;
  CHECK(fw_option_set("purge_delay", delay) == 0);
  fw_tld_t *tld = test_tld();
  fw_page_t *p0 = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  fw_page_t *p1 = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  fw_page_t *p2 = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  fw_segment_t *s = fw_page_segment(p0);
  CHECK(p1 == &s->pages[1] && p2 == &s->pages[2]);

  fw_segment_page_free(tld, p1);               /* the segment's deadline is set */
  CHECK(s->purge_due != 0 && tld->purge_due == s->purge_due);
  CHECK(fw_segment_page_alloc(tld, FW_KIND_SMALL, false) == p1);  /* and the slot reused */
  uint64_t now = s->purge_due;
  housekeep(tld, now);                         /* nothing dirty to purge */
  CHECK(s->dirty_mask == 0);

  memset(p2->area, 0x22, 4096);
  fw_segment_page_free(tld, p2);               /* dirty, with a deadline to come */
  CHECK(s->dirty_mask == bits(2, 3));
  CHECKF(tld->purge_due != 0, "a dirty free slot, but the tld has no purge deadline (segment's: %llu)",
         (unsigned long long)s->purge_due);
  for (int round = 0; round < 4 && (s->dirty_mask & bits(2, 3)); round++) {
    now += 2 * (uint64_t)delay + 1;
    housekeep(tld, now);
  }
  CHECKF(!(s->dirty_mask & bits(2, 3)), "slot 2 still dirty after four purge delays (tld deadline %llu)",
         (unsigned long long)tld->purge_due);
  CHECK(s->purged_mask & bits(2, 3));
  CHECK(p2->area[0] == 0);

  fw_segment_page_free(tld, p0);
  fw_segment_page_free(tld, p1);
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(tld->segments == NULL);
}

/* What a thread's exit leaves warm (fw_segment_purge_free): the lowest free
 * dirty slots up to the bytes asked for; the others are purged, runs of
 * slots together, and no longer count as committed. */
static void t_segment_purge_free(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_tld_t *tld = test_tld();
  enum { N = 12 };
  fw_page_t *pg[N];
  fw_segment_t *s = NULL;
  for (size_t i = 0; i < N; i++) {
    pg[i] = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
    CHECK(pg[i] != NULL);
    if (!s) s = fw_page_segment(pg[i]);
    CHECK(pg[i] == &s->pages[i]);
    memset(pg[i]->area, 0x40 + (int)i, 8192);
  }
  /* free slots 1-3, 5, 7-10; 0, 4, 6 and 11 keep their pages */
  static const size_t freed[] = {1, 2, 3, 5, 7, 8, 9, 10};
  uint64_t fm = 0;
  for (size_t k = 0; k < IT_COUNT(freed); k++) {
    fw_segment_page_free(tld, pg[freed[k]]);
    fm |= bits(freed[k], freed[k] + 1);
  }
  /* (the slots beyond N were never touched: purged from the start) */
  CHECK((s->free_mask & bits(0, N)) == fm && s->dirty_mask == fm && (s->purged_mask & bits(0, N)) == 0);
  size_t committed = it_stats().bytes_committed;
  uint64_t purged_before = it_stats().bytes_purged;

  /* two and a half slots' worth: the two lowest stay warm, contents kept */
  fw_segment_purge_free(s, 2 * SLICE + SLICE / 2);
  CHECK(s->dirty_mask == (bits(1, 2) | bits(2, 3)));
  CHECK((s->purged_mask & bits(0, N)) == (fm & ~bits(1, 3)));
  CHECK((s->free_mask & bits(0, N)) == fm);  /* still free, now clean */
  CHECK(pg[1]->area[0] == 0x41 && pg[2]->area[8191] == 0x42);
  for (size_t k = 2; k < IT_COUNT(freed); k++)
    CHECKF(first_nonzero((uint8_t *)s + freed[k] * SLICE, SLICE) == SIZE_MAX, "slot %zu not purged", freed[k]);
  CHECK(pg[0]->area[0] == 0x40 && pg[4]->area[0] == 0x44 && pg[6]->area[0] == 0x46 && pg[11]->area[0] == 0x4b);
  CHECK(it_stats().bytes_committed == committed - 6 * SLICE);
  CHECK(it_stats().bytes_purged == purged_before + 6 * SLICE);
  /* a slot purged comes back zero, a kept one warm */
  fw_page_t *again = fw_segment_page_alloc(tld, FW_KIND_SMALL, false);
  CHECK(again == pg[1] && !again->is_zero);
  fw_segment_page_free(tld, again);

  /* less than a slot: nothing kept */
  fw_segment_purge_free(s, SLICE - 1);
  CHECK(s->dirty_mask == 0 && (s->purged_mask & bits(0, N)) == fm);
  CHECK(first_nonzero(pg[1]->area, 8192) == SIZE_MAX);
  fw_segment_purge_free(s, 0);  /* nothing left to purge */
  CHECK((s->purged_mask & bits(0, N)) == fm);

  for (size_t i = 0; i < N; i++)
    if (!(fm & bits(i, i + 1))) fw_segment_page_free(tld, pg[i]);
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(tld->segments == NULL);
}

/* A page of a segment no thread owns given back warm (a free into an
 * abandoned segment by a thread with a heap): its slot stays dirty, with
 * its contents, for the adopter; given back the other way it is purged.
 * The segment freed with its last page goes to its arena unpurged. */
static void t_segment_free_unowned(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_tld_t *tld = test_tld();
  const size_t seg0 = live_segments();
  fw_page_t *a = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  fw_page_t *b = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  fw_page_t *c = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  fw_segment_t *s = fw_page_segment(a);
  CHECK(fw_page_segment(c) == s && b == &s->pages[1] && c == &s->pages[2]);
  memset(b->area, 0x5b, 4096);
  memset(c->area, 0x5c, 4096);
  fw_segment_detach(tld, s);
  CHECK(s->tld == NULL && atomic_load(&s->thread_id) == 0 && tld->segments == NULL);

  fw_segment_page_free_warm(b);
  CHECK((s->free_mask & bits(1, 2)) && (s->dirty_mask & bits(1, 2)) && !(s->purged_mask & bits(1, 2)));
  CHECK(b->area[0] == 0x5b && s->pages_used == 2);
  fw_segment_page_free(NULL, c);
  CHECK((s->free_mask & bits(2, 3)) && !(s->dirty_mask & bits(2, 3)) && (s->purged_mask & bits(2, 3)));
  CHECK(first_nonzero((uint8_t *)s + 2 * SLICE, SLICE) == SIZE_MAX);

  /* the adopter finds the warm slot first */
  fw_segment_attach(tld, s);
  fw_page_t *again = fw_segment_page_alloc(tld, FW_KIND_SMALL, false);
  CHECK(again == b && !again->is_zero && again->area[0] == 0x5b);
  fw_segment_page_free(tld, again);
  fw_segment_detach(tld, s);

  /* its last page given back warm: the segment goes, its chunk dirty */
  fw_segment_page_free_warm(a);
  CHECK(live_segments() == seg0 && atomic_load(&s->thread_id) == 0);
  fw_arena_t *arena;
  uint32_t chunk;
  bool zero = true;
  void *mem = fw_arena_alloc(1, &arena, &chunk, &zero);
  CHECK(mem == (void *)s && !zero);
  CHECK(((unsigned char *)s)[1 * SLICE] == 0x5b);
  fw_arena_free(arena, chunk, 1, true);
}

/* ---- empty segments ------------------------------------------------------------------ */
static void t_segment_cache(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_tld_t *tld = test_tld();
  const size_t seg0 = live_segments();
  fw_page_t *pg = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  fw_segment_t *s = fw_page_segment(pg);
  CHECK(live_segments() == seg0 + 1 && empties(tld) == 0);
  memset(pg->area, 0x77, 4096);
  const unsigned char *touched = pg->area;

  /* its last page gone, the segment stays with the thread */
  fw_segment_page_free(tld, pg);
  CHECK(s->pages_used == 0 && owns(tld, s) && empties(tld) == 1);
  CHECK(atomic_load(&s->thread_id) == fw_thread_id() && live_segments() == seg0 + 1);
  fw_page_t *pg2 = fw_segment_page_alloc(tld, FW_KIND_SMALL, false);  /* and serves again */
  CHECK(pg2 == pg && empties(tld) == 0);
  fw_segment_page_free(tld, pg2);
  CHECK(empties(tld) == 1);

  /* a purge pass before its delay keeps it, one after frees it */
  CHECK(s->purge_due != 0);
  fw_segments_purge(tld, s->purge_due - 1, false);
  CHECK(owns(tld, s) && empties(tld) == 1);
  fw_segments_purge(tld, s->purge_due, false);
  CHECK(!owns(tld, s) && tld->segments == NULL && empties(tld) == 0);
  CHECK(tld->segments_free[FW_KIND_SMALL] == NULL);
  CHECK(live_segments() == seg0 && atomic_load(&s->thread_id) == 0);
  /* its chunk went back to the arena purged: it has waited its delay once
   * already (the arena's own delay is long, so only the segment's purge can
   * have cleared what the page wrote) */
  fw_arena_t *arena;
  uint32_t chunk;
  bool zero = false;
  void *mem = fw_arena_alloc(1, &arena, &chunk, &zero);
  CHECK(mem == (void *)s && zero);
  CHECK(touched[0] == 0 && touched[4095] == 0);
  fw_arena_free(arena, chunk, 1, false);

  /* a forced pass frees it whatever the time */
  pg = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
  s = fw_page_segment(pg);
  fw_segment_page_free(tld, pg);
  CHECK(owns(tld, s) && empties(tld) == 1 && live_segments() == seg0 + 1);
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(!owns(tld, s) && tld->segments == NULL && empties(tld) == 0 && live_segments() == seg0);

  /* beyond FREEWAY_SEGMENT_CACHE an emptied segment goes at once, purged */
  CHECK(fw_option_set("segment_cache", 1) == 0);
  fw_page_t *x = fw_segment_span_alloc(tld, FW_SPAN_MAX_SLICES, true);
  fw_page_t *y = fw_segment_span_alloc(tld, FW_SPAN_MAX_SLICES, true);
  fw_segment_t *sx = fw_page_segment(x), *sy = fw_page_segment(y);
  CHECK(sx != sy && live_segments() == seg0 + 2);
  memset(y->area, 0x44, 4096);
  fw_segment_page_free(tld, x);
  CHECK(owns(tld, sx) && empties(tld) == 1);
  fw_segment_page_free(tld, y);
  CHECK(!owns(tld, sy) && owns(tld, sx) && empties(tld) == 1 && live_segments() == seg0 + 1);
  check_bins(tld);
  fw_arena_purge(0, true);  /* sx's old chunk, and s's */
  fw_segments_purge(tld, fw_os_clock_ms(), true);
  CHECK(tld->segments == NULL && empties(tld) == 0 && live_segments() == seg0);

  /* purge delay 0: an emptied segment goes at once */
  CHECK(fw_option_set("segment_cache", 32) == 0);
  CHECK(fw_option_set("purge_delay", 0) == 0);
  pg = fw_segment_page_alloc(tld, FW_KIND_MEDIUM, true);
  s = fw_page_segment(pg);
  fw_segment_page_free(tld, pg);
  CHECK(!owns(tld, s) && tld->segments == NULL && empties(tld) == 0 && live_segments() == seg0);
  CHECK(fw_option_set("purge_delay", 100000) == 0);

  /* large segments are never kept */
  fw_page_t *lg = fw_segment_large_alloc(tld, (size_t)5 << 20, 16);
  CHECK(lg != NULL);
  fw_segment_t *ls = fw_page_segment(lg);
  CHECK(ls->kind == FW_KIND_LARGE && ls->chunks == 2 && !ls->direct && empties(tld) == 0);
  CHECK(lg->area == (uint8_t *)ls + FW_SEGMENT_HEADER && lg->block_size == ls->size - FW_SEGMENT_HEADER);
  CHECK(fw_ptr_page(lg->area) == lg);  /* a block is looked up by its start */
  fw_segment_page_free(tld, lg);
  CHECK(!owns(tld, ls) && tld->segments == NULL && live_segments() == seg0);
  /* an alignment beyond a chunk's: a mapping of its own, unmapped on free */
  const size_t align = (size_t)8 << 20;
  lg = fw_segment_large_alloc(tld, (size_t)1 << 20, align);
  CHECK(lg != NULL);
  ls = fw_page_segment(lg);
  CHECK(ls->direct && ((uintptr_t)lg->area & (align - 1)) == 0 && fw_ptr_page(lg->area) == lg);
  CHECK(lg->area == (uint8_t *)ls + FW_SEGMENT_SIZE);
  lg->area[0] = 1;
  fw_segment_page_free(tld, lg);
  CHECK(tld->segments == NULL && live_segments() == seg0 && !fw_os_is_mapped(ls));
}

/* A block of a segment of its own: freed, its chunks wait warm in the arena
 * for the next big block; realloc grows it into the free chunks after it
 * and shrinks it by giving the tail chunks back. */
static void t_segment_large(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_tld_t *tld = test_tld();
  const size_t seg0 = live_segments();
  const size_t MB = (size_t)1 << 20;
  fw_page_t *lg = fw_segment_large_alloc(tld, 5 * MB, 16);
  CHECK(lg != NULL && lg->is_zero);
  fw_segment_t *ls = fw_page_segment(lg);
  CHECK(ls->chunks == 2 && !ls->direct && live_segments() == seg0 + 1);
  uint8_t *area = lg->area;
  memset(area, 0x5a, 5 * MB);

  /* freed: the segment goes, its warm chunks serve the next one */
  fw_segment_page_free(tld, lg);
  CHECK(tld->segments == NULL && live_segments() == seg0);
  lg = fw_segment_large_alloc(tld, 7 * MB, 16);
  CHECK(lg != NULL && lg->area == area && !lg->is_zero);
  CHECK(area[0] == 0x5a && area[5 * MB - 1] == 0x5a);  /* not purged */

  /* grows into the free chunks after it */
  ls = fw_page_segment(lg);
  CHECK(fw_segment_large_grow(lg, 15 * MB));
  CHECK(ls->chunks == 4 && ls->size == 4 * FW_SEGMENT_SIZE && lg->block_size == ls->size - FW_SEGMENT_HEADER);
  CHECK(lg->area == area && fw_ptr_page(area) == lg);
  memset(area + 7 * MB, 0x6b, 8 * MB);
  CHECK(!fw_segment_large_grow(lg, 15 * MB));  /* not larger */
  CHECK(!fw_segment_large_grow(lg, (size_t)FW_ARENA_MAX_CHUNKS * FW_SEGMENT_SIZE));
  /* not into chunks in use */
  fw_page_t *next = fw_segment_large_alloc(tld, 3 * MB, 16);
  CHECK(next != NULL);
  fw_segment_t *ns = fw_page_segment(next);
  if ((uint8_t *)ns == (uint8_t *)ls + ls->size) CHECK(!fw_segment_large_grow(lg, 17 * MB));
  fw_segment_page_free(tld, next);

  /* shrinks by its tail chunks */
  CHECK(!fw_segment_large_shrink(lg, 15 * MB));  /* nothing to give */
  CHECK(fw_segment_large_shrink(lg, 6 * MB));
  CHECK(ls->chunks == 2 && lg->block_size == 2 * FW_SEGMENT_SIZE - FW_SEGMENT_HEADER);
  CHECK(area[0] == 0x5a && area[5 * MB - 1] == 0x5a);
  CHECK(live_segments() == seg0 + 1);
  /* the tail is free again: the block grows back over it */
  CHECK(fw_segment_large_grow(lg, 15 * MB) && ls->chunks == 4);
  fw_segment_page_free(tld, lg);
  CHECK(tld->segments == NULL && live_segments() == seg0);

  /* a mapping of its own shrinks by unmapping its tail, and never grows */
  const size_t align = (size_t)8 << 20;
  lg = fw_segment_large_alloc(tld, 20 * MB, align);
  CHECK(lg != NULL);
  ls = fw_page_segment(lg);
  CHECK(ls->direct && lg->area == (uint8_t *)ls + FW_SEGMENT_SIZE && ls->chunks == 6);
  CHECK(!fw_segment_large_grow(lg, 30 * MB));
  size_t reserved = it_stats().bytes_reserved;
  CHECK(fw_segment_large_shrink(lg, 2 * MB));
  CHECK(ls->chunks == 2 && lg->block_size == FW_SEGMENT_SIZE);
  CHECK(it_stats().bytes_reserved == reserved - 4 * FW_SEGMENT_SIZE);
  CHECK(fw_os_is_mapped(lg->area) && !fw_os_is_mapped(lg->area + FW_SEGMENT_SIZE));
  lg->area[FW_SEGMENT_SIZE - 1] = 1;
  fw_segment_page_free(tld, lg);
  CHECK(tld->segments == NULL && live_segments() == seg0 && !fw_os_is_mapped(ls));
  fw_arena_purge(0, true);
}

/* The upper half of a thread's segment of small blocks takes huge pages
 * when the lower half holds 640 KiB of blocks in use and six full pages
 * (fw_segment_upper_wants_huge). The heap profiler's pages of sampled
 * blocks hold a few blocks each and take a slot as any page: they count as
 * full, in bytes too. Here nine full pages (567 KiB) and the rest pages of
 * samples with one block each: without the bytes of the samples' pages the
 * thread is under the threshold (as thp.sampled.prof's thread was, in 1
 * run of 150 on a loaded machine, with the profiler's draws). */
static bool thp_usable(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char buf[128] = {0};
  if (!f) return false;
  bool ok = fgets(buf, sizeof buf, f) != NULL && strstr(buf, "[never]") == NULL;
  fclose(f);
  return ok;
}

static void t_segment_upper_sampled(void) {
  if (!thp_usable()) it_skip("transparent huge pages are off");
  fw_tld_t *tld = test_tld();
  if (fw_opt(THP) != FW_THP_AUTO || fw_opt(PURGE_DELAY) == 0) it_skip("FREEWAY_THP or FREEWAY_PURGE_DELAY set");
  enum { BS = 1024, FULL = 9 };
  fw_segment_t *seg = NULL;
  size_t lower = 0;
  for (;;) {
    fw_page_t *pg = fw_segment_page_alloc(tld, FW_KIND_SMALL, true);
    CHECK(pg != NULL);
    if (!seg) seg = fw_page_segment(pg);
    CHECK(fw_page_segment(pg) == seg);
    size_t slot = (size_t)(pg - seg->pages) / seg->page_slices;
    if (slot >= FW_SLICES / seg->page_slices / 2) break;  /* the upper half reached: weighed */
    CHECK(!seg->huge);
    pg->block_size = BS;
    pg->reserved = (uint16_t)(seg->page_slices * FW_SLICE_SIZE / BS - 1);
    pg->capacity = pg->reserved;
    if (lower++ < FULL) {
      pg->used = pg->reserved;
    } else {
      pg->used = 1;
      pg->prof_side = 1;
    }
  }
  CHECKF(lower > FULL + 6 && FULL * (FW_SLICE_SIZE / BS - 1) * BS < (640u << 10),
         "%zu pages in the lower half", lower);
  CHECKF(seg->huge, "the upper half of a segment whose lower half holds %d full pages and %zu pages of samples got "
         "no huge pages", FULL, lower - FULL);
}

int main(int argc, char **argv) {
  static const it_section s[] = {
    {"segment_upper_sampled", t_segment_upper_sampled},
    {"segment_span", t_segment_span},
    {"segment_span_grow", t_segment_span_grow},
    {"segment_page_free", t_segment_page_free},
    {"segment_purge_deadline", t_segment_purge_deadline},
    {"segment_purge_free", t_segment_purge_free},
    {"segment_free_unowned", t_segment_free_unowned},
    {"segment_cache", t_segment_cache},
    {"segment_large", t_segment_large},
  };
  return it_main(argc, argv, s, IT_COUNT(s));
}
