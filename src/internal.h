/* internal.h — freeway's internal types and the table of contents of every
 * cross-file function, grouped by the file that defines it.
 *
 * The design is described at the top of alloc.c. Layers, lowest first:
 *   os.c (the only file that talks to the kernel) -> options.c, stats.c ->
 *   arena.c (address space in 4 MiB chunks) -> segment.c (segments, pages) ->
 *   page.c (blocks inside a page, page queues) -> heap.c, alloc.c, free.c
 *   (front end) -> init.c (process and thread life cycle), check.c (cautious
 *   mode), override.c / new_delete.cpp (standard names), pool.c (object pools).
 * A file calls only into its own layer and the ones below, with one
 * exception: the slow paths of segment.c call back into init.c for the
 * current thread's data.
 */
#ifndef FW_INTERNAL_H
#define FW_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include "freeway.h"
#include "sizeclass.h"

#define FW_HIDDEN __attribute__((visibility("hidden")))
#define FW_NOINLINE __attribute__((noinline))
#define FW_COLD __attribute__((cold, noinline))
#define FW_INLINE static inline __attribute__((always_inline))
#define fw_likely(x) __builtin_expect(!!(x), 1)
#define fw_unlikely(x) __builtin_expect(!!(x), 0)

/* ---- geometry ------------------------------------------------------------ */
#define FW_SEGMENT_SHIFT 22                       /* 4 MiB segments, aligned */
#define FW_SEGMENT_SIZE ((size_t)1 << FW_SEGMENT_SHIFT)
#define FW_SEGMENT_MASK (FW_SEGMENT_SIZE - 1)
#define FW_SLICE_SHIFT 16                         /* 64 KiB slices */
#define FW_SLICE_SIZE ((size_t)1 << FW_SLICE_SHIFT)
#define FW_SLICES (FW_SEGMENT_SIZE / FW_SLICE_SIZE) /* 64 */
#define FW_MEDIUM_PAGE_SLICES 8                    /* 512 KiB medium pages */
#define FW_PAGE_DESC_SHIFT 7                       /* sizeof(fw_page_t) == 128 */
#define FW_MAX_ALIGN ((size_t)2 << 20)             /* 2 MiB: half a segment */
#define FW_ARENA_MAX_CHUNKS 64                     /* larger blocks: own mapping */
#define FW_MIN_ALIGN 16

typedef struct fw_block_s { struct fw_block_s *next; } fw_block_t;
typedef struct fw_page_s fw_page_t;
typedef struct fw_segment_s fw_segment_t;
typedef struct fw_tld_s fw_tld_t;
typedef struct fw_arena_s fw_arena_t;

/* Page flags. Any non-zero flag sends a local free to the slow path, so all
 * rare page states cost the fast path one compare. */
enum {
  FW_PF_FULL = 1,      /* in the heap's full list, not in a class queue */
  FW_PF_ALIGNED = 2,   /* holds blocks handed out at an interior offset */
  FW_PF_REDIRECT = 4,  /* not a page: a later slice of a multi-slice page */
  FW_PF_CHECKED = 8,   /* cautious mode: every free is validated */
  FW_PF_UNUSED = 16,   /* slice not in use as a page */
};

/* Segment kinds; a page's kind is SMALL, MEDIUM or LARGE (one block). A
 * SPAN segment holds LARGE pages of 1..FW_SPAN_MAX_SLICES slices each, a
 * LARGE segment exactly one. */
enum { FW_KIND_SMALL = 0, FW_KIND_MEDIUM = 1, FW_KIND_LARGE = 2, FW_KIND_SPAN = 3 };
#define FW_SPAN_MAX_SLICES 32                      /* 2 MiB: larger blocks get a segment */

/* xfree's low bit: the page is full and remote frees go to the owning heap's
 * delayed list instead, so the owner learns the page has room again. */
#define FW_XFREE_DELAYED ((uintptr_t)1)

/* A page: blocks of one size class carved from one or more slices. Owned by
 * one heap; every field but xfree and heap is touched only by the owning
 * thread. Exactly 128 bytes so that the free fast path finds the descriptor
 * of a pointer with a shift and a mask. */
struct fw_page_s {
  union {
    struct {
      fw_block_t *free;          /* local free list: malloc pops, free pushes */
      uint32_t used;             /* live blocks, +1 while the page is its queue's head */
      uint8_t flags;             /* FW_PF_*: zero on the fast path */
      uint8_t kind;              /* FW_KIND_* */
      uint16_t cls;              /* size class, FW_CLASS_LARGE for single-block pages */
      uintptr_t tag;             /* owner's thread id while flags == 0, else 0: the
                                    free fast path's single test */
      size_t block_size;
      uint32_t capacity;         /* blocks carved into the free list so far */
      uint32_t reserved;         /* blocks that fit */
      uint32_t slice_offset;     /* FW_PF_REDIRECT: distance in slices to the page */
      uint32_t slices;           /* slices the page spans */
      uint8_t *area;             /* first block */
      _Atomic(uintptr_t) xfree;  /* blocks freed by other threads | FW_XFREE_DELAYED */
      _Atomic(fw_heap_t *) heap; /* owning heap (read by remote frees) */
      fw_page_t *next, *prev;    /* class queue or full list */
      size_t requested;          /* LARGE: the size asked for (usable size) */
      uint8_t is_zero;           /* LARGE: block memory known to be zero */
      uint8_t idle;              /* queue head found empty by the last idle scan */
      uint8_t *fresh;            /* blocks > FW_DIRECT_MAX: from here on never handed
                                    out (zero but for the link word if is_zero) */
    };
    uint8_t raw_[1u << FW_PAGE_DESC_SHIFT]; /* same size on 32- and 64-bit builds */
  };
};
_Static_assert(sizeof(struct fw_page_s) == (1u << FW_PAGE_DESC_SHIFT), "page descriptor size");

/* A segment: FW_SEGMENT_SIZE-aligned memory whose header holds the page
 * descriptors, so that a pointer's page is found by arithmetic alone.
 * Owned by one thread (thread_id); abandoned segments have thread_id 0. */
struct fw_segment_s {
  union {
    struct {
      _Atomic(uintptr_t) thread_id; /* owner's thread pointer; read by every free */
      uint8_t kind;
      uint8_t direct;               /* own mapping, not from an arena */
      uint8_t in_free_list;
      uint8_t span_bin;             /* SPAN: longest free run, the tld bin it is in */
      uint32_t page_slices;         /* slices per page */
      uint32_t pages_total;
      uint32_t pages_used;
      uint64_t free_mask;           /* page slots not in use */
      uint64_t dirty_mask;          /* free page slots whose memory is not purged */
      uint64_t purge_due;           /* ms: when the dirty free pages may be purged */
      size_t size;                  /* bytes spanned */
      fw_arena_t *arena;            /* source, or NULL for a direct mapping */
      uint32_t chunk;               /* first chunk in the arena */
      uint32_t chunks;
      fw_tld_t *tld;                /* owner's thread data (NULL when abandoned) */
      fw_segment_t *next, *prev;    /* tld->segments (all owned) */
      fw_segment_t *fnext, *fprev;  /* tld->segments_free[kind] or tld->span_bins[span_bin] */
      fw_segment_t *anext;          /* abandoned list */
      uint64_t cookie;              /* cautious mode: proves the header is ours */
      uint64_t purged_mask;         /* free page slots purged (not counted as committed) */
      uint64_t dirty_young;         /* dirty slots freed after purge_due was set: wait a round */
    };
    uint8_t header_raw_[256]; /* the page descriptors start at 256 */
  };
  fw_page_t pages[FW_SLICES];
};
_Static_assert(offsetof(struct fw_segment_s, pages) == 256, "segment header layout");
#define FW_SEGMENT_HEADER (((sizeof(fw_segment_t)) + 4095) & ~(size_t)4095)

typedef struct fw_page_queue_s { fw_page_t *first, *last; } fw_page_queue_t;

/* A heap: the front end. The default heap of each thread is one instance;
 * fw_heap_new() makes more. direct[] maps (size+7)/8 to the page serving it,
 * or to fw_page_empty, whose free list is always NULL, so that a new heap
 * needs no "is initialised" test on the fast path. */
struct fw_heap_s {
  fw_page_t *direct[FW_DIRECT_SLOTS];
  fw_tld_t *tld;
  uintptr_t thread_id;
  _Atomic(fw_block_t *) delayed;   /* remote frees into full pages */
  fw_page_queue_t queues[FW_CLASS_COUNT + 1];
  fw_page_queue_t full;
  fw_heap_t *next, *prev;          /* tld->heaps */
  fw_heap_t *pool_next;            /* free heap structs */
  size_t peak_bytes;               /* sampled on the slow path */
  uint64_t slow_count;
  uint64_t idle_scan_due;          /* ms: next check for idle queue heads */
  fw_page_t *lcache[FW_SPAN_MAX_SLICES + 1]; /* freed large pages by slice count */
  size_t lcache_bytes;
  uint64_t lcache_due;             /* ms: next look for cached pages not reused */
  bool is_default;
};

/* Per-thread data: what the thread owns besides its heaps. */
struct fw_tld_s {
  uintptr_t thread_id;
  fw_heap_t *heap_default;
  fw_heap_t *heaps;                 /* all heaps of the thread */
  fw_segment_t *segments;           /* all owned segments */
  fw_segment_t *segments_free[2];   /* small / medium with a free page */
  fw_segment_t *span_bins[FW_SLICES]; /* span segments by longest free run */
  uint64_t span_binmap;             /* bit k: span_bins[k] is not empty */
  uint64_t purge_due;               /* earliest dirty page deadline (ms) */
  size_t segments_empty;            /* owned segments with no page in use */
  fw_tld_t *pool_next;
  bool done;                        /* thread has exited */
};

/* ---- inline helpers used across files ------------------------------------ */
FW_INLINE uintptr_t fw_thread_id(void) {
#if defined(__x86_64__)
  uintptr_t tp;
  __asm__("mov %%fs:0, %0" : "=r"(tp));
  return tp;
#elif defined(__aarch64__)
  uintptr_t tp;
  __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp));
  return tp;
#else
  return (uintptr_t)__builtin_thread_pointer();
#endif
}

FW_INLINE fw_segment_t *fw_ptr_segment(const void *p) {
  return (fw_segment_t *)((uintptr_t)p & ~FW_SEGMENT_MASK);
}
/* The descriptor of the slice holding p (may be a FW_PF_REDIRECT one). */
FW_INLINE fw_page_t *fw_ptr_slice(fw_segment_t *seg, const void *p) {
  uintptr_t off = ((uintptr_t)p >> (FW_SLICE_SHIFT - FW_PAGE_DESC_SHIFT)) &
                  ((FW_SLICES - 1) << FW_PAGE_DESC_SHIFT);
  return (fw_page_t *)((uint8_t *)seg->pages + off);
}
FW_INLINE fw_page_t *fw_ptr_page(const void *p) {
  fw_segment_t *seg = fw_ptr_segment(p);
  fw_page_t *pg = fw_ptr_slice(seg, p);
  if (__atomic_load_n(&pg->flags, __ATOMIC_RELAXED) & FW_PF_REDIRECT) pg -= pg->slice_offset;
  return pg;
}
FW_INLINE fw_segment_t *fw_page_segment(const fw_page_t *pg) {
  return fw_ptr_segment(pg);
}

/* Every change of a page's flags or owner goes through here, keeping the
 * fast path's tag in step. */
FW_INLINE void fw_page_flags_set(fw_page_t *pg, unsigned flags) {
  /* relaxed atomic stores: other threads' frees read both fields */
  __atomic_store_n(&pg->flags, (uint8_t)flags, __ATOMIC_RELAXED);
  __atomic_store_n(&pg->tag, flags ? 0 : atomic_load_explicit(&fw_page_segment(pg)->thread_id, memory_order_relaxed),
                   __ATOMIC_RELAXED);
}
#define fw_page_flags(pg) __atomic_load_n(&(pg)->flags, __ATOMIC_RELAXED)

FW_INLINE size_t fw_size_class(size_t size) {
  if (size <= 128) return size <= 8 ? 1 : ((size + 15) >> 4) + 1;
  size_t s = size - 1;
  unsigned b = 63u - (unsigned)__builtin_clzll(s);
  return 10 + (size_t)(b - 7) * 8 + ((s >> (b - 3)) & 7);
}

FW_INLINE size_t fw_align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }
FW_INLINE bool fw_is_pow2(size_t x) { return x && !(x & (x - 1)); }

/* ---- os.c: the whole contract with the kernel --------------------------- */
FW_HIDDEN void *fw_os_map(size_t size, size_t align);
FW_HIDDEN void fw_os_unmap(void *p, size_t size);
FW_HIDDEN void fw_os_purge(void *p, size_t size);       /* contents become zero */
FW_HIDDEN uint64_t fw_os_clock_ms(void);
FW_HIDDEN void fw_os_write(int fd, const char *s, size_t n);
FW_HIDDEN size_t fw_os_page_size(void);
FW_HIDDEN __attribute__((noreturn)) void fw_os_abort(void);
FW_HIDDEN void fw_os_thp_disable(void *p, size_t size);
FW_HIDDEN bool fw_os_is_mapped(const void *p);

/* ---- options.c ------------------------------------------------------------ */
#define FW_OPTION(id, name, def, lo, hi, doc) FW_OPT_##id,
typedef enum {
#include "options.def"
  FW_OPT_COUNT_
} fw_option_id_t;
#undef FW_OPTION
FW_HIDDEN extern long fw_options[FW_OPT_COUNT_];
FW_HIDDEN void fw_options_init(void);
FW_HIDDEN void fw_options_print(int fd);
#define fw_opt(id) (fw_options[FW_OPT_##id])

/* ---- stats.c -------------------------------------------------------------- */
#define FW_STAT(name) FW_HIDDEN extern _Atomic(size_t) fw_stat_##name;
#include "stats.def"
#undef FW_STAT
#define fw_stat_add(name, n) atomic_fetch_add_explicit(&fw_stat_##name, (size_t)(n), memory_order_relaxed)
#define fw_stat_sub(name, n) atomic_fetch_sub_explicit(&fw_stat_##name, (size_t)(n), memory_order_relaxed)
FW_HIDDEN void fw_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
FW_HIDDEN int fw_snprintf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- arena.c: 4 MiB chunks of reserved address space ------------------ */
/* Returns FW_SEGMENT_SIZE-aligned memory of chunks * FW_SEGMENT_SIZE bytes;
 * *is_zero tells whether it is known to be untouched. */
FW_HIDDEN void *fw_arena_alloc(size_t chunks, fw_arena_t **arena, uint32_t *chunk, bool *is_zero);
FW_HIDDEN void fw_arena_free(fw_arena_t *arena, uint32_t chunk, size_t chunks, bool purge_now);
FW_HIDDEN void fw_arena_purge(uint64_t now, bool force);
FW_HIDDEN bool fw_arena_contains(const void *p);
FW_HIDDEN size_t fw_arena_release_unused(void);
FW_HIDDEN void fw_arena_mark_abandoned(fw_arena_t *arena, uint32_t chunk, uint64_t purge_due);
FW_HIDDEN bool fw_arena_reclaim(fw_arena_t *arena, uint32_t chunk); /* true: caller owns it now */
FW_HIDDEN void *fw_arena_reclaim_any(void);                          /* an abandoned segment, now the caller's */
FW_HIDDEN void fw_arena_fork_prepare(void);
FW_HIDDEN void fw_arena_fork_parent(void);
FW_HIDDEN void fw_arena_fork_child(void);

/* ---- segment.c ------------------------------------------------------------ */
FW_HIDDEN fw_page_t *fw_segment_page_alloc(fw_heap_t *heap, int kind);
FW_HIDDEN fw_page_t *fw_segment_large_alloc(fw_heap_t *heap, size_t size, size_t align);
FW_HIDDEN void fw_segment_page_free(fw_tld_t *tld, fw_page_t *page);
FW_HIDDEN bool fw_segment_span_grow(fw_page_t *page, size_t size);
FW_HIDDEN void fw_segments_purge(fw_tld_t *tld, uint64_t now, bool force);
FW_HIDDEN void fw_segments_abandon(fw_tld_t *tld);
FW_HIDDEN bool fw_segment_reclaim_one(fw_heap_t *heap);
FW_HIDDEN bool fw_segment_reclaim_on_free(fw_segment_t *seg);
FW_HIDDEN void fw_segment_purge_abandoned(void *seg); /* caller holds its abandoned bit */
FW_HIDDEN void fw_segment_fork_prepare(void);
FW_HIDDEN void fw_segment_fork_parent(void);
FW_HIDDEN void fw_segment_fork_child(void);
FW_HIDDEN extern uint64_t fw_segment_cookie_key;
FW_INLINE uint64_t fw_segment_cookie(const fw_segment_t *s) {
  return (uint64_t)(uintptr_t)s ^ fw_segment_cookie_key;
}

/* ---- page.c ----------------------------------------------------------- */
FW_HIDDEN extern fw_page_t fw_page_empty;
FW_HIDDEN void fw_page_tables_init(void);
FW_HIDDEN fw_page_t *fw_page_find(fw_heap_t *heap, size_t cls);
FW_HIDDEN void fw_page_init(fw_page_t *page, fw_heap_t *heap, size_t cls, size_t block_size);
FW_HIDDEN void fw_page_collect(fw_page_t *page);
FW_HIDDEN void fw_page_queue_push(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page);
FW_HIDDEN void fw_page_queue_remove(fw_heap_t *heap, fw_page_queue_t *q, fw_page_t *page);
FW_HIDDEN void fw_page_unfull(fw_heap_t *heap, fw_page_t *page);
FW_HIDDEN void fw_page_to_full(fw_heap_t *heap, fw_page_t *page);
FW_HIDDEN void fw_page_retire(fw_heap_t *heap, fw_page_t *page);
FW_HIDDEN bool fw_page_adopt(fw_heap_t *heap, fw_page_t *page);
FW_HIDDEN fw_block_t *fw_page_block_start(const fw_page_t *page, const void *p);
FW_HIDDEN size_t fw_page_usable(const fw_page_t *page, const void *p);

/* ---- heap.c ----------------------------------------------------------- */
FW_HIDDEN extern fw_heap_t fw_heap_empty;
FW_HIDDEN fw_heap_t *fw_heap_alloc_struct(fw_tld_t *tld, bool is_default);
FW_HIDDEN void fw_heap_collect_delayed(fw_heap_t *heap);
FW_HIDDEN void fw_heap_release_all(fw_heap_t *heap);
FW_HIDDEN void fw_heap_housekeeping(fw_heap_t *heap, bool force);
FW_HIDDEN void fw_heap_retire_idle(fw_heap_t *heap);
FW_HIDDEN bool fw_heap_lcache_put(fw_heap_t *heap, fw_page_t *page);
FW_HIDDEN fw_page_t *fw_heap_lcache_get(fw_heap_t *heap, size_t slices);
FW_HIDDEN void fw_heap_lcache_flush(fw_heap_t *heap, bool all);
FW_HIDDEN bool fw_heap_lcache_clear_after(fw_page_t *page, size_t size);
FW_HIDDEN void fw_heap_struct_free(fw_heap_t *heap);
FW_HIDDEN void fw_heap_fork_prepare(void);
FW_HIDDEN void fw_heap_fork_parent(void);
FW_HIDDEN void fw_heap_fork_child(void);

/* ---- alloc.c ---------------------------------------------------------- */
FW_HIDDEN void *fw_malloc_generic(fw_heap_t *heap, size_t size);
/* The same with the arguments swapped: keeps size in the first argument
 * register on the malloc fast path, so the tail call needs no move. */
FW_HIDDEN void *fw_malloc_slow(size_t size, fw_heap_t *heap);
FW_HIDDEN void *fw_malloc_plain(fw_heap_t *heap, size_t size);
FW_HIDDEN void *fw_malloc_plain_ex(fw_heap_t *heap, size_t size, bool *fresh);
FW_HIDDEN void *fw_malloc_aligned_plain(fw_heap_t *heap, size_t size, size_t align);
FW_HIDDEN void *fw_heap_malloc_zero(fw_heap_t *heap, size_t size, bool zero);
FW_HIDDEN void *fw_heap_malloc_aligned_ex(fw_heap_t *heap, size_t size, size_t align, bool zero);
FW_HIDDEN void *fw_realloc_ex(fw_heap_t *heap, void *p, size_t size);
FW_HIDDEN void *fw_enomem(void);
FW_HIDDEN void *fw_malloc_direct(size_t size);  /* fw_malloc, for new_delete.cpp */

/* ---- free.c ----------------------------------------------------------- */
FW_HIDDEN void fw_free_generic(void *p);
FW_HIDDEN void fw_free_local_slow(fw_page_t *page, fw_block_t *b);
FW_HIDDEN void fw_free_local_unchecked(fw_page_t *page, fw_block_t *b);
FW_HIDDEN void fw_free_remote(fw_page_t *page, fw_block_t *b);
FW_HIDDEN size_t fw_usable_size(const void *p);
FW_HIDDEN void fw_free_direct(void *p);         /* fw_free, for new_delete.cpp */

/* ---- init.c ----------------------------------------------------------- */
FW_HIDDEN extern __thread fw_heap_t *fw_tls_heap __attribute__((tls_model("initial-exec")));
FW_HIDDEN extern _Atomic(int) fw_process_state; /* 0 none, 1 initialising, 2 ready */
FW_HIDDEN fw_heap_t *fw_thread_init(void);
FW_HIDDEN void fw_process_init(void);
FW_HIDDEN void *fw_meta_alloc(size_t size);   /* zeroed, type-stable, never unmapped */

/* ---- check.c: cautious mode --------------------------------------------- */
FW_HIDDEN __attribute__((noreturn)) void fw_check_fail(const char *what, const void *p, size_t size);
FW_HIDDEN void fw_check_free(fw_page_t *page, const void *p);
FW_HIDDEN bool fw_check_pointer(const void *p);
FW_HIDDEN void *fw_check_malloc(fw_heap_t *heap, size_t size, size_t align);
FW_HIDDEN void *fw_check_resize(void *p, size_t size);
FW_HIDDEN size_t fw_check_usable(const void *p);
FW_HIDDEN void fw_check_init(void);
FW_HIDDEN void fw_leak_report(void);

#endif
