/* abandon.c — the abandoned-segment layer (abandon.h): the blocks another
 * thread kept back for a batch, freed into a segment whose thread has exited
 * with one hold of the segment for the lists of all its pages
 * (fw_abandon_free_lists), refused while someone else holds the segment,
 * and the segment gone with its last blocks. */
#include "itest.h"
#include "abandon.h"
#include "arena.h"
#include "page.h"
#include "segment.h"
#include "thread.h"
#include <pthread.h>

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

static void t_abandon_free_lists(void) {
  CHECK(fw_option_set("purge_delay", 100000) == 0);
  fw_process_init();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, maker, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);

  fw_segment_t *seg = fw_ptr_segment(blocks[0][0]);
  fw_page_t *pg[2] = {fw_ptr_page(blocks[0][0]), fw_ptr_page(blocks[1][0])};
  for (size_t c = 0; c < 2; c++)
    for (size_t i = 0; i < PER_CLASS; i++) {
      CHECKF(fw_ptr_segment(blocks[c][i]) == seg, "the maker's blocks of class %zu in more than one segment", c);
      CHECK(fw_ptr_page(blocks[c][i]) == pg[c]);
    }
  CHECK(pg[0] != pg[1] && seg->arena != NULL);
  CHECK(atomic_load(&seg->thread_id) == 0);
  const size_t abandoned = it_stats().segments_abandoned, segments = it_stats().segments;
  CHECK(abandoned >= 1);
  const uint32_t used0 = pg[0]->used, used1 = pg[1]->used;
  CHECKF(used0 == PER_CLASS && used1 == PER_CLASS, "used %u and %u", used0, used1);

  /* held by another (as an adopter holds it): refused, nothing touched */
  fw_rfree_t lists[2] = {list_of(0, 0, PER_CLASS / 2), list_of(1, 0, PER_CLASS / 4)};
  CHECK(fw_arena_unmark(seg->arena, seg->chunk));
  CHECK(!fw_abandon_free_lists(seg, lists, 2, true));
  CHECK(pg[0]->used == used0 && pg[1]->used == used1);
  fw_arena_mark(seg->arena, seg->chunk, 0);

  /* two pages' lists with one hold: the blocks are in, the segment stays
   * abandoned for an adopter, and it can be held again */
  CHECK(fw_abandon_free_lists(seg, lists, 2, true));
  CHECKF(pg[0]->used == used0 - PER_CLASS / 2 && pg[1]->used == used1 - PER_CLASS / 4, "used %u and %u",
         pg[0]->used, pg[1]->used);
  CHECK(it_stats().segments_abandoned == abandoned && atomic_load(&seg->thread_id) == 0);
  CHECK(pg[0]->block_size >= sizes[0] && fw_page_has_free(pg[0]));
  CHECK(fw_arena_unmark(seg->arena, seg->chunk));
  fw_arena_mark(seg->arena, seg->chunk, 0);

  /* a page's last blocks with the other's: the first page goes, and with
   * the second's last ones the segment */
  lists[0] = list_of(0, PER_CLASS / 2, PER_CLASS);
  lists[1] = list_of(1, PER_CLASS / 4, PER_CLASS / 2);
  CHECK(fw_abandon_free_lists(seg, lists, 2, true));
  CHECK(pg[1]->used == used1 - PER_CLASS / 2);
  CHECK(it_stats().segments_abandoned == abandoned && it_stats().segments == segments);
  lists[0] = list_of(1, PER_CLASS / 2, PER_CLASS);
  CHECK(fw_abandon_free_lists(seg, lists, 1, true));
  CHECKF(it_stats().segments_abandoned == abandoned - 1 && it_stats().segments == segments - 1,
         "abandoned %zu (before %zu), segments %zu (before %zu)", it_stats().segments_abandoned, abandoned,
         it_stats().segments, segments);
}

static const it_section sections[] = {
    {"abandon_free_lists", t_abandon_free_lists},
};

int main(int argc, char **argv) { return it_main(argc, argv, sections, IT_COUNT(sections)); }
