/* check.c — cautious mode (FREEWAY_CAUTIOUS=1).
 *
 * THE BLOCK. A cautious request of n bytes takes a block of at least
 * max(n, 16) + sizeof(fw_trailer_t) bytes; the user's bytes start at the
 * block (or at an aligned offset in it) and the trailer fills the block's
 * last bytes:
 *
 *   [pad][user's n bytes][canary ...][head size info threads stacks tail]
 *
 * - head and tail are two checksums, keyed with a per-process secret, of
 *   the block's address and size, its state (live or freed), the requested
 *   size, the form and alignment of the allocation and the allocating
 *   thread. A block is live when both say live, freed when both say freed:
 *   a freed block is known as freed wherever it is (a page's list, another
 *   thread's pending list, a page whose other blocks moved on), with no
 *   list to walk. Writing past the request reaches the canary, then head;
 *   writing before the next block's start reaches tail first: which of the
 *   two still holds tells an overrun from an underrun.
 * - the canary fills the slack after the request (and an aligned block's
 *   pad before it), up to FW_CHECK_SPAN bytes each, with bytes drawn from
 *   the secret and the block's address, each with its top bit set.
 * - a freed block is filled (after its list link, up to FW_CHECK_SPAN
 *   bytes) with another such pattern, checked when the block is handed out
 *   again: a write through a dangling pointer is found then.
 * - the 16-byte minimum keeps the list link of a freed block (its first
 *   word) clear of the trailer even for a malloc(0).
 * - tail is also the block's lock: a free changes it from live to busy
 *   with one compare-and-swap, so of two racing frees of a block one wins
 *   and the other reports the double free; a thread that reads another
 *   block's trailer (the one before the block it frees) reads tail before
 *   and after and judges only a trailer that did not change meanwhile.
 *
 * A large block's page goes back to its segment when the block is freed;
 * its descriptor remembers the block (UNUSED, kind LARGE, same area), and
 * the last FW_CHECK_RING large blocks freed are remembered by address, so
 * that a second free of either is still reported as a double free.
 *
 * Every report is one write to stderr: what happened, the address, the
 * requested size, the size class, the threads, the stacks of the
 * allocation, of the free and of the call that found it; then abort. See
 * docs/cautious.md. */
#include "check.h"
#include "arena.h"
#include "heap.h"
#include "page.h"
#include "segment.h"
#include "message.h"
#include "options.h"
#include "os.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ThreadSanitizer does not model fences (gcc refuses them under
 * -fsanitize=thread). Its builds run the default mode, where none of the
 * trailer code below runs; a compiler barrier keeps them building. */
#if defined(__SANITIZE_THREAD__)
#define FW_FENCE(order) __atomic_signal_fence(order)
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FW_FENCE(order) __atomic_signal_fence(order)
#endif
#endif
#ifndef FW_FENCE
#define FW_FENCE(order) __atomic_thread_fence(order)
#endif

#define FW_CHECK_FRAMES 4     /* return addresses kept per block, for the allocation and the free */
#define FW_CHECK_SPAN 4096    /* bytes of canary and of freed pattern per block */
#define FW_CHECK_MIN 16       /* the smallest user part: the list link and more */
#define FW_CHECK_RING 64      /* large blocks whose free is remembered by address */

typedef struct {
  uint64_t head;
  uint64_t size;          /* requested */
  uint64_t info;          /* user offset (32 bits), form (8), log2 of the alignment + 1 (8) */
  uint64_t alloc_thread;
  uint64_t free_thread;
  uintptr_t alloc_pc[FW_CHECK_FRAMES];
  uintptr_t free_pc[FW_CHECK_FRAMES];
  uint64_t tail;
} fw_trailer_t;
_Static_assert(sizeof(fw_trailer_t) % 8 == 0, "trailer: whole words");

enum { FW_ST_BAD = 0, FW_ST_LIVE = 1, FW_ST_FREED = 2, FW_ST_BUSY = 3 };
enum { FW_HALF_HEAD = 0, FW_HALF_TAIL = 1 };

/* The secret, drawn at start-up; no part of it is ever stored in a block. */
static struct {
  uint64_t core[6];     /* the keyed hash of a trailer's fields */
  uint64_t half[2][3];  /* [head, tail][live, freed]: what each half adds to it */
  uint64_t busy, canary, freed;
} fw_sec;
static size_t fw_frames;                   /* FREEWAY_CAUTIOUS_FRAMES */
static uintptr_t fw_code_lo, fw_code_hi;  /* freeway's code: frames left out of stacks */
static FW_THREAD_LOCAL int fw_in_capture;
static FW_THREAD_LOCAL int fw_form_unknown;      /* the next block is the one whose allocation started the process */
static _Atomic(uintptr_t) fw_large_freed[FW_CHECK_RING];
static _Atomic(unsigned) fw_large_next;

/* ---- arithmetic --------------------------------------------------------------- */
static inline uint64_t fw_mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  return x ^ (x >> 32);
}

/* Two 64-bit words folded into one: the high and low halves of their full
 * product, xored. With both words offset by secrets, the result of inputs
 * that differ anywhere is unrelated without the secrets. */
static inline uint64_t fw_fold(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
  __uint128_t r = (__uint128_t)a * b;
  return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
  return fw_mix(a ^ fw_mix(b));
#endif
}

/* The keyed hash of what a trailer vouches for: the block's address and
 * size, the requested size, the form and alignment, the allocating thread.
 * The trailer's head and tail are this hash xored with a secret of their
 * own for the block's state (fw_half), so one hash per trailer read or
 * written serves both halves and both states.
 *
 * What it guards against is a program's own stray writes, not an adversary
 * who reads the heap (one who could would read the secret as well). A word
 * the program writes, copies or computes matches a half only if it knows
 * the hash: a guess holds with a chance of 2^-64; a trailer copied from
 * another block fails on the address, a head copied into a tail or a live
 * value turned into a freed one fails on the halves' secrets, which differ
 * by amounts drawn at random. Two folds of secret-offset inputs and a
 * third of their sum make the hash of one block useless for another:
 * nothing linear survives the products. */
static uint64_t fw_core(const uint8_t *b, size_t bs, const fw_trailer_t *t) {
  uint64_t x = fw_fold((uint64_t)(uintptr_t)b ^ fw_sec.core[0], t->size ^ fw_sec.core[1]);
  uint64_t y = fw_fold(t->info ^ fw_sec.core[2], (uint64_t)bs ^ fw_sec.core[3]);
  return fw_fold(x ^ y ^ fw_sec.core[4], t->alloc_thread ^ fw_sec.core[5]);
}
/* The byte of each half at the trailer's edge has its top bit set, as the
 * canary's bytes have: head's first byte is the one an overrun of a block
 * with no slack reaches first, tail's last the one an underrun of the next
 * block does. A hash byte drawn from all 256 values let a one-byte write
 * of 'A' pass unseen in one run in 256 (tests/badinput, underflow_1 in
 * cautious mode: 1 miss in about 135 runs); text never has that bit. */
static const uint64_t fw_half_edge[2] = {0x80ull, 0x80ull << 56};
static inline uint64_t fw_half(uint64_t core, unsigned half, unsigned state) {
  return (core ^ fw_sec.half[half][state]) | fw_half_edge[half];
}
static inline int fw_half_state(uint64_t core, uint64_t v, unsigned half) {
  if (v == fw_half(core, half, FW_ST_LIVE)) return FW_ST_LIVE;
  if (v == fw_half(core, half, FW_ST_FREED)) return FW_ST_FREED;
  return FW_ST_BAD;
}
/* tail while a free or an allocation rewrites the trailer */
static uint64_t fw_busy(const uint8_t *b) { return fw_mix(fw_sec.busy ^ (uint64_t)(uintptr_t)b); }

static uint32_t fw_info_off(uint64_t info) { return (uint32_t)info; }
static unsigned fw_info_form(uint64_t info) { return (unsigned)(info >> 32) & 0xff; }
static size_t fw_info_align(uint64_t info) {
  unsigned a = (unsigned)(info >> 40) & 0xff;
  return a ? (size_t)1 << (a - 1) : 0;
}
static uint64_t fw_info(size_t off, unsigned form, size_t align) {
  unsigned a = align ? (unsigned)__builtin_ctzll((unsigned long long)align) + 1 : 0;
  return (uint64_t)(uint32_t)off | (uint64_t)form << 32 | (uint64_t)a << 40;
}

/* Eight pattern bytes for a block, each with its top bit set: a write of
 * text (ASCII, a string's terminator one byte too far) over a canary or a
 * freed block always changes it, where a byte drawn from all 256 values
 * would let one such write in 256 pass unseen. Drawn from the secret and
 * the block's address, so that bytes copied from another block's canary or
 * freed pattern do not pass for this one's. */
static uint64_t fw_pattern(const uint8_t *b, uint64_t secret) {
  return fw_fold((uint64_t)(uintptr_t)b ^ secret, secret | 1) | 0x8080808080808080ull;
}

/* The byte at address a of a pattern: by the address, so that word-sized
 * stretches compare as words. */
static inline uint8_t fw_pat_byte(uint64_t w, uintptr_t a) { return (uint8_t)(w >> ((a & 7) * 8)); }

typedef uint64_t fw_word_t __attribute__((may_alias, aligned(8)));

/* The bytes of the word at a (8-aligned) that lie in [from, to), as a
 * mask (x86 is little-endian: the byte at a + i is bits 8i to 8i + 7). */
static inline uint64_t fw_word_mask(uintptr_t a, uintptr_t from, uintptr_t to) {
  uint64_t m = ~(uint64_t)0;
  if (from > a) m <<= 8 * (from - a);
  if (to < a + 8) m &= ~(uint64_t)0 >> 8 * (a + 8 - to);
  return m;
}

/* The pattern is written and compared in whole words: a partial first or
 * last word under a mask, then, with SSE2, sixteen bytes at a time (both
 * halves of a vector hold the word, the pattern being by the address mod
 * 8), four vectors per step, then words.
 *
 * Fills [from, to) with the pattern. The block is the caller's alone (a
 * block being handed out or freed): the word that holds both its first
 * bytes and some before them is rewritten whole, with those kept. */
static void fw_pat_fill(uint8_t *from, uint8_t *to, uint64_t w) {
  if (from >= to) return;
  uintptr_t f = (uintptr_t)from, t = (uintptr_t)to, q = f & ~(uintptr_t)7;
  if (q != f || t - q < 8) {
    uint64_t m = fw_word_mask(q, f, t), v = *(fw_word_t *)q;
    *(fw_word_t *)q = (v & ~m) | (w & m);
    q += 8;
  }
#if defined(__SSE2__)
  __m128i v = _mm_set1_epi64x((long long)w);
  for (; q + 64 <= t; q += 64) {
    _mm_storeu_si128((__m128i *)q, v);
    _mm_storeu_si128((__m128i *)(q + 16), v);
    _mm_storeu_si128((__m128i *)(q + 32), v);
    _mm_storeu_si128((__m128i *)(q + 48), v);
  }
  for (; q + 16 <= t; q += 16) _mm_storeu_si128((__m128i *)q, v);
#endif
  for (; q + 8 <= t; q += 8) *(fw_word_t *)q = w;
  for (; q < t; q++) *(uint8_t *)q = fw_pat_byte(w, q);
}

/* The first byte in [from, to) that differs from the pattern, or NULL.
 * Whole words are compared (the first one masked to the stretch), only
 * one that differs byte by byte. */
static const uint8_t *fw_pat_find(const uint8_t *from, const uint8_t *to, uint64_t w) {
  if (from >= to) return NULL;
  uintptr_t f = (uintptr_t)from, t = (uintptr_t)to, q = f & ~(uintptr_t)7;
  if (q != f || t - q < 8) {
    if ((*(const fw_word_t *)q ^ w) & fw_word_mask(q, f, t)) goto bytes;
    q += 8;
  }
#if defined(__SSE2__)
  {
    __m128i v = _mm_set1_epi64x((long long)w);
    for (; q + 64 <= t; q += 64) {
      __m128i e = _mm_and_si128(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)q), v),
                                _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(q + 16)), v));
      e = _mm_and_si128(e, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(q + 32)), v));
      e = _mm_and_si128(e, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(q + 48)), v));
      if (_mm_movemask_epi8(e) != 0xffff) goto bytes;
    }
    for (; q + 16 <= t; q += 16)
      if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)q), v)) != 0xffff) goto bytes;
  }
#endif
  for (; q + 8 <= t; q += 8)
    if (*(const fw_word_t *)q != w) goto bytes;
  if (q >= t || !((*(const fw_word_t *)q ^ w) & fw_word_mask(q, q, t))) return NULL;
bytes:
  /* a difference in the stretch from q (or from from) on: the first one */
  for (const uint8_t *b = (const uint8_t *)(q > f ? q : f); b < to; b++)
    if (*b != fw_pat_byte(w, (uintptr_t)b)) return b;
  return NULL;
}

/* Linked into the program, freeway's code cannot be told from the
 * program's by the object it is in: its frames are recognised by address,
 * in the free functions' own section or between the lowest and the
 * highest of a few functions of its lower layers (best effort: code the
 * compiler moved out of line, to .text.unlikely, is not recognised). */
static bool fw_code_static;
static uintptr_t fw_static_lo, fw_static_hi;

static bool fw_is_ours(uintptr_t pc) {
  return (pc >= fw_static_lo && pc < fw_static_hi) || fw_os_probing(pc);
}

/* The stack of the caller of freeway, up to n frames (at most 16),
 * without freeway's own. quick: the walk that keeps each return address's
 * rule (a block's allocation and free); else the unwinder, which starts at
 * from_pc if that is not 0 (a report). */
static size_t fw_walk(uintptr_t *pcs, size_t n, uintptr_t lo, uintptr_t hi, bool quick, uintptr_t from_pc) {
  size_t k = quick ? fw_os_backtrace_quick(pcs, n, lo, hi) : SIZE_MAX;
  if (k != SIZE_MAX) return k;
  k = fw_os_backtrace(pcs, n, lo, hi, from_pc);
  if (!k && from_pc) k = fw_os_backtrace(pcs, n, lo, hi, 0);
  return k;
}

static size_t fw_stack(uintptr_t *pcs, size_t n, bool quick, uintptr_t from_pc) {
  if (!fw_code_static) return fw_walk(pcs, n, fw_code_lo, fw_code_hi, quick, from_pc);
  /* freeway's frames are among the first 12 */
  uintptr_t raw[12 + 16];
  size_t m = fw_walk(raw, 12 + n, 0, 0, quick, from_pc);
  size_t start = 0;
  for (size_t i = 0; i < m && i < 12; i++)
    if (fw_is_ours(raw[i])) start = i + 1;
  size_t k = 0;
  for (size_t i = start; i < m && k < n; i++) pcs[k++] = raw[i];
  return k;
}

/* A block's allocation or free stack. Inlined into the hooks, so that the
 * quick walk, when it can run from here, has only the hook's caller's
 * frames of freeway to step over. Neither walk is expected to allocate; if
 * one ever did, its allocation must not walk again. */
FW_INLINE void fw_capture(uintptr_t *pcs) {
  size_t n = 0;
  if (fw_frames && !FW_TLS(fw_in_capture)) {
    FW_TLS(fw_in_capture) = 1;
    n = fw_code_static ? SIZE_MAX : fw_os_backtrace_quick(pcs, fw_frames, fw_code_lo, fw_code_hi);
    if (n == SIZE_MAX) n = fw_stack(pcs, fw_frames, true, 0);
    FW_TLS(fw_in_capture) = 0;
  }
  for (; n < FW_CHECK_FRAMES; n++) pcs[n] = 0;
}

/* ---- finding the block of a pointer ------------------------------------------------ */
typedef struct {
  fw_page_t *page;
  uint8_t *b;             /* block start */
  size_t bs;              /* block size */
  fw_trailer_t *tp;       /* where its trailer is */
  fw_trailer_t t;         /* a copy */
  uint64_t core;          /* fw_core of the copy */
  int head, tail;         /* FW_ST_* each half says */
  bool stable;            /* the copy did not change while it was read */
  bool fresh;             /* never handed out in this page's life */
} fw_blk_t;

enum { FW_LOC_FOREIGN, FW_LOC_BLOCK, FW_LOC_FREED_LARGE };

static void fw_blk_at(fw_blk_t *k, fw_page_t *page, uint8_t *b) {
  k->page = page;
  k->b = b;
  k->bs = page->block_size;
  k->tp = (fw_trailer_t *)(b + k->bs - sizeof(fw_trailer_t));
  k->fresh = page->kind != FW_KIND_LARGE && b >= (uint8_t *)__atomic_load_n(&page->fresh, __ATOMIC_RELAXED);
}

/* Reads the trailer (as a seqlock reader: tail is the sequence); its
 * stacks only when a report shows them (fw_report). */
static void fw_blk_read(fw_blk_t *k) {
  uint64_t t1 = __atomic_load_n(&k->tp->tail, __ATOMIC_ACQUIRE);
  k->t.head = k->tp->head;
  k->t.size = k->tp->size;
  k->t.info = k->tp->info;
  k->t.alloc_thread = k->tp->alloc_thread;
  k->t.free_thread = k->tp->free_thread;
  FW_FENCE(__ATOMIC_ACQUIRE);
  uint64_t t2 = __atomic_load_n(&k->tp->tail, __ATOMIC_RELAXED);
  k->t.tail = t1;
  k->stable = t1 == t2;
  k->core = fw_core(k->b, k->bs, &k->t);
  k->head = fw_half_state(k->core, k->t.head, FW_HALF_HEAD);
  k->tail = fw_half_state(k->core, t1, FW_HALF_TAIL);
  if (k->tail == FW_ST_BAD && t1 == fw_busy(k->b)) k->tail = FW_ST_BUSY;
}

/* The page and block of any pointer, without trusting it: nothing is read
 * before the memory is known to be mapped and a segment header of ours. */
static int fw_locate(const void *p, fw_blk_t *k) {
  /* a caller reads k only for a block */
  k->page = NULL;
  if ((uintptr_t)p < 4096) return FW_LOC_FOREIGN;
  fw_segment_t *seg = fw_ptr_segment(p);
  if (!fw_arena_contains(p) && !fw_os_is_mapped(seg)) return FW_LOC_FOREIGN;
  if (seg->cookie != fw_segment_cookie(seg)) return FW_LOC_FOREIGN;
  fw_page_t *pg;
  if (seg->kind == FW_KIND_LARGE) {
    pg = &seg->pages[0];  /* a single page: its other slices' descriptors are not kept */
  } else {
    pg = fw_ptr_slice(seg, p);
    if (fw_page_flags(pg) & FW_PF_REDIRECT) {
      if (pg->slice_offset > (size_t)(pg - seg->pages)) return FW_LOC_FOREIGN;
      pg -= pg->slice_offset;
      if (fw_page_flags(pg) & FW_PF_REDIRECT) return FW_LOC_FOREIGN;
    }
  }
  if (fw_page_flags(pg) & FW_PF_UNUSED)
    return pg->kind == FW_KIND_LARGE && pg->area == (const uint8_t *)p ? FW_LOC_FREED_LARGE : FW_LOC_FOREIGN;
  const uint8_t *q = p;
  if (q < pg->area || !pg->block_size) return FW_LOC_FOREIGN;
  size_t off = (size_t)(q - pg->area);
  uint8_t *b;
  if (pg->kind == FW_KIND_LARGE) {
    if (off >= pg->block_size || pg->used == 0) return FW_LOC_FOREIGN;
    b = pg->area;
  } else {
    if (off >= (size_t)pg->capacity * pg->block_size) return FW_LOC_FOREIGN;
    b = pg->area + off - off % pg->block_size;
  }
  if (pg->block_size < sizeof(fw_trailer_t) + FW_CHECK_MIN) return FW_LOC_FOREIGN;
  fw_blk_at(k, pg, b);
  fw_blk_read(k);
  return FW_LOC_BLOCK;
}

static uint8_t *fw_blk_user(const fw_blk_t *k) { return k->b + fw_info_off(k->t.info); }

/* ---- the large blocks freed lately ----------------------------------------------- */
static void fw_ring_add(const void *p) {
  unsigned i = atomic_fetch_add_explicit(&fw_large_next, 1, memory_order_relaxed) % FW_CHECK_RING;
  atomic_store_explicit(&fw_large_freed[i], (uintptr_t)p, memory_order_release);
}
static bool fw_ring_has(const void *p) {
  for (size_t i = 0; i < FW_CHECK_RING; i++)
    if (atomic_load_explicit(&fw_large_freed[i], memory_order_acquire) == (uintptr_t)p) return true;
  return false;
}
static void fw_ring_drop(const void *p) {
  for (size_t i = 0; i < FW_CHECK_RING; i++) {
    uintptr_t v = (uintptr_t)p;
    atomic_compare_exchange_strong(&fw_large_freed[i], &v, 0);
  }
}

/* ---- reports ------------------------------------------------------------------------ */
typedef struct {
  char *buf;
  size_t n, cap;
} fw_textbuf_t;

FW_PRINTF(2, 3) static void fw_out(fw_textbuf_t *o, const char *fmt, ...) {
  if (o->n + 1 >= o->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int r = vsnprintf(o->buf + o->n, o->cap - o->n, fmt, ap);
  va_end(ap);
  if (r > 0) o->n += (size_t)r < o->cap - o->n ? (size_t)r : o->cap - o->n - 1;
}

static void fw_out_frames(fw_textbuf_t *o, const uintptr_t *pcs, size_t n) {
  size_t shown = 0;
  for (size_t i = 0; i < n && pcs[i]; i++, shown++) {
    char line[256];
    fw_os_describe_pc(pcs[i], line, sizeof line);
    fw_out(o, "%s\n    %s", shown ? "" : " at:", line);
  }
  fw_out(o, "\n");
}

static void fw_out_thread(fw_textbuf_t *o, uint64_t t) {
  if (t) fw_out(o, "thread %#llx", (unsigned long long)t);
  else fw_out(o, "no thread");
}

typedef struct {
  const char *what;
  const void *addr;
  const char *call;
  const fw_blk_t *k;       /* the block, or NULL */
  bool trusted;            /* its trailer's fields hold */
  bool freed;              /* and say freed */
  char note[200];
  uintptr_t from_pc;       /* a fault: the stack starts at this instruction */
} fw_report_t;

static _Atomic(int) fw_reporting;

static __attribute__((noreturn)) void fw_report(fw_report_t *r) {
  if (atomic_exchange(&fw_reporting, 1)) {
    /* another thread is reporting (and about to abort): wait for it */
    for (;;) fw_os_sleep_ms(1000);
  }
  static char buf[8192];
  fw_textbuf_t o = {buf, 0, sizeof buf};
  fw_out(&o, "freeway: cautious mode: %s: address %p", r->what, r->addr);
  const fw_blk_t *k = r->k;
  if (k) {
    if (r->trusted) fw_out(&o, ", requested size %llu", (unsigned long long)k->t.size);
    else fw_out(&o, ", requested size unknown (the block's trailer is overwritten)");
    if (k->page->kind == FW_KIND_LARGE)
      fw_out(&o, ", size class large (%zu-byte block)", k->bs);
    else
      fw_out(&o, ", size class %u (%zu-byte blocks)", (unsigned)k->page->cls, k->bs);
    fw_out(&o, ", ");
    fw_out_thread(&o, atomic_load_explicit(&fw_page_segment(k->page)->thread_id, memory_order_relaxed));
    fw_out(&o, " owns it");
    if (r->trusted && fw_info_off(k->t.info))
      fw_out(&o, "; the block starts at %p, the user's part at +%u", (void *)k->b, fw_info_off(k->t.info));
  }
  fw_out(&o, "\n");
  if (r->note[0]) fw_out(&o, "  %s\n", r->note);
  if (k && r->trusted) {
    static const char *forms[] = {"malloc", "new", "new[]", "malloc or new"};
    fw_out(&o, "  allocated (%s", forms[fw_info_form(k->t.info) & 3]);
    if (fw_info_align(k->t.info)) fw_out(&o, ", alignment %zu", fw_info_align(k->t.info));
    fw_out(&o, ") by ");
    fw_out_thread(&o, k->t.alloc_thread);
    /* the stacks as the trailer holds them now (fw_blk_read leaves them) */
    uintptr_t pcs[FW_CHECK_FRAMES];
    memcpy(pcs, k->tp->alloc_pc, sizeof pcs);
    fw_out_frames(&o, pcs, FW_CHECK_FRAMES);
    if (r->freed) {
      fw_out(&o, "  freed by ");
      fw_out_thread(&o, k->t.free_thread);
      memcpy(pcs, k->tp->free_pc, sizeof pcs);
      fw_out_frames(&o, pcs, FW_CHECK_FRAMES);
    }
  }
  uintptr_t now[16];
  size_t n = fw_stack(now, 16, false, r->from_pc);
  fw_out(&o, "  found in %s by ", r->call);
  fw_out_thread(&o, fw_thread_id());
  fw_out_frames(&o, now, n);
  fw_out(&o, "freeway: aborting\n");
  fw_os_write(2, buf, o.n);
  fw_os_abort();
}

static void fw_report_init(fw_report_t *r, const char *what, const void *addr, const char *call,
                           const fw_blk_t *k) {
  memset(r, 0, sizeof *r);
  r->what = what;
  r->addr = addr;
  r->call = call;
  r->k = k;
  if (k) {
    int s = k->head != FW_ST_BAD ? k->head : k->tail;
    r->trusted = s == FW_ST_LIVE || s == FW_ST_FREED;
    r->freed = s == FW_ST_FREED;
  }
}

static __attribute__((noreturn)) void fw_fail_block(const char *what, const void *addr, const char *call,
                                                    const fw_blk_t *k, const char *note) {
  fw_report_t r;
  fw_report_init(&r, what, addr, call, k);
  if (note) fw_snprintf(r.note, sizeof r.note, "%s", note);
  fw_report(&r);
}

void fw_check_fail(const char *what, const void *p, size_t size) {
  fw_report_t r;
  fw_report_init(&r, what, p, "a call", NULL);
  if (size) fw_snprintf(r.note, sizeof r.note, "size %zu", size);
  fw_report(&r);
}

#define FW_NOT_OURS "free of a pointer freeway did not hand out"
#define FW_INSIDE "free of a pointer inside a block"
#define FW_DOUBLE "double free"
#define FW_OVERRUN "write past the end of the block"
#define FW_UNDERRUN "write before the start of the block"
#define FW_UAF "write to a freed block"

/* ---- the checks a block's own trailer and canary allow ------------------------------- */
/* The next block's start was written before: damage at the very end of
 * this block's trailer (tail), while head and this block's own bytes
 * hold. Reported against the next block. */
static __attribute__((noreturn)) void fw_fail_underrun_into(const fw_blk_t *prev, const char *call) {
  fw_blk_t next;
  uint8_t *nb = prev->b + prev->bs;
  const fw_blk_t *k = NULL;
  const void *addr = nb;
  if (prev->page->kind != FW_KIND_LARGE && nb < prev->page->area + (size_t)prev->page->capacity * prev->bs) {
    fw_blk_at(&next, prev->page, nb);
    fw_blk_read(&next);
    if (next.head != FW_ST_BAD || next.tail == FW_ST_LIVE || next.tail == FW_ST_FREED) {
      k = &next;
      addr = fw_blk_user(&next);
    }
  }
  char note[200];
  fw_snprintf(note, sizeof note, "the end of the block before it (block %p) was overwritten; that block's own "
              "bytes are intact", (void *)prev->b);
  fw_fail_block(FW_UNDERRUN, addr, call, k, note);
}

/* A live block's canary after the request and, for an aligned block, the
 * pad before it. */
static void fw_check_canary(const fw_blk_t *k, const char *call) {
  uint8_t *user = fw_blk_user(k);
  uint64_t w = fw_pattern(k->b, fw_sec.canary);
  uint8_t *end = (uint8_t *)k->tp;
  uint8_t *from = user + k->t.size;
  if ((size_t)(end - from) > FW_CHECK_SPAN) end = from + FW_CHECK_SPAN;
  const uint8_t *bad = fw_pat_find(from, end, w);
  if (bad) {
    char note[200];
    fw_snprintf(note, sizeof note, "the byte %zu bytes after the requested size was overwritten",
                (size_t)(bad - from));
    fw_fail_block(FW_OVERRUN, user, call, k, note);
  }
  if (user > k->b) {
    uint8_t *pad = user - k->b > FW_CHECK_SPAN ? user - FW_CHECK_SPAN : k->b;
    bad = fw_pat_find(pad, user, w);
    if (bad) {
      char note[200];
      fw_snprintf(note, sizeof note, "the byte %zu bytes before the start was overwritten", (size_t)(user - bad));
      fw_fail_block(FW_UNDERRUN, user, call, k, note);
    }
  }
}

/* Classifies the block of p for a call on a live block (free, realloc,
 * malloc_usable_size); reports anything else. On return the block is
 * live, p is its user pointer and its canary is intact. */
static void fw_check_live(const void *p, fw_blk_t *k, int loc, const char *call, const char *freed_what) {
  if (loc == FW_LOC_FOREIGN) {
    if (fw_ring_has(p)) fw_fail_block(freed_what, p, call, NULL, "a large block freed before");
    fw_fail_block(FW_NOT_OURS, p, call, NULL, NULL);
  }
  if (loc == FW_LOC_FREED_LARGE) fw_fail_block(freed_what, p, call, NULL, "a large block freed before");
  bool aligned_page = (fw_page_flags(k->page) & FW_PF_ALIGNED) != 0;
  if (k->tail == FW_ST_BUSY) fw_fail_block(freed_what, p, call, k, "the block is being freed by another thread");
  if (k->head == FW_ST_FREED || k->tail == FW_ST_FREED) {
    if ((const uint8_t *)p == fw_blk_user(k)) fw_fail_block(freed_what, p, call, k, NULL);
    fw_fail_block(FW_INSIDE, p, call, k, "(of a freed block)");
  }
  if (k->fresh) {
    if ((const uint8_t *)p == k->b) fw_fail_block(FW_NOT_OURS, p, call, NULL, "a block never handed out");
    fw_fail_block(FW_INSIDE, p, call, NULL, "(of a block never handed out)");
  }
  if (k->head == FW_ST_LIVE && k->tail == FW_ST_LIVE) {
    if ((const uint8_t *)p != fw_blk_user(k)) fw_fail_block(FW_INSIDE, p, call, k, NULL);
    fw_check_canary(k, call);
    return;
  }
  /* the trailer is damaged */
  if ((const uint8_t *)p != k->b && !aligned_page) fw_fail_block(FW_INSIDE, p, call, k, NULL);
  if (k->head == FW_ST_LIVE) {
    /* tail alone is damaged: the next block was written before, unless
     * this block's own overrun shows in its canary */
    fw_check_canary(k, call);
    fw_fail_underrun_into(k, call);
  }
  fw_fail_block(FW_OVERRUN, p, call, k,
                k->tail == FW_ST_LIVE ? "the start of the block's trailer, after the canary, was overwritten"
                                      : "the block's trailer was overwritten");
}

/* The block before b in its page, if it was ever handed out: an underrun
 * of b lands at its end. */
static void fw_check_prev(const fw_blk_t *k, const char *call) {
  if (k->page->kind == FW_KIND_LARGE || k->b == k->page->area) return;
  fw_blk_t prev;
  fw_blk_at(&prev, k->page, k->b - k->bs);
  if (prev.fresh) return;
  fw_blk_read(&prev);
  if (!prev.stable || prev.head == FW_ST_BAD || prev.tail != FW_ST_BAD) return;
  /* head holds, tail does not: and nobody is rewriting it */
  char note[200];
  fw_snprintf(note, sizeof note, "the end of the block before it (block %p) was overwritten", (void *)prev.b);
  fw_fail_block(FW_UNDERRUN, fw_blk_user(k), call, k, note);
}

/* ---- writing a trailer ------------------------------------------------------------------ */
/* Both halves for the state, tail last (a seqlock writer: the caller has
 * set tail to busy, or holds the block unseen by others, and the fields
 * are in place). */
static void fw_trailer_seal(fw_blk_t *k, unsigned state) {
  __atomic_store_n(&k->tp->head, fw_half(k->core, FW_HALF_HEAD, state), __ATOMIC_RELAXED);
  __atomic_store_n(&k->tp->tail, fw_half(k->core, FW_HALF_TAIL, state), __ATOMIC_RELEASE);
}

/* Publishes a live trailer with every field from k->t. */
static void fw_trailer_publish_live(fw_blk_t *k) {
  fw_trailer_t *tp = k->tp;
  k->core = fw_core(k->b, k->bs, &k->t);
  FW_FENCE(__ATOMIC_RELEASE);
  tp->size = k->t.size;
  tp->info = k->t.info;
  tp->alloc_thread = k->t.alloc_thread;
  tp->free_thread = k->t.free_thread;
  memcpy(tp->alloc_pc, k->t.alloc_pc, sizeof tp->alloc_pc);
  memcpy(tp->free_pc, k->t.free_pc, sizeof tp->free_pc);
  fw_trailer_seal(k, FW_ST_LIVE);
}

/* Publishes a freed trailer: what the hash covers is as the block's
 * allocation left it (the tail the free swapped out vouched for it), so
 * only the free's own fields and the halves change. */
static void fw_trailer_publish_freed(fw_blk_t *k) {
  fw_trailer_t *tp = k->tp;
  FW_FENCE(__ATOMIC_RELEASE);
  tp->free_thread = k->t.free_thread;
  memcpy(tp->free_pc, k->t.free_pc, sizeof tp->free_pc);
  fw_trailer_seal(k, FW_ST_FREED);
}

FW_INLINE void fw_write_live(fw_blk_t *k, uint8_t *user, size_t size, size_t align, unsigned form, bool stack) {
  __atomic_store_n(&k->tp->tail, fw_busy(k->b), __ATOMIC_RELAXED);
  k->t.size = size;
  k->t.info = fw_info((size_t)(user - k->b), form, align);
  k->t.alloc_thread = fw_thread_id();
  k->t.free_thread = 0;
  if (stack) fw_capture(k->t.alloc_pc);
  memset(k->t.free_pc, 0, sizeof k->t.free_pc);
  uint64_t w = fw_pattern(k->b, fw_sec.canary);
  uint8_t *from = user + size, *end = (uint8_t *)k->tp;
  if ((size_t)(end - from) > FW_CHECK_SPAN) end = from + FW_CHECK_SPAN;
  fw_pat_fill(from, end, w);
  if (user > k->b) fw_pat_fill(user - k->b > FW_CHECK_SPAN ? user - FW_CHECK_SPAN : k->b, user, w);
  fw_trailer_publish_live(k);
}

/* ---- the hooks ------------------------------------------------------------------------- */
size_t fw_check_padded(size_t size) {
  if (size > PTRDIFF_MAX - 4 * FW_SLICE_SIZE) return 0;
  return (size < FW_CHECK_MIN ? FW_CHECK_MIN : size) + sizeof(fw_trailer_t);
}

void fw_check_pop(fw_page_t *page) {
  fw_block_t *head = page->free;
  if (head == FW_LIST_END) return;
  fw_blk_t k;
  fw_blk_at(&k, page, (uint8_t *)head);
  /* the test fw_page_pop_checked makes, made first so that the damage is
   * told as what it is here: a write into a freed block */
  bool link_bad = fw_link_damaged(head);
  if (k.fresh && !link_bad) return;
  /* handed out and freed before in this page's life: it must still be as
   * its free left it */
  fw_blk_read(&k);
  uint8_t *fill = k.b + sizeof(fw_block_t), *end = (uint8_t *)k.tp;
  if ((size_t)(end - fill) > FW_CHECK_SPAN) end = fill + FW_CHECK_SPAN;
  const uint8_t *bad = k.fresh ? NULL : fw_pat_find(fill, end, fw_pattern(k.b, fw_sec.freed));
  bool marked = k.head == FW_ST_FREED && k.tail == FW_ST_FREED;
  if (!link_bad && !bad && marked) return;
  if (!link_bad && !bad && k.head == FW_ST_FREED) fw_fail_underrun_into(&k, "malloc");
  bool known = k.head == FW_ST_FREED || k.tail == FW_ST_FREED;
  const uint8_t *user = known ? fw_blk_user(&k) : k.b;
  char note[200];
  if (link_bad)
    fw_snprintf(note, sizeof note, "the freed block's first word (its list link) was overwritten");
  else if (bad)
    fw_snprintf(note, sizeof note, "the byte at offset %zu of the freed block was overwritten", (size_t)(bad - user));
  else
    fw_snprintf(note, sizeof note, "the freed block's trailer was overwritten");
  fw_fail_block(FW_UAF, user, "malloc", known ? &k : NULL, note);
}

void fw_check_malloc(fw_page_t *page, void *block, void *user, size_t size, size_t align) {
  fw_blk_t k;
  fw_blk_at(&k, page, block);
  if (page->kind == FW_KIND_LARGE) fw_ring_drop(user);
  unsigned form = FW_FORM_MALLOC;
  if (fw_unlikely(FW_TLS(fw_form_unknown))) {
    FW_TLS(fw_form_unknown) = 0;
    form = FW_FORM_ANY;
  }
  fw_write_live(&k, user, size, align, form, true);
}

void fw_check_set_form(void *p, unsigned form) {
  fw_blk_t k;
  if (fw_locate(p, &k) != FW_LOC_BLOCK) return;
  __atomic_store_n(&k.tp->tail, fw_busy(k.b), __ATOMIC_RELAXED);
  k.t.info = fw_info(fw_info_off(k.t.info), form, fw_info_align(k.t.info));
  k.core = fw_core(k.b, k.bs, &k.t);
  FW_FENCE(__ATOMIC_RELEASE);
  k.tp->info = k.t.info;
  fw_trailer_seal(&k, FW_ST_LIVE);
}

static const char *fw_how_call(unsigned how) {
  unsigned form = how & 3;
  if (form == FW_FORM_NEW) return how & FW_HOW_SIZED ? "sized operator delete" : "operator delete";
  if (form == FW_FORM_NEW_ARRAY) return how & FW_HOW_SIZED ? "sized operator delete[]" : "operator delete[]";
  if (how & FW_HOW_ALIGNED) return how & FW_HOW_SIZED ? "free_aligned_sized" : "fw_free_aligned";
  return how & FW_HOW_SIZED ? "free_sized" : "free";
}

fw_block_t *fw_check_free(void *p, unsigned how, size_t size, size_t align, fw_page_t **page) {
  static const char *forms[] = {"malloc", "new", "new[]", "malloc or new"};
  const char *call = fw_how_call(how);
  fw_blk_t k;
  int loc = fw_locate(p, &k);
  fw_check_live(p, &k, loc, call, FW_DOUBLE);
  char note[200];
  unsigned form = fw_info_form(k.t.info), want = how & 3;
  if (form != want && form != FW_FORM_ANY) {
    fw_snprintf(note, sizeof note, "made by %s, freed by %s", forms[form & 3], call);
    fw_fail_block("mismatched new/delete", p, call, &k, note);
  }
  if ((how & FW_HOW_SIZED) && size != k.t.size) {
    fw_snprintf(note, sizeof note, "given size %zu, requested size %llu", size, (unsigned long long)k.t.size);
    fw_fail_block("sized free with the wrong size", p, call, &k, note);
  }
  size_t have = fw_info_align(k.t.info);
  /* an alignment no larger than malloc's own counts as none */
  size_t a = have <= FW_MIN_ALIGN ? 0 : have, g = !(how & FW_HOW_ALIGNED) || align <= FW_MIN_ALIGN ? 0 : align;
  bool align_ok = (how & FW_HOW_ALIGNED) ? (align == have || a == g) : (want == FW_FORM_MALLOC || a == 0);
  if (!align_ok) {
    if (how & FW_HOW_ALIGNED)
      fw_snprintf(note, sizeof note, "given alignment %zu, allocated with alignment %zu", align, have);
    else
      fw_snprintf(note, sizeof note, "allocated with alignment %zu, freed without one", have);
    fw_fail_block("aligned free with the wrong alignment", p, call, &k, note);
  }
  fw_check_prev(&k, call);
  /* live -> busy: of two racing frees, one wins */
  uint64_t expected = k.t.tail;
  if (!__atomic_compare_exchange_n(&k.tp->tail, &expected, fw_busy(k.b), false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    fw_blk_read(&k);
    fw_fail_block(FW_DOUBLE, p, call, &k, "freed by two threads at once");
  }
  k.t.free_thread = fw_thread_id();
  fw_capture(k.t.free_pc);
  if (k.page->kind != FW_KIND_LARGE) {
    uint8_t *fill = k.b + sizeof(fw_block_t), *end = (uint8_t *)k.tp;
    if ((size_t)(end - fill) > FW_CHECK_SPAN) end = fill + FW_CHECK_SPAN;
    fw_pat_fill(fill, end, fw_pattern(k.b, fw_sec.freed));
  } else {
    fw_ring_add(p);
  }
  fw_trailer_publish_freed(&k);
  *page = k.page;
  return (fw_block_t *)k.b;
}

size_t fw_check_realloc(const void *p, fw_page_t **page, size_t *align) {
  fw_blk_t k;
  int loc = fw_locate(p, &k);
  fw_check_live(p, &k, loc, "realloc", "realloc of a freed block");
  unsigned form = fw_info_form(k.t.info);
  if (form != FW_FORM_MALLOC && form != FW_FORM_ANY)
    fw_fail_block("mismatched new/delete", p, "realloc", &k,
                  form == FW_FORM_NEW ? "made by new, passed to realloc" : "made by new[], passed to realloc");
  *page = k.page;
  *align = fw_info_align(k.t.info);
  return (size_t)k.t.size;
}

void fw_check_resize(void *p, size_t size, size_t align) {
  fw_blk_t k;
  if (fw_locate(p, &k) != FW_LOC_BLOCK) return;
  /* the block may have grown: its trailer moves to the new end, and what
   * is there now is no trailer (the alignment comes from the old one) */
  fw_write_live(&k, p, size, align, FW_FORM_MALLOC, true);
}

size_t fw_check_usable(const void *p) {
  fw_blk_t k;
  int loc = fw_locate(p, &k);
  fw_check_live(p, &k, loc, "malloc_usable_size", "realloc of a freed block");
  return (size_t)k.t.size;
}

/* ---- heap queries ------------------------------------------------------------------------ */
/* A block start from the heap walk: live with its user pointer and size,
 * and (pcs non-NULL) its allocation's return addresses. */
bool fw_check_block_live(const void *block, const uint8_t **user, size_t *size, uintptr_t pcs[4], size_t *npcs) {
  fw_page_t *pg = fw_ptr_page(block);
  fw_blk_t k;
  memset(&k, 0, sizeof k);
  fw_blk_at(&k, pg, (uint8_t *)block);
  if (k.fresh) return false;
  fw_blk_read(&k);
  if (!k.stable || k.head != FW_ST_LIVE || k.tail != FW_ST_LIVE) return false;
  *user = fw_blk_user(&k);
  *size = (size_t)k.t.size;
  if (pcs) {
    size_t n = 0;
    _Static_assert(FW_CHECK_FRAMES == 4, "the caller's array");
    for (size_t i = 0; i < FW_CHECK_FRAMES && k.tp->alloc_pc[i]; i++) pcs[n++] = k.tp->alloc_pc[i];
    *npcs = n;
  }
  return true;
}

static bool fw_walked_live(const void *block, const uint8_t **user, size_t *size) {
  return fw_check_block_live(block, user, size, NULL, NULL);
}

typedef struct { fw_block_visitor_t *visit; void *arg; fw_heap_stats_t *s; } fw_walk_t;

static bool fw_walk_visit(const void *block, size_t bs, void *arg) {
  (void)bs;
  fw_walk_t *w = arg;
  const uint8_t *user;
  size_t size;
  if (!fw_walked_live(block, &user, &size)) return true;
  if (w->s) {
    w->s->blocks_live++;
    w->s->bytes_live += size + (size_t)(user - (const uint8_t *)block);
    return true;
  }
  return w->visit(user, size, w->arg);
}

void fw_check_heap_visit(const fw_heap_t *heap, fw_block_visitor_t *visit, void *arg) {
  fw_walk_t w = {visit, arg, NULL};
  fw_heap_visit_blocks(heap, fw_walk_visit, &w);
}

void fw_check_heap_stats(fw_heap_t *heap, fw_heap_stats_t *s) {
  /* the page walk gives pages and reserved bytes; the live counts are the
   * live trailers', in requested sizes (and the pad before an aligned
   * block), exact even for blocks other threads freed and the owner has
   * not collected yet */
  size_t peak = heap->peak_bytes;
  fw_heap_stats_of(heap, s);
  heap->peak_bytes = peak;
  s->blocks_live = s->bytes_live = 0;
  fw_walk_t w = {NULL, NULL, s};
  fw_heap_visit_blocks(heap, fw_walk_visit, &w);
  if (s->bytes_live > heap->peak_bytes) heap->peak_bytes = s->bytes_live;
  s->bytes_peak = heap->peak_bytes;
}

bool fw_check_heap_contains(const fw_heap_t *heap, const void *p) {
  if (!fw_heap_contains_block(heap, p)) return false;
  const uint8_t *user;
  size_t size;
  fw_page_t *pg = fw_ptr_page(p);
  return fw_walked_live(fw_page_block_start(pg, p), &user, &size) && user == (const uint8_t *)p;
}

size_t fw_check_heap_usable(const fw_heap_t *heap, const void *p) {
  fw_blk_t k;
  if (fw_locate(p, &k) != FW_LOC_BLOCK || atomic_load_explicit(&k.page->heap, memory_order_relaxed) != heap)
    return 0;
  if (k.fresh || k.head != FW_ST_LIVE || k.tail != FW_ST_LIVE || fw_blk_user(&k) != (const uint8_t *)p) return 0;
  return (size_t)k.t.size;
}

/* ---- faults in the free fast path ----------------------------------------------------------- */
/* The free fast path reads the slice descriptor at the pointer's segment
 * base before anything else: for a pointer whose base is not mapped that
 * read faults, inside freeway. */
static void fw_check_fault(uintptr_t addr, uintptr_t pc, const uintptr_t *regs, size_t nregs) {
  uintptr_t tag_off = offsetof(fw_page_t, tag);
  uintptr_t in_seg = addr & FW_SEGMENT_MASK;
  if (in_seg < offsetof(fw_segment_t, pages) + tag_off ||
      in_seg >= offsetof(fw_segment_t, pages) + FW_SLICES * sizeof(fw_page_t) ||
      (in_seg - offsetof(fw_segment_t, pages) - tag_off) % sizeof(fw_page_t) != 0)
    return;  /* not the fast path's read: not ours to explain */
  fw_report_t r;
  const void *p = NULL;
  for (size_t i = 0; i < nregs && !p; i++) {
    const void *v = (const void *)regs[i];
    if (regs[i] > 4096 && (uintptr_t)&fw_ptr_slice(fw_ptr_segment(v), v)->tag == addr) p = v;
  }
  bool freed = p && fw_ring_has(p);
  fw_report_init(&r, freed ? FW_DOUBLE : FW_NOT_OURS, p, "free", NULL);
  r.from_pc = pc;
  uintptr_t base = (addr & ~FW_SEGMENT_MASK) + (in_seg - offsetof(fw_segment_t, pages) - tag_off) /
                   sizeof(fw_page_t) * FW_SLICE_SIZE;
  if (freed)
    fw_snprintf(r.note, sizeof r.note, "a large block freed before, whose memory is unmapped now");
  else if (p)
    fw_snprintf(r.note, sizeof r.note, "nothing is mapped at its 4 MiB-aligned base %p", (void *)(addr & ~FW_SEGMENT_MASK));
  else
    fw_snprintf(r.note, sizeof r.note, "a pointer in [%p, %p), whose 4 MiB-aligned base %p is not mapped",
                (void *)base, (void *)(base + FW_SLICE_SIZE), (void *)(addr & ~FW_SEGMENT_MASK));
  fw_report(&r);
}

/* Where freeway's code is, so that stacks leave its frames out; and the
 * quick walk turned on. */
static void fw_check_code_range(void) {
  fw_code_static = fw_os_code_range((const void *)fw_check_init, &fw_code_lo, &fw_code_hi);
  fw_os_backtrace_init();
  if (fw_code_static) {
    const void *fns[] = {(const void *)fw_check_init, (const void *)fw_check_free, (const void *)fw_check_malloc,
                         (const void *)fw_os_backtrace, (const void *)fw_os_backtrace_quick,
                         (const void *)fw_page_collect, (const void *)fw_heap_collect_delayed,
                         (const void *)fw_segment_page_free, (const void *)fw_arena_contains,
                         (const void *)fw_message, (const void *)fw_options_init,
                         (const void *)fw_check_stack};
    fw_static_lo = UINTPTR_MAX;
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
      if ((uintptr_t)fns[i] < fw_static_lo) fw_static_lo = (uintptr_t)fns[i];
      if ((uintptr_t)fns[i] > fw_static_hi) fw_static_hi = (uintptr_t)fns[i];
    }
    fw_static_hi += 4096;  /* the highest one's own code */
  }
}

size_t fw_check_stack(uintptr_t *pcs, size_t max) {
  if (max > 16) max = 16;
  size_t n = fw_code_static ? SIZE_MAX : fw_os_backtrace_quick(pcs, max, fw_code_lo, fw_code_hi);
  if (n == SIZE_MAX) n = fw_stack(pcs, max, true, 0);
  return n;
}

fw_bt_walk_t *fw_check_stack_cached(fw_bt_cache_t *c) {
  /* freeway inside the program: its frames are told apart by address
   * after the walk (fw_stack), which the cache does not do */
  if (fw_code_static) return NULL;
  return fw_os_backtrace_cached(c, fw_code_lo, fw_code_hi);
}

void fw_check_init(void) {
  /* the generated table and the arithmetic class function must agree */
  for (size_t c = 1; c < FW_CLASS_COUNT; c++) {
    if (fw_size_class(fw_class_size[c]) != c || fw_size_class(fw_class_size[c - 1] + 1) != c) {
      fw_message("size class table and fw_size_class disagree at class %zu\n", c);
      fw_os_abort();
    }
  }
  if (!fw_opt(CAUTIOUS)) {
    /* the heap profiler records stacks too (fw_check_stack) */
    if (fw_opt(PROFILE)) fw_check_code_range();
    return;
  }
  fw_os_random(&fw_sec, sizeof fw_sec);
  /* the two states of a half must differ, in the bits fw_half_edge leaves */
  for (unsigned h = 0; h < 2; h++)
    if (((fw_sec.half[h][FW_ST_LIVE] ^ fw_sec.half[h][FW_ST_FREED]) & ~fw_half_edge[h]) == 0)
      fw_sec.half[h][FW_ST_FREED] ^= 1;
  fw_frames = (size_t)fw_opt(CAUTIOUS_FRAMES);
  if (fw_frames > FW_CHECK_FRAMES) fw_frames = FW_CHECK_FRAMES;
  if (fw_frames) fw_check_code_range();
  else fw_code_static = fw_os_code_range((const void *)fw_check_init, &fw_code_lo, &fw_code_hi);
  fw_os_fault_hook(fw_check_fault);
  /* this thread is making the process's first allocation: operator new
   * tested the option before it was read */
  FW_TLS(fw_form_unknown) = 1;
}
