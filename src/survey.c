/* survey.c — where the memory goes: one walk over every arena, segment and
 * page of the process, and the three reports made from it
 * (docs/observability.md).
 *
 * The walk starts from the arenas' bitmaps, not from the threads' heaps, so
 * that it sees everything: pages of every thread, segments of exited
 * threads waiting to be adopted, empty segments kept for reuse and chunks
 * waiting for their purge. It reads other threads' page descriptors
 * without a lock, so a report made while other threads allocate is a
 * snapshot whose parts may be a moment apart; at exit, or with the other
 * threads quiet, it is exact.
 *
 * The ledger splits what freeway counts as committed (stats.c:
 * fw_stat_committed, the upper bound of its resident memory) into lines
 * that add up to it: live blocks, free blocks, page space not carved yet,
 * page tails, segment headers, free slots and chunks not purged yet, the
 * large-block cache, metadata and the own mappings of huge blocks. Every
 * line is computed from the walk but the last two, which have counters of
 * their own; the ledger's "unaccounted" line is what the walk could not
 * explain, zero when nothing moved during the walk.
 *
 * Nothing here allocates from the heap it reports on: buffers are on the
 * stack or mapped from the OS (the leak report's table of call sites). */
#include "survey.h"
#include "thread.h"
#include "arena.h"
#include "segment.h"
#include "page.h"
#include "heap.h"
#include "front.h"
#include "check.h"
#include "message.h"
#include "options.h"
#include "stats.h"
#include "os.h"
#include "pprof.h"
#include "prof.h"
#include <string.h>

/* ---- the walk ---------------------------------------------------------------- */

enum {
  FW_L_LIVE,        /* block space of live blocks */
  FW_L_FREE,        /* carved blocks on free lists */
  FW_L_UNCARVED,    /* page space for blocks not carved yet */
  FW_L_TAIL,        /* page ends too small for one more block */
  FW_L_LARGE_LIVE,  /* live large blocks */
  FW_L_LARGE_TAIL,  /* what a large block's slices hold beyond its size */
  FW_L_LCACHE,      /* freed large blocks kept for reuse */
  FW_L_HEADERS,     /* segment headers and page descriptors */
  FW_L_FREE_SLOTS,  /* free page slots whose memory is not purged yet */
  FW_L_FREE_CHUNKS, /* free arena chunks whose memory is not purged yet */
  FW_L_DIRECT,      /* huge blocks in mappings of their own */
  FW_L_META,        /* thread and heap data, arena tables */
  FW_L_COUNT
};

static const char *const fw_ledger_names[FW_L_COUNT] = {
    "live blocks",           "free blocks in pages",  "page space not carved yet", "page tails",
    "live large blocks",     "large blocks' tails",   "large-block cache",         "segment headers",
    "free page slots",       "free segment memory",   "huge blocks' mappings",     "metadata",
};
static const char *const fw_ledger_notes[FW_L_COUNT] = {
    "the block sizes of blocks in use (the requests they serve are at most this)",
    "blocks handed out before and freed, or carved and not handed out yet",
    "the rest of each page, carved into blocks as they are needed",
    "the end of each page, too small for one more block",
    "blocks above 128 KiB",
    "the slices a large block spans beyond its size",
    "freed large blocks kept for the next request of their size (FREEWAY_LARGE_CACHE)",
    "each segment's header and page descriptors",
    "pages given back to their segment, memory not yet returned to the OS (FREEWAY_PURGE_DELAY)",
    "segments given back, memory not yet returned to the OS (FREEWAY_PURGE_DELAY)",
    "blocks too big for a segment, each in a mapping of its own",
    "thread and heap data, the arena table",
};

typedef struct {
  size_t pages, blocks, live_blocks, live_bytes;
  uint64_t frees; /* the counting flavour's (fw_counts_t); allocations are frees + live */
} fw_class_tally_t;

typedef struct fw_survey_s fw_survey_t;
/* Called for every page in use (the map and the leak report look closer). */
typedef void fw_survey_page_fn(fw_survey_t *sv, const fw_segment_t *seg, const fw_page_t *pg, size_t slice);

/* Per owning thread (a segment's owner; 0: no thread owns it). */
#define FW_SURVEY_OWNERS 64
typedef struct {
  uintptr_t owner;
  size_t segments, bytes, live_bytes, live_blocks, large_live;
  uint64_t frees, large_frees, large_allocs, remote_frees;
} fw_owner_tally_t;

/* A thread's allocations, by the rule of fw_class_allocs below. */
static uint64_t fw_owner_allocs(const fw_owner_tally_t *t) {
  return (t->frees - t->large_frees) + (t->live_blocks - t->large_live) + t->large_allocs;
}

struct fw_survey_s {
  size_t line[FW_L_COUNT];
  fw_owner_tally_t owners[FW_SURVEY_OWNERS + 1]; /* the last: all others */
  size_t nowners;
  size_t segments, arenas;
  fw_class_tally_t cls[FW_CLASS_LARGE + 1];
  uint64_t large_allocs, remote_frees;
  fw_survey_page_fn *page_fn;
  void (*reserved_fn)(fw_survey_t *sv, size_t slice, size_t n);
  void (*segment_fn)(fw_survey_t *sv, const fw_segment_t *seg);
  void (*segment_end_fn)(fw_survey_t *sv);
  void *arg;
};

/* The bytes of [slice, slice + n) that are not the segment's header. */
static size_t fw_slices_bytes(size_t slice, size_t n) {
  size_t lo = slice * FW_SLICE_SIZE, hi = (slice + n) * FW_SLICE_SIZE;
  if (lo < FW_SEGMENT_HEADER) lo = FW_SEGMENT_HEADER;
  return hi > lo ? hi - lo : 0;
}

static void fw_survey_large(fw_survey_t *sv, fw_owner_tally_t *ot, const fw_page_t *pg, size_t mem) {
  fw_class_tally_t *t = &sv->cls[FW_CLASS_LARGE];
  t->frees += pg->frees;
  ot->frees += pg->frees;
  ot->large_frees += pg->frees;
  if (pg->used) {
    ot->live_blocks++;
    ot->large_live++;
    size_t bs = pg->block_size < mem ? pg->block_size : mem;
    sv->line[FW_L_LARGE_LIVE] += bs;
    sv->line[FW_L_LARGE_TAIL] += mem - bs;
    t->pages++;
    t->blocks++;
    t->live_blocks++;
    t->live_bytes += bs;
  } else {
    sv->line[FW_L_LCACHE] += mem;
  }
}

/* Blocks other threads freed into pg that its owner has not taken in yet:
 * they still count in used. A walk of the page's remote list that stops at
 * anything but a link within the page, since the owner may take the list
 * (and hand its blocks out again) while the walk runs. */
static size_t fw_survey_pending(const fw_page_t *pg) {
  const uint8_t *lo = pg->area, *hi = lo + (size_t)pg->capacity * pg->block_size;
  const fw_block_t *b = FW_XFREE_LIST(atomic_load_explicit(&((fw_page_t *)pg)->xfree, memory_order_acquire));
  size_t n = 0;
  while (b && (const uint8_t *)b >= lo && (const uint8_t *)b < hi && n < pg->capacity) {
    n++;
    uintptr_t t = fw_link_decode(b);
    const fw_block_t *next = (const fw_block_t *)(t ^ (uintptr_t)b);
    if (next == FW_LIST_END || FW_LINK_BAD(t)) break;
    b = next;
  }
  return n;
}

static fw_owner_tally_t *fw_survey_owner(fw_survey_t *sv, uintptr_t owner) {
  for (size_t i = 0; i < sv->nowners; i++)
    if (sv->owners[i].owner == owner) return &sv->owners[i];
  if (sv->nowners == FW_SURVEY_OWNERS) return &sv->owners[FW_SURVEY_OWNERS];
  sv->owners[sv->nowners].owner = owner;
  return &sv->owners[sv->nowners++];
}

static void fw_survey_segment(fw_survey_t *sv, const fw_segment_t *seg) {
  size_t live_before = sv->line[FW_L_LIVE] + sv->line[FW_L_LARGE_LIVE];
  fw_owner_tally_t *ot =
      fw_survey_owner(sv, atomic_load_explicit(&((fw_segment_t *)seg)->thread_id, memory_order_relaxed));
  ot->segments++;
  ot->bytes += seg->size;
  sv->segments++;
  sv->line[FW_L_HEADERS] += FW_SEGMENT_HEADER;
  if (sv->segment_fn) sv->segment_fn(sv, seg);
  if (seg->kind == FW_KIND_LARGE) {
    const fw_page_t *pg = &seg->pages[0];
    fw_survey_large(sv, ot, pg, seg->size - FW_SEGMENT_HEADER);
    if (sv->page_fn) sv->page_fn(sv, seg, pg, 0);
  } else {
    size_t ps = seg->page_slices;
    for (size_t s = 0; s < seg->pages_total; s++) {
      uint64_t bit = (uint64_t)1 << s;
      size_t slice = s * ps;
      const fw_page_t *pg = &seg->pages[slice];
      if (seg->free_mask & bit) {
        if (!(seg->purged_mask & bit)) sv->line[FW_L_FREE_SLOTS] += fw_slices_bytes(slice, ps);
        continue;
      }
      if (pg->flags & FW_PF_REDIRECT) continue; /* a later slot of a span's page */
      if ((pg->flags & FW_PF_UNUSED) || !pg->block_size) {
        /* a slot no page may take: a span segment's header slice, or the
         * secure level's guard slice. Its descriptor was never set up as a
         * page: whatever else it holds is from the memory's earlier use */
        sv->line[FW_L_HEADERS] += fw_slices_bytes(slice, ps);
        if (sv->reserved_fn) sv->reserved_fn(sv, slice, ps);
        continue;
      }
      if (pg->kind == FW_KIND_LARGE) {
        size_t n = pg->slices ? pg->slices : 1;
        fw_survey_large(sv, ot, pg, fw_slices_bytes(slice, n));
        if (sv->page_fn) sv->page_fn(sv, seg, pg, slice);
        continue;
      }
      size_t mem = fw_slices_bytes(slice, ps), bs = pg->block_size;
      size_t cap = pg->capacity, res = pg->reserved;
      /* a page its owner is setting up while the walk runs (a report on a
       * signal, or asked for by another thread) may show fields of both
       * states: one whose blocks would not fit in its slot is left out
       * (the ledger's unaccounted line shows it) */
      if (pg->area < (const uint8_t *)seg || cap > res || res * bs > mem ||
          pg->area + res * bs > (const uint8_t *)seg + (slice + ps) * FW_SLICE_SIZE)
        continue;
      size_t live = fw_page_live(pg), pending = fw_survey_pending(pg);
      live = live > pending ? live - pending : 0;
      if (live > cap) live = cap;
      sv->line[FW_L_LIVE] += live * bs;
      sv->line[FW_L_FREE] += (cap - live) * bs;
      sv->line[FW_L_UNCARVED] += (res - cap) * bs;
      sv->line[FW_L_TAIL] += mem > res * bs ? mem - res * bs : 0;
      fw_class_tally_t *t = &sv->cls[pg->cls <= FW_CLASS_LARGE ? pg->cls : 0];
      t->pages++;
      t->blocks += cap;
      t->live_blocks += live;
      t->live_bytes += live * bs;
      t->frees += pg->frees + pending;
      ot->frees += pg->frees + pending;
      ot->remote_frees += pending;
      sv->remote_frees += pending;
      ot->live_blocks += live;
      if (sv->page_fn) sv->page_fn(sv, seg, pg, slice);
    }
  }
  ot->live_bytes += sv->line[FW_L_LIVE] + sv->line[FW_L_LARGE_LIVE] - live_before;
  if (sv->segment_end_fn) sv->segment_end_fn(sv);
}

static void fw_survey_arena(uint8_t *base, uint32_t chunks, const uint64_t *inuse, const uint64_t *dirty,
                            void *arg) {
  fw_survey_t *sv = arg;
  sv->arenas++;
  for (uint32_t c = 0; c < chunks; c++) {
    bool used = (inuse[c / 64] >> (c % 64)) & 1;
    if (!used) {
      if ((dirty[c / 64] >> (c % 64)) & 1) sv->line[FW_L_FREE_CHUNKS] += FW_SEGMENT_SIZE;
      continue;
    }
    const fw_segment_t *seg = (const fw_segment_t *)(base + (size_t)c * FW_SEGMENT_SIZE);
    /* a chunk in use is a segment's first (its header is ours) or a later
     * chunk of a large block's segment, which its first chunk accounts for */
    if (seg->cookie != fw_segment_cookie(seg) || seg->direct) continue;
    fw_survey_segment(sv, seg);
  }
}

/* The counts pages no longer carry: each live thread's, then those of
 * exited threads and of pages no thread owned. */
/* Blocks other threads freed into full pages wait on their heap's delayed
 * list until its thread takes them in; they still count in their pages'
 * used. Small and medium ones move from live to free here (a large one
 * stays live until taken in). Each block is validated before it is read,
 * as the list may be taken while the walk runs. */
static void fw_survey_delayed(fw_survey_t *sv, const fw_heap_t *heap) {
  const fw_block_t *b = atomic_load_explicit(&((fw_heap_t *)heap)->delayed, memory_order_acquire);
  for (size_t n = 0; b && n < ((size_t)1 << 24); n++) {
    const fw_page_t *pg = fw_page_of_pointer(b, 0);
    if (!pg) break;
    size_t bs = pg->block_size;
    fw_class_tally_t *t = &sv->cls[pg->cls <= FW_CLASS_LARGE ? pg->cls : 0];
    const fw_segment_t *seg = fw_page_segment(pg);
    fw_owner_tally_t *ot =
        fw_survey_owner(sv, atomic_load_explicit(&((fw_segment_t *)seg)->thread_id, memory_order_relaxed));
    if (pg->kind != FW_KIND_LARGE && t->live_blocks && sv->line[FW_L_LIVE] >= bs && ot->live_blocks &&
        ot->live_bytes >= bs) {
      sv->line[FW_L_LIVE] -= bs;
      sv->line[FW_L_FREE] += bs;
      t->live_blocks--;
      t->live_bytes -= bs;
      t->frees++;
      ot->live_blocks--;
      ot->live_bytes -= bs;
      ot->frees++;
      ot->remote_frees++;
      sv->remote_frees++;
    }
    b = (const fw_block_t *)(b->link * fw_list_key_inv);
  }
}

/* Adds a thread's counts (a copy: no field changes under the additions)
 * to the process's and to the owner's. */
static void fw_survey_add_counts(fw_survey_t *sv, uintptr_t owner, const fw_counts_t *c) {
  uint64_t frees = 0;
  for (size_t i = 0; i <= FW_CLASS_LARGE; i++) {
    sv->cls[i].frees += c->frees[i];
    frees += c->frees[i];
  }
  sv->large_allocs += c->large_allocs;
  sv->remote_frees += c->remote_frees;
  if (!frees && !c->large_allocs && !c->remote_frees) return;
  fw_owner_tally_t *ot = fw_survey_owner(sv, owner);
  ot->frees += frees;
  ot->large_frees += c->frees[FW_CLASS_LARGE];
  ot->large_allocs += c->large_allocs;
  ot->remote_frees += c->remote_frees;
}

static void fw_survey_thread(const fw_tld_t *tld, void *arg) {
  fw_survey_t *sv = arg;
  size_t n = 0;
  for (const fw_heap_t *h = __atomic_load_n(&tld->heaps, __ATOMIC_ACQUIRE); h && n < 4096;
       h = __atomic_load_n(&h->next, __ATOMIC_RELAXED), n++)
    fw_survey_delayed(sv, h);
  fw_counts_t c;
  for (size_t i = 0; i <= FW_CLASS_LARGE; i++) c.frees[i] = fw_count_read(&tld->counts.frees[i]);
  c.large_allocs = fw_count_read(&tld->counts.large_allocs);
  c.remote_frees = fw_count_read(&tld->counts.remote_frees);
  fw_survey_add_counts(sv, __atomic_load_n(&tld->thread_id, __ATOMIC_RELAXED), &c);
}

static void fw_survey_run(fw_survey_t *sv) {
  sv->line[FW_L_DIRECT] = atomic_load_explicit(&fw_stat_direct, memory_order_relaxed);
  sv->line[FW_L_META] = atomic_load_explicit(&fw_stat_meta, memory_order_relaxed);
  fw_arena_visit(fw_survey_arena, sv);
  fw_thread_visit(fw_survey_thread, sv);
  /* threads gone count as owner 0, with the segments they left */
  fw_counts_t gone;
  for (size_t i = 0; i <= FW_CLASS_LARGE; i++)
    gone.frees[i] = atomic_load_explicit(&fw_counts_gone.frees[i], memory_order_relaxed);
  gone.large_allocs = atomic_load_explicit(&fw_counts_gone.large_allocs, memory_order_relaxed);
  gone.remote_frees = atomic_load_explicit(&fw_counts_gone.remote_frees, memory_order_relaxed);
  fw_survey_add_counts(sv, 0, &gone);
}

/* Blocks handed out of class c since the process started: small classes
 * count frees only (one store on the free path), so they are frees plus the
 * blocks live now; large blocks count both (huge blocks' own mappings are
 * not walked for their live ones). */
static uint64_t fw_class_allocs(const fw_survey_t *sv, size_t c) {
  if (c == FW_CLASS_LARGE) return sv->large_allocs;
  return sv->cls[c].frees + sv->cls[c].live_blocks;
}

static size_t fw_survey_total(const fw_survey_t *sv) {
  size_t t = 0;
  for (int i = 0; i < FW_L_COUNT; i++) t += sv->line[i];
  return t;
}

/* ---- the ledger ---------------------------------------------------------------- */

static void fw_json_head(fw_out_t *o, const char *format) {
  fw_out_printf(o, "{\"format\": \"%s\", \"version\": 1, \"freeway\": \"%s\", \"pid\": %ld, \"time_ms\": %llu", format,
                fw_version_string(), fw_os_pid(), (unsigned long long)fw_os_time_ms());
}

#define FW_LOAD(name) atomic_load_explicit(&fw_stat_##name, memory_order_relaxed)

/* What object pools hold (pool.c counts it): their slabs are blocks of the
 * live lines; of their bytes, those of live objects and those of free
 * objects waiting in the pools' caches. The live count moves at batch
 * granularity, so it is clamped to the slabs. */
static void fw_survey_pools(size_t *slabs, size_t *live, size_t *cached) {
  *slabs = FW_LOAD(pool_slab_bytes);
  *live = FW_LOAD(pool_live_bytes);
  if (*live > *slabs) *live = (intptr_t)*live < 0 ? 0 : *slabs;
  *cached = *slabs - *live;
}

static const char *const fw_osc_names[FW_OSC_COUNT] = {"map", "unmap", "purge", "guard", "huge_pages", "resident", "populate"};

/* The counts: blocks handed out and freed (the counting flavour only: the
 * default's fast frees count nothing), frees that crossed threads, and the
 * calls freeway made to the OS. */
static void fw_survey_counts_json(fw_out_t *o, const fw_survey_t *sv) {
  uint64_t allocs = 0, frees = 0;
  size_t live = 0;
  for (size_t c = 1; c <= FW_CLASS_LARGE; c++) {
    allocs += fw_class_allocs(sv, c);
    frees += sv->cls[c].frees;
    live += sv->cls[c].live_blocks;
  }
  fw_out_printf(o, "\n \"counts\": {\"counting\": %s", fw_flavour_profiling ? "true" : "false");
  if (fw_flavour_profiling)
    fw_out_printf(o, ", \"allocs\": %llu, \"frees\": %llu", (unsigned long long)allocs, (unsigned long long)frees);
  fw_out_printf(o, ", \"live_blocks\": %zu, \"remote_frees\": %llu, \"os_calls\": {", live,
                (unsigned long long)sv->remote_frees);
  for (int i = 0; i < FW_OSC_COUNT; i++)
    fw_out_printf(o, "%s\"%s\": %llu", i ? ", " : "", fw_osc_names[i],
                  (unsigned long long)atomic_load_explicit(&fw_os_calls[i], memory_order_relaxed));
  fw_out_printf(o, "}},");
  size_t slabs, pool_live, cached;
  fw_survey_pools(&slabs, &pool_live, &cached);
  fw_out_printf(o, "\n \"pools\": {\"slab_bytes\": %zu, \"live_bytes\": %zu, \"cached_bytes\": %zu},", slabs,
                pool_live, cached);
}

/* The peak as the OS reports it was read at another moment than the
 * current figure, so it may be a page or more below it (a fault between
 * the two reads, or the kernel's per-thread counters folded in between):
 * a peak is never below what is resident now. The same for the committed
 * peak, kept apart from the committed count. */
static size_t fw_peak_of(size_t peak, size_t now) { return peak > now ? peak : now; }

void fw_stats_print_json(int fd) {
  fw_survey_t sv;
  memset(&sv, 0, sizeof sv);
  fw_survey_run(&sv);
  size_t committed = FW_LOAD(committed), total = fw_survey_total(&sv), rss = fw_os_rss();
  fw_out_t o;
  fw_out_init(&o, fd);
  fw_json_head(&o, "freeway-stats");
  fw_out_printf(&o,
                ",\n \"process\": {\"rss\": %zu, \"rss_peak\": %zu, \"reserved\": %zu, \"committed\": %zu, "
                "\"committed_peak\": %zu, \"purged_total\": %zu, "
                "\"segments\": %zu, \"segments_abandoned\": %zu, \"segments_abandoned_total\": %zu, "
                "\"segments_adopted_total\": %zu, \"threads\": %zu, \"threads_total\": %zu, "
                "\"heaps\": %zu, \"huge_blocks\": %zu, \"arenas\": %zu},",
                rss, fw_peak_of(fw_os_rss_peak(), rss), FW_LOAD(reserved), committed,
                fw_peak_of(FW_LOAD(committed_peak), committed), FW_LOAD(purged),
                FW_LOAD(segments), FW_LOAD(abandoned), FW_LOAD(abandoned_total), FW_LOAD(adopted_total),
                FW_LOAD(threads), FW_LOAD(threads_total), FW_LOAD(heaps), FW_LOAD(huge), sv.arenas);
  fw_survey_counts_json(&o, &sv);
  fw_out_printf(&o, "\n \"ledger\": [");
  for (int i = 0; i < FW_L_COUNT; i++)
    fw_out_printf(&o, "%s\n  {\"line\": \"%s\", \"bytes\": %zu, \"note\": \"%s\"}", i ? "," : "", fw_ledger_names[i],
                  sv.line[i], fw_ledger_notes[i]);
  /* what the walk could not explain (signed: the walk may also see more) */
  fw_out_printf(&o, ",\n  {\"line\": \"unaccounted\", \"bytes\": %lld, \"note\": \"%s\"}\n ],\n \"classes\": [",
                (long long)committed - (long long)total,
                "committed memory the walk did not find, or found twice: other threads changed the heap while "
                "it ran");
  bool first = true;
  for (size_t c = 1; c <= FW_CLASS_LARGE; c++) {
    const fw_class_tally_t *t = &sv.cls[c];
    if (!t->pages && !(fw_flavour_profiling && fw_class_allocs(&sv, c))) continue;
    fw_out_printf(&o, "%s\n  {\"block_size\": %zu, \"pages\": %zu, \"blocks\": %zu, \"live_blocks\": %zu, "
                  "\"live_bytes\": %zu",
                  first ? "" : ",", c == FW_CLASS_LARGE ? (size_t)0 : (size_t)fw_class_size[c], t->pages, t->blocks,
                  t->live_blocks, t->live_bytes);
    if (fw_flavour_profiling)
      fw_out_printf(&o, ", \"allocs\": %llu, \"frees\": %llu", (unsigned long long)fw_class_allocs(&sv, c),
                    (unsigned long long)t->frees);
    fw_out_printf(&o, "}");
    first = false;
  }
  /* by owning thread: what each thread's segments hold (owner 0x0: the
   * segments of exited threads not taken over yet; "others": past the 64th) */
  fw_out_printf(&o, "\n ],\n \"threads\": [");
  for (size_t i = 0; i <= sv.nowners && i <= FW_SURVEY_OWNERS; i++) {
    const fw_owner_tally_t *t = i < sv.nowners ? &sv.owners[i] : &sv.owners[FW_SURVEY_OWNERS];
    if (i == sv.nowners && !t->segments && !t->frees && !t->remote_frees) break;
    fw_out_printf(&o, "%s\n  {\"owner\": ", i ? "," : "");
    if (i < sv.nowners) fw_out_printf(&o, "\"0x%lx\"", (unsigned long)t->owner);
    else fw_out_printf(&o, "\"others\"");
    fw_out_printf(&o, ", \"segments\": %zu, \"bytes\": %zu, \"live_bytes\": %zu, \"live_blocks\": %zu, "
                  "\"remote_frees_in\": %llu", t->segments, t->bytes, t->live_bytes, t->live_blocks,
                  (unsigned long long)t->remote_frees);
    if (fw_flavour_profiling)
      fw_out_printf(&o, ", \"allocs\": %llu, \"frees\": %llu",
                    (unsigned long long)fw_owner_allocs(t), (unsigned long long)t->frees);
    fw_out_printf(&o, "}");
  }
  fw_out_printf(&o, "\n ],\n \"options\": {");
  fw_options_print_json(&o);
  fw_out_printf(&o, "}\n}\n");
  fw_out_flush(&o);
}

static void fw_size_text(char *buf, size_t n, size_t bytes) {
  if (bytes >= ((size_t)10 << 30)) fw_snprintf(buf, n, "%zu GiB", bytes >> 30);
  else if (bytes >= ((size_t)10 << 20)) fw_snprintf(buf, n, "%zu MiB", bytes >> 20);
  else if (bytes >= ((size_t)10 << 10)) fw_snprintf(buf, n, "%zu KiB", bytes >> 10);
  else fw_snprintf(buf, n, "%zu B", bytes);
}

void fw_stats_print(int fd) {
  fw_survey_t sv;
  memset(&sv, 0, sizeof sv);
  fw_survey_run(&sv);
  size_t committed = FW_LOAD(committed), total = fw_survey_total(&sv), rss = fw_os_rss();
  fw_out_t o;
  fw_out_init(&o, fd);
  char a[32], b[32];
  fw_out_printf(&o, "freeway %s: where the memory goes (bytes)\n", fw_version_string());
  for (int i = 0; i < FW_L_COUNT; i++) {
    if (!sv.line[i]) continue;
    fw_size_text(a, sizeof a, sv.line[i]);
    fw_out_printf(&o, "  %-28s %14zu  %9s\n", fw_ledger_names[i], sv.line[i], a);
  }
  long long other = (long long)committed - (long long)total;
  if (other) fw_out_printf(&o, "  %-28s %14lld  (changed during the walk)\n", "unaccounted", other);
  fw_size_text(a, sizeof a, committed);
  fw_out_printf(&o, "  %-28s %14zu  %9s\n", "= committed", committed, a);
  fw_size_text(b, sizeof b, rss);
  fw_out_printf(&o, "  %-28s %14zu  %9s  (the whole process, from the OS)\n", "resident", rss, b);
  fw_out_printf(&o, "  reserved %zu, purged so far %zu; segments %zu (%zu abandoned), arenas %zu; threads %zu "
                "live, %zu ever; heaps %zu; huge blocks %zu\n",
                FW_LOAD(reserved), FW_LOAD(purged), FW_LOAD(segments), FW_LOAD(abandoned), sv.arenas,
                FW_LOAD(threads), FW_LOAD(threads_total), FW_LOAD(heaps), FW_LOAD(huge));
  fw_size_text(a, sizeof a, fw_peak_of(FW_LOAD(committed_peak), committed));
  fw_size_text(b, sizeof b, fw_peak_of(fw_os_rss_peak(), rss));
  fw_out_printf(&o, "  peak committed %s, peak resident %s; frees across threads %llu; segments abandoned %zu, "
                "adopted %zu; OS calls:",
                a, b, (unsigned long long)sv.remote_frees, FW_LOAD(abandoned_total), FW_LOAD(adopted_total));
  for (int i = 0; i < FW_OSC_COUNT; i++)
    fw_out_printf(&o, " %s %llu", fw_osc_names[i],
                  (unsigned long long)atomic_load_explicit(&fw_os_calls[i], memory_order_relaxed));
  size_t pslabs, plive, pcached;
  fw_survey_pools(&pslabs, &plive, &pcached);
  if (pslabs) {
    char c[32];
    fw_size_text(a, sizeof a, pslabs);
    fw_size_text(b, sizeof b, plive);
    fw_size_text(c, sizeof c, pcached);
    fw_out_printf(&o, "\n  object pools: slabs %s (in the live lines above), live objects %s, free objects in the "
                  "pools' caches %s", a, b, c);
  }
  fw_out_printf(&o, "\n  %10s %8s %12s %12s %14s %6s", "block size", "pages", "blocks", "live", "live bytes", "fill");
  if (fw_flavour_profiling) fw_out_printf(&o, " %14s %14s", "allocations", "frees");
  fw_out_printf(&o, "\n");
  for (size_t c = 1; c <= FW_CLASS_LARGE; c++) {
    const fw_class_tally_t *t = &sv.cls[c];
    if (!t->pages && !(fw_flavour_profiling && fw_class_allocs(&sv, c))) continue;
    if (c == FW_CLASS_LARGE) fw_snprintf(a, sizeof a, "large");
    else fw_snprintf(a, sizeof a, "%u", (unsigned)fw_class_size[c]);
    fw_out_printf(&o, "  %10s %8zu %12zu %12zu %14zu %5zu%%", a, t->pages, t->blocks, t->live_blocks,
                  t->live_bytes, t->blocks ? t->live_blocks * 100 / t->blocks : 0);
    if (fw_flavour_profiling)
      fw_out_printf(&o, " %14llu %14llu", (unsigned long long)fw_class_allocs(&sv, c), (unsigned long long)t->frees);
    fw_out_printf(&o, "\n");
  }
  if (!fw_flavour_profiling)
    fw_out_printf(&o, "  (allocation and free counts: run with libfreeway-prof.so, the counting flavour)\n");
  fw_out_flush(&o);
  fw_options_print(fd);
}

/* ---- the heap map --------------------------------------------------------------- */

typedef struct {
  fw_out_t *o;
  bool first_seg, first_slice;
  size_t next_slice; /* the first slice the segment's slice runs have not covered */
  const fw_segment_t *seg;
} fw_map_ctx_t;

static const char *fw_kind_name(int kind) {
  switch (kind) {
  case FW_KIND_SMALL: return "small";
  case FW_KIND_MEDIUM: return "medium";
  case FW_KIND_SPAN: return "span";
  default: return "large";
  }
}

static void fw_map_run(fw_map_ctx_t *m, size_t index, size_t count, const char *state) {
  fw_out_printf(m->o, "%s\n    {\"index\": %zu, \"count\": %zu, \"state\": \"%s\"}", m->first_slice ? "" : ",", index,
                count, state);
  m->first_slice = false;
}

/* The slices from m->next_slice up to (not including) upto that are not a
 * page: free or purged runs, by the segment's masks. */
static void fw_map_gap(fw_map_ctx_t *m, size_t upto) {
  const fw_segment_t *seg = m->seg;
  size_t ps = seg->page_slices ? seg->page_slices : 1;
  while (m->next_slice < upto) {
    size_t s = m->next_slice / ps;
    bool purged = (seg->purged_mask >> s) & 1;
    size_t n = 0;
    while (m->next_slice + n < upto && ((seg->purged_mask >> ((m->next_slice + n) / ps)) & 1) == purged) n++;
    fw_map_run(m, m->next_slice, n, purged ? "purged" : "free");
    m->next_slice += n;
  }
}

static void fw_map_segment(fw_survey_t *sv, const fw_segment_t *seg) {
  fw_map_ctx_t *m = sv->arg;
  fw_out_printf(m->o,
                "%s\n  {\"start\": \"%p\", \"size\": %zu, \"kind\": \"%s\", \"owner\": \"0x%lx\", \"abandoned\": %s, "
                "\"huge_pages\": %s, \"slices\": [",
                m->first_seg ? "" : ",", (const void *)seg, seg->size, fw_kind_name(seg->kind),
                (unsigned long)atomic_load_explicit(&((fw_segment_t *)seg)->thread_id, memory_order_relaxed),
                seg->tld ? "false" : "true", seg->huge ? "true" : "false");
  m->first_seg = false;
  m->first_slice = true;
  m->next_slice = 0;
  m->seg = seg;
}

static void fw_map_page(fw_survey_t *sv, const fw_segment_t *seg, const fw_page_t *pg, size_t slice) {
  fw_map_ctx_t *m = sv->arg;
  fw_map_gap(m, slice);
  size_t n = seg->kind == FW_KIND_LARGE  ? seg->size / FW_SLICE_SIZE
             : seg->kind == FW_KIND_SPAN ? (pg->slices ? pg->slices : 1)
                                         : seg->page_slices;
  bool large = pg->kind == FW_KIND_LARGE;
  size_t live = large ? (pg->used ? 1 : 0) : fw_page_live(pg);
  fw_out_printf(m->o,
                "%s\n    {\"index\": %zu, \"count\": %zu, \"state\": \"%s\", \"block_size\": %zu, \"capacity\": %u, "
                "\"used\": %zu, \"reserved\": %u}",
                m->first_slice ? "" : ",", slice, n, large && !pg->used ? "cached" : "page", pg->block_size,
                large ? 1u : pg->capacity, live, large ? 1u : pg->reserved);
  m->first_slice = false;
  m->next_slice = slice + n;
}

static void fw_map_reserved(fw_survey_t *sv, size_t slice, size_t n) {
  fw_map_ctx_t *m = sv->arg;
  fw_map_gap(m, slice);
  fw_map_run(m, slice, n, "reserved");
  m->next_slice = slice + n;
}

static void fw_map_segment_end(fw_survey_t *sv) {
  fw_map_ctx_t *m = sv->arg;
  if (m->seg->kind != FW_KIND_LARGE) fw_map_gap(m, FW_SLICES);
  fw_out_printf(m->o, "]}");
}

static void fw_map_arena(uint8_t *base, uint32_t chunks, const uint64_t *inuse, const uint64_t *dirty, void *arg) {
  fw_map_ctx_t *m = arg;
  (void)inuse;
  (void)dirty;
  fw_out_printf(m->o, "%s\n  {\"start\": \"%p\", \"size\": %zu}", m->first_seg ? "" : ",", (void *)base,
                (size_t)chunks * FW_SEGMENT_SIZE);
  m->first_seg = false;
}

void fw_heap_map_json(int fd) {
  fw_out_t o;
  fw_out_init(&o, fd);
  fw_map_ctx_t m = {&o, true, true, 0, NULL};
  fw_json_head(&o, "freeway-map");
  fw_out_printf(&o, ",\n \"segment_size\": %zu, \"slice_size\": %zu, \"arenas\": [", (size_t)FW_SEGMENT_SIZE,
                (size_t)FW_SLICE_SIZE);
  fw_arena_visit(fw_map_arena, &m);
  fw_out_printf(&o, "\n ],\n \"segments\": [");
  fw_survey_t sv;
  memset(&sv, 0, sizeof sv);
  m.first_seg = true;
  sv.segment_fn = fw_map_segment;
  sv.page_fn = fw_map_page;
  sv.reserved_fn = fw_map_reserved;
  sv.segment_end_fn = fw_map_segment_end;
  sv.arg = &m;
  fw_arena_visit(fw_survey_arena, &sv);
  fw_out_printf(&o, "\n ],\n \"huge\": {\"blocks\": %zu, \"bytes\": %zu}\n}\n", FW_LOAD(huge), FW_LOAD(direct));
  fw_out_flush(&o);
}

/* ---- the leak report ----------------------------------------------------------- *
 * Every live block of the process, grouped by allocation call site in
 * cautious mode (each block's trailer holds its site), by block size
 * otherwise. A block is live when it is on no free list: in the default
 * mode, when its first word is not a list link (page.h: the taken mark or
 * the program's data); blocks another thread freed into a full page and
 * its owner has not collected yet still count as live there. */

#define FW_SITES_MAX 4096
typedef struct {
  uintptr_t pcs[4];
  size_t npcs, key, blocks, bytes;
} fw_site_t;

typedef struct {
  fw_site_t *sites;
  size_t nsites, blocks, bytes, dropped;
  bool exact;
} fw_leaks_t;

static uint64_t fw_site_hash(size_t key, const uintptr_t *pcs, size_t n) {
  uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15u;
  for (size_t i = 0; i < n; i++) h = (h ^ pcs[i]) * 0x100000001b3u;
  return h ^ (h >> 29);
}

static void fw_leak_add(fw_leaks_t *lk, size_t key, const uintptr_t *pcs, size_t n, size_t bytes) {
  lk->blocks++;
  lk->bytes += bytes;
  if (!lk->sites) {
    lk->dropped++;
    return;
  }
  for (size_t i = fw_site_hash(key, pcs, n) % FW_SITES_MAX, probes = 0; probes < FW_SITES_MAX;
       i = (i + 1) % FW_SITES_MAX, probes++) {
    fw_site_t *st = &lk->sites[i];
    if (st->blocks == 0) {
      st->key = key;
      st->npcs = n;
      memcpy(st->pcs, pcs, n * sizeof *pcs);
      lk->nsites++;
    } else if (st->key != key || st->npcs != n || memcmp(st->pcs, pcs, n * sizeof *pcs) != 0) {
      continue;
    }
    st->blocks++;
    st->bytes += bytes;
    return;
  }
  lk->dropped++; /* the table is full: counted in the totals only */
}

static void fw_leak_page(fw_survey_t *sv, const fw_segment_t *seg, const fw_page_t *pg, size_t slice) {
  fw_leaks_t *lk = sv->arg;
  uintptr_t pcs[4] = {0, 0, 0, 0};
  size_t n = 0, size;
  const uint8_t *user;
  (void)seg;
  (void)slice;
  if (pg->kind == FW_KIND_LARGE) {
    if (!pg->used || (atomic_load_explicit(&((fw_page_t *)pg)->xfree, memory_order_relaxed) & ~FW_XFREE_DELAYED))
      return;
    if (!lk->exact) fw_leak_add(lk, pg->block_size, pcs, 0, pg->block_size);
    else if (fw_check_block_live(pg->area, &user, &size, pcs, &n)) fw_leak_add(lk, 0, pcs, n, size);
    return;
  }
  if (fw_page_live(pg) == 0) return;
  for (size_t i = 0; i < pg->capacity; i++) {
    const fw_block_t *b = (const fw_block_t *)(pg->area + i * pg->block_size);
    if (!lk->exact) {
      if (!fw_link_looks_free(b)) fw_leak_add(lk, pg->block_size, pcs, 0, pg->block_size);
    } else if (fw_check_block_live(b, &user, &size, pcs, &n)) {
      fw_leak_add(lk, 0, pcs, n, size);
    }
  }
}

static void fw_leaks_collect(fw_leaks_t *lk) {
  memset(lk, 0, sizeof *lk);
  lk->exact = fw_cautious;
  lk->sites = fw_os_map(FW_SITES_MAX * sizeof(fw_site_t), 0, 0);
  fw_survey_t sv;
  memset(&sv, 0, sizeof sv);
  sv.page_fn = fw_leak_page;
  sv.arg = lk;
  fw_arena_visit(fw_survey_arena, &sv);
  if (!lk->sites) return;
  /* the sites in use to the front, largest first (a shell sort: no
   * allocation, and run once) */
  size_t n = 0;
  for (size_t i = 0; i < FW_SITES_MAX; i++)
    if (lk->sites[i].blocks) lk->sites[n++] = lk->sites[i];
  static const size_t gaps[] = {701, 301, 132, 57, 23, 10, 4, 1};
  for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++)
    for (size_t i = gaps[g]; i < n; i++) {
      fw_site_t t = lk->sites[i];
      size_t j = i;
      for (; j >= gaps[g] && lk->sites[j - gaps[g]].bytes < t.bytes; j -= gaps[g]) lk->sites[j] = lk->sites[j - gaps[g]];
      lk->sites[j] = t;
    }
  lk->nsites = n;
}

static void fw_leaks_release(fw_leaks_t *lk) {
  if (lk->sites) fw_os_unmap(lk->sites, FW_SITES_MAX * sizeof(fw_site_t));
}

typedef struct {
  fw_out_t *o;
  bool first;
} fw_mapping_ctx_t;

static void fw_leak_mapping(uintptr_t start, uintptr_t end, uintptr_t offset, const char *path, void *arg) {
  fw_mapping_ctx_t *mc = arg;
  fw_out_printf(mc->o, "%s\n  {\"start\": \"%#lx\", \"end\": \"%#lx\", \"offset\": \"%#lx\", \"path\": \"",
                mc->first ? "" : ",", (unsigned long)start, (unsigned long)end, (unsigned long)offset);
  for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
    if (*c == '"' || *c == '\\') fw_out_printf(mc->o, "\\%c", *c);
    else if (*c < 0x20) fw_out_printf(mc->o, "\\u%04x", *c);
    else fw_out_printf(mc->o, "%c", *c);
  }
  fw_out_printf(mc->o, "\"}");
  mc->first = false;
}

static void fw_leak_sampled_site(const uintptr_t *pcs, size_t npcs, double objects, double bytes, void *arg) {
  fw_mapping_ctx_t *sc = arg;
  fw_out_printf(sc->o, "%s\n  {\"blocks\": %zu, \"bytes\": %zu, \"stack\": [", sc->first ? "" : ",",
                (size_t)(objects + 0.5), (size_t)(bytes + 0.5));
  for (size_t k = 0; k < npcs; k++) fw_out_printf(sc->o, "%s\"%#lx\"", k ? ", " : "", (unsigned long)pcs[k]);
  fw_out_printf(sc->o, "]}");
  sc->first = false;
}

/* Cautious mode's leak report as a pprof profile: objects and bytes per
 * allocation site (docs/observability.md). */
void fw_leak_report_pprof(int fd) {
  fw_leaks_t lk;
  fw_leaks_collect(&lk);
  static const char *const types[2][2] = {{"leaked_objects", "count"}, {"leaked_space", "bytes"}};
  static const char *const period[2] = {"space", "bytes"};
  fw_pprof_t *pp = fw_pprof_new(types, 2, period, 1);
  if (pp) {
    for (size_t i = 0; i < lk.nsites; i++) {
      int64_t v[2] = {(int64_t)lk.sites[i].blocks, (int64_t)lk.sites[i].bytes};
      fw_pprof_add(pp, lk.sites[i].pcs, lk.sites[i].npcs, v);
    }
    if (!fw_pprof_write(pp, fd)) fw_message("warning: the leak profile could not be written whole\n");
    fw_pprof_free(pp);
  }
  fw_leaks_release(&lk);
}

void fw_leak_report_json(int fd) {
  fw_leaks_t lk;
  fw_leaks_collect(&lk);
  fw_out_t o;
  fw_out_init(&o, fd);
  fw_json_head(&o, "freeway-leaks");
  fw_out_printf(&o, ",\n \"exact\": %s, \"blocks\": %zu, \"bytes\": %zu, \"unlisted_blocks\": %zu,\n \"sites\": [",
                lk.exact ? "true" : "false", lk.blocks, lk.bytes, lk.dropped);
  for (size_t i = 0; i < lk.nsites; i++) {
    const fw_site_t *st = &lk.sites[i];
    fw_out_printf(&o, "%s\n  {\"blocks\": %zu, \"bytes\": %zu", i ? "," : "", st->blocks, st->bytes);
    if (!lk.exact) fw_out_printf(&o, ", \"block_size\": %zu", st->key);
    fw_out_printf(&o, ", \"stack\": [");
    for (size_t k = 0; k < st->npcs; k++) fw_out_printf(&o, "%s\"%#lx\"", k ? ", " : "", (unsigned long)st->pcs[k]);
    fw_out_printf(&o, "]}");
  }
  fw_out_printf(&o, "\n ]");
  if (fw_prof_on && !lk.exact) {
    /* the heap profiler's in-use samples: sites by estimate */
    fw_out_printf(&o, ",\n \"sampled_sites\": [");
    fw_mapping_ctx_t sc = {&o, true};
    fw_prof_visit_inuse(fw_leak_sampled_site, &sc);
    fw_out_printf(&o, "\n ]");
  }
  fw_out_printf(&o, ",\n \"mappings\": [");
  fw_mapping_ctx_t mc = {&o, true};
  fw_os_mappings(fw_leak_mapping, &mc);
  fw_out_printf(&o, "\n ]\n}\n");
  fw_out_flush(&o);
  fw_leaks_release(&lk);
}

static void fw_leak_print_sampled(const uintptr_t *pcs, size_t npcs, double objects, double bytes, void *arg) {
  fw_out_t *o = arg;
  char where[256];
  fw_out_printf(o, "  about %zu blocks, %zu bytes, allocated at\n", (size_t)(objects + 0.5), (size_t)(bytes + 0.5));
  for (size_t k = 0; k < npcs && k < 6; k++) {
    fw_os_describe_pc(pcs[k], where, sizeof where);
    fw_out_printf(o, "      %s\n", where);
  }
}

void fw_leak_report_print(int fd) {
  fw_leaks_t lk;
  fw_leaks_collect(&lk);
  fw_out_t o;
  fw_out_init(&o, fd);
  fw_out_printf(&o, "freeway: leak report: %zu blocks, %zu bytes still live (every thread's heaps and the segments "
                "of exited threads)%s\n",
                lk.blocks, lk.bytes, lk.exact ? "" : "; call sites need cautious mode (FREEWAY_CAUTIOUS=1)");
  char where[256];
  for (size_t i = 0; i < lk.nsites && i < 16; i++) {
    const fw_site_t *st = &lk.sites[i];
    if (!lk.exact) {
      fw_out_printf(&o, "  %zu blocks of %zu bytes\n", st->blocks, st->key);
      continue;
    }
    fw_out_printf(&o, "  %zu blocks, %zu bytes, allocated at\n", st->blocks, st->bytes);
    for (size_t k = 0; k < st->npcs; k++) {
      fw_os_describe_pc(st->pcs[k], where, sizeof where);
      fw_out_printf(&o, "      %s\n", where);
    }
  }
  if (lk.nsites > 16) fw_out_printf(&o, "  ... %zu more\n", lk.nsites - 16);
  if (fw_prof_on && !lk.exact) {
    fw_out_printf(&o, "  sampled allocation sites of the live blocks (heap profiler's estimates):\n");
    fw_prof_visit_inuse(fw_leak_print_sampled, &o);
  }
  fw_out_flush(&o);
  fw_leaks_release(&lk);
}

/* ---- at exit --------------------------------------------------------------------- */

static void fw_prof_dump_report(int fd) {
  if (fw_prof_dump_fd(fd) != 0) fw_message("warning: the heap profile could not be written whole\n");
}

/* Writes one report into FREEWAY_REPORT_DIR as freeway-PID-KIND (KIND
 * with its extension): into a file of its own first, then renamed over
 * the last one, so that a reader (freeway top) never sees half a report. */
static void fw_report_file(const char *kind, void (*write_fn)(int fd)) {
  const char *dir = fw_topt(REPORT_DIR);
  if (!dir) return;
  char path[1200], tmp[1210];
  fw_snprintf(path, sizeof path, "%s/freeway-%ld-%s", dir, fw_os_pid(), kind);
  fw_snprintf(tmp, sizeof tmp, "%s.part", path);
  int fd = fw_os_create(tmp);
  if (fd < 0) {
    fw_message("warning: cannot write the %s report to %s\n", kind, tmp);
    return;
  }
  write_fn(fd);
  fw_os_close(fd);
  if (!fw_os_rename(tmp, path)) fw_message("warning: cannot rename %s to %s\n", tmp, path);
}

/* The reports the options ask for, or at least the ledger (FREEWAY_DUMP_SIGNAL).
 * A dump on a signal with FREEWAY_REPORT_DIR set writes the files only: a
 * program watched every second (freeway top) keeps its stderr. */
static void fw_survey_dump(bool on_signal) {
  bool text = !(on_signal && fw_topt(REPORT_DIR));
  if (fw_opt(LEAK_REPORT)) {
    if (text) fw_leak_report_print(2);
    fw_report_file("leaks.json", fw_leak_report_json);
    if (fw_cautious) fw_report_file("leaks.pb", fw_leak_report_pprof);
  }
  if (fw_opt(SHOW_STATS) || on_signal) {
    if (text) fw_stats_print(2);
    fw_report_file("stats.json", fw_stats_print_json);
  }
  if (fw_opt(HEAP_MAP)) {
    if (!fw_topt(REPORT_DIR)) fw_message("warning: FREEWAY_HEAP_MAP=1 needs FREEWAY_REPORT_DIR: no map written\n");
    fw_report_file("map.json", fw_heap_map_json);
  }
}

void fw_survey_at_exit(void) {
  /* the blocks of other threads' pages this thread holds for a batch are
   * freed: the reports must not show them live */
  fw_heap_t *heap = FW_TLS(fw_tls_heap);
  if (heap != &fw_heap_empty) fw_free_remote_flush_if(heap->tld);
  fw_survey_dump(false);
  if (fw_prof_on) {
    if (!fw_topt(REPORT_DIR)) fw_message("warning: FREEWAY_PROFILE=1 needs FREEWAY_REPORT_DIR: no profile written\n");
    fw_report_file("heap.pb", fw_prof_dump_report);
  }
}

static void fw_survey_on_signal(void) { fw_survey_dump(true); }

void fw_survey_init(void) {
  long sig = fw_opt(DUMP_SIGNAL);
  if (sig && !fw_os_on_signal((int)sig, fw_survey_on_signal))
    fw_message("warning: FREEWAY_DUMP_SIGNAL=%ld: cannot catch that signal\n", sig);
}
