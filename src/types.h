/* types.h — the shapes every layer shares: geometry, the block, page,
 * segment, heap and thread-data structs, and the address arithmetic that
 * maps a pointer to its segment and page. Data layout only: the functions
 * that work on each struct live in its own layer (src/LAYERS lists them,
 * the design is at the top of alloc.c). */
#ifndef FW_TYPES_H
#define FW_TYPES_H

#include "base.h"
#include "sizeclass.h"

/* ---- geometry ------------------------------------------------------------ */
#define FW_SEGMENT_SHIFT 22                       /* 4 MiB segments, aligned */
#define FW_SEGMENT_SIZE ((size_t)1 << FW_SEGMENT_SHIFT)
#define FW_SEGMENT_MASK (FW_SEGMENT_SIZE - 1)
#define FW_SLICE_SHIFT 16                         /* 64 KiB slices */
#define FW_SLICE_SIZE ((size_t)1 << FW_SLICE_SHIFT)
#define FW_SLICES (FW_SEGMENT_SIZE / FW_SLICE_SIZE) /* 64 */
#define FW_MEDIUM_PAGE_SLICES 8                    /* 512 KiB medium pages */
#define FW_PAGE_DESC_SHIFT 7                       /* sizeof(fw_page_t) == 128 */
#define FW_ARENA_MAX_CHUNKS 64                     /* larger blocks: own mapping */
#define FW_SPAN_MAX_SLICES 32                      /* 2 MiB: larger blocks get a segment */
#define FW_MIN_ALIGN 16
/* Alignments up to this one are met by the size class of the request
 * rounded up to a multiple of the alignment (api.c fw_aligned): pages start
 * 4 KiB-aligned. */
#define FW_ALIGN_BY_CLASS 4096

/* A free block: its first word is an encoded link (page.h). */
typedef struct fw_block_s { uintptr_t link; } fw_block_t;
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
  FW_PF_SAMPLED = 32,  /* holds blocks the heap profiler sampled (prof.c) */
  FW_PF_SAMPLES = 64,  /* serves the heap profiler's sampled blocks only: stays in
                          the heap's full list (heap.c) */
  FW_PF_RETAINED = 128, /* emptied, kept by its heap for the next page of its class
                           (heap.c): no block live, so every free into it is checked */
};
/* Bytes after the blocks of a page of sampled blocks (FW_PF_SAMPLES) for
 * each block: the heap profiler's record of it (prof.c). */
#define FW_PROF_SIDE 16

/* Segment kinds; a page's kind is SMALL, MEDIUM or LARGE (one block).
 *   SMALL   64 pages of one 64 KiB slice, blocks up to FW_SMALL_MAX (8 KiB)
 *   MEDIUM  8 pages of 8 slices (512 KiB), blocks up to FW_MEDIUM_MAX (128 KiB)
 *   SPAN    LARGE pages of 1..FW_SPAN_MAX_SLICES slices, one block each
 *   LARGE   exactly one LARGE page: bigger blocks and big alignments */
enum { FW_KIND_SMALL = 0, FW_KIND_MEDIUM = 1, FW_KIND_LARGE = 2, FW_KIND_SPAN = 3 };

/* xfree's low bit: the page is full and remote frees go to the owning heap's
 * delayed list instead, so the owner learns the page has room again. */
#define FW_XFREE_DELAYED ((uintptr_t)1)
/* On 64-bit builds xfree's top 16 bits count the blocks on the list, so
 * that the owner takes it in without walking it (page.c fw_page_collect);
 * 0 with a non-empty list: not known (32-bit builds, a count that would
 * overflow, a block above 2^48), and the owner walks it. */
#if UINTPTR_MAX > 0xffffffffu
#define FW_XFREE_COUNT_SHIFT 48
#define FW_XFREE_LIST(x) ((fw_block_t *)((x) & ((((uintptr_t)1 << FW_XFREE_COUNT_SHIFT) - 1) & ~FW_XFREE_DELAYED)))
#define FW_XFREE_COUNT(x) ((uint32_t)((x) >> FW_XFREE_COUNT_SHIFT))
#else
#define FW_XFREE_LIST(x) ((fw_block_t *)((x) & ~FW_XFREE_DELAYED))
#define FW_XFREE_COUNT(x) ((void)(x), (uint32_t)0)
#endif

/* A page: blocks of one size class carved from one or more slices. Owned by
 * one heap; every field but xfree, heap, flags and tag is touched only by
 * the owning thread. Exactly 128 bytes so that the free fast path finds the
 * descriptor of a pointer with a shift and a mask. */
struct fw_page_s {
  union {
    struct {
      /* The first 64 bytes, one cache line: what the owner's malloc and free
       * write on their common paths (the pop and the push, fresh for blocks
       * above FW_DIRECT_MAX, frees in the counting flavour) and what only
       * the owner reads. No other thread writes or reads it, so a page whose
       * blocks another thread frees one by one (a consumer of the owner's
       * messages) does not take the line the owner allocates from away from
       * it at each free. */
      fw_block_t *free;          /* local free list: malloc pops, free pushes */
      uint32_t used;             /* live blocks, +1 while the page is its queue's head */
      uint16_t capacity;         /* blocks carved into the free list so far */
      uint8_t is_zero;           /* memory of never-handed-out blocks reads as zero */
      uint8_t idle;              /* seen unused by the last idle scan / cache look */
      union {
        uintptr_t link_mask;     /* the bits a valid link's t = next ^ b has clear
                                    (page.h): the segment's and those below the
                                    block size's power-of-two factor */
        fw_page_t *lnext;        /* FW_KIND_LARGE in its heap's large-block cache:
                                    the next page of its bin (large.c) */
      };
      union {
        uint8_t *fresh;          /* blocks > FW_DIRECT_MAX: from here on never handed
                                    out (zero but for the link word if is_zero) */
        int64_t prof_objects;    /* FW_KIND_LARGE, and a medium page's later slices:
                                    what a sampled block stands for (prof.c) */
      };
      uint64_t frees;            /* blocks freed since the slot became a page (the
                                    ledger's counts: folded into the owner's
                                    fw_counts_t when the slot is given back) */
      union {
        fw_block_t *later;       /* FREEWAY_SECURE: the owner's frees, a list moved to
                                    free only once free is used up (delayed reuse) */
        size_t prof_size;        /* FW_KIND_LARGE (never on a list), and a medium
                                    page's later slices: the size asked for of a
                                    sampled block (prof.c) */
      };
      fw_page_t *next, *prev;    /* class queue or full list */
      /* The second line: what other threads' frees read (the tag, the
       * block's checks, the owner) and write (xfree, once per batch of
       * blocks), which the owner writes only where the page changes state
       * (flags, heap). The owner's free reads the tag here and writes the
       * first line: two lines of a page in use rather than one, against a
       * miss at each free of another thread's block and at the owner's
       * next malloc after it. */
      _Alignas(64) uintptr_t tag; /* owner's thread id while flags == 0, else 0: the
                                    free fast path's single test */
      uint8_t flags;             /* FW_PF_*: zero on the fast path */
      uint8_t kind;              /* FW_KIND_* */
      uint16_t cls;              /* size class, FW_CLASS_LARGE for single-block pages */
      uint16_t reserved;         /* blocks that fit (at most 8192, of 8 bytes) */
      uint16_t slice_offset;     /* FW_PF_REDIRECT: distance in slices to the page */
      uint16_t slices;           /* slices the page spans */
      uint8_t adopted;           /* taken over from another heap (fw_page_adopt) */
      uint8_t prof_side;         /* the heap profiler's records of the blocks follow
                                    them (FW_PROF_SIDE bytes a block): a page of
                                    sampled blocks, or one that was (prof.c) */
      union {
        uint32_t aligned_live;   /* FW_PF_ALIGNED: interior blocks handed out and not
                                    yet freed by the owner (the flag goes with the last) */
        uint32_t ends;           /* FW_KIND_LARGE: the 4 KiB pages of the last slice in
                                    which the sizes it was taken for ended (large.c) */
      };
      size_t block_size;
      uint8_t *area;             /* first block */
      _Atomic(fw_heap_t *) heap; /* owning heap (read by remote frees) */
      _Atomic(uintptr_t) xfree;  /* blocks freed by other threads | FW_XFREE_DELAYED */
      _Atomic(uint32_t) sampled; /* live blocks the heap profiler sampled (prof.c);
                                    a medium page's later slice: the call site of
                                    the sample it records, 0 for none */
      _Atomic(uint32_t) sampled_at; /* the offset from area of the one sampled, if one
                                       (a later slice: of the block it records);
                                       FW_KIND_LARGE: its call site's number */
    };
    uint8_t raw_[1u << FW_PAGE_DESC_SHIFT]; /* same size on 32- and 64-bit builds */
  };
};
_Static_assert(sizeof(struct fw_page_s) == (1u << FW_PAGE_DESC_SHIFT), "page descriptor size");
_Static_assert(offsetof(struct fw_page_s, prev) + sizeof(fw_page_t *) <= 64 && offsetof(struct fw_page_s, tag) == 64,
               "the owner's fields in the first 64 bytes, the others' in the next");

/* A segment: FW_SEGMENT_SIZE-aligned memory whose header holds the page
 * descriptors, so that a pointer's page is found by arithmetic alone.
 * Owned by one thread (thread_id); abandoned segments have thread_id 0. */
struct fw_segment_s {
  union {
    struct {
      /* The first line: what other threads' frees read (the owner, the
       * cookie), which the owner writes only as the segment changes hands
       * or kind. The owner's bookkeeping, which changes as its pages come
       * and go and its collects count other threads' frees back in, is on
       * the lines after, so that a consumer freeing the owner's blocks
       * does not miss on this one after each of them. */
      _Atomic(uintptr_t) thread_id; /* owner's thread pointer; read by every free */
      uint8_t kind;
      uint8_t direct;               /* own mapping, not from an arena */
      uint8_t huge;                 /* backed by transparent huge pages (FREEWAY_THP) */
      uint8_t abandoned;            /* direct mappings: on the abandoned list */
      uint32_t page_slices;         /* slices per page */
      uint32_t pages_total;
      uint32_t chunk;               /* first chunk in the arena */
      uint32_t chunks;
      uint64_t cookie;              /* proves the header is ours (cautious checks) */
      size_t size;                  /* bytes spanned */
      fw_arena_t *arena;            /* source, or NULL for a direct mapping */
      fw_tld_t *tld;                /* owner's thread data (NULL when abandoned) */
      _Alignas(64) uint32_t pages_used;
      uint8_t in_free_list;
      uint8_t span_bin;             /* SPAN: longest free run, the tld bin it is in */
      uint64_t free_mask;           /* page slots not in use */
      uint64_t dirty_mask;          /* free page slots whose memory is not purged */
      uint64_t purge_due;           /* ms: when the dirty free pages may be purged */
      uint64_t purged_mask;         /* free page slots purged (not counted as committed) */
      uint64_t dirty_young;         /* dirty slots freed after purge_due was set: wait a round */
      uint64_t remote_in;           /* blocks of its pages that other threads freed and its
                                       holder took back (fw_page_collect) */
      fw_segment_t *next, *prev;    /* tld->segments (all owned) */
      fw_segment_t *fnext, *fprev;  /* tld->segments_free[kind] or tld->span_bins[span_bin] */
      fw_segment_t *anext, *aprev;  /* direct mappings: the abandoned list */
    };
    uint8_t header_raw_[256]; /* the page descriptors start at 256 */
  };
  fw_page_t pages[FW_SLICES];
};
_Static_assert(offsetof(struct fw_segment_s, pages) == 256, "segment header layout");
_Static_assert(offsetof(struct fw_segment_s, thread_id) == 0, "thread_id first: fw_segment_new clears what follows");
_Static_assert(offsetof(struct fw_segment_s, tld) + sizeof(fw_tld_t *) <= 64, "what other threads read in the first line");
#define FW_SEGMENT_HEADER (((sizeof(fw_segment_t)) + 4095) & ~(size_t)4095)

typedef struct fw_page_queue_s { fw_page_t *first, *last; } fw_page_queue_t;

/* A heap: the front end. The default heap of each thread is one instance;
 * fw_heap_new() makes more. direct[size], for size <= FW_DIRECT_MAX (1 KiB),
 * is indexed by the request size itself (one slot per byte: no rounding on
 * the fast path) and names the page serving that size's class, or
 * fw_page_empty, whose free list is always NULL, so that a new heap needs no
 * "is initialised" test on the fast path. */
struct fw_heap_s {
  fw_page_t *direct[FW_DIRECT_SLOTS];
  /* cdirect[c], for the classes above FW_DIRECT_MAX up to FW_MEDIUM_MAX:
   * the head page of class c's queue, or fw_page_empty, kept as direct[]
   * is (page.c), so that malloc's miss pops a block of 1 to 128 KiB after
   * the size class's computation alone (front.h fw_malloc_class_fast) */
  fw_page_t *cdirect[FW_CLASS_COUNT];
  fw_tld_t *tld;
  fw_page_queue_t queues[FW_CLASS_COUNT + 1];
  uint64_t queued[2];              /* bit c: queues[c] is not empty (page.c) */
  uint64_t head_gone[2];           /* bit c: class c's empty head page gave its
                                      slot back for another class's new page */
  uint64_t head_back[2];           /* bit c: ... and class c needed a new page
                                      after that: its empty head stays (both
                                      cleared after some new pages, heap.c) */
  uint32_t pages_new;              /* pages set up (fw_heap_page_new) */
  uint32_t head_lapsed;            /* pages_new when head_gone and head_back
                                      were last cleared */
  uint64_t filled[2];              /* bit c: this heap used a page of class c up:
                                      its next fresh pages come in whole
                                      (fw_segment_page_fault_in) */
  bool adopted_any;                /* has taken in pages of another heap or thread */
  fw_page_queue_t full;
  fw_heap_t *next, *prev;          /* tld->heaps */
  fw_heap_t *pool_next;            /* free heap structs */
  size_t peak_bytes;               /* sampled by fw_heap_stats */
  uint64_t slow_count;
  uint32_t retire_count;           /* pages given back: housekeeping every few */
  uint64_t rng;                    /* FREEWAY_SECURE: the carving order's state; the
                                      heap profiler's intervals */
  intptr_t prof_left;              /* FREEWAY_PROFILE: bytes until the next sample */
  fw_page_t *samples[FW_CLASS_COUNT]; /* FREEWAY_PROFILE: the page sampled blocks of each
                                         class come from (FW_PF_SAMPLES) */
  uint64_t idle_scan_due;          /* ms: next check for idle queue heads */
  fw_page_t *retained;             /* emptied pages kept (FW_PF_RETAINED), newest first */
  size_t retained_bytes;
  fw_page_t *lcache[FW_SPAN_MAX_SLICES + 1]; /* freed large pages by slice count */
  size_t lcache_bytes;
  size_t lcache_recent;            /* bytes of span blocks (up to 2 MiB) handed out since the last look */
  uint64_t lcache_due;             /* ms: next look for cached pages not reused (0:
                                       set by the next housekeeping) */
  /* Last, and never cleared by a memset when the struct is recycled: other
   * threads may read them at any time. The owner check of a call on a dead
   * handle reads thread_id; a remote free that read page->heap just before
   * the heap went away may still push onto delayed. */
  /* A line of their own: remote frees CAS delayed while the owner works on
   * the fields above. */
  _Alignas(64) _Atomic(uintptr_t) thread_id; /* owner; 0 for a heap struct not in use */
  _Atomic(fw_block_t *) delayed;   /* remote frees into full pages */
  bool is_default;                 /* a thread's default heap: written atomically, since
                                      other threads' frees read it (free.c) */
};

/* What a thread counted for the ledger (survey.c), written by the thread
 * alone on slow paths and read by reports without a lock: frees per size
 * class of the pages it gave back (the pages in use carry their own count),
 * large blocks it handed out, blocks other threads freed that it took in.
 * An exiting thread adds them to the process's (stats.h). */
typedef struct fw_counts_s {
  uint64_t frees[FW_CLASS_LARGE + 1];
  uint64_t large_allocs;
  uint64_t remote_frees;
} fw_counts_t;
/* The owner's add to such a count: relaxed loads and stores, so that a
 * report's read is no data race (plain ones on 32-bit builds, where a 64-bit
 * atomic would be a call, and a torn read only a report's blemish). */
FW_INLINE void fw_count_add(uint64_t *c, uint64_t n) {
#if UINTPTR_MAX > 0xffffffffu
  __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
#else
  *c += n;
#endif
}
FW_INLINE uint64_t fw_count_read(const uint64_t *c) {
#if UINTPTR_MAX > 0xffffffffu
  return __atomic_load_n(c, __ATOMIC_RELAXED);
#else
  return *c;
#endif
}

/* Blocks of one page of another thread's, freed by this thread and held
 * to be handed over together (free.c, "remote frees, batched"): a list
 * linked as the page's own lists are, tail's link set at the hand-over. */
typedef struct fw_rfree_s {
  fw_page_t *page;  /* NULL: the entry is free */
  fw_block_t *head, *tail;
  uint32_t n, limit;  /* blocks held; hand-over at limit */
} fw_rfree_t;
#define FW_RFREE_SHIFT 6
#define FW_RFREE_SLOTS (1u << FW_RFREE_SHIFT)

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
  size_t segments_empty[2];         /* owned segments with no page in use: [0]
                                       of small and medium blocks, [1] spans */
  size_t segments_reused;           /* empty segments of small and medium blocks
                                       put to use again while still warm, halved
                                       at each purge pass that gives some back
                                       (fw_segment_cache_cap) */
  size_t segments_small;            /* owned segments of small pages */
  bool calloc_untouched;            /* has handed out a medium block by calloc
                                       without writing it (fresh memory) */
  uint8_t big_whole;                /* looks in a row that found a freed big block
                                       written through (fw_segment_big_look) */
  uint16_t big_every;               /* big frees from one look to the next */
  uint16_t big_wait;                /* big frees until the next look */
  uint16_t big_huge;                /* big frees in huge pages since the decision */
  uint8_t big_early;                /* looks made at the next big malloc */
  const uint8_t *big_last;          /* the last big block placed, for that look */
  fw_tld_t *pool_next;
  fw_tld_t *all_next;               /* every tld ever made (never freed): reports */
  fw_counts_t counts;
  void *prof_cache;                 /* the heap profiler's (prof.c): kept when the
                                       struct is recycled, emptied for the next thread */
  uint64_t rfree_used;              /* bit i: rfree[i] holds blocks */
  size_t rfree_bytes;               /* the bytes of the blocks rfree[] holds */
  fw_rfree_t rfree[FW_RFREE_SLOTS]; /* other threads' blocks this thread freed (free.c) */
};

/* ---- address arithmetic ----------------------------------------------------
 * The segment of p is found from p - 1, so that a block that starts exactly
 * at a segment boundary (a huge alignment: the block is placed one segment
 * after its header) still maps to its own header. No block ever starts at
 * offset 0 of its segment otherwise, since the header is there. */
FW_INLINE fw_segment_t *fw_ptr_segment(const void *p) {
  return (fw_segment_t *)(((uintptr_t)p - 1) & ~FW_SEGMENT_MASK);
}
/* The descriptor of the slice holding p (may be a FW_PF_REDIRECT one). */
FW_INLINE fw_page_t *fw_ptr_slice(fw_segment_t *seg, const void *p) {
  uintptr_t off = ((uintptr_t)p >> (FW_SLICE_SHIFT - FW_PAGE_DESC_SHIFT)) &
                  ((FW_SLICES - 1) << FW_PAGE_DESC_SHIFT);
  return (fw_page_t *)((uint8_t *)seg->pages + off);
}
/* The page a slice descriptor belongs to (a later slice of a multi-slice
 * page points back to its first). */
FW_INLINE fw_page_t *fw_slice_page(fw_page_t *pg) {
  if (__atomic_load_n(&pg->flags, __ATOMIC_RELAXED) & FW_PF_REDIRECT) pg -= pg->slice_offset;
  return pg;
}
FW_INLINE fw_page_t *fw_ptr_page(const void *p) { return fw_slice_page(fw_ptr_slice(fw_ptr_segment(p), p)); }
FW_INLINE fw_segment_t *fw_page_segment(const fw_page_t *pg) {
  return (fw_segment_t *)((uintptr_t)pg & ~FW_SEGMENT_MASK);
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

/* The size class of a request: 16-byte steps up to 128 bytes (8 for the
 * first), then 8 classes per doubling; tools/gen_sizeclasses.py generates
 * the table in sizeclass.h from the same rule. */
FW_INLINE size_t fw_size_class(size_t size) {
  if (size <= 128) return size <= 8 ? 1 : ((size + 15) >> 4) + 1;
  size_t s = size - 1;
  unsigned b = 63u - (unsigned)__builtin_clzll(s);
  return 10 + (size_t)(b - 7) * 8 + ((s >> (b - 3)) & 7);
}

#endif
