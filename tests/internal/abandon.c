/* abandon.c — the abandoned-segment layer (abandon.h): the blocks another
 * thread kept back for a batch, freed into a segment whose thread has exited
 * with one hold of the segment for the lists of all its pages
 * (fw_abandon_free_lists), left for the holder while someone else holds the
 * segment and taken in as it puts the segment back, and the segment gone
 * with its last blocks, however they came: in a batch, left for a holder,
 * or freed remotely by a thread that saw the owner alive (the purge pass). */
#include "itest.h"
#include "abandon.h"
#include "arena.h"
#include "page.h"
#include "segment.h"
#include "thread.h"
#include <pthread.h>
#include <sched.h>

enum { PER_CLASS = 64 };
static const size_t sizes[2] = {48, 200};
static void *blocks[2][PER_CLASS];

/* A thread that allocates blocks of two classes and exits: its segment is
 * left abandoned with them live. */
static void *maker(void *arg) {
  (void)arg;
  for (size_t c = 0; c < 2; c++)
    for (size_t i = 0; i < PER_CLASS; i++) {
      blocks[c][i] = fw_malloc(sizes[c]);
      CHECK(blocks[c][i] != NULL);
      memset(blocks[c][i], 0x6d, sizes[c]);
    }
  return NULL;
}

/* blocks[c][from..to) as a list the way remote frees link them. */
static fw_rfree_t list_of(size_t c, size_t from, size_t to) {
  fw_rfree_t l = {.page = fw_ptr_page(blocks[c][from]), .n = (uint32_t)(to - from), .limit = PER_CLASS};
  l.head = (fw_block_t *)blocks[c][from];
  l.tail = (fw_block_t *)blocks[c][to - 1];
  for (size_t i = from; i < to; i++)
    fw_block_set_next((fw_block_t *)blocks[c][i], i + 1 < to ? (fw_block_t *)blocks[c][i + 1] : FW_LIST_END);
  return l;
}

/* A fresh process's maker, run and gone: its segment, abandoned with both
 * pages' blocks live. */
static fw_segment_t *made_abandoned(size_t *segments) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_process_init();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, maker, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  fw_segment_t *seg = fw_ptr_segment(blocks[0][0]);
  for (size_t c = 0; c < 2; c++)
    for (size_t i = 0; i < PER_CLASS; i++) CHECK(fw_ptr_segment(blocks[c][i]) == seg);
  CHECK(seg->arena != NULL && atomic_load(&seg->thread_id) == 0);
  *segments = it_stats().segments;
  return seg;
}

static void t_abandon_free_lists(void) {
  size_t segments;
  fw_segment_t *seg = made_abandoned(&segments);
  fw_page_t *pg[2] = {fw_ptr_page(blocks[0][0]), fw_ptr_page(blocks[1][0])};
  for (size_t c = 0; c < 2; c++)
    for (size_t i = 0; i < PER_CLASS; i++) CHECK(fw_ptr_page(blocks[c][i]) == pg[c]);
  CHECK(pg[0] != pg[1]);
  const size_t abandoned = it_stats().segments_abandoned;
  CHECK(abandoned >= 1);
  const uint32_t used0 = pg[0]->used, used1 = pg[1]->used;
  CHECKF(used0 == PER_CLASS && used1 == PER_CLASS, "used %u and %u", used0, used1);

  /* two pages' lists with one hold: the blocks are in, the segment stays
   * abandoned for an adopter, and it can be held again */
  fw_rfree_t lists[2] = {list_of(0, 0, PER_CLASS / 4), list_of(1, 0, PER_CLASS / 8)};
  fw_abandon_free_lists(seg, lists, 2, true);
  CHECKF(pg[0]->used == used0 - PER_CLASS / 4 && pg[1]->used == used1 - PER_CLASS / 8, "used %u and %u",
         pg[0]->used, pg[1]->used);
  CHECK(fw_arena_unmark(seg->arena, seg->chunk));

  /* held by another (as the purge pass holds it): the lists wait on their
   * pages, and the holder takes them in as it puts the segment back */
  lists[0] = list_of(0, PER_CLASS / 4, PER_CLASS / 2);
  lists[1] = list_of(1, PER_CLASS / 8, PER_CLASS / 4);
  fw_abandon_free_lists(seg, lists, 2, true);
  CHECK(pg[0]->used == used0 - PER_CLASS / 4 && pg[1]->used == used1 - PER_CLASS / 8);
  CHECK(fw_arena_parked(seg->arena, seg->chunk));
  fw_abandon_release(seg, 0, true);
  CHECKF(pg[0]->used == used0 - PER_CLASS / 2 && pg[1]->used == used1 - PER_CLASS / 4, "used %u and %u",
         pg[0]->used, pg[1]->used);
  CHECK(!fw_arena_parked(seg->arena, seg->chunk));
  CHECK(it_stats().segments_abandoned == abandoned && atomic_load(&seg->thread_id) == 0);
  CHECK(pg[0]->block_size >= sizes[0] && fw_page_has_free(pg[0]));
  CHECK(fw_arena_unmark(seg->arena, seg->chunk));
  fw_arena_mark(seg->arena, seg->chunk, 0);

  /* a page's last blocks with the other's: the first page goes, and with
   * the second's last ones the segment */
  lists[0] = list_of(0, PER_CLASS / 2, PER_CLASS);
  lists[1] = list_of(1, PER_CLASS / 4, PER_CLASS / 2);
  fw_abandon_free_lists(seg, lists, 2, true);
  CHECK(pg[1]->used == used1 - PER_CLASS / 2);
  CHECK(it_stats().segments_abandoned == abandoned && it_stats().segments == segments);
  lists[0] = list_of(1, PER_CLASS / 2, PER_CLASS);
  fw_abandon_free_lists(seg, lists, 1, true);
  CHECKF(it_stats().segments_abandoned == abandoned - 1 && it_stats().segments == segments - 1,
         "abandoned %zu (before %zu), segments %zu (before %zu)", it_stats().segments_abandoned, abandoned,
         it_stats().segments, segments);
}

static void check_gone(size_t segments) {
  CHECKF(it_stats().segments == segments - 1, "segments %zu, before %zu: the abandoned one is still there",
         it_stats().segments, segments);
}

/* Every last block left for the holder: the segment goes as it is put back. */
static void t_abandon_parked_last(void) {
  size_t segments;
  fw_segment_t *seg = made_abandoned(&segments);
  CHECK(fw_arena_unmark(seg->arena, seg->chunk));
  fw_rfree_t lists[2] = {list_of(0, 0, PER_CLASS), list_of(1, 0, PER_CLASS)};
  fw_abandon_free_lists(seg, lists, 2, true);
  CHECK(it_stats().segments == segments);
  fw_abandon_release(seg, 0, true);
  check_gone(segments);
}

/* Remote frees of a thread that saw the owner alive (as it was leaving):
 * nobody holds the segment to take them in; the purge pass does. */
static void t_abandon_purge_collects(void) {
  size_t segments;
  (void)made_abandoned(&segments);
  for (size_t c = 0; c < 2; c++) {
    fw_rfree_t l = list_of(c, 0, PER_CLASS);
    fw_page_free_remote_list(l.page, l.head, l.tail, l.n);
  }
  CHECK(it_stats().segments == segments);
  fw_abandon_purge(0, true);
  check_gone(segments);
}

/* One thread frees the maker's blocks one at a time while another holds
 * the segment and puts it back over and over (as frees in place and the
 * purge pass do): blocks left for the holder just as it puts the segment
 * back must not be missed by both. At the end no block is live: the
 * segment must be gone. */
static _Atomic(bool) race_done, race_started;
static void *race_holder(void *arg) {
  fw_segment_t *seg = arg;
  atomic_store(&race_started, true);
  while (!atomic_load(&race_done))
    if (fw_arena_unmark(seg->arena, seg->chunk)) fw_abandon_release(seg, 0, true);
  return NULL;
}

static void t_abandon_park_race(void) {
  for (int round = 0; round < 400; round++) {
    size_t segments;
    fw_segment_t *seg = made_abandoned(&segments);
    atomic_store(&race_done, false);
    atomic_store(&race_started, false);
    pthread_t h;
    CHECK(pthread_create(&h, NULL, race_holder, seg) == 0);
    while (!atomic_load(&race_started)) sched_yield();
    for (size_t i = 0; i < PER_CLASS; i++)
      for (size_t c = 0; c < 2; c++) fw_abandon_free(seg, fw_ptr_page(blocks[c][i]), blocks[c][i], true);
    atomic_store(&race_done, true);
    CHECK(pthread_join(h, NULL) == 0);
    CHECKF(it_stats().segments == segments - 1, "round %d: segments %zu, before %zu", round, it_stats().segments,
           segments);
  }
}

static const it_section sections[] = {
    {"abandon_free_lists", t_abandon_free_lists},
    {"abandon_parked_last", t_abandon_parked_last},
    {"abandon_purge_collects", t_abandon_purge_collects},
    {"abandon_park_race", t_abandon_park_race},
};

int main(int argc, char **argv) { return it_main(argc, argv, sections, IT_COUNT(sections)); }
