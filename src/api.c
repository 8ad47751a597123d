/* api.c — the public malloc family (fw_malloc, fw_calloc, ...): the fast
 * paths of fast.h, argument rules, and the hand-off to thread.c when the
 * calling thread has no heap yet. override.c maps the standard names here. */
#include "fast.h"
#include "check.h"
#include "options.h"
#include <string.h>

void *fw_malloc(size_t size) { return fw_malloc_fast(size); }

/* The frees read the pointer's slice descriptor before anything has
 * validated it (FW_PROBING: cautious mode explains a fault there). */
FW_PROBING void fw_free(void *p) { fw_free_fast(p); }

/* The size and alignment are hints only: the block's page knows its size
 * class. Cautious mode checks them against the block. */
FW_PROBING void fw_free_sized(void *p, size_t size) {
  if (fw_unlikely(fw_cautious)) {
    fw_free_checked(p, FW_FORM_MALLOC | FW_HOW_SIZED, size, 0);
    return;
  }
  fw_free_fast(p);
}

FW_PROBING void fw_free_aligned(void *p, size_t alignment) {
  if (fw_unlikely(fw_cautious)) {
    fw_free_checked(p, FW_FORM_MALLOC | FW_HOW_ALIGNED, 0, alignment);
    return;
  }
  fw_free_fast(p);
}

FW_PROBING void fw_free_aligned_sized(void *p, size_t alignment, size_t size) {
  if (fw_unlikely(fw_cautious)) {
    fw_free_checked(p, FW_FORM_MALLOC | FW_HOW_ALIGNED | FW_HOW_SIZED, size, alignment);
    return;
  }
  fw_free_fast(p);
}

/* ---- operator new and delete (new_delete.cpp) ------------------------------
 * Hidden names, called directly rather than through the GOT as exported
 * (interposable) ones would be. Cautious mode records the form of each new
 * and checks each delete against it; the default mode tests the option only
 * when the fast path misses (fast.h), or, for the aligned forms of new, once
 * per call. */
FW_COLD static void *fw_new_cautious(size_t size, size_t alignment, unsigned form) {
  void *p = alignment ? fw_malloc_aligned(size, alignment) : fw_malloc(size);
  if (p) fw_check_set_form(p, form);
  return p;
}

FW_COLD static void *fw_new_slow(size_t size, unsigned form) {
  if (fw_cautious) return fw_new_cautious(size, 0, form);
  return fw_malloc_slow(size, FW_TLS(fw_tls_heap));
}
FW_COLD void fw_delete_slow(void *p, unsigned how, size_t size, size_t alignment) {
  if (fw_cautious) fw_free_checked(p, how, size, alignment);
  else fw_free_slow(p);
}

/* The plain forms test the option only when the fast path misses, which it
 * always does in cautious mode (fast.h). */
#if FW_PROF_ENTRIES
/* With the slow path's return coming back to the countdown, the hit had a
 * stack frame: 21 instructions a new against 15 in libfreeway.so
 * (callgrind, bench_objects 128 B). */
FW_COLD void *fw_new_miss(size_t size, unsigned form) {
  void *p = fw_new_slow(size, form);
  return fw_prof_countdown(FW_TLS(fw_tls_heap), p, size);  /* the heap may be new */
}
#else
FW_COLD void *fw_new_miss(size_t size, unsigned form) { return fw_new_slow(size, form); }
#endif
/* The forms that return NULL on failure: new_delete.cpp's nothrow forms, and
 * its new_handler loop's retries. */
#define FW_NEW(name, form)                                                         \
  FW_HIDDEN void *name(size_t size);                                               \
  void *name(size_t size) { FW_NEW_BODY(size, fw_new_miss, form) }
#define FW_NEW_ALIGNED(name, form)                                                 \
  FW_HIDDEN void *name(size_t size, size_t alignment);                             \
  void *name(size_t size, size_t alignment) {                                      \
    if (fw_unlikely(fw_cautious)) return fw_new_cautious(size, alignment, form);   \
    return fw_malloc_aligned(size, alignment);                                     \
  }
FW_NEW(fw_new_direct, FW_FORM_NEW)
FW_NEW(fw_new_array_direct, FW_FORM_NEW_ARRAY)
FW_NEW_ALIGNED(fw_new_aligned_direct, FW_FORM_NEW)
FW_NEW_ALIGNED(fw_new_array_aligned_direct, FW_FORM_NEW_ARRAY)

/* One per form of delete; the arguments a form lacks are 0. */
#define FW_DELETE(name, params, how, size, alignment)                               \
  FW_HIDDEN void name params;                                                      \
  FW_PROBING void name params { FW_DELETE_BODY(how, size, alignment) }
FW_DELETE(fw_delete_direct, (void *p), FW_FORM_NEW, 0, 0)
FW_DELETE(fw_delete_array_direct, (void *p), FW_FORM_NEW_ARRAY, 0, 0)
#ifdef _WIN32 /* elsewhere the sized deletes are override_cxx.c's */
FW_DELETE(fw_delete_sized_direct, (void *p, size_t n), FW_FORM_NEW | FW_HOW_SIZED, n, 0)
FW_DELETE(fw_delete_array_sized_direct, (void *p, size_t n), FW_FORM_NEW_ARRAY | FW_HOW_SIZED, n, 0)
#endif
FW_DELETE(fw_delete_aligned_direct, (void *p, size_t a), FW_FORM_NEW | FW_HOW_ALIGNED, 0, a)
FW_DELETE(fw_delete_array_aligned_direct, (void *p, size_t a), FW_FORM_NEW_ARRAY | FW_HOW_ALIGNED, 0, a)
FW_DELETE(fw_delete_sized_aligned_direct, (void *p, size_t n, size_t a), FW_FORM_NEW | FW_HOW_SIZED | FW_HOW_ALIGNED,
          n, a)
FW_DELETE(fw_delete_array_sized_aligned_direct, (void *p, size_t n, size_t a),
          FW_FORM_NEW_ARRAY | FW_HOW_SIZED | FW_HOW_ALIGNED, n, a)

size_t fw_malloc_usable_size(const void *p) { return fw_usable_size(p); }

/* calloc's small blocks are cleared here, 16 bytes a store, rather than
 * by a call of memset, whose dispatch and tail handling cost more than the
 * stores for blocks of a few dozen bytes: calloc(1, 64) and free took 88
 * instructions, mimalloc 3.3's 76 (callgrind). A block of 9 bytes or more
 * is a multiple of 16 (sizeclass.h), so the rounded stores stay in it; one
 * of 8 takes one store. The empty asm keeps the compiler from making the
 * loop a call of memset again. */
#define FW_CALLOC_INLINE 128
FW_INLINE void fw_zero_small(void *p, size_t n) {
  if (n <= 8) {
    *(uint64_t *)p = 0;
    return;
  }
  for (uint8_t *q = p, *end = q + n; q < end; q += 16) {
    __builtin_memset(q, 0, 16);
    __asm__("" : : "r"(q) : "memory");
  }
}

/* Out of line in both libraries: the profiling flavour's hit then needs no
 * stack frame (below), and the default's pays one jump more on a miss. */
static FW_NOINLINE void *fw_calloc_miss(size_t total) {
  fw_heap_t *heap = fw_ready_heap();
  if (fw_unlikely(!heap)) return fw_thread_alloc(FW_OP_ZERO, NULL, total, 0);
  void *p = fw_heap_malloc_zero(heap, total, true);
  FW_PROF_ACCOUNT(p, total);
  return p;
}

void *fw_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) return fw_enomem();
  if (total <= FW_CALLOC_INLINE) {
#if FW_PROF_ENTRIES
    /* The profiling flavour's hit counts down as malloc's does, and leaves
     * only by tail calls: with the miss's call and the sample's coming
     * back to it, calloc(1, 64) and free took 94 instructions against 74
     * in libfreeway.so (callgrind, bench_apipath calloc 64): a stack frame
     * of four registers on every call. A sampled block stays where it is:
     * one from a page of sampled blocks would have to be cleared again. */
    fw_heap_t *heap = FW_TLS(fw_tls_heap);
    fw_block_t *p = fw_page_pop_fast(heap->direct[total]);
    if (fw_likely(p != NULL)) {
      fw_zero_small(p, total);
      if (fw_prof_count_down(heap, total)) return p;
      return fw_prof_sampled_here(heap, p, total);
    }
#else
    void *p = fw_malloc_try_fast(total);
    if (fw_likely(p != NULL)) {
      fw_zero_small(p, total);
      return p;
    }
#endif
  }
  return fw_calloc_miss(total);
}

void *fw_realloc(void *p, size_t size) {
  /* Cautious mode reads nothing through p before it has validated it
   * (fw_realloc_ex). */
  if (fw_likely(p != NULL) && fw_likely(!fw_cautious)) {
    /* A block of this thread's small or medium page with no flag (the free
     * fast path's one test) stays or moves by fw_realloc_own; the rest is
     * checked first, then kept in place if it fits (a growing buffer mostly
     * stays in its block: that needs no heap) or goes to fw_realloc_ex. */
    fw_segment_t *seg = fw_ptr_segment(p);
    fw_page_t *slice = fw_ptr_slice(seg, p);
    if (fw_likely(__atomic_load_n(&slice->tag, __ATOMIC_RELAXED) == fw_thread_id()) && size - 1 < FW_MEDIUM_MAX) {
      size_t bs = slice->block_size;
      if (size <= bs && size >= bs / 2 && fw_page_reserved_block_start(slice, p) && !fw_link_looks_free((fw_block_t *)p))
        return p;
      fw_heap_t *heap = FW_TLS(fw_tls_heap);
      if (fw_likely(heap != &fw_heap_empty)) {
        void *q = fw_realloc_own(heap, seg, slice, p, size);
        if (q != p) FW_PROF_ACCOUNT(q, size);
        return q;
      }
    }
    if (fw_likely(fw_realloc_fits(p, size))) return p;
  }
  fw_heap_t *heap = fw_ready_heap();
  if (fw_unlikely(!heap)) {
    if (p && size == 0) {
      fw_free_generic(p);
      return NULL;
    }
    return fw_thread_alloc(FW_OP_REALLOC, p, size, 0);
  }
  void *q = fw_realloc_ex(heap, p, size);
  if (q != p) FW_PROF_ACCOUNT(q, size);
  return q;
}

void *fw_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) return fw_enomem();
  if (total == 0 && p == NULL) return fw_malloc_fast(0);
  return fw_realloc(p, total);
}

static void *fw_aligned_other(size_t size, size_t alignment);

/* Up to FW_ALIGN_BY_CLASS, a request rounded up to a multiple of the
 * alignment is a plain malloc too: every class's size is a multiple of
 * the largest power of two that divides the sizes around it (16-byte
 * steps to 128, then steps of an eighth of the power of two below), so
 * the class of such a size is a multiple of the alignment, and so is
 * every block of its page, whose start is 4 KiB-aligned (sizeclass
 * test aligned_by_class checks the table). Through the slow path and its
 * look for a block that happens to be aligned, aligned_alloc(64, 64)
 * and free took 212 instructions, posix_memalign(32) 245; mimalloc 3.3
 * 73 and 98 (callgrind). The test of the address stays: it costs two
 * instructions and would catch a table that broke the rule. */
static FW_NOINLINE FW_COLD void *fw_aligned_misfit(void *p, size_t size, size_t alignment) {
  fw_free_fast(p);
  return fw_aligned_other(size, alignment);
}
static FW_NOINLINE void *fw_aligned_by_class_slow(size_t n, size_t size, size_t alignment) {
  void *p = fw_malloc_fast(n);
  if (fw_likely(((uintptr_t)p & (alignment - 1)) == 0)) return p;
  return fw_aligned_misfit(p, size, alignment);
}
#if FW_PROF_ENTRIES
/* The profiling flavour's hit that was not aligned (not counted yet) or
 * whose countdown ran out. The sample may trade the block for one of a
 * page of sampled blocks: the address is tested after it. */
static FW_NOINLINE FW_COLD void *fw_aligned_prof_other(fw_heap_t *heap, void *p, size_t n, size_t size,
                                                       size_t alignment) {
  if (((uintptr_t)p & (alignment - 1)) != 0) return fw_aligned_misfit(p, size, alignment);
  p = fw_prof_sampled(heap, p, n);
  if (fw_likely(((uintptr_t)p & (alignment - 1)) == 0)) return p;
  return fw_aligned_misfit(p, size, alignment);
}
#endif
/* The hit apart from the rest, so that it needs no stack frame (6
 * instructions less a call). */
static FW_NOINLINE void *fw_aligned_by_class(size_t size, size_t alignment) {
  size_t n = size < alignment ? alignment : (size + alignment - 1) & ~(alignment - 1);
  if (fw_unlikely(n > FW_MEDIUM_MAX)) return fw_aligned_other(size, alignment);
#if FW_PROF_ENTRIES
  /* counted down as malloc's hit is, the sample and the misfit tail
   * calls: through fw_malloc_fast and back, aligned_alloc(64, 64) and free
   * took 89 instructions against 75 in libfreeway.so (callgrind,
   * bench_apipath aligned 64) */
  if (fw_likely(n <= FW_DIRECT_MAX)) {
    fw_heap_t *heap = FW_TLS(fw_tls_heap);
    fw_block_t *p = fw_page_pop_fast(heap->direct[n]);
    if (fw_likely(p != NULL)) {
      if (fw_likely(((uintptr_t)p & (alignment - 1)) == 0) && fw_prof_count_down(heap, n))
        return p;
      return fw_aligned_prof_other(heap, p, n, size, alignment);
    }
  }
#else
  void *p = fw_malloc_try_fast(n);
  if (fw_likely(p != NULL)) {
    if (fw_likely(((uintptr_t)p & (alignment - 1)) == 0)) return p;
    return fw_aligned_misfit(p, size, alignment);
  }
#endif
  return fw_aligned_by_class_slow(n, size, alignment);
}

static void *fw_aligned(size_t size, size_t alignment) {
  /* Every block of 16 bytes or more is 16-aligned, every block 8-aligned:
   * small alignments are plain mallocs, fast path included. Cautious mode
   * records the alignment, so it takes the long way. */
  if (fw_likely(alignment <= FW_MIN_ALIGN && alignment != 0 && fw_is_pow2(alignment)) && !fw_cautious)
  {
    size_t n = size < alignment ? alignment : size;
    /* counted down there already (in libfreeway-prof.so): not again */
    return fw_malloc_fast(n);
  }
  if (fw_likely(alignment <= FW_ALIGN_BY_CLASS && fw_is_pow2(alignment) && size <= FW_MEDIUM_MAX) && !fw_cautious)
    return fw_aligned_by_class(size, alignment);
  return fw_aligned_other(size, alignment);
}

static void *fw_aligned_other(size_t size, size_t alignment) {
  fw_heap_t *heap = fw_ready_heap();
  if (fw_unlikely(!heap)) {
    if (!fw_is_pow2(alignment)) {
      errno = EINVAL;
      return NULL;
    }
    return fw_thread_alloc(FW_OP_ALIGNED, NULL, size, alignment);
  }
  void *p = fw_heap_malloc_aligned_ex(heap, size, alignment, false);
  FW_PROF_ACCOUNT(p, size);
  return p;
}

void *fw_malloc_aligned(size_t size, size_t alignment) { return fw_aligned(size, alignment); }

void *fw_aligned_alloc(size_t alignment, size_t size) {
  /* C17 drops the "size is a multiple of alignment" rule; any power of two */
  return fw_aligned(size, alignment);
}

int fw_posix_memalign(void **out, size_t alignment, size_t size) {
  if (!fw_is_pow2(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
  int saved = errno;
  void *p = fw_aligned(size, alignment);
  if (!p) {
    int e = errno;
    errno = saved;
    return e == EINVAL ? EINVAL : ENOMEM;
  }
  *out = p;
  return 0;
}

void *fw_memalign(size_t alignment, size_t size) {
  /* glibc rounds a non-power-of-two alignment up rather than failing */
  if (!fw_is_pow2(alignment)) {
    if (alignment > SIZE_MAX / 2 + 1) return fw_enomem();
    size_t a = 1;
    while (a < alignment) a <<= 1;
    alignment = a;
  }
  return fw_aligned(size, alignment);
}

void *fw_valloc(size_t size) { return fw_aligned(size, fw_os_page_size()); }

void *fw_pvalloc(size_t size) {
  size_t page = fw_os_page_size();
  if (size > SIZE_MAX - page) return fw_enomem();
  size_t rounded = size ? fw_align_up(size, page) : page;
  return fw_aligned(rounded, page);
}

/* The largest alignment that succeeds whenever the memory is there (on
 * 32-bit systems, while the address space has room for a few dozen such
 * blocks). Larger powers of two are accepted too, and fail with ENOMEM only
 * when the address space cannot place them. */
size_t fw_max_alignment(void) { return sizeof(size_t) >= 8 ? (size_t)1 << 30 : (size_t)1 << 24; }
