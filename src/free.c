/* free.c — frees the fast path (fast.h) hands over, and usable sizes.
 * A block is freed by its owner (local), by another thread (one CAS onto
 * the page or its heap), or into a segment whose thread has exited
 * (adopted, or freed in place by a thread with no heap). Cautious checks
 * run once, in fw_free_checked, whichever way the block then goes: the
 * paths that move blocks on later (delayed lists, adoption) check nothing.
 * See alloc.c. */
#include "front.h"
#include "abandon.h"
#include "check.h"
#include "prof.h"
#include "heap.h"
#include "page.h"
#include "options.h"
#include "os.h"
#include "message.h"
#include "segment.h"

/* Routes a block that has passed any checks to its page's owner. */
FW_INLINE void fw_free_route(fw_segment_t *seg, fw_page_t *page, fw_block_t *b) {
  if (fw_unlikely(fw_page_flags(page) & FW_PF_SAMPLED)) fw_prof_free(page, b);
  uintptr_t owner = atomic_load_explicit(&seg->thread_id, memory_order_acquire);
  if (owner == fw_thread_id()) {
    fw_heap_free_local(page, b);
    return;
  }
  /* An exited thread's segment goes to a thread that needs memory of its
   * kind (it has no free page of that kind), here or in fw_heap_page_new;
   * any other thread frees in place and leaves the segment abandoned: it
   * would hold the segment's free pages unused. */
  if (owner == 0) {
    fw_heap_t *heap = FW_TLS(fw_tls_heap);
    bool has_heap = heap != &fw_heap_empty && fw_opt(RECLAIM);
    if (has_heap && !fw_segment_tld_has_room(heap->tld, seg->kind) && fw_abandon_reclaim(heap, seg)) {
      fw_heap_free_local(page, b);
      return;
    }
    fw_abandon_free(seg, page, b, has_heap);
    return;
  }
  fw_page_free_remote(page, b);
}

/* ---- remote frees, batched -------------------------------------------------
 * A thread that frees many blocks of another thread's pages (a consumer, a
 * pool's list nodes handed around) would pay a compare-and-swap per block
 * on a line the owner and the other freeing threads also write. In the
 * default mode such a free instead links the block into this thread's
 * entry for its page (tld->rfree, a small table indexed by a hash of the
 * page): the blocks of one page go to it as one list, with one CAS
 * (fw_page_free_remote_list), when the entry is wanted for another page,
 * when it holds FREEWAY_REMOTE_BATCH blocks or FW_RFREE_BYTES, on this
 * thread's slow path (a page used up), and when it collects or exits. A
 * block waits at most that long; its page counts it live meanwhile, so the
 * page stays where it is (its owner cannot retire it).
 * Only pages of a thread's default heap, and of segments whose thread has
 * exited, are batched: a user heap may be destroyed while a block freed
 * into it before waits here. A page never
 * goes from a default heap to a user heap (adoption and fw_heap_delete move
 * pages to default heaps only), so a page seen in a default heap stays in
 * one, or in an abandoned segment, until its last block comes back. The
 * checks of fw_free_generic ran before a block gets here; the links of a
 * list are checked as the owner takes it, as for any remote free. Not in
 * cautious mode (its frees take fw_free_checked) nor at the secure level,
 * whose frees are to be seen at once. */
#define FW_RFREE_BYTES ((uint32_t)64 << 10)
/* ... and what a thread holds in all: blocks held are blocks their owner
 * cannot reuse, and bench_xmalloc's four consumers (8 B to 1 KiB) held
 * enough in 64 entries with no such cap to take the peak RSS from 10 to
 * 16 MB. A cap of 64 KiB handed bench_prodcons's blocks (16 B to 4 KiB,
 * some 40 pages in turn) over one or two at a time: each new block of a
 * page found the total above the cap and its entry went at once (callgrind,
 * one pair: half the frees set an entry up). With 128 KiB: prodcons 1 pair
 * 170 -> 148 ms (medians of 21; 139 with 256 KiB), xmalloc 8 B-1 KiB 4+4
 * peak RSS 10.5 -> 11.2 MB (12.4). */
#define FW_RFREE_HELD ((size_t)128 << 10)
/* Blocks above 2 KiB are not held: an entry takes at most 64 KiB of them
 * (FW_RFREE_BYTES), so a batch would be short, and what they add to
 * FW_RFREE_HELD made a thread that frees blocks of many sizes
 * (bench_xmalloc 8 B-16 KiB, one consumer) reach the cap at almost every
 * free, each then handing its entry over with one or two blocks. Freed at
 * once with their CAS, interleaved runs, medians of 9: bench_xmalloc --producers 1 --consumers
 * 1 --blocks 1500000 --min 8 --max 16384 163 -> 132 ms, peak RSS 10.3 ->
 * 5.8 MB; 4 + 4: 170 -> 153 ms; whole-suite pass against the library
 * before (5 runs each): time 0.996, peak RSS 1.003. */
#define FW_RFREE_BIG 2048

FW_INLINE size_t fw_rfree_slot(const fw_page_t *page) {
  uint64_t h = (uint64_t)(uintptr_t)page >> FW_PAGE_DESC_SHIFT;
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> (64 - FW_RFREE_SHIFT));
}

/* The heap profiler forgets the samples among an entry's blocks before
 * they go back: after, the owner could hand one out and sample it again.
 * A block sampled before its free was flagged before it (the flag is set
 * before the block is handed out, and stays while a sample lives), so the
 * flag as the entry goes tells whether to look. */
static FW_NOINLINE void fw_rfree_forget(fw_page_t *page, fw_block_t *b, uint32_t n) {
  for (uint32_t k = 0; k < n; k++) {
    fw_block_t *next = k + 1 < n ? fw_block_next(b) : NULL;
    fw_prof_free(page, b);
    b = next;
  }
}

/* Takes entry i out of the table. */
FW_INLINE fw_rfree_t fw_rfree_take(fw_tld_t *tld, size_t i) {
  fw_rfree_t e = tld->rfree[i];
  tld->rfree[i].page = NULL;
  tld->rfree_used &= ~((uint64_t)1 << i);
  tld->rfree_bytes -= (size_t)e.n * e.page->block_size;
  return e;
}

/* ... for its blocks to go back as a list (not each the way of a single
 * free, which forgets its own sample) */
FW_INLINE fw_rfree_t fw_rfree_take_list(fw_tld_t *tld, size_t i) {
  fw_rfree_t e = fw_rfree_take(tld, i);
  if (fw_unlikely(fw_page_flags(e.page) & FW_PF_SAMPLED)) fw_rfree_forget(e.page, e.head, e.n);
  return e;
}

/* Entry i's blocks, of a page of segment seg whose thread has exited, go
 * in with the blocks of every other entry of seg and one hold of the
 * segment, where each block freed alone holds it once (fw_free_route): two
 * atomic operations on the arena's word of abandoned segments, which every
 * thread freeing into one writes. bench_threadwave --threads 2 --waves 10
 * --ops 80000 under callgrind: 27,008 holds with each block alone, 12,653
 * with each entry alone, 2,851 with each segment's (1,093 of them single
 * frees: no room, or no heap); 248.8M instructions in all before, 239.6M
 * after. If another thread holds the segment, the lists wait on their
 * pages for it (fw_abandon_free_lists). */
static void fw_rfree_flush_abandoned(fw_tld_t *tld, size_t i, fw_segment_t *seg) {
  fw_rfree_t lists[FW_RFREE_SLOTS];
  size_t count = 0;
  lists[count++] = fw_rfree_take_list(tld, i);
  for (uint64_t more = tld->rfree_used; more; more &= more - 1) {
    size_t j = fw_ctz64(more);
    if (fw_page_segment(tld->rfree[j].page) == seg) lists[count++] = fw_rfree_take_list(tld, j);
  }
  fw_abandon_free_lists(seg, lists, count, fw_opt(RECLAIM) != 0);
}

/* Hands an entry's blocks to their page: one CAS if the owner is still
 * another live thread; with the segment held once if it has exited (above);
 * else (this thread would adopt the segment, or took it over meanwhile)
 * each block the way a single free goes. */
static void fw_rfree_flush_slot(fw_tld_t *tld, size_t i) {
  fw_page_t *page = tld->rfree[i].page;
  fw_segment_t *seg = fw_page_segment(page);
  uintptr_t owner = atomic_load_explicit(&seg->thread_id, memory_order_acquire);
  if (owner == 0 && fw_segment_tld_has_room(tld, seg->kind)) {
    fw_rfree_flush_abandoned(tld, i, seg);
    return;
  }
  if (owner != 0 && owner != fw_thread_id()) {
    fw_rfree_t e = fw_rfree_take_list(tld, i);
    fw_page_free_remote_list(page, e.head, e.tail, e.n);
    return;
  }
  fw_rfree_t e = fw_rfree_take(tld, i);
  fw_block_t *b = e.head;
  uint32_t n = e.n;
  while (n--) {
    uintptr_t t = fw_link_decode(b);
    fw_block_t *next = (fw_block_t *)(t ^ (uintptr_t)b);
    /* a write into a block after its free: the page's owner would stop at
     * it; so does this walk */
    if (n && fw_unlikely(FW_LINK_BAD_PAGE(t, page))) fw_list_corrupt(page, b, t);
    fw_free_route(seg, page, b);
    b = next;
  }
}

void fw_free_remote_flush(fw_tld_t *tld) {
  while (tld->rfree_used) fw_rfree_flush_slot(tld, fw_ctz64(tld->rfree_used));
}

/* (Blocks above FW_RFREE_BIG, large ones among them, never get this far:
 * fw_free_route_batched; nor does the secure level: its callers.) */
FW_INLINE bool fw_rfree_wanted(fw_segment_t *seg, fw_page_t *page, const fw_heap_t *me) {
  FW_ASSERT(!fw_secure && page->block_size <= FW_RFREE_BIG);
  if (fw_page_flags(page) & ~(FW_PF_FULL | FW_PF_ALIGNED | FW_PF_SAMPLED)) return false;
  uintptr_t owner = atomic_load_explicit(&seg->thread_id, memory_order_relaxed);
  if (owner == fw_thread_id()) return false;
  /* An exited thread's segment (no owner) goes only to a default heap if
   * adopted, and no heap can free its pages in bulk meanwhile; a huge
   * block's has no page to batch. Batched, its frees hold the segment once
   * a batch (fw_rfree_flush_abandoned). Not for a thread with no room of
   * the segment's kind: its free adopts the segment at once (fw_free_route). */
  if (owner == 0) return !seg->direct && me != &fw_heap_empty && fw_segment_tld_has_room(me->tld, seg->kind);
  fw_heap_t *heap = atomic_load_explicit(&page->heap, memory_order_relaxed);
  return heap && __atomic_load_n(&heap->is_default, __ATOMIC_RELAXED);
}

/* Whether this thread holds b for a batch. */
static bool fw_rfree_holds(const fw_page_t *page, const fw_block_t *b) {
  fw_heap_t *me = FW_TLS(fw_tls_heap);
  if (me == &fw_heap_empty) return false;
  const fw_rfree_t *e = &me->tld->rfree[fw_rfree_slot(page)];
  if (e->page != page) return false;
  const fw_block_t *x = e->head;
  for (uint32_t k = 0; k < e->n; k++, x = fw_block_next(x))
    if (x == b) return true;
  return false;
}

FW_THREAD_LOCAL uint32_t fw_tls_rfree_heapless;

static void fw_free_route_new(fw_segment_t *seg, fw_page_t *page, fw_block_t *b, fw_heap_t *me, size_t i);

/* fw_free_route out of line, for the frees that reach the batching and
 * are not for it (a block above FW_RFREE_BIG; the owner's block of its
 * full page): inlined there, its registers gave the callers a bigger stack
 * frame on every path. */
static FW_NOINLINE void fw_free_route_out(fw_segment_t *seg, fw_page_t *page, fw_block_t *b) {
  fw_free_route(seg, page, b);
}

/* fw_free_route, with another thread's blocks batched where they may be.
 * A page this thread already holds blocks of passed fw_rfree_wanted when
 * its entry was made, and what that found stays so while they are held
 * (they keep the page from being retired; a default heap's page never goes
 * to a user heap; the owner may exit or this thread take the segment over,
 * which the hand-over sees): a free into it goes straight to the entry.
 * Against the table's size (64 entries, 2 KiB of thread data): bench_xmalloc
 * (8 B to 1 KiB, one page a size class in turn) handed over 2.4 blocks a
 * batch with 16 entries, whose slots the pages of some 40 classes shared. */
FW_INLINE void fw_free_route_batched(fw_segment_t *seg, fw_page_t *page, fw_block_t *b) {
  /* never held (FW_RFREE_BIG): no look for an entry */
  if (page->block_size > FW_RFREE_BIG) {
    fw_free_route_out(seg, page, b);
    return;
  }
  fw_heap_t *me = FW_TLS(fw_tls_heap);
  size_t i = fw_rfree_slot(page);
  if (fw_likely(me != &fw_heap_empty)) {
    fw_tld_t *tld = me->tld;
    fw_rfree_t *e = &tld->rfree[i];
    if (e->page == page) {
      fw_block_set_next(b, e->head);
      e->head = b;
      tld->rfree_bytes += page->block_size;
      if (++e->n >= e->limit || tld->rfree_bytes > FW_RFREE_HELD) fw_rfree_flush_slot(tld, i);
      return;
    }
  }
  /* the owner's own free (a block of its full page): nothing to batch */
  if (atomic_load_explicit(&seg->thread_id, memory_order_relaxed) == fw_thread_id()) fw_free_route_out(seg, page, b);
  else fw_free_route_new(seg, page, b, me, i);
}

/* fw_free_route_batched for a block of a page this thread holds none of:
 * a new entry, or the way a single free goes. */
static FW_NOINLINE void fw_free_route_new(fw_segment_t *seg, fw_page_t *page, fw_block_t *b, fw_heap_t *me,
                                          size_t i) {
  long batch = fw_opt(REMOTE_BATCH);
  if (!batch || !fw_rfree_wanted(seg, page, me)) {
    fw_free_route(seg, page, b);
    return;
  }
  if (me == &fw_heap_empty) {
    FW_TLS(fw_tls_rfree_heapless)++;
    fw_free_route(seg, page, b);
    return;
  }
  fw_tld_t *tld = me->tld;
  fw_rfree_t *e = &tld->rfree[i];
  if (e->page) fw_rfree_flush_slot(tld, i);
  size_t limit = FW_RFREE_BYTES / page->block_size;
  if (limit > (size_t)batch) limit = (size_t)batch;
  if (limit <= 1) {
    fw_free_route(seg, page, b);
    return;
  }
  e->page = page;
  e->tail = b;
  e->n = 1;
  e->limit = (uint32_t)limit;
  tld->rfree_bytes += page->block_size;
  tld->rfree_used |= (uint64_t)1 << i;
  fw_block_set_next(b, FW_LIST_END);
  e->head = b;
}

void fw_free_checked(void *p, unsigned how, size_t size, size_t align) {
  if (!p) return;
  fw_page_t *page;
  fw_block_t *b = fw_check_free(p, how, size, align, &page);
  fw_free_route(fw_page_segment(page), page, b);
}

/* The default mode's checks of a block that reaches a slow path (a remote
 * free, a full or aligned page, a large block, realloc), made before
 * anything is written: the segment header must be one of freeway's, the
 * slot in use, the pointer a block's start (a large block: not free
 * already, and a small or medium block's first word no valid list link:
 * a block on a free list holds one, a live block the taken mark or the
 * program's data, page.h). A double free that takes the fast path is
 * caught where the block is met again (the pops, the empty-page scan); the
 * secure level's free mark and cautious mode catch every one at the
 * second free. */
/* A block whose first word looks like a list link: freed, on 64-bit builds;
 * on 32-bit ones, where one live block in 8192 would look so, only when its
 * owner (the caller) finds it on the page's lists, or when the caller holds
 * it for a batch (another thread's block it freed). */
bool fw_block_freed_32(fw_segment_t *seg, const fw_page_t *page, const fw_block_t *b) {
  if (FW_LINK_PROOF) return true;
  if (atomic_load_explicit(&seg->thread_id, memory_order_relaxed) == fw_thread_id()) return fw_page_lists_hold(page, b);
  return fw_rfree_holds(page, b);
}

void fw_block_check(fw_segment_t *seg, fw_page_t *page, const void *p, const fw_block_t *b, const char *freed) {
  if (seg->cookie != fw_segment_cookie(seg)) fw_block_report(seg, page, p, "free of a pointer freeway did not hand out");
  fw_block_check_in(seg, page, p, b, freed);
}

static void fw_free_generic_page(void *p, fw_segment_t *seg, fw_page_t *slice);
static void fw_free_generic_other(void *p, fw_segment_t *seg, fw_page_t *page);

/* A segment header that is not one of freeway's: reported, and the program
 * stops. Apart (its arguments in the order the caller has them), so that
 * fw_free_generic's common path moves no register for it. */
static FW_COLD __attribute__((noreturn)) void fw_free_foreign(void *p, fw_segment_t *seg, fw_page_t *slice) {
  fw_block_report(seg, slice, p, "free of a pointer freeway did not hand out");
}

/* The owner frees a block of a small or medium page whose only flag is the
 * heap profiler's (tested by the caller), and p is known not to be one of
 * the samples that live in it (prof.h, fw_prof_not_sample): what the fast
 * path would do. The fast path's test reads the same descriptor, so this
 * one trusts p no more than it does. A sampled medium block stays on its
 * page (prof.c), which holds 4 to 64 blocks, and most of a thread's
 * medium pages hold one when its blocks are big and many (bench_speed 256
 * B-32 KiB samples one allocation in some 32): without this, their frees
 * took the whole slow path, five times what the samples themselves cost
 * (callgrind). */
FW_INLINE bool fw_free_beside_sample(fw_segment_t *seg, fw_page_t *page, const void *p) {
  return page->kind != FW_KIND_LARGE && atomic_load_explicit(&seg->thread_id, memory_order_relaxed) == fw_thread_id() &&
         fw_prof_not_sample(page, (uint32_t)((uintptr_t)p - (uintptr_t)page->area));
}

/* The owner frees the block of a large page whose flags are exactly flags
 * (its start, one block live, no remote free under way): what
 * fw_heap_large_free_local takes. The tests are those of the page path
 * for this case, so a double free or an interior pointer still goes the
 * long way. The kind first: most blocks that reach it are not large. */
FW_INLINE bool fw_free_large_own(fw_segment_t *seg, const fw_page_t *page, const void *p, unsigned flags) {
  return page->kind == FW_KIND_LARGE && fw_page_flags(page) == flags && p == (const void *)page->area &&
         page->used == 1 &&
         atomic_load_explicit(&page->xfree, memory_order_relaxed) == FW_XFREE_DELAYED &&
         atomic_load_explicit(&seg->thread_id, memory_order_relaxed) == fw_thread_id();
}

/* The owner frees a block of its small or medium page that is full and
 * has no other flag: the page goes back to its class queue (heap.c). In a
 * program that frees at random among blocks of 1 KiB and more, a page holds
 * few of them and fills and empties over and over: bench_glibcbench
 * --mode thread --min 1024 --max 8192 took this path for one free in six.
 * Its own way, with the default mode's check of the block, rather than
 * fw_free_generic_page's, whose batching of other threads' frees and
 * routing by owner cost as much again. */
FW_INLINE bool fw_free_full_own(fw_segment_t *seg, const fw_page_t *page) {
  return fw_page_flags(page) == FW_PF_FULL && page->kind != FW_KIND_LARGE && !fw_secure &&
         atomic_load_explicit(&seg->thread_id, memory_order_relaxed) == fw_thread_id();
}
static FW_NOINLINE void fw_free_full_local(fw_segment_t *seg, fw_page_t *page, void *p) {
  fw_block_check_in(seg, page, p, (fw_block_t *)p, "double free");  /* the cookie: fw_free_generic */
  fw_heap_free_local(page, (fw_block_t *)p);
}

/* Out of line, so that fw_free_generic's own tests need no frame. */
void fw_free_local_push(fw_page_t *page, void *p) {
  if (fw_unlikely(fw_page_push(page, (fw_block_t *)p))) fw_heap_page_empty(page);
}

/* The owner's frees into its small or medium page that carries one flag
 * of its own: the heap profiler's, for a block the page knows not to be a
 * sample (fw_free_beside_sample), or the full list's. True if done. Behind
 * the cookie's check (the page of a later slice is found through it).
 * Others (another thread's, a sampled block) go on to
 * fw_free_generic_page: a test here on the common path of every remote
 * free would cost more than it saves. */
FW_INLINE bool fw_free_own_flagged(fw_segment_t *seg, fw_page_t *page, void *p) {
  if (fw_unlikely(fw_page_flags(page) == FW_PF_SAMPLED) && fw_free_beside_sample(seg, page, p)) {
    fw_free_local_push(page, p);
    return true;
  }
  if (fw_free_full_own(seg, page)) {
    fw_free_full_local(seg, page, p);
    return true;
  }
  return false;
}

/* The rest of fw_free_generic for a pointer in a later slice of a
 * multi-slice page that is not the owner's plain medium page (tested
 * there): another thread's block, a page with a flag, a pointer inside a
 * large block or one freeway did not hand out. Apart, so that the other
 * frees test for a later slice once. */
static FW_NOINLINE void fw_free_generic_later(void *p, fw_segment_t *seg, fw_page_t *slice) {
  if (fw_unlikely(fw_opt(CAUTIOUS))) {
    fw_free_checked(p, FW_FORM_MALLOC, 0, 0);
    return;
  }
  if (fw_unlikely(seg->cookie != fw_segment_cookie(seg))) fw_free_foreign(p, seg, slice);
  if (!fw_free_own_flagged(seg, slice - slice->slice_offset, p)) fw_free_generic_page(p, seg, slice);
}

void fw_free_generic(void *p) {
  if (!p) return;
  fw_segment_t *seg = fw_ptr_segment(p);
  fw_page_t *slice = fw_ptr_slice(seg, p);
  /* The owner's block of a medium page that starts in a later slice (most
   * do: bench_speed 256 B-32 KiB, two frees in three), first: what the
   * fast path would do had it looked one descriptor further, reading only
   * the two descriptors' second lines. The fast path read this slice's
   * already; a distance back no greater than the slice's own index keeps
   * the second read inside the same segment header, so a pointer freeway
   * did not hand out reads nothing before the cookie's check (in
   * fw_free_generic_later) that the fast path could not have read (and
   * those bytes do not hold this thread's pointer by chance). Cautious
   * mode flags every page: no tag there is this thread's. Behind the
   * cookie's check, these frees read the segment header's first line too,
   * which shares an L1 set with the blocks of sizes that are multiples of
   * 4 KiB: bench_glibcbench --mode thread --min 8192 --max 32768, 300,000
   * random frees and mallocs, 1.07 M L1 read misses before, 0.93 M after
   * (cachegrind, this machine's L1 and L2). */
  if (fw_page_flags(slice) == FW_PF_REDIRECT) {
    size_t back = slice->slice_offset;
    fw_page_t *page = slice - back;
    if (back <= (size_t)(slice - seg->pages) && __atomic_load_n(&page->tag, __ATOMIC_RELAXED) == fw_thread_id() &&
        page->kind == FW_KIND_MEDIUM) {
      fw_free_local_push(page, p);
      return;
    }
    fw_free_generic_later(p, seg, slice);
    return;
  }
  /* cautious mode: the pointer is validated before anything is read
   * through it */
  if (fw_unlikely(fw_opt(CAUTIOUS))) {
    fw_free_checked(p, FW_FORM_MALLOC, 0, 0);
    return;
  }
  /* before anything else is read through the header (a redirect offset of
   * a foreign mapping's bytes could point anywhere) */
  if (fw_unlikely(seg->cookie != fw_segment_cookie(seg))) fw_free_foreign(p, seg, slice);
  if (fw_free_own_flagged(seg, slice, p)) return;
  /* The owner frees a large block that nothing else is pending on, with no
   * flag but being in the full list. */
  if (fw_free_large_own(seg, slice, p, FW_PF_FULL)) {
    fw_heap_large_free_local(slice);
    return;
  }
  fw_free_generic_page(p, seg, slice);
}

/* The rest of fw_free_generic, apart so that the tests above, and the large
 * block's free they lead to, run without the stack frame this part needs
 * (six registers saved and restored: 9 instructions of each large block's
 * free in bench_objects at 1 MiB, callgrind). */
static FW_NOINLINE void fw_free_generic_page(void *p, fw_segment_t *seg, fw_page_t *slice) {
  fw_page_t *page = fw_slice_page(slice);
  /* A block of a small or medium page that is not aligned, out of the
   * secure level: the common case (another thread's block, one of a full
   * page) takes no call but the hand-over, and so needs no stack frame. */
  if (fw_likely(!(fw_page_flags(page) & FW_PF_ALIGNED) && page->kind != FW_KIND_LARGE && !fw_secure)) {
    fw_block_check_in(seg, page, p, (fw_block_t *)p, "double free");  /* the cookie: fw_free_generic */
    fw_free_route_batched(seg, page, (fw_block_t *)p);
    return;
  }
  fw_free_generic_other(p, seg, page);
}

/* The rest of fw_free_generic_page: large blocks, aligned pages, the secure
 * level. */
static FW_NOINLINE void fw_free_generic_other(void *p, fw_segment_t *seg, fw_page_t *page) {
  /* The secure level's common case first: a block of a small or medium
   * page with the level's flag alone (an aligned one is flagged so; a
   * large page is not always in a full list: one of an exited thread's
   * segment has the level's flag alone, and its block no free mark).
   * Its checks and free mark, then its owner: the tests below are for
   * other pages (11 instructions of each free, callgrind, bench_objects
   * --threads 1 --size 128, FREEWAY_SECURE=1). */
  if (fw_secure && fw_page_flags(page) == FW_PF_CHECKED && page->kind != FW_KIND_LARGE) {
    fw_block_t *b = (fw_block_t *)p;
    fw_block_check_in(seg, page, p, b, "double free");  /* the cookie: fw_free_generic */
    if (fw_unlikely(!fw_block_mark(b))) fw_block_report(seg, page, p, "double free");
    /* the owner's test before fw_free_route's, which inlined here cost
     * 11 instructions more a free (callgrind, as above) */
    if (atomic_load_explicit(&seg->thread_id, memory_order_acquire) == fw_thread_id()) fw_heap_free_local(page, b);
    else fw_free_route(seg, page, b);
    return;
  }
  /* The owner's free of a large block the heap profiler sampled (at the
   * default rate, most blocks of 1 MiB are): fw_free_generic's tests for
   * its large blocks but for the flag, kept out of its common path. The
   * profiler forgets the sample and, as the owner calls, clears the flag,
   * so the page goes to the cache as any other rather than through
   * retire's tests for every kind of page. */
  if (fw_free_large_own(seg, page, p, FW_PF_FULL | FW_PF_SAMPLED)) {
    fw_prof_free(page, p);
    fw_heap_large_free_local(page);
    return;
  }
  fw_block_t *b = (fw_block_t *)p;
  if ((fw_page_flags(page) & FW_PF_ALIGNED) || page->kind == FW_KIND_LARGE) b = fw_page_block_start(page, p);
  fw_block_check_in(seg, page, p, b, "double free");  /* the cookie: fw_free_generic */
  if (fw_secure && page->kind != FW_KIND_LARGE && fw_unlikely(!fw_block_mark(b))) fw_block_report(seg, page, p, "double free");
  /* The owner frees the last interior block of its page: frees from the
   * page take the fast path again. Remote frees of such blocks do not
   * count down (the counter is the owner's), so the flag can only stay
   * too long, never go too early. */
  if ((void *)b != p && (fw_page_flags(page) & FW_PF_ALIGNED) && page->kind != FW_KIND_LARGE &&
      atomic_load_explicit(&seg->thread_id, memory_order_relaxed) == fw_thread_id() && page->aligned_live &&
      --page->aligned_live == 0)
    fw_page_flags_set(page, fw_page_flags(page) & ~FW_PF_ALIGNED);
  /* the secure level batches nothing (fw_rfree_wanted): its frees skip the
   * look for an entry */
  if (fw_secure) fw_free_route(seg, page, b);
  else fw_free_route_batched(seg, page, b);
}


void fw_block_report(fw_segment_t *seg, const fw_page_t *page, const void *p, const char *what) {
  fw_message("%s: address %p, in a page of %zu-byte blocks (class %u) of thread %#lx; aborting\n", what, p,
             page->block_size, (unsigned)page->cls,
             (unsigned long)atomic_load_explicit(&seg->thread_id, memory_order_relaxed));
  fw_os_abort();
}

size_t fw_usable_size(const void *p) {
  if (!p) return 0;
  if (fw_unlikely(fw_opt(CAUTIOUS))) return fw_check_usable(p);
  return fw_page_usable(fw_ptr_page(p), p);
}

void fw_free_unchecked(fw_block_t *b) { fw_free_route(fw_ptr_segment(b), fw_ptr_page(b), b); }
