/* page.c — blocks inside a page and the heap's page queues.
 *
 * Each heap keeps one queue per size class; the head of a queue is the page
 * that the malloc fast path pops from (heap->direct[] points at it), and it
 * carries one extra count in page->used so that freeing its last block never
 * sends the free fast path into retirement: in a malloc/free loop the head
 * page goes from one block to none and back without leaving the fast path.
 * Pages with no free block move to the heap's full list and set the DELAYED
 * bit in xfree, so that a remote free into them is routed to the heap, which
 * then puts the page back in its queue. What to do with a page whose last
 * block is freed is the heap layer's decision. See alloc.c for the design. */
#include "page.h"
#include "segment.h"
#include "arena.h"
#include "options.h"
#include "os.h"
#include "message.h"
#include "stats.h"
#include <string.h>

fw_page_t fw_page_empty = {.free = &fw_list_end, .later = &fw_list_end, .link_mask = FW_LINK_MASK};

/* K = 1 until fw_list_init: no list exists before it. */
uintptr_t fw_list_key = 1, fw_list_key_inv = 1, fw_mark_key;
/* Its link is the taken mark, which fails the fast pop's test too. */
fw_block_t fw_list_end = {.link = FW_LINK_TAKEN};

void fw_list_init(void) {
  uintptr_t k = 0;
  fw_os_random(&k, sizeof k);
  k |= 1;  /* odd: invertible modulo 2^N */
  /* Newton's iteration doubles the correct low bits each step: 3 -> 96 */
  uintptr_t inv = k;
  for (int i = 0; i < 5; i++) inv *= 2 - k * inv;
  FW_ASSERT(k * inv == 1);
  fw_list_key = k;
  fw_list_key_inv = inv;
  fw_os_random(&fw_mark_key, sizeof fw_mark_key);
}

void fw_block_take(const fw_page_t *page, fw_block_t *b) {
  if (fw_unlikely(!fw_block_marked(b))) {
    fw_segment_t *seg = fw_page_segment(page);
    fw_message("write to a freed block: address %p, in a page of %zu-byte blocks (class %u) of thread %#lx: "
               "its free mark is gone (written after the free, or the block was on a free list twice); "
               "aborting\n", (void *)b, page->block_size, (unsigned)page->cls,
               (unsigned long)atomic_load_explicit(&seg->thread_id, memory_order_relaxed));
    fw_os_abort();
  }
  atomic_store_explicit(fw_mark_word(b), 0, memory_order_relaxed);
}

void fw_list_corrupt(const fw_page_t *page, const fw_block_t *b, uintptr_t t) {
  fw_segment_t *seg = fw_page_segment(page);
  bool taken = b->link == FW_LINK_TAKEN;
  const char *what = t == 0 || taken ? "double free" : "free list corrupted";
  fw_message("%s: address %p%s, in a page of %zu-byte blocks (class %u) of thread %#lx; "
             "a freed block was written to or freed twice; aborting\n",
             what, (const void *)b,
             t == 0 ? " is its own successor"
                    : taken ? " was handed out and is on a free list again" : "'s link is damaged",
             page->block_size, (unsigned)page->cls,
             (unsigned long)atomic_load_explicit(&seg->thread_id, memory_order_relaxed));
  fw_os_abort();
}

fw_block_t *fw_delayed_next(const fw_block_t *b) {
  fw_block_t *next = (fw_block_t *)(b->link * fw_list_key_inv);
  if (next && !fw_page_of_pointer(next, 0)) {
    fw_message("free list corrupted: address %p, on a heap's list of delayed frees, links to %p, "
               "which is no block of freeway's; aborting\n", (const void *)b, (void *)next);
    fw_os_abort();
  }
  return next;
}

/* direct[] slots per class: class c serves slots fw_direct_first[c] up to
 * fw_direct_end[c]. Filled at start-up from fw_size_class(). */
static uint16_t fw_direct_first[FW_CLASS_COUNT + 1];
static uint16_t fw_direct_end[FW_CLASS_COUNT + 1];
static uint8_t fw_direct_cls[FW_DIRECT_SLOTS];

/* Bit c of fw_kind_classes[k]: class c's pages are of kind k (small or
 * medium), so that a look through the heap's queues for a page of one kind
 * skips the other's without reading their page descriptors. */
static uint64_t fw_kind_classes[2][2];

void fw_page_tables_init(void) {
  for (size_t c = 1; c < FW_CLASS_COUNT; c++)
    fw_kind_classes[fw_class_size[c] <= FW_SMALL_MAX ? FW_KIND_SMALL : FW_KIND_MEDIUM][c / 64] |= (uint64_t)1 << (c % 64);
  for (size_t w = 0; w < FW_DIRECT_SLOTS; w++) fw_direct_cls[w] = (uint8_t)fw_size_class(w);
  for (size_t w = FW_DIRECT_SLOTS; w-- > 0;) fw_direct_first[fw_direct_cls[w]] = (uint16_t)w;
  for (size_t w = 0; w < FW_DIRECT_SLOTS; w++) fw_direct_end[fw_direct_cls[w]] = (uint16_t)(w + 1);
}

/* Four stores a step with known bounds, which the compiler pairs into
 * vector stores: a class near 1 KiB serves 128 slots (the table is indexed
 * by the byte size, so that the fast path needs no shift), rewritten
 * whenever its queue's head page changes, and a heap's whole table is
 * reset when a thread starts and when it exits (bench_fastpath ring 1024:
 * 8 instructions of 69 a malloc and free went to a loop that tested every
 * slot's class). */
static void fw_direct_fill(fw_page_t **w, fw_page_t **end, fw_page_t *page) {
  for (; end - w >= 4; w += 4) {
    w[0] = page;
    w[1] = page;
    w[2] = page;
    w[3] = page;
  }
  for (; w < end; w++) *w = page;
}

void fw_direct_reset(fw_heap_t *heap) {
  fw_direct_fill(heap->direct, heap->direct + FW_DIRECT_SLOTS, &fw_page_empty);
  fw_direct_fill(heap->cdirect, heap->cdirect + FW_CLASS_COUNT, &fw_page_empty);
}

static void fw_direct_set(fw_heap_t *heap, size_t cls, fw_page_t *page) {
  /* cautious mode and the secure level keep every slot empty so that all
   * calls are checked */
  if (fw_opt(CAUTIOUS) || fw_secure) return;
  if (cls > fw_direct_cls[FW_DIRECT_SLOTS - 1]) {
    if (cls < FW_CLASS_COUNT) heap->cdirect[cls] = page;
    return;
  }
  fw_direct_fill(&heap->direct[fw_direct_first[cls]], &heap->direct[fw_direct_end[cls]], page);
}

/* The head of a queue changes: move the bias and the direct pointers. */
static void fw_pq_head_moved(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *old) {
  fw_page_t *now = q->first;
  if (old == now) return;
  if (old) old->used--;
  if (now) {
    now->used++;
    now->idle = 0;
  }
  if (q != &heap->full) {
    size_t c = (size_t)(q - heap->queues);
    fw_direct_set(heap, c, now ? now : &fw_page_empty);
    if (!now) heap->queued[c / 64] &= ~((uint64_t)1 << (c % 64));
    else if (!old) heap->queued[c / 64] |= (uint64_t)1 << (c % 64);
  }
}

void fw_page_queue_push_front(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page) {
  fw_page_t *old = q->first;
  page->prev = NULL;
  page->next = old;
  if (old) old->prev = page; else q->last = page;
  q->first = page;
  if (q != &heap->full) fw_pq_head_moved(heap, q, old);
}

void fw_page_queue_push(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page) {
  fw_page_t *old = q->first;
  page->next = NULL;
  page->prev = q->last;
  if (q->last) q->last->next = page; else q->first = page;
  q->last = page;
  if (q != &heap->full) fw_pq_head_moved(heap, q, old);
}

void fw_page_queue_remove(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page) {
  fw_page_t *old = q->first;
  if (page->prev) page->prev->next = page->next; else q->first = page->next;
  if (page->next) page->next->prev = page->prev; else q->last = page->prev;
  page->next = page->prev = NULL;
  if (q != &heap->full) fw_pq_head_moved(heap, q, old);
}

fw_page_t *fw_page_queue_take_all(fw_heap_t *heap, fw_page_queue_t *q) {
  fw_page_t *first = q->first;
  if (!first) return NULL;
  if (q != &heap->full) {
    size_t c = (size_t)(q - heap->queues);
    first->used--;
    heap->queued[c / 64] &= ~((uint64_t)1 << (c % 64));
  }
  q->first = q->last = NULL;
  return first;
}

/* Carves more never-used blocks into the free list, one OS page's worth at
 * a time, so that a thread that uses a size class for a few blocks touches
 * one page of it, not the whole page of the class: the link word of each
 * carved block faults its first page in. Blocks of 4 KiB and more are carved
 * one at a time (their mallocs take the slow path anyway). */
static void fw_page_extend_secure(fw_page_t *page, uint8_t *start, size_t n);

static void fw_page_extend(fw_page_t *page) {
  size_t bs = page->block_size;
  size_t n = page->reserved - page->capacity;
  /* A 4 KiB page's worth at a time: a thread that allocates a few blocks
   * of a class brings in no more memory than it uses. A page of small
   * blocks that has carved four of them is a class the thread piles up:
   * it carves 16 KiB at a time, a quarter of the slow paths (see
   * fw_malloc_generic) - unless other threads free blocks of its segment,
   * which come back to be served before more is carved (16 KiB there too:
   * bench_xmalloc 1 producer + 1 consumer, 8 B-16 KiB, peak RSS 4.8 -> 5.3
   * MB; medium blocks too: bench_speed 10 threads, 256 B-32 KiB, 117 ->
   * 121 MB; medians of 11, interleaved). */
  size_t os = fw_os_page_size();
  bool more = page->kind == FW_KIND_SMALL && (size_t)page->capacity * bs >= 4 * os &&
              fw_page_segment(page)->remote_in == 0;
  size_t max = (more ? 4 * os : os) / bs;
  if (max < 1) max = 1;
  if (n > max) n = max;
  uint8_t *start = page->area + (size_t)page->capacity * bs;
  /* The OS pages such a carve writes its links into are faulted in by one
   * system call (fw_os_populate), not by a fault each as the carve's loop
   * reaches them: nothing the carve would not touch at once, so no more
   * memory resident. A page faulted in whole when it was set up (a class
   * that had used a page up before, FREEWAY_POPULATE, heap.c) is not
   * asked again; nor is a page of the heap profiler's sampled blocks, as
   * at set-up (a few blocks of each size that is sampled). A thread's
   * first page of each class comes this way: bench_frag --threads 10
   * --ptrs 5000 --min 128 --max 1280 --loops 3 (27 classes piling up at
   * once, the first loop faulting 35 MB in), 15 interleaved runs,
   * medians: system time 19.4 -> 17.0 ms, the mean loop 5.24 -> 4.63 ms. */
  if (more && page->is_zero && !page->prof_side && fw_opt(POPULATE) && n > 1) {
    fw_heap_t *heap = atomic_load_explicit(&page->heap, memory_order_relaxed);
    if (heap && !(heap->filled[page->cls / 64] & ((uint64_t)1 << (page->cls % 64))) && !fw_page_segment(page)->huge)
      fw_os_populate(start, (n - 1) * bs + sizeof(fw_block_t) + os - 1);
  }
  /* a page of sampled blocks: the profiler's records of the new blocks
   * (after the page's blocks) must say "none" before any is handed out */
  if (page->prof_side && !page->is_zero)
    memset(page->area + (size_t)page->reserved * bs + (size_t)page->capacity * FW_PROF_SIDE, 0, n * FW_PROF_SIDE);
  page->capacity += (uint32_t)n;
  if (fw_secure) {
    fw_page_extend_secure(page, start, n);
    return;
  }
  uint8_t *p = start;
  for (size_t i = 1; i < n; i++, p += bs) fw_block_set_next((fw_block_t *)p, (fw_block_t *)(p + bs));
  fw_block_set_next((fw_block_t *)p, page->free);
  page->free = (fw_block_t *)start;
}

/* The secure level carves the n blocks in an order drawn at random: from a
 * random first block, a random step prime to n (a permutation, so every
 * block is listed once), so that where the next blocks will be cannot be
 * told from where the last ones were. Each carries the free mark. */
static uint64_t fw_secure_rand(fw_heap_t *heap) {
  uint64_t x = heap ? heap->rng : 0;
  if (x == 0) fw_os_random(&x, sizeof x);
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;  /* xorshift64: never 0 from non-zero */
  if (x == 0) x = 0x9e3779b97f4a7c15ull;
  if (heap) heap->rng = x;
  return x;
}

static size_t fw_gcd(size_t a, size_t b) {
  while (b) { size_t t = a % b; a = b; b = t; }
  return a;
}

static void fw_page_extend_secure(fw_page_t *page, uint8_t *start, size_t n) {
  size_t bs = page->block_size;
  FW_ASSERT(bs >= 2 * sizeof(uintptr_t));
  uint64_t r = fw_secure_rand(atomic_load_explicit(&page->heap, memory_order_relaxed));
  size_t first = (size_t)(r % n), step = 1;
  if (n > 2) {
    step = 1 + (size_t)((r >> 32) % (n - 1));
    while (fw_gcd(step, n) != 1) step = step % (n - 1) + 1;
  }
  fw_block_t *head = (fw_block_t *)(start + first * bs), *b = head;
  for (size_t i = 1, k = first; i <= n; i++) {
    atomic_store_explicit(fw_mark_word(b), fw_free_mark(b), memory_order_relaxed);
    k = (k + step) % n;
    fw_block_t *next = i < n ? (fw_block_t *)(start + k * bs) : page->free;
    fw_block_set_next(b, next);
    b = next;
  }
  page->free = head;
}

void fw_page_init(fw_page_t *page, fw_heap_t *heap, size_t cls, size_t block_size) {
  size_t span = page->block_size;  /* set by the segment: bytes available */
  page->cls = (uint16_t)cls;
  page->block_size = block_size;
  page->capacity = 0;
  page->reserved = (uint16_t)(span / block_size);
  page->link_mask = fw_link_mask(block_size);
  page->free = FW_LIST_END;
  page->later = FW_LIST_END;
  page->used = 0;
  page->aligned_live = 0;
  page->adopted = 0;
  page->prof_side = 0;
  atomic_store_explicit(&page->sampled, 0, memory_order_relaxed);
  /* a medium page's later slices hold the heap profiler's records of its
   * sampled blocks (prof.c): their descriptors' fields may be those of the
   * memory's earlier use */
  if (page->kind == FW_KIND_MEDIUM)
    for (size_t k = 1; k < page->slices; k++) atomic_store_explicit(&page[k].sampled, 0, memory_order_relaxed);
  page->fresh = page->area;
  atomic_store_explicit(&page->xfree, 0, memory_order_relaxed);
  atomic_store_explicit(&page->heap, heap, memory_order_relaxed);
  fw_page_extend(page);
}

void fw_page_collect(fw_page_t *page) {
  uintptr_t x = atomic_load_explicit(&page->xfree, memory_order_relaxed);
  if ((x & ~FW_XFREE_DELAYED) == 0) return;
  while (!atomic_compare_exchange_weak_explicit(&page->xfree, &x, x & FW_XFREE_DELAYED,
                                                memory_order_acq_rel, memory_order_relaxed)) {
  }
  fw_block_t *list = FW_XFREE_LIST(x);
  if (!list) return;
  uint32_t n = FW_XFREE_COUNT(x);
  fw_heap_t *heap = atomic_load_explicit(&page->heap, memory_order_relaxed);
  /* A list whose count is known becomes the local one as it is: its last
   * block links to the list's end, and the pops check every link as they
   * come to it (remote frees are other threads' writes: the owner's first
   * touch of each block is then the pop that hands it out, not a walk that
   * waits on one miss after another). Walked when the count is not known,
   * when the local list is not empty (the walk finds the tail), and when
   * the count would leave the page no live block (a double free among
   * them: the walk sees it before the page goes). Short lists were walked
   * too, to leave their blocks in the cache for the pops; in
   * bench_prodcons (1 pair, lists mostly up to 32 blocks) the walk's loads
   * were 20 % of the cycles (perf), each waiting on the line the consumer
   * had just written. Left as they are, interleaved runs, medians of 21:
   * bench_prodcons 1 pair 71.3 -> 64.3 ms, 2 pairs 301 -> 274 ms,
   * bench_xmalloc 1P+1C 8 B-16 KiB 255 -> 230 ms, 8 B-1 KiB 279 -> 285
   * ms (an earlier measurement, on the code of its day, had found
   * prodcons 1.09 to 1.15 times as long without the walk of lists up to
   * 32). */
  if (n && n < page->used && page->free == FW_LIST_END) {
    page->free = list;
    page->used -= n;
    page->frees += n;
    fw_page_segment(page)->remote_in += n;
    if (heap) fw_count_add(&heap->tld->counts.remote_frees, n);
    else atomic_fetch_add_explicit(&fw_counts_gone.remote_frees, n, memory_order_relaxed);
    return;
  }
  /* remote frees are checked here, as the owner takes them */
  n = 1;
  fw_block_t *tail = list;
  for (;;) {
    uintptr_t t = fw_link_decode(tail);
    fw_block_t *next = (fw_block_t *)(t ^ (uintptr_t)tail);
    if (next == FW_LIST_END) break;
    if (fw_unlikely(FW_LINK_BAD_PAGE(t, page))) fw_list_corrupt(page, tail, t);
    tail = next;
    if (fw_unlikely(++n > page->capacity)) fw_list_corrupt(page, tail, 0);  /* a cycle */
  }
  fw_block_set_next(tail, page->free);
  page->free = list;
  page->used -= n;
  page->frees += n;
  fw_page_segment(page)->remote_in += n;
  if (heap) fw_count_add(&heap->tld->counts.remote_frees, n);
  else atomic_fetch_add_explicit(&fw_counts_gone.remote_frees, n, memory_order_relaxed);
}

bool fw_page_push_later(fw_page_t *page, fw_block_t *b) {
  page->frees++;
  fw_block_set_next(b, page->later);
  page->later = b;
  return --page->used == 0;
}

/* A page whose free list is used up takes what came back since: remote
 * frees, then (secure level) the owner's frees set aside on later. */
static void fw_page_refill(fw_page_t *page) {
  fw_page_collect(page);
  if (page->kind != FW_KIND_LARGE && !fw_page_has_free(page) && page->later != FW_LIST_END) {
    page->free = page->later;
    page->later = FW_LIST_END;
  }
}

bool fw_page_rearm(fw_page_t *page) {
  for (;;) {
    fw_page_collect(page);
    uintptr_t x = atomic_load_explicit(&page->xfree, memory_order_acquire);
    if (x == FW_XFREE_DELAYED) break;
    if (x == 0 && atomic_compare_exchange_strong_explicit(&page->xfree, &x, FW_XFREE_DELAYED, memory_order_acq_rel,
                                                          memory_order_relaxed))
      break;
  }
  return page->used == 0;
}

fw_block_t *fw_page_carve(fw_page_t *page) {
  fw_page_extend(page);
  return fw_page_pop_checked(page);
}

fw_block_t *fw_page_take(fw_page_t *page) {
  if (!fw_page_has_free(page)) {
    fw_page_refill(page);
    if (!fw_page_has_free(page) && page->capacity < page->reserved) fw_page_extend(page);
  }
  return fw_page_pop_checked(page);
}

/* Marks a page (not in any list) full: remote frees now go to the heap. If
 * one slipped in first, the page is not full after all: returns false. */
static bool fw_page_mark_full(fw_heap_t *heap, fw_page_t *page) {
  uintptr_t expected = 0;
  if (!atomic_compare_exchange_strong_explicit(&page->xfree, &expected, FW_XFREE_DELAYED,
                                               memory_order_acq_rel, memory_order_relaxed))
    return false;
  fw_page_flags_set(page, page->flags | FW_PF_FULL);
  fw_page_queue_push(heap, &heap->full, page);
  return true;
}

void fw_page_to_full(fw_heap_t *heap, fw_page_t *page) {
  while (!fw_page_mark_full(heap, page)) {
    fw_page_refill(page);
    if (fw_page_has_free(page)) {
      fw_page_queue_push(heap, &heap->queues[page->cls], page);
      return;
    }
  }
}

void fw_page_clear_delayed(fw_page_t *page) {
  atomic_fetch_and_explicit(&page->xfree, ~FW_XFREE_DELAYED, memory_order_acq_rel);
}

void fw_page_unfull(fw_heap_t *heap, fw_page_t *page) {
  fw_page_queue_remove(heap, &heap->full, page);
  fw_page_flags_set(page, page->flags & ~FW_PF_FULL);
  fw_page_clear_delayed(page);
  fw_page_queue_push(heap, &heap->queues[page->cls], page);
}

/* Takes a page of an adopted segment into heap. Returns false if the page
 * had no live block and went back to its segment (which may be gone now). */
bool fw_page_adopt(fw_heap_t *heap, fw_page_t *page) {
  page->adopted = 1;
  heap->adopted_any = true;
  atomic_store_explicit(&page->heap, heap, memory_order_release);
  fw_page_flags_set(page, page->flags & (FW_PF_CHECKED | FW_PF_ALIGNED | FW_PF_SAMPLED));
  page->next = page->prev = NULL;
  fw_page_refill(page);
  if (page->used == 0) {
    fw_segment_page_free(heap->tld, page);
    return false;
  }
  if (page->kind != FW_KIND_LARGE && (fw_page_has_free(page) || page->capacity < page->reserved)) {
    fw_page_queue_push(heap, &heap->queues[page->cls], page);
    return true;
  }
  if (page->kind == FW_KIND_LARGE) page->cls = FW_CLASS_LARGE;
  fw_page_to_full(heap, page);
  return true;
}

/* The head page of a class queue keeps its page even with no live block
 * (see fw_heap_retire_idle). Before a new page is set up, one such empty
 * head of the same kind gives its slot back, so that blocks moving from
 * class to class (a buffer grown by realloc, a string that keeps growing)
 * reuse memory already touched instead of spreading over fresh pages.
 * Not a class that came back for a new page after its empty head went
 * (heap->head_back, set by fw_heap_page_new): a program that allocates
 * and frees blocks of two classes in turn, each freed before the next is
 * taken, had each malloc set up a page for its class, the other class's
 * head having gone for it: 1,330 instructions a malloc and free (callgrind,
 * a loop of malloc(64 + (i % 2) * 32) and free; 48 with one size). */
void fw_page_retire_empty_head(fw_heap_t *heap, int kind, size_t cls) {
  /* only the classes of that kind with a queue: a few, where a program
   * allocates (cc1 -O2 set up 18,681 pages and spent 9.6M instructions on
   * this look before the other kind's classes were left out, 7.8M after) */
  for (size_t w = 0; w < 2; w++) {
    for (uint64_t m = heap->queued[w] & fw_kind_classes[kind][w] & ~heap->head_back[w]; m; m &= m - 1) {
      size_t c = w * 64 + (size_t)__builtin_ctzll(m);
      fw_page_t *pg = heap->queues[c].first;
      if (c == cls || pg->used != 1 ||
          (atomic_load_explicit(&pg->xfree, memory_order_relaxed) & ~FW_XFREE_DELAYED))
        continue;
      fw_page_queue_remove(heap, &heap->queues[c], pg);  /* also drops the head's extra count */
      fw_segment_page_free(heap->tld, pg);
      heap->head_gone[w] |= (uint64_t)1 << (c % 64);
      return;
    }
  }
}

/* Pages this far along a queue are looked at before the page at hand
 * carves new blocks. */
#define FW_QUEUE_LOOKAHEAD 8

/* One of the few pages from page on that may serve before the page at
 * hand carves new blocks, with free blocks, remote frees folded in (also
 * when it has free blocks already: left on the remote list, the blocks
 * given back waited while the page's few own ones went, and bench_prodcons
 * 1 pair kept 6.2 MB of peak RSS instead of 4.7) and, if its list is used
 * up, the secure level's frees waiting on later moved to it (looked over,
 * such pages had the page at hand carve fresh memory while theirs stayed:
 * FREEWAY_SECURE=1, medians of 5 interleaved runs, bench_speed --threads 4
 * --ops 200000 --min 256 --max 131072 152.9 -> 127.2 MB of peak RSS,
 * 43,700 -> 34,500 page faults; bench_glibcbench --mode thread --min 8192
 * --max 32768 18.2 -> 11.4 MB; tests/secure.c served_later); or NULL. A page
 * qualifies if it came from another heap or thread (fw_page_adopt), any
 * page if own, or one whose list of blocks other threads freed holds want
 * of them (64-bit builds: the lists carry their length there, and 32-bit
 * ones look for none). */
static fw_page_t *fw_page_queue_served(fw_page_t *page, bool own, uint32_t want) {
  for (int n = 0; page && n < FW_QUEUE_LOOKAHEAD; page = page->next, n++) {
    if (!page->adopted && !own &&
        FW_XFREE_COUNT(atomic_load_explicit(&page->xfree, memory_order_relaxed)) < want)
      continue;
    fw_page_refill(page);
    if (fw_page_has_free(page)) return page;
  }
  return NULL;
}

fw_page_t *fw_page_queue_find(fw_heap_t *heap, size_t cls) {
  fw_page_queue_t *q = &heap->queues[cls];
  fw_page_t *page = q->first;
  while (page) {
    FW_VALIDATE_PAGE(page);
    if (!fw_page_has_free(page)) {
      fw_page_refill(page);
      if (!fw_page_has_free(page) && page->capacity < page->reserved) {
        /* The free blocks of an adopted page (an exited thread's, whose
         * other blocks are still live, so the page stays) are memory
         * touched already: they serve before this page carves new blocks,
         * which would bring in new memory while those stay resident. Of
         * small blocks, adopted pages, and the heap's own pages that other
         * threads gave back as many blocks as a carve brings (a 4 KiB
         * page's worth): those with a few free blocks are often ones it is
         * draining (a loop that frees its oldest blocks), and hopping to
         * them would cost more slow paths than carving, which brings in a
         * 4 KiB page for several blocks. A producer whose blocks a
         * consumer frees carved its pages whole while the blocks came back
         * to its other pages: bench_prodcons 1 pair, peak RSS 6.2 -> 4.6 MB
         * (medians of 15, interleaved; Debian's mimalloc: 3.0 MB),
         * bench_xmalloc 4 producers + 4 consumers, 8 B-16 KiB, 45.8 -> 40.7
         * MB; times within the runs' noise. Of medium blocks (8 KiB and
         * more), any page: each block carved brings in a page of its own,
         * at least, a page fault that costs far more than the slow paths.
         * (bench_speed 12 threads, 256 B-128 KiB: 45,000 page faults and
         * 169 MiB of peak RSS with adopted pages only, 39,600 and 136 MiB;
         * medians of 5.) */
        size_t want = fw_os_page_size() / page->block_size;
        fw_page_t *other =
            fw_page_queue_served(page->next, page->kind == FW_KIND_MEDIUM, want ? (uint32_t)want : 1u);
        if (other) page = other;
        else fw_page_extend(page);
      }
    }
    if (fw_page_has_free(page)) {
      if (page != q->first) {
        fw_page_queue_remove(heap, q, page);
        fw_page_queue_push_front(heap, q, page);
      }
      return page;
    }
    fw_page_t *next = page->next;
    fw_page_queue_remove(heap, q, page);
    fw_page_to_full(heap, page);
    /* used up by this heap's mallocs (not a page of samples, full from the
     * start, nor one adopted full): the class piles up (heap.c) */
    heap->filled[cls / 64] |= (uint64_t)1 << (cls % 64);
    if (fw_page_has_free(page)) {  /* a remote free arrived in the meantime */
      if (q->first != page) {
        fw_page_queue_remove(heap, q, page);
        fw_page_queue_push_front(heap, q, page);
      }
      return page;
    }
    page = next;
  }
  return NULL;
}

/* xfree's count bits after n blocks starting at b are pushed on the list
 * of x. */
static uintptr_t fw_xfree_count_next(uintptr_t x, const fw_block_t *b, uint32_t n) {
#ifdef FW_XFREE_COUNT_SHIFT
  uint32_t c = FW_XFREE_COUNT(x);
  if ((FW_XFREE_LIST(x) && c == 0) || c + n > 0xffff || ((uintptr_t)b >> FW_XFREE_COUNT_SHIFT)) return 0;
  return (uintptr_t)(c + n) << FW_XFREE_COUNT_SHIFT;
#else
  (void)x, (void)b, (void)n;
  return 0;
#endif
}

void fw_page_free_remote_list(fw_page_t *page, fw_block_t *head, fw_block_t *tail, uint32_t n) {
  uintptr_t x = atomic_load_explicit(&page->xfree, memory_order_relaxed);
  while (true) {
    if (x & FW_XFREE_DELAYED) {
      fw_heap_t *heap = atomic_load_explicit(&page->heap, memory_order_acquire);
      if (heap) {
        /* Only the first free into a full page goes to the heap: it tells
         * the owner the page has room. Clearing the bit sends the frees
         * after it to the page's own list, so that the owner's work grows
         * with the pages that come back, not with the blocks. */
        if (!atomic_compare_exchange_weak_explicit(&page->xfree, &x, x & ~FW_XFREE_DELAYED,
                                                   memory_order_acq_rel, memory_order_relaxed))
          continue;
        fw_block_t *b = head;
        if (n > 1) head = fw_block_next(b);  /* before the delayed list's link replaces it */
        fw_block_t *dhead = atomic_load_explicit(&heap->delayed, memory_order_relaxed);
        do {
          fw_delayed_set_next(b, dhead);
        } while (!atomic_compare_exchange_weak_explicit(&heap->delayed, &dhead, b, memory_order_release,
                                                        memory_order_relaxed));
        if (--n == 0) return;
        x &= ~FW_XFREE_DELAYED;
        continue;
      }
    }
    fw_block_t *old = FW_XFREE_LIST(x);
    fw_block_set_next(tail, old ? old : FW_LIST_END);
    if (atomic_compare_exchange_weak_explicit(&page->xfree, &x,
                                              (uintptr_t)head | (x & FW_XFREE_DELAYED) | fw_xfree_count_next(x, head, n),
                                              memory_order_release, memory_order_relaxed))
      return;
  }
}

void fw_page_free_remote(fw_page_t *page, fw_block_t *b) { fw_page_free_remote_list(page, b, b, 1); }

fw_page_t *fw_page_of_pointer(const void *p, uintptr_t owner) {
  if (!p || ((uintptr_t)p & 7)) return NULL;
  fw_segment_t *seg = fw_ptr_segment(p);
  if (!fw_arena_contains(p) && !fw_os_is_mapped(seg)) return NULL;
  if (owner && atomic_load_explicit(&seg->thread_id, memory_order_acquire) != owner) return NULL;
  if (seg->cookie != fw_segment_cookie(seg)) return NULL;
  fw_page_t *pg = fw_ptr_slice(seg, p);
  if (pg->flags & FW_PF_REDIRECT) {
    if (pg->slice_offset > (size_t)(pg - seg->pages)) return NULL;
    pg -= pg->slice_offset;
  }
  if (pg->flags & FW_PF_UNUSED) return NULL;
  const uint8_t *b = p;
  if (b < pg->area) return NULL;
  size_t off = (size_t)(b - pg->area);
  if (pg->kind == FW_KIND_LARGE) return off < pg->block_size ? pg : NULL;
  if (off >= (size_t)pg->capacity * pg->block_size) return NULL;
  return ((pg->flags & FW_PF_ALIGNED) || off % pg->block_size == 0) ? pg : NULL;
}

fw_block_t *fw_page_block_start(const fw_page_t *page, const void *p) {
  if (page->kind == FW_KIND_LARGE) return (fw_block_t *)page->area;
  size_t off = (size_t)((const uint8_t *)p - page->area);
  return (fw_block_t *)(page->area + off - off % page->block_size);
}

size_t fw_page_usable(const fw_page_t *page, const void *p) {
  /* p is a block start unless the page hands out aligned interior
   * pointers: no division on the common path (realloc asks every time) */
  if (page->kind != FW_KIND_LARGE && !(fw_page_flags(page) & FW_PF_ALIGNED)) return page->block_size;
  const uint8_t *b = (const uint8_t *)fw_page_block_start(page, p);
  return page->block_size - (size_t)((const uint8_t *)p - b);
}

size_t fw_page_live(const fw_page_t *pg) {
  fw_heap_t *heap = atomic_load_explicit(&((fw_page_t *)pg)->heap, memory_order_relaxed);
  bool head = !(pg->flags & FW_PF_FULL) && pg->kind != FW_KIND_LARGE && heap && heap->queues[pg->cls].first == pg;
  return pg->used - (head ? 1u : 0u);
}

bool fw_page_lists_hold(const fw_page_t *page, const fw_block_t *b) {
  const fw_block_t *lists[2] = {page->free, page->later};
  for (int l = 0; l < 2; l++) {
    uint32_t n = 0;
    for (const fw_block_t *x = lists[l]; x && x != FW_LIST_END && n <= page->capacity; n++) {
      if (x == b) return true;
      uintptr_t t = fw_link_decode(x);
      if (FW_LINK_BAD(t)) break;
      x = (const fw_block_t *)(t ^ (uintptr_t)x);
    }
  }
  return false;
}

/* The first block a cyclic list reaches twice (Floyd's method): the block
 * that was freed twice. The links were checked by the caller. */
static const fw_block_t *fw_list_cycle_entry(const fw_block_t *head) {
  const fw_block_t *slow = head, *fast = head;
  do {
    slow = fw_block_next(slow);
    fast = fw_block_next(fw_block_next(fast));
  } while (slow != fast);
  for (slow = head; slow != fast; slow = fw_block_next(slow), fast = fw_block_next(fast)) {
  }
  return slow;
}

void fw_page_check_empty(const fw_page_t *page) {
  if (page->kind == FW_KIND_LARGE) return;
  /* Every carved block must hold a link (a live one holds the taken mark
   * or the program's data). A scan of the blocks in address order, not a
   * walk of the lists: its loads do not wait on each other. */
  const uint8_t *area = page->area;
  size_t bs = page->block_size, n = page->capacity, live = n;
  const uintptr_t inv = fw_list_key_inv, mask = ~(uintptr_t)FW_SEGMENT_MASK | 7;
  /* four blocks a test; a group that fails (a list's last block, whose
   * link leads to fw_list_end, or a live block) is looked at one by one */
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint8_t *b = area + i * bs;
    uintptr_t bad = ((((const fw_block_t *)b)->link * inv - 8) | (((const fw_block_t *)(b + bs))->link * inv - 8) |
                     (((const fw_block_t *)(b + 2 * bs))->link * inv - 8) |
                     (((const fw_block_t *)(b + 3 * bs))->link * inv - 8)) & mask;
    if (fw_likely(bad == 0)) continue;
    for (size_t j = i; j < i + 4 && live == n; j++)
      if (!fw_link_looks_free((const fw_block_t *)(area + j * bs))) live = j;
    if (live != n) break;
  }
  for (; i < n && live == n; i++)
    if (!fw_link_looks_free((const fw_block_t *)(area + i * bs))) live = i;
  if (fw_likely(live == n)) return;
  /* The block freed twice is the one its list reaches twice, if the list
   * has a cycle; the live block is what the page would lose. */
  fw_segment_t *seg = fw_page_segment(page);
  unsigned long owner = (unsigned long)atomic_load_explicit(&seg->thread_id, memory_order_relaxed);
  const fw_block_t *lists[2] = {page->free, page->later}, *twice = NULL;
  for (int l = 0; l < 2 && !twice; l++) {
    size_t k = 0;
    for (const fw_block_t *b = lists[l]; b && b != FW_LIST_END && !twice; b = fw_block_next(b)) {
      if (FW_LINK_BAD(fw_link_decode(b))) break;
      if (++k > n) twice = fw_list_cycle_entry(lists[l]);
    }
  }
  if (twice)
    fw_message("double free: address %p is twice on the free list of its page of %zu-byte blocks (class %u) "
               "of thread %#lx, whose count says no block is live: the block at %p still is, and would be "
               "handed out again; aborting\n",
               (const void *)twice, bs, (unsigned)page->cls, owner, (const void *)(area + live * bs));
  else
    fw_message("double free: a page of %zu-byte blocks (class %u) of thread %#lx counts no live block, "
               "but the block at %p still is: a block was freed twice, and this one would be handed out "
               "again; aborting\n",
               bs, (unsigned)page->cls, owner, (const void *)(area + live * bs));
  fw_os_abort();
}

#ifdef FW_DEBUG
/* Internal consistency: the page's counts agree with its lists. */
void fw_page_validate(const fw_page_t *pg) {
  FW_ASSERT(!(pg->flags & (FW_PF_UNUSED | FW_PF_REDIRECT)));
  fw_segment_t *seg = fw_page_segment(pg);
  FW_ASSERT(seg->cookie == fw_segment_cookie(seg));
  if (pg->kind == FW_KIND_LARGE) {
    FW_ASSERT(pg->capacity <= 1 && pg->used <= 1);
    return;
  }
  FW_ASSERT(pg->capacity <= pg->reserved && pg->block_size > 0);
  FW_ASSERT(pg->area + (size_t)pg->reserved * pg->block_size <= (const uint8_t *)seg + FW_SEGMENT_SIZE);
  size_t nfree = 0;
  for (const fw_block_t *b = pg->free; b != FW_LIST_END; b = fw_block_next(b)) {
    size_t off = (size_t)((const uint8_t *)b - pg->area);
    FW_ASSERT((const uint8_t *)b >= pg->area && off % pg->block_size == 0 && off / pg->block_size < pg->capacity);
    FW_ASSERT(++nfree <= pg->capacity);
  }
  /* used counts blocks handed out (remote frees not yet folded in included)
   * plus one while the page heads its queue */
  fw_heap_t *heap = atomic_load_explicit(&((fw_page_t *)pg)->heap, memory_order_relaxed);
  bool head = !(pg->flags & FW_PF_FULL) && heap && heap->queues[pg->cls].first == pg;
  for (const fw_block_t *b = pg->later; b && b != FW_LIST_END; b = fw_block_next(b)) FW_ASSERT(++nfree <= pg->capacity);
  FW_ASSERT(nfree + pg->used - (head ? 1u : 0u) == pg->capacity);
}

void fw_page_queue_validate(const fw_heap_t *heap, const fw_page_queue_t *q) {
  const fw_page_t *prev = NULL;
  size_t n = 0;
  for (const fw_page_t *pg = q->first; pg; prev = pg, pg = pg->next) {
    FW_ASSERT(pg->prev == prev);
    FW_ASSERT(atomic_load_explicit(&((fw_page_t *)pg)->heap, memory_order_relaxed) == heap);
    FW_ASSERT(((pg->flags & FW_PF_FULL) != 0) == (q == &heap->full));
    if (q != &heap->full) FW_ASSERT(&heap->queues[pg->cls] == q);
    FW_ASSERT(++n < ((size_t)1 << 24));
  }
  FW_ASSERT(q->last == prev);
  if (q != &heap->full) {
    size_t c = (size_t)(q - heap->queues);
    FW_ASSERT(((heap->queued[c / 64] >> (c % 64)) & 1) == (q->first != NULL));
  }
}
#endif
