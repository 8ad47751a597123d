/* page.c — the page layer (page.h) on real pages of a heap made with
 * fw_heap_struct_new on the calling thread's tld: queue links, the queue
 * head's extra count in used, heap->direct[] following the head, block
 * pop/push counts, carving, and remote frees (the xfree list folded in by
 * fw_page_collect, the heap's delayed list for full pages), and adopted
 * pages (and, for medium blocks, any page) serving before a dry head carves
 * more. */
#include "itest.h"
#include "heap.h"
#include "page.h"
#include "segment.h"
#include "thread.h"
#include "os.h"
#include "options.h"
#include "front.h"
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

static fw_heap_t *test_heap(void) {
  fw_process_init();
  fw_heap_t *def = fw_heap_get_default();
  CHECK(def != NULL && def->tld != NULL && def->tld->heap_default == def);
  fw_heap_t *heap = fw_heap_struct_new(def->tld, false);
  CHECK(heap != NULL && heap->tld == def->tld);
  CHECK(atomic_load(&heap->thread_id) == fw_thread_id());
  return heap;
}

/* Every direct[] slot names the head of its class's queue, or fw_page_empty. */
static void check_direct(const fw_heap_t *heap) {
  for (size_t w = 0; w <= FW_DIRECT_MAX; w++) {
    const fw_page_t *head = heap->queues[fw_size_class(w)].first;
    CHECKF(heap->direct[w] == (head ? head : &fw_page_empty), "direct[%zu] (class %zu) is %p, head %p", w,
           fw_size_class(w), (void *)heap->direct[w], (const void *)head);
  }
}

/* The queue holds exactly pages[0..n) in this order, each page's used is
 * its live blocks plus one for the head only, and direct[] agrees. */
static void check_queue(const fw_heap_t *heap, const fw_page_queue_t *q, fw_page_t *const *pages, size_t n,
                        fw_page_t *const *all, const uint32_t *live, size_t nall) {
  CHECK(q->first == (n ? pages[0] : NULL));
  CHECK(q->last == (n ? pages[n - 1] : NULL));
  for (size_t i = 0; i < n; i++) {
    CHECKF(pages[i]->prev == (i ? pages[i - 1] : NULL), "page %zu: prev", i);
    CHECKF(pages[i]->next == (i + 1 < n ? pages[i + 1] : NULL), "page %zu: next", i);
  }
  bool is_full = q == &heap->full;
  for (size_t k = 0; k < nall; k++) {
    bool head = !is_full && n && all[k] == pages[0];
    CHECKF(all[k]->used == live[k] + (head ? 1u : 0u), "page %zu: used %u, live %u, head %d", k, all[k]->used,
           live[k], head);
    CHECKF(fw_page_live(all[k]) == live[k], "page %zu: fw_page_live %zu, live %u", k, fw_page_live(all[k]),
           live[k]);
  }
  check_direct(heap);
}

/* A fresh page of class cls in no queue, with no live block. */
static fw_page_t *lone_page(fw_heap_t *heap, size_t cls) {
  fw_page_t *pg = fw_heap_page_for(heap, cls);
  CHECK(pg != NULL && fw_page_has_free(pg));
  CHECK(heap->queues[cls].first == pg && pg->used == 1);
  CHECK(pg->cls == cls && pg->block_size == fw_class_size[cls]);
  CHECK(atomic_load(&pg->heap) == heap && fw_page_flags(pg) == 0 && pg->tag == fw_thread_id());
  fw_page_queue_remove(heap, &heap->queues[cls], pg);
  CHECK(pg->used == 0 && pg->next == NULL && pg->prev == NULL);
  return pg;
}

static bool in_free(const fw_page_t *pg, const fw_block_t *b) {
  for (const fw_block_t *l = pg->free; l != FW_LIST_END; l = fw_block_next(l))
    if (l == b) return true;
  return false;
}

static void t_page_queue(void) {
  fw_heap_t *heap = test_heap();
  check_direct(heap);
  const size_t cls = fw_size_class(48), big_cls = fw_size_class(3000), med_cls = fw_size_class(20000);
  CHECK(cls <= fw_size_class(FW_DIRECT_MAX) && big_cls > fw_size_class(FW_DIRECT_MAX));
  fw_page_queue_t *q = &heap->queues[cls];

  enum { N = 4 };
  fw_page_t *p[N];
  uint32_t live[N];
  for (size_t i = 0; i < N; i++) {
    p[i] = lone_page(heap, cls);
    for (size_t k = 0; k <= i; k++) fw_page_pop_checked(p[i]);  /* distinct counts: i + 1 live */
    live[i] = (uint32_t)i + 1;
    for (size_t k = 0; k < i; k++) CHECK(p[i] != p[k]);
  }
  check_queue(heap, q, NULL, 0, p, live, N);

  fw_page_queue_push(heap, q, p[0]);
  check_queue(heap, q, (fw_page_t *[]){p[0]}, 1, p, live, N);
  fw_page_queue_push(heap, q, p[1]);
  check_queue(heap, q, (fw_page_t *[]){p[0], p[1]}, 2, p, live, N);
  fw_page_queue_push_front(heap, q, p[2]);
  check_queue(heap, q, (fw_page_t *[]){p[2], p[0], p[1]}, 3, p, live, N);
  fw_page_queue_remove(heap, q, p[0]);  /* the middle */
  check_queue(heap, q, (fw_page_t *[]){p[2], p[1]}, 2, p, live, N);
  fw_page_queue_remove(heap, q, p[2]);  /* the head: the extra count moves on */
  check_queue(heap, q, (fw_page_t *[]){p[1]}, 1, p, live, N);
  fw_page_queue_push(heap, q, p[3]);
  fw_page_queue_push_front(heap, q, p[0]);
  fw_page_queue_push(heap, q, p[2]);
  check_queue(heap, q, (fw_page_t *[]){p[0], p[1], p[3], p[2]}, 4, p, live, N);
  fw_page_queue_remove(heap, q, p[2]);  /* the tail */
  check_queue(heap, q, (fw_page_t *[]){p[0], p[1], p[3]}, 3, p, live, N);
  /* a live block more or less on the head does not disturb the count */
  fw_page_pop_checked(p[0]);
  live[0]++;
  check_queue(heap, q, (fw_page_t *[]){p[0], p[1], p[3]}, 3, p, live, N);
  fw_page_queue_remove(heap, q, p[0]);
  fw_page_queue_remove(heap, q, p[3]);
  check_queue(heap, q, (fw_page_t *[]){p[1]}, 1, p, live, N);
  fw_page_queue_remove(heap, q, p[1]);
  check_queue(heap, q, NULL, 0, p, live, N);
  fw_page_queue_push_front(heap, q, p[3]);
  check_queue(heap, q, (fw_page_t *[]){p[3]}, 1, p, live, N);
  fw_page_queue_remove(heap, q, p[3]);
  check_queue(heap, q, NULL, 0, p, live, N);

  /* the full list: links only, no extra count, direct[] untouched */
  fw_page_queue_push(heap, &heap->full, p[1]);
  fw_page_queue_push_front(heap, &heap->full, p[2]);
  fw_page_queue_push(heap, &heap->full, p[0]);
  check_queue(heap, &heap->full, (fw_page_t *[]){p[2], p[1], p[0]}, 3, p, live, N);
  CHECK(q->first == NULL);
  fw_page_queue_remove(heap, &heap->full, p[2]);
  check_queue(heap, &heap->full, (fw_page_t *[]){p[1], p[0]}, 2, p, live, N);
  fw_page_queue_remove(heap, &heap->full, p[1]);
  fw_page_queue_remove(heap, &heap->full, p[0]);
  check_queue(heap, &heap->full, NULL, 0, p, live, N);

  /* classes above the direct range: the extra count moves, direct[] stays */
  fw_page_t *b[3];
  uint32_t blive[3] = {0, 0, 0};
  b[0] = lone_page(heap, big_cls);
  b[1] = lone_page(heap, big_cls);
  b[2] = lone_page(heap, med_cls);
  CHECK(b[0]->kind == FW_KIND_SMALL && b[2]->kind == FW_KIND_MEDIUM && b[2]->slices == FW_MEDIUM_PAGE_SLICES);
  fw_page_queue_push(heap, &heap->queues[big_cls], b[0]);
  fw_page_queue_push_front(heap, &heap->queues[big_cls], b[1]);
  check_queue(heap, &heap->queues[big_cls], (fw_page_t *[]){b[1], b[0]}, 2, b, blive, 2);
  fw_page_queue_push(heap, &heap->queues[med_cls], b[2]);
  CHECK(b[2]->used == 1);
  check_direct(heap);
  fw_page_queue_remove(heap, &heap->queues[big_cls], b[1]);
  CHECK(b[0]->used == 1 && b[1]->used == 0);
  fw_page_queue_remove(heap, &heap->queues[big_cls], b[0]);
  fw_page_queue_remove(heap, &heap->queues[med_cls], b[2]);
  check_queue(heap, &heap->queues[big_cls], NULL, 0, b, blive, 3);

  /* a queue head of one class and another of a second class at once */
  fw_page_queue_push(heap, q, p[1]);
  fw_page_queue_push(heap, &heap->queues[big_cls], b[0]);
  check_direct(heap);
  fw_page_queue_remove(heap, q, p[1]);
  fw_page_queue_remove(heap, &heap->queues[big_cls], b[0]);
  check_direct(heap);

  for (size_t i = 0; i < N; i++) fw_segment_page_free(heap->tld, p[i]);
  for (size_t i = 0; i < 3; i++) fw_segment_page_free(heap->tld, b[i]);
  fw_heap_struct_free(heap);
}

/* A dry head that could carve more blocks lets an adopted page further on
 * serve its free blocks first (memory touched already); a page of the
 * heap's own with free blocks does not stop it carving. */
static void t_page_queue_adopted(void) {
  fw_heap_t *heap = test_heap();
  const size_t cls = fw_size_class(48);
  fw_page_queue_t *q = &heap->queues[cls];
  static fw_block_t *ab[4096], *bb[4096];
  size_t na = 0, nb = 0;
  fw_page_t *a = lone_page(heap, cls), *b = lone_page(heap, cls);
  while (fw_page_has_free(a)) ab[na++] = fw_page_pop_checked(a);
  while (fw_page_has_free(b)) bb[nb++] = fw_page_pop_checked(b);
  CHECK(a->capacity < a->reserved && nb >= 4);
  for (size_t i = 0; i < nb; i += 2) CHECK(!fw_page_push(b, bb[i]));  /* every other block free */
  fw_page_queue_push(heap, q, a);
  fw_page_queue_push(heap, q, b);
  CHECK(q->first == a && !a->adopted && !b->adopted);

  /* b is the heap's own: a carves */
  uint32_t cap = a->capacity;
  CHECK(fw_page_queue_find(heap, cls) == a && a->capacity > cap && q->first == a);
  while (fw_page_has_free(a)) ab[na++] = fw_page_pop_checked(a);
  CHECK(a->capacity < a->reserved);

  /* b taken over (as from an exited thread): it serves, a carves nothing */
  fw_page_queue_remove(heap, q, b);
  CHECK(fw_page_adopt(heap, b) && b->adopted && q->last == b);
  cap = a->capacity;
  uint32_t b_live = b->used;
  CHECK(fw_page_queue_find(heap, cls) == b);
  CHECK(q->first == b && a->capacity == cap && b->used == b_live + 1 && fw_page_has_free(b));
  CHECK(heap->direct[48] == b);
  /* dry in its turn, b carves: a, behind it, is the heap's own */
  while (fw_page_has_free(b)) bb[nb++] = fw_page_pop_checked(b);
  uint32_t bcap = b->capacity;
  CHECK(b->capacity < b->reserved);
  CHECK(fw_page_queue_find(heap, cls) == b && b->capacity > bcap && a->capacity == cap);
  while (fw_page_has_free(b)) bb[nb++] = fw_page_pop_checked(b);

  /* a page set up anew is the heap's own again */
  for (size_t i = 0; i < na; i++) fw_page_push(a, ab[i]);
  for (size_t i = 0; i < nb; i++)
    if (fw_ptr_page(bb[i]) == b && !in_free(b, bb[i])) fw_page_push(b, bb[i]);
  fw_page_queue_remove(heap, q, a);
  fw_page_queue_remove(heap, q, b);
  CHECK(a->used == 0 && b->used == 0);
  fw_segment_page_free(heap->tld, a);
  fw_segment_page_free(heap->tld, b);
  fw_page_t *c = lone_page(heap, cls);
  CHECK(!c->adopted);
  fw_segment_page_free(heap->tld, c);
  fw_heap_struct_free(heap);
}

/* Medium blocks: a dry head that could carve lets any page further on with
 * free blocks serve first, the heap's own too: carving a block of 8 KiB or
 * more brings in new memory for each one, while the free ones are there. */
static void t_page_queue_medium(void) {
  fw_heap_t *heap = test_heap();
  const size_t cls = fw_size_class(16384);
  fw_page_queue_t *q = &heap->queues[cls];
  enum { MAXB = 64, NB = 6 };
  fw_block_t *ab[MAXB], *bb[MAXB];
  size_t na = 0, nb = 0;
  fw_page_t *a = lone_page(heap, cls), *b = lone_page(heap, cls);
  CHECK(a->kind == FW_KIND_MEDIUM && a->reserved <= MAXB && a->reserved > NB);
  while (fw_page_has_free(a)) ab[na++] = fw_page_pop_checked(a);
  while (nb < NB) {
    bb[nb] = fw_page_take(b);
    CHECK(bb[nb] != NULL);
    nb++;
  }
  for (size_t i = 0; i < nb; i += 2) CHECK(!fw_page_push(b, bb[i]));  /* every other block free */
  fw_page_queue_push(heap, q, a);
  fw_page_queue_push(heap, q, b);
  CHECK(q->first == a && !a->adopted && !b->adopted && !fw_page_has_free(a) && a->capacity < a->reserved);
  uint32_t cap = a->capacity;
  CHECK(fw_page_queue_find(heap, cls) == b);
  CHECKF(q->first == b && a->capacity == cap,
         "a dry head of medium blocks carved (capacity %u, was %u) while page %p further on had free blocks",
         a->capacity, cap, (void *)b);
  /* b's free blocks used up, and none elsewhere: b carves */
  for (size_t i = 0; i < nb; i += 2) CHECK(fw_page_pop_checked(b) != NULL);
  uint32_t bcap = b->capacity;
  CHECK(fw_page_queue_find(heap, cls) == b && b->capacity > bcap && a->capacity == cap);
  while (fw_page_has_free(b)) bb[nb++] = fw_page_pop_checked(b);
  for (size_t i = 0; i < na; i++) fw_page_push(a, ab[i]);
  for (size_t i = 0; i < nb; i++) fw_page_push(b, bb[i]);
  fw_page_queue_remove(heap, q, a);
  fw_page_queue_remove(heap, q, b);
  CHECK(a->used == 0 && b->used == 0);
  fw_segment_page_free(heap->tld, a);
  fw_segment_page_free(heap->tld, b);
  fw_heap_struct_free(heap);
}

/* The bytes a page's blocks may use: from its area to the end of its slices. */
static size_t page_room(const fw_page_t *pg) {
  fw_segment_t *seg = fw_page_segment(pg);
  size_t slice = (size_t)(pg - seg->pages);
  return (size_t)((uint8_t *)seg + (slice + pg->slices) * FW_SLICE_SIZE - pg->area);
}

static void t_page_pop_push(void) {
  fw_heap_t *heap = test_heap();
  const size_t classes[] = {fw_size_class(8), fw_size_class(48), fw_size_class(1000), fw_size_class(5000),
                            fw_size_class(40000)};
  for (size_t ci = 0; ci < IT_COUNT(classes); ci++) {
    size_t cls = classes[ci], bs = fw_class_size[cls];
    fw_page_t *pg = fw_heap_page_for(heap, cls);
    CHECK(pg != NULL && heap->queues[cls].first == pg && pg->used == 1);
    CHECK(pg->reserved == page_room(pg) / bs);
    size_t per_os_page = fw_os_page_size() / bs ? fw_os_page_size() / bs : 1;
    size_t first = pg->reserved < per_os_page ? pg->reserved : per_os_page;
    CHECKF(pg->capacity == first, "class %zu: %u blocks carved at first, expected %zu", cls, pg->capacity, first);

    /* pop everything carved: distinct blocks inside the carved area */
    static fw_block_t *blocks[8192];
    static uint8_t seen[8192];
    size_t n = 0;
    while (fw_page_has_free(pg)) {
      CHECK(n < 8192);
      uint32_t before = pg->used;
      blocks[n] = fw_page_pop_checked(pg);
      CHECK(pg->used == before + 1);
      n++;
    }
    CHECK(n == pg->capacity && pg->used == 1 + n);
    memset(seen, 0, sizeof seen);
    for (size_t i = 0; i < n; i++) {
      size_t off = (size_t)((uint8_t *)blocks[i] - pg->area);
      CHECK((uint8_t *)blocks[i] >= pg->area && off % bs == 0 && off / bs < pg->capacity);
      CHECK(!seen[off / bs]);
      seen[off / bs] = 1;
      CHECK(fw_ptr_page(blocks[i]) == pg);
      CHECK(fw_ptr_page((uint8_t *)blocks[i] + bs - 1) == pg);
    }
    CHECK(fw_page_live(pg) == n);

    /* the dry head is carved further by the queue search */
    if (pg->capacity < pg->reserved) {
      uint32_t cap = pg->capacity;
      CHECK(fw_page_queue_find(heap, cls) == pg);
      size_t more = pg->reserved - cap < per_os_page ? pg->reserved - cap : per_os_page;
      CHECK(pg->capacity == cap + more && fw_page_has_free(pg) && pg->used == 1 + n);
      while (fw_page_has_free(pg)) blocks[n++] = fw_page_pop_checked(pg);
      CHECK(n == pg->capacity);
    }

    /* pushing back: the head never reports empty (its extra count) */
    for (size_t i = n; i-- > 0;) CHECK(!fw_page_push(pg, blocks[i]));
    CHECK(pg->used == 1 && fw_page_live(pg) == 0);
    CHECK(pg->free == blocks[0] && fw_page_pop_checked(pg) == blocks[0]);  /* LIFO */
    CHECK(!fw_page_push(pg, blocks[0]));

    /* out of the queue, the last push reports the page empty */
    fw_page_queue_remove(heap, &heap->queues[cls], pg);
    CHECK(pg->used == 0);
    size_t k = n < 3 ? n : 3;
    fw_block_t *got[3];
    for (size_t i = 0; i < k; i++) got[i] = fw_page_pop_checked(pg);
    CHECK(pg->used == k);
    for (size_t i = 0; i < k; i++) CHECK(fw_page_push(pg, got[(i + 1) % k]) == (i + 1 == k));
    CHECK(pg->used == 0);
    fw_segment_page_free(heap->tld, pg);
  }
  fw_heap_struct_free(heap);
}

/* ---- remote frees ------------------------------------------------------------ */
typedef struct remote_job {
  fw_page_t *page;
  fw_block_t **blocks;
  size_t n;
  _Atomic int *go;
} remote_job;

static void *remote_free_thread(void *arg) {
  remote_job *j = arg;
  if (j->go)
    while (!atomic_load(j->go)) sched_yield();
  for (size_t i = 0; i < j->n; i++) {
    fw_page_free_remote(j->page, j->blocks[i]);
    if (i % 16 == 0) sched_yield();
  }
  return NULL;
}

static size_t list_len(const fw_block_t *b) {
  size_t n = 0;
  for (; b != FW_LIST_END; b = fw_block_next(b)) n++;
  return n;
}

static bool in_list(const fw_block_t *l, const fw_block_t *b) {
  for (; l != FW_LIST_END; l = fw_block_next(l))
    if (l == b) return true;
  return false;
}

/* A remote list of every other block of a page, short (64 B blocks) or
 * long (16 B): counted (64-bit builds), it becomes the empty local list as
 * it is, whatever its length; below, a block freed remotely while the
 * local list holds one is walked onto it. */
static void page_collect(size_t size) {
  fw_heap_t *heap = test_heap();
  const size_t cls = fw_size_class(size);
  fw_page_t *pg = fw_heap_page_for(heap, cls);
  CHECK(pg != NULL);
  static fw_block_t *blocks[4096], *odd[4096];
  size_t n = 0;
  while (fw_page_has_free(pg)) blocks[n++] = fw_page_pop_checked(pg);
  CHECK(n >= 8 && pg->used == 1 + n);

  /* another thread frees every other block */
  size_t m = 0;
  for (size_t i = 1; i < n; i += 2) odd[m++] = blocks[i];
  remote_job job = {pg, odd, m, NULL};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, remote_free_thread, &job) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  uintptr_t x = atomic_load(&pg->xfree);
  CHECK(x != 0 && !(x & FW_XFREE_DELAYED));
  CHECK(list_len(FW_XFREE_LIST(x)) == m);
  for (size_t i = 0; i < m; i++) CHECK(in_list(FW_XFREE_LIST(x), odd[i]));
  /* counted, so that the owner need not walk it (64-bit builds) */
  CHECK(FW_XFREE_COUNT(x) == (UINTPTR_MAX > 0xffffffffu ? m : 0));
  CHECK(!fw_page_has_free(pg) && pg->used == 1 + n);  /* nothing changes before the owner collects */

  fw_page_collect(pg);
  CHECK(atomic_load(&pg->xfree) == 0);
  CHECK(pg->used == 1 + n - m && fw_page_live(pg) == n - m);
  CHECK(list_len(pg->free) == m);
  for (size_t i = 0; i < m; i++) CHECK(in_list(pg->free, odd[i]));
  fw_page_collect(pg);  /* nothing more to fold in */
  CHECK(pg->used == 1 + n - m && list_len(pg->free) == m);

  /* the local list is kept: remote blocks are added in front of it */
  for (size_t i = 0; i < m; i++) odd[i] = fw_page_pop_checked(pg);
  CHECK(!fw_page_has_free(pg));
  CHECK(!fw_page_push(pg, blocks[0]));
  job.n = 1;
  CHECK(pthread_create(&t, NULL, remote_free_thread, &job) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  fw_page_collect(pg);
  CHECK(list_len(pg->free) == 2 && in_list(pg->free, blocks[0]) && in_list(pg->free, odd[0]));
  CHECK(pg->used == 1 + n - 2);
  while (fw_page_has_free(pg)) fw_page_pop_checked(pg);

  /* two threads free concurrently while the owner keeps collecting: every
   * block arrives exactly once */
  for (int round = 0; round < 100; round++) {
    CHECK(pg->used == 1 + n && !fw_page_has_free(pg));
    _Atomic int go = 0;
    remote_job j1 = {pg, blocks, n / 2, &go}, j2 = {pg, blocks + n / 2, n - n / 2, &go};
    pthread_t t1, t2;
    CHECK(pthread_create(&t1, NULL, remote_free_thread, &j1) == 0);
    CHECK(pthread_create(&t2, NULL, remote_free_thread, &j2) == 0);
    atomic_store(&go, 1);
    while (pg->used > 1) {
      fw_page_collect(pg);
      sched_yield();
    }
    CHECK(pthread_join(t1, NULL) == 0 && pthread_join(t2, NULL) == 0);
    fw_page_collect(pg);
    CHECK(atomic_load(&pg->xfree) == 0 && pg->used == 1);
    CHECKF(list_len(pg->free) == n, "round %d: %zu blocks came back of %zu", round, list_len(pg->free), n);
    for (size_t i = 0; i < n; i++) CHECK(in_list(pg->free, blocks[i]));
    for (size_t i = 0; i < n; i++) blocks[i] = fw_page_pop_checked(pg);
  }
  fw_page_queue_remove(heap, &heap->queues[cls], pg);
  fw_segment_page_free(heap->tld, pg);
  fw_heap_struct_free(heap);
}

static void t_page_collect(void) {
  page_collect(64);
  page_collect(16);
}

/* A page with no block left moves to the full list; remote frees into it
 * then go to the heap's delayed list, which gives the page back to its
 * queue when the owner folds it in. */
static void t_page_full_delayed(void) {
  fw_heap_t *heap = test_heap();
  const size_t cls = fw_size_class(1000);
  fw_page_t *pg = fw_heap_page_for(heap, cls);
  CHECK(pg != NULL);
  static fw_block_t *blocks[256];
  size_t n = 0;
  for (;;) {
    while (fw_page_has_free(pg)) blocks[n++] = fw_page_pop_checked(pg);
    if (pg->capacity == pg->reserved) break;
    CHECK(fw_page_queue_find(heap, cls) == pg);
  }
  CHECK(n == pg->reserved && pg->used == 1 + n);
  /* exhausted: the search moves it to the full list and finds nothing */
  CHECK(fw_page_queue_find(heap, cls) == NULL);
  CHECK(heap->queues[cls].first == NULL && heap->full.first == pg && heap->full.last == pg);
  CHECK(fw_page_flags(pg) & FW_PF_FULL);
  CHECK(pg->tag == 0);  /* the free fast path stays away from it */
  CHECK(atomic_load(&pg->xfree) == FW_XFREE_DELAYED);
  CHECK(pg->used == n);
  check_direct(heap);

  /* the first remote free goes to the heap and tells it the page has room;
   * the ones after it stay on the page's own list */
  remote_job job = {pg, blocks, 2, NULL};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, remote_free_thread, &job) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(FW_XFREE_LIST(atomic_load(&pg->xfree)) == blocks[1]);
  fw_block_t *d = atomic_load(&heap->delayed);
  CHECK(d == blocks[0] && fw_delayed_next(d) == NULL);
  CHECK(pg->used == n);

  /* the owner folds them in: the page is back at the head of its queue */
  fw_heap_collect_delayed(heap);
  CHECK(atomic_load(&heap->delayed) == NULL);
  CHECK(heap->full.first == NULL && heap->queues[cls].first == pg);
  CHECK(fw_page_flags(pg) == 0 && pg->tag == fw_thread_id());
  CHECK(pg->used == 1 + n - 1 && list_len(pg->free) == 1);
  fw_page_collect(pg);
  CHECK(atomic_load(&pg->xfree) == 0);
  CHECK(pg->used == 1 + n - 2 && list_len(pg->free) == 2);
  check_direct(heap);

  /* a remote free that arrives before the page is marked full keeps it out
   * of the full list */
  blocks[0] = fw_page_pop_checked(pg);
  blocks[1] = fw_page_pop_checked(pg);
  fw_page_queue_remove(heap, &heap->queues[cls], pg);
  job.n = 1;
  CHECK(pthread_create(&t, NULL, remote_free_thread, &job) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  fw_page_to_full(heap, pg);
  CHECK(heap->full.first == NULL && heap->queues[cls].first == pg);
  CHECK(!(fw_page_flags(pg) & FW_PF_FULL) && atomic_load(&pg->xfree) == 0);
  CHECK(pg->free == blocks[0] && fw_block_next(pg->free) == FW_LIST_END);
  CHECK(pg->used == 1 + n - 1);

  /* fw_page_unfull: back from the full list by hand */
  blocks[0] = fw_page_pop_checked(pg);
  fw_page_queue_remove(heap, &heap->queues[cls], pg);
  fw_page_to_full(heap, pg);
  CHECK(heap->full.first == pg && (fw_page_flags(pg) & FW_PF_FULL));
  fw_page_unfull(heap, pg);
  CHECK(heap->full.first == NULL && heap->queues[cls].first == pg && fw_page_flags(pg) == 0);
  CHECK(atomic_load(&pg->xfree) == 0 && pg->used == 1 + n);
  check_direct(heap);

  fw_page_queue_remove(heap, &heap->queues[cls], pg);
  fw_segment_page_free(heap->tld, pg);
  fw_heap_struct_free(heap);
}

/* A page that served blocks at an interior aligned offset leaves the free
 * fast path (FW_PF_ALIGNED) only while its owner has such blocks out. */
static void t_page_aligned_flag(void) {
  fw_heap_t *heap = test_heap();
  void *got[64];
  size_t n = 0;
  fw_page_t *pg = NULL;
  /* 100 bytes at 256: the first block of a page is aligned already and is
   * handed out plainly; the later ones are placed inside 355-byte blocks */
  while (n < 64) {
    void *p = fw_heap_malloc_aligned_ex(heap, 100, 256, false);
    CHECK(p != NULL && ((uintptr_t)p & 255) == 0);
    got[n++] = p;
    fw_page_t *q = fw_ptr_page(p);
    if ((void *)fw_page_block_start(q, p) != p && (fw_page_flags(q) & FW_PF_ALIGNED)) { pg = q; break; }
  }
  CHECK(pg != NULL && pg->aligned_live >= 1 && pg->tag == 0);
  uint32_t interior = pg->aligned_live;
  void *extra = fw_heap_malloc_aligned_ex(heap, 100, 256, false);
  CHECK(extra != NULL);
  bool extra_here = fw_ptr_page(extra) == pg && (void *)fw_page_block_start(pg, extra) != extra;
  CHECK(pg->aligned_live == interior + (extra_here ? 1u : 0u));
  if (extra_here) {
    fw_free_generic(extra);
    CHECK(pg->aligned_live == interior && (fw_page_flags(pg) & FW_PF_ALIGNED) && pg->tag == 0);
  } else {
    fw_free_generic(extra);
  }
  for (size_t i = 0; i < n; i++) fw_free_generic(got[i]);
  /* the last interior block is back: frees take the fast path again
   * (the page may have gone back to its segment if nothing else is live) */
  if (!(fw_page_flags(pg) & FW_PF_UNUSED)) {
    CHECK(pg->aligned_live == 0 && !(fw_page_flags(pg) & FW_PF_ALIGNED));
  }
  fw_heap_struct_free(heap);
}

/* A program that takes and frees blocks of two classes in turn, each freed
 * before the next is taken: once a class's empty head page has given its
 * slot to the other class and the first class came back for a page, its
 * head stays (fw_page_retire_empty_head, heap->head_back). Before, each
 * malloc set a page up for its class, the other's empty head having gone
 * for it: the head page changed at every round. */
static void t_page_heads_alternate(void) {
  fw_heap_t *heap = test_heap();
  const size_t sa = 64, sb = 96, ca = fw_size_class(sa), cb = fw_size_class(sb);
  CHECK(ca != cb && fw_class_size[cb] <= FW_SMALL_MAX);
  fw_page_t *first_a = NULL, *first_b = NULL;
  size_t changes = 0;
  for (int round = 0; round < 200; round++) {
    void *a = fw_heap_malloc_fast(heap, sa);
    CHECK(a != NULL);
    fw_page_t *pa = fw_ptr_page(a);
    fw_heap_free_local(pa, a);
    void *b = fw_heap_malloc_fast(heap, sb);
    CHECK(b != NULL);
    fw_page_t *pb = fw_ptr_page(b);
    fw_heap_free_local(pb, b);
    if (round >= 2) {
      changes += pa != first_a || pb != first_b;
      /* the other class's head stays in its queue while this one is used */
      CHECKF(heap->queues[ca].first == pa, "round %d: class %zu's head %p left its queue (now %p)", round, ca,
             (void *)pa, (void *)heap->queues[ca].first);
    }
    first_a = pa, first_b = pb;
  }
  CHECKF(changes == 0, "the head pages changed in %zu of 198 rounds", changes);
  fw_heap_release(heap, NULL, true);
}

/* A program whose few live blocks are spread over many size classes: a
 * window of 64 blocks of every class from 8 B to 32 KiB (73), one replaced at a time
 * at random. Most heads are empty most of the time, and each new page took
 * one of them, whose class then needed a new page in turn: the marks that
 * keep a class's head once it came back lapsed every 32 new pages, before
 * a class came back, and a page was set up every seven allocations. Once
 * every class has its page, the heap sets up (almost) none. */
static void t_page_heads_many(void) {
  fw_heap_t *heap = test_heap();
  enum { W = 64, CLASSES = 80 };
  size_t sizes[CLASSES], n = 0;
  for (size_t c = 1; c < FW_CLASS_COUNT && n < CLASSES; c++)
    if (fw_class_size[c] <= 32768) sizes[n++] = fw_class_size[c];
  CHECK(n >= 60);
  void *slot[W] = {0};
  uint64_t x = 88172645463325252ull;
  uint32_t warm = 0;
  for (int op = 0; op < 150000; op++) {
    if (op == 50000) warm = heap->pages_new;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t j = (size_t)(x % W), size = sizes[(x >> 20) % n];
    if (slot[j]) fw_heap_free_local(fw_ptr_page(slot[j]), (fw_block_t *)slot[j]);
    slot[j] = fw_heap_malloc_fast(heap, size);
    CHECK(slot[j] != NULL);
  }
  uint32_t later = heap->pages_new - warm;
  CHECKF(later < 1000, "%u pages set up in 100,000 allocations after the first 50,000 (%u before)", later, warm);
  for (size_t j = 0; j < W; j++)
    if (slot[j]) fw_heap_free_local(fw_ptr_page(slot[j]), (fw_block_t *)slot[j]);
  fw_heap_release(heap, NULL, true);
}

/* Whether the kernel takes MADV_POPULATE_WRITE (Linux 5.14 and later). */
static bool populate_works(void) {
  static int works = -1;
  if (works < 0) {
    size_t os = fw_os_page_size();
    void *m = mmap(NULL, 2 * os, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    works = fw_os_populate(m, 2 * os) && fw_os_resident(m, 2 * os) == 2 * os;
    munmap(m, 2 * os);
  }
  return works == 1;
}

/* A thread piling up blocks of one class: its page carves a 4 KiB page's
 * worth at a time until it has carved 16 KiB, then 16 KiB at a time if its
 * blocks are small and no other thread has freed blocks of its segment
 * (the slow path's carve of fw_malloc_generic, and the whole slow path's,
 * carve the same). Returns the page's first block. */
static void *carve_class(fw_heap_t *heap, size_t size) {
  const size_t os = fw_os_page_size();
  void *first = fw_heap_malloc_fast(heap, size);
  CHECK(first != NULL);
  fw_page_t *pg = fw_ptr_page(first);
  const size_t bs = pg->block_size;
  CHECKF(pg->capacity == (os / bs ? os / bs : 1), "%zu B: first carve %u blocks of %zu B", size, pg->capacity, bs);
  uint32_t cap = pg->capacity, carves = 1, big = 0;
  while (pg->capacity < pg->reserved) {
    /* a carve of several OS pages of a fresh page, of a class not used
     * up before, faults them in by one system call */
    bool fresh = pg->is_zero && !pg->prof_side && !(heap->filled[pg->cls / 64] & ((uint64_t)1 << (pg->cls % 64))) &&
                 !fw_page_segment(pg)->huge && fw_opt(POPULATE) && populate_works();
    uint64_t pops = atomic_load(&fw_os_calls[FW_OSC_POPULATE]);
    void *p = fw_heap_malloc_fast(heap, size);
    CHECK(p != NULL && fw_ptr_page(p) == pg);
    if (pg->capacity == cap) continue;
    bool more = pg->kind == FW_KIND_SMALL && (size_t)cap * bs >= 4 * os && fw_page_segment(pg)->remote_in == 0;
    if (fresh) {
      uint64_t asked = atomic_load(&fw_os_calls[FW_OSC_POPULATE]) - pops;
      /* fw_page_extend's rule: the whole OS pages up to the last carved
       * block's link */
      size_t n = pg->capacity - cap;
      uintptr_t from = (uintptr_t)pg->area + (size_t)cap * bs;
      uintptr_t to = (from + (n - 1) * bs + sizeof(fw_block_t) + os - 1) & ~(uintptr_t)(os - 1);
      bool want = more && n > 1 && to > fw_align_up(from, os);
      CHECKF(asked == (want ? 1u : 0u), "%zu B: carve %u of %u blocks (%u carved before): %llu population calls, "
             "expected %d", size, carves, pg->capacity - cap, cap, (unsigned long long)asked, want ? 1 : 0);
    }
    size_t unit = (more ? 4 * os : os) / bs;
    if (unit < 1) unit = 1;
    size_t want = cap + unit < pg->reserved ? unit : pg->reserved - cap;
    CHECKF(pg->capacity - cap == want, "%zu B: carve %u after %u blocks: %u blocks, expected %zu", size, carves, cap,
           pg->capacity - cap, want);
    big += more;
    cap = pg->capacity;
    carves++;
  }
  CHECKF(big > 0 || pg->kind != FW_KIND_SMALL || fw_page_segment(pg)->remote_in != 0,
         "%zu B: no 16 KiB carve in %u carves", size, carves);
  return first;
}

/* With a remote free waiting on the page, a malloc takes that block before
 * it carves more. */
static void carve_waits(fw_heap_t *heap, size_t size) {
  void *first = fw_heap_malloc_fast(heap, size);
  CHECK(first != NULL);
  fw_page_t *pg = fw_ptr_page(first);
  while (fw_page_has_free(pg)) CHECK(fw_heap_malloc_fast(heap, size) != NULL);
  CHECK(pg->capacity < pg->reserved);
  uint32_t cap = pg->capacity;
  fw_page_free_remote(pg, (fw_block_t *)first);
  void *again = fw_heap_malloc_fast(heap, size);
  CHECKF(again == first && pg->capacity == cap, "%zu B: a remote free waiting, the malloc got %p (freed %p), "
         "capacity %u -> %u", size, again, first, cap, pg->capacity);
  CHECK(fw_heap_malloc_fast(heap, size) != NULL && pg->capacity > cap);
}

static void t_page_carve(void) {
  fw_heap_t *heap = test_heap();
  carve_class(heap, 256);
  carve_class(heap, 1536);
  carve_class(heap, 20000);
  /* from here on, blocks of the segment have come back from another thread */
  carve_waits(heap, 96);
  carve_waits(heap, 3000);
  carve_class(heap, 512);
}

int main(int argc, char **argv) {
  static const it_section s[] = {
    {"page_carve", t_page_carve},
    {"page_heads_alternate", t_page_heads_alternate},
    {"page_heads_many", t_page_heads_many},
    {"page_queue", t_page_queue},
    {"page_pop_push", t_page_pop_push},
    {"page_collect", t_page_collect},
    {"page_full_delayed", t_page_full_delayed},
    {"page_aligned_flag", t_page_aligned_flag},
    {"page_queue_adopted", t_page_queue_adopted},
    {"page_queue_medium", t_page_queue_medium},
  };
  return it_main(argc, argv, s, IT_COUNT(s));
}
