/* pprof.c — the builder and encoder of pprof profiles (contract in pprof.h).
 *
 * A Profile message names everything by number: strings by their index in
 * string_table (index 0 is ""), locations and mappings by ids from 1. The
 * builder keeps
 *  - the strings back to back, with their offsets, found again by a scan: a
 *    profile holds a few dozen (value types, the mapped files' paths and
 *    build IDs);
 *  - one location per distinct return address, its id its position + 1,
 *    found through an open-addressing table of ids keyed by the address;
 *  - the samples: a stack (location ids, in one array shared by all) and
 *    the values, found through a table keyed by a hash of the stack.
 * Arrays grow by mapping one twice as large and copying, so each element is
 * copied a bounded number of times on average; nothing here is on a hot
 * path. The tables are at most half full.
 *
 * The encoder streams: each nested message's size, which prefixes it, is
 * computed before it is written, and the bytes go out through a 64 KiB
 * buffer, so the encoded profile is never held whole.
 *
 * Addresses. pprof looks a location's address up as it is given (addr2line
 * on the file, after removing the mapping's load offset). A return address
 * is the instruction after the call, which may belong to the next source
 * line, or to the next function after a call that does not return; each
 * location holds the return address minus one instead, inside the call
 * instruction, which is what Go's runtime writes into its own profiles:
 * pprof then shows the calling line.
 *
 * Mappings. pprof takes mapping[0] for the main program (its name heads the
 * report, and a binary named on pprof's command line replaces that
 * mapping's file), so the main program's mappings come first, then the
 * others in address order. */
#include "pprof.h"
#include "os.h"
#include <string.h>

/* ---- arrays in mapped memory ----------------------------------------------- */
typedef struct {
  uint8_t *p;
  size_t len, cap;
} fw_vec_t;

static bool fw_vec_reserve(fw_vec_t *v, size_t more) {
  if (more <= v->cap - v->len) return true;
  if (more > SIZE_MAX / 4 - v->len) return false;
  size_t cap = v->cap ? v->cap : (size_t)16 << 10;
  while (cap - v->len < more) cap *= 2;
  uint8_t *q = fw_os_map(cap, 0, 0);
  if (!q) return false;
  if (v->len) memcpy(q, v->p, v->len);
  fw_os_unmap(v->p, v->cap);
  v->p = q;
  v->cap = cap;
  return true;
}

static bool fw_vec_push(fw_vec_t *v, const void *x, size_t n) {
  if (!fw_vec_reserve(v, n)) return false;
  memcpy(v->p + v->len, x, n);
  v->len += n;
  return true;
}

static void fw_vec_free(fw_vec_t *v) {
  fw_os_unmap(v->p, v->cap);
  v->p = NULL;
  v->len = v->cap = 0;
}

/* ---- the builder ----------------------------------------------------------- */
typedef struct {
  uint32_t hash;   /* of the stack */
  uint32_t nlocs;
  uint64_t stack;  /* index of its first location id in stacks */
  int64_t values[];
} fw_pprof_sample_t;

typedef struct {
  uintptr_t start, end, offset;
  int64_t file, build_id;  /* strings */
  uint32_t id;
  bool is_main;
} fw_pprof_map_t;

struct fw_pprof_s {
  int ntypes;
  int64_t types[FW_PPROF_TYPES_MAX][2];  /* strings */
  int64_t period_type[2], period, drop_frames;
  size_t sample_size;  /* of a fw_pprof_sample_t with its values */
  size_t nsamples;
  fw_vec_t str;        /* the strings, each followed by a NUL */
  fw_vec_t str_off;    /* uint32_t: where string i starts in str */
  fw_vec_t locs;       /* uintptr_t: the return address of location id i + 1 */
  fw_vec_t samples;    /* fw_pprof_sample_t, sample_size bytes each */
  fw_vec_t stacks;     /* uint32_t: location ids */
  fw_vec_t maps;       /* fw_pprof_map_t, in address order; filled by fw_pprof_write */
  bool maps_failed;
  uint32_t *loc_slots, *sample_slots;  /* ids, 0 for an empty slot */
  size_t loc_mask, sample_mask;        /* slots - 1 */
};

static uint64_t fw_pprof_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static size_t fw_pprof_nstrings(const fw_pprof_t *p) { return p->str_off.len / sizeof(uint32_t); }

static const char *fw_pprof_str_at(const fw_pprof_t *p, size_t i, size_t *len) {
  const uint32_t *off = (const uint32_t *)(const void *)p->str_off.p;
  size_t end = i + 1 < fw_pprof_nstrings(p) ? off[i + 1] : p->str.len;
  *len = end - off[i] - 1;
  return (const char *)p->str.p + off[i];
}

/* The index of string s (n bytes), added if new; -1 if memory was refused. */
static int64_t fw_pprof_string(fw_pprof_t *p, const char *s, size_t n) {
  size_t count = fw_pprof_nstrings(p);
  for (size_t i = 0; i < count; i++) {
    size_t len;
    const char *t = fw_pprof_str_at(p, i, &len);
    if (len == n && memcmp(t, s, n) == 0) return (int64_t)i;
  }
  if (n >= UINT32_MAX - p->str.len || !fw_vec_reserve(&p->str, n + 1) ||
      !fw_vec_reserve(&p->str_off, sizeof(uint32_t)))
    return -1;
  uint32_t off = (uint32_t)p->str.len;
  if (n) memcpy(p->str.p + p->str.len, s, n);
  p->str.p[p->str.len + n] = 0;
  p->str.len += n + 1;
  fw_vec_push(&p->str_off, &off, sizeof off);
  return (int64_t)count;
}

static int64_t fw_pprof_cstring(fw_pprof_t *p, const char *s) { return s ? fw_pprof_string(p, s, strlen(s)) : 0; }

static uintptr_t fw_pprof_loc_pc(const fw_pprof_t *p, uint32_t id) {
  return ((const uintptr_t *)(const void *)p->locs.p)[id - 1];
}

static fw_pprof_sample_t *fw_pprof_sample_at(const fw_pprof_t *p, uint32_t id) {
  return (fw_pprof_sample_t *)(void *)(p->samples.p + (size_t)(id - 1) * p->sample_size);
}

static const uint32_t *fw_pprof_stack(const fw_pprof_t *p, const fw_pprof_sample_t *s) {
  return (const uint32_t *)(const void *)p->stacks.p + s->stack;
}

typedef uint64_t fw_pprof_hash_fn(const fw_pprof_t *p, uint32_t id);
static uint64_t fw_pprof_loc_hash(const fw_pprof_t *p, uint32_t id) {
  return fw_pprof_mix(fw_pprof_loc_pc(p, id));
}
static uint64_t fw_pprof_sample_hash(const fw_pprof_t *p, uint32_t id) {
  return fw_pprof_mix(fw_pprof_sample_at(p, id)->hash);
}

/* Room in a table holding n ids for one more: a table twice as large when
 * it would be more than half full. */
static bool fw_pprof_table_room(const fw_pprof_t *p, uint32_t **slots, size_t *mask, size_t n,
                                fw_pprof_hash_fn *hash) {
  size_t cap = *slots ? *mask + 1 : 0;
  if ((n + 1) * 2 <= cap) return true;
  size_t ncap = cap ? cap * 2 : 1024;
  if (ncap > SIZE_MAX / 4 / sizeof(uint32_t)) return false;
  uint32_t *t = fw_os_map(ncap * sizeof *t, 0, 0);
  if (!t) return false;
  for (size_t i = 0; i < cap; i++) {
    uint32_t id = (*slots)[i];
    if (!id) continue;
    size_t j = (size_t)hash(p, id) & (ncap - 1);
    while (t[j]) j = (j + 1) & (ncap - 1);
    t[j] = id;
  }
  fw_os_unmap(*slots, cap * sizeof **slots);
  *slots = t;
  *mask = ncap - 1;
  return true;
}

static uint32_t *fw_pprof_loc_slot(const fw_pprof_t *p, uintptr_t pc) {
  for (size_t i = (size_t)fw_pprof_mix(pc) & p->loc_mask;; i = (i + 1) & p->loc_mask) {
    uint32_t id = p->loc_slots[i];
    if (!id || fw_pprof_loc_pc(p, id) == pc) return &p->loc_slots[i];
  }
}

/* The id of the location of return address pc, added if new; 0 if memory
 * was refused. */
static uint32_t fw_pprof_location(fw_pprof_t *p, uintptr_t pc) {
  if (p->loc_slots) {
    uint32_t id = *fw_pprof_loc_slot(p, pc);
    if (id) return id;
  }
  size_t n = p->locs.len / sizeof(uintptr_t);
  if (n >= UINT32_MAX / 2 || !fw_pprof_table_room(p, &p->loc_slots, &p->loc_mask, n, fw_pprof_loc_hash) ||
      !fw_vec_push(&p->locs, &pc, sizeof pc))
    return 0;
  uint32_t *slot = fw_pprof_loc_slot(p, pc);
  *slot = (uint32_t)(n + 1);
  return *slot;
}

static uint32_t *fw_pprof_sample_slot(const fw_pprof_t *p, uint32_t hash, const uint32_t *ids, size_t n) {
  for (size_t i = (size_t)fw_pprof_mix(hash) & p->sample_mask;; i = (i + 1) & p->sample_mask) {
    uint32_t id = p->sample_slots[i];
    if (!id) return &p->sample_slots[i];
    const fw_pprof_sample_t *s = fw_pprof_sample_at(p, id);
    if (s->hash == hash && s->nlocs == n && memcmp(fw_pprof_stack(p, s), ids, n * sizeof *ids) == 0)
      return &p->sample_slots[i];
  }
}

fw_pprof_t *fw_pprof_new(const char *const (*types)[2], int ntypes, const char *const period_type[2],
                         int64_t period) {
  if (!types || ntypes < 1 || ntypes > FW_PPROF_TYPES_MAX) return NULL;
  fw_pprof_t *p = fw_os_map(sizeof *p, 0, 0);
  if (!p) return NULL;
  p->ntypes = ntypes;
  p->sample_size = sizeof(fw_pprof_sample_t) + (size_t)ntypes * sizeof(int64_t);
  p->period = period;
  bool ok = fw_pprof_string(p, "", 0) == 0;
  for (int i = 0; i < ntypes; i++)
    for (int k = 0; k < 2; k++) ok = ok && (p->types[i][k] = fw_pprof_cstring(p, types[i][k])) >= 0;
  for (int k = 0; k < 2 && period_type; k++) ok = ok && (p->period_type[k] = fw_pprof_cstring(p, period_type[k])) >= 0;
  if (!ok) {
    fw_pprof_free(p);
    return NULL;
  }
  return p;
}

bool fw_pprof_drop_frames(fw_pprof_t *p, const char *regex) {
  int64_t s = fw_pprof_cstring(p, regex);
  if (s < 0) return false;
  p->drop_frames = s;
  return true;
}

bool fw_pprof_add(fw_pprof_t *p, const uintptr_t *pcs, size_t npcs, const int64_t *values) {
  if (!p || !values || (npcs && !pcs) || npcs > UINT32_MAX / 2) return false;
  /* the stack's ids go after the stored ones, and stay there only if the
   * stack is new */
  if (!fw_vec_reserve(&p->stacks, (npcs ? npcs : 1) * sizeof(uint32_t))) return false;
  uint32_t *ids = (uint32_t *)(void *)(p->stacks.p + p->stacks.len);
  uint64_t h = npcs;
  for (size_t i = 0; i < npcs; i++) {
    if (!(ids[i] = fw_pprof_location(p, pcs[i]))) return false;
    h = fw_pprof_mix(h ^ ids[i]);
  }
  uint32_t hash = (uint32_t)h;
  if (p->sample_slots) {
    uint32_t id = *fw_pprof_sample_slot(p, hash, ids, npcs);
    if (id) {
      fw_pprof_sample_t *s = fw_pprof_sample_at(p, id);
      /* wraps rather than overflows: a sum past 2^63 is meaningless anyway */
      for (int i = 0; i < p->ntypes; i++) s->values[i] = (int64_t)((uint64_t)s->values[i] + (uint64_t)values[i]);
      return true;
    }
  }
  if (p->nsamples >= UINT32_MAX / 2 ||
      !fw_pprof_table_room(p, &p->sample_slots, &p->sample_mask, p->nsamples, fw_pprof_sample_hash) ||
      !fw_vec_reserve(&p->samples, p->sample_size))
    return false;
  uint32_t *slot = fw_pprof_sample_slot(p, hash, ids, npcs);
  fw_pprof_sample_t *s = (fw_pprof_sample_t *)(void *)(p->samples.p + p->samples.len);
  s->hash = hash;
  s->nlocs = (uint32_t)npcs;
  s->stack = p->stacks.len / sizeof(uint32_t);
  memcpy(s->values, values, (size_t)p->ntypes * sizeof *values);
  p->samples.len += p->sample_size;
  p->stacks.len += npcs * sizeof(uint32_t);
  *slot = (uint32_t)++p->nsamples;
  return true;
}

void fw_pprof_free(fw_pprof_t *p) {
  if (!p) return;
  fw_vec_t *v[] = {&p->str, &p->str_off, &p->locs, &p->samples, &p->stacks, &p->maps};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) fw_vec_free(v[i]);
  if (p->loc_slots) fw_os_unmap(p->loc_slots, (p->loc_mask + 1) * sizeof(uint32_t));
  if (p->sample_slots) fw_os_unmap(p->sample_slots, (p->sample_mask + 1) * sizeof(uint32_t));
  fw_os_unmap(p, sizeof *p);
}

/* ---- mappings ---------------------------------------------------------------- */
static void fw_pprof_map_one(uintptr_t start, uintptr_t end, uintptr_t offset, const char *path, void *arg) {
  fw_pprof_t *p = arg;
  fw_pprof_map_t m = {start, end, offset, fw_pprof_cstring(p, path), 0, 0, false};
  uint8_t id[64];
  size_t n = 0;
  if (!fw_os_object_at(start, &m.is_main, id, sizeof id, &n)) m.is_main = false;
  if (n) {
    /* pprof compares it with the file's, printed as lower-case hex */
    char hex[2 * sizeof id];
    for (size_t i = 0; i < n; i++) {
      hex[2 * i] = "0123456789abcdef"[id[i] >> 4];
      hex[2 * i + 1] = "0123456789abcdef"[id[i] & 15];
    }
    m.build_id = fw_pprof_string(p, hex, 2 * n);
    if (m.build_id < 0) m.build_id = 0;
  }
  if (m.file < 0 || !fw_vec_push(&p->maps, &m, sizeof m)) p->maps_failed = true;
}

/* The id of the mapping that holds address a, or 0. */
static uint32_t fw_pprof_map_of(const fw_pprof_t *p, uintptr_t a) {
  const fw_pprof_map_t *m = (const fw_pprof_map_t *)(const void *)p->maps.p;
  size_t lo = 0, hi = p->maps.len / sizeof *m;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (a < m[mid].start) hi = mid;
    else if (a >= m[mid].end) lo = mid + 1;
    else return m[mid].id;
  }
  return 0;
}

/* ---- the encoder ------------------------------------------------------------- */
#define FW_PB_BUF ((size_t)64 << 10)

typedef struct {
  uint8_t *buf;
  size_t n;
  int fd;
  bool ok;
} fw_pb_t;

static void fw_pb_flush(fw_pb_t *o) {
  if (o->n && !fw_os_write(o->fd, (const char *)o->buf, o->n)) o->ok = false;
  o->n = 0;
}

static void fw_pb_byte(fw_pb_t *o, uint8_t b) {
  if (o->n == FW_PB_BUF) fw_pb_flush(o);
  o->buf[o->n++] = b;
}

static void fw_pb_varint(fw_pb_t *o, uint64_t v) {
  for (; v >= 0x80; v >>= 7) fw_pb_byte(o, (uint8_t)(v | 0x80));
  fw_pb_byte(o, (uint8_t)v);
}

static size_t fw_pb_varint_len(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) n++;
  return n;
}

enum { FW_PB_VARINT = 0, FW_PB_LEN = 2 };

/* A varint field, left out when zero: proto3 reads a missing field as 0.
 * int64 fields go as their two's complement (10 bytes when negative). */
static size_t fw_pb_uint_len(unsigned field, uint64_t v) {
  return v ? fw_pb_varint_len((uint64_t)field << 3 | FW_PB_VARINT) + fw_pb_varint_len(v) : 0;
}

static void fw_pb_uint(fw_pb_t *o, unsigned field, uint64_t v) {
  if (!v) return;
  fw_pb_varint(o, (uint64_t)field << 3 | FW_PB_VARINT);
  fw_pb_varint(o, v);
}

/* A length-delimited field (a message, a string, a packed array) of n bytes:
 * its whole size, and its key and length, which the n bytes follow. */
static size_t fw_pb_len_len(unsigned field, size_t n) {
  return fw_pb_varint_len((uint64_t)field << 3 | FW_PB_LEN) + fw_pb_varint_len(n) + n;
}

static void fw_pb_len(fw_pb_t *o, unsigned field, size_t n) {
  fw_pb_varint(o, (uint64_t)field << 3 | FW_PB_LEN);
  fw_pb_varint(o, n);
}

static void fw_pb_bytes(fw_pb_t *o, const char *s, size_t n) {
  while (n) {
    if (o->n == FW_PB_BUF) fw_pb_flush(o);
    size_t k = FW_PB_BUF - o->n < n ? FW_PB_BUF - o->n : n;
    memcpy(o->buf + o->n, s, k);
    o->n += k;
    s += k;
    n -= k;
  }
}

/* Profile and its messages' field numbers (profile.proto). */
enum {
  FW_PROFILE_SAMPLE_TYPE = 1, FW_PROFILE_SAMPLE = 2, FW_PROFILE_MAPPING = 3, FW_PROFILE_LOCATION = 4,
  FW_PROFILE_STRING_TABLE = 6, FW_PROFILE_DROP_FRAMES = 7, FW_PROFILE_TIME_NANOS = 9,
  FW_PROFILE_PERIOD_TYPE = 11, FW_PROFILE_PERIOD = 12,
  FW_VALUE_TYPE_TYPE = 1, FW_VALUE_TYPE_UNIT = 2,
  FW_SAMPLE_LOCATION_ID = 1, FW_SAMPLE_VALUE = 2,
  FW_MAPPING_ID = 1, FW_MAPPING_MEMORY_START = 2, FW_MAPPING_MEMORY_LIMIT = 3, FW_MAPPING_FILE_OFFSET = 4,
  FW_MAPPING_FILENAME = 5, FW_MAPPING_BUILD_ID = 6,
  FW_LOCATION_ID = 1, FW_LOCATION_MAPPING_ID = 2, FW_LOCATION_ADDRESS = 3,
};

static void fw_pb_value_type(fw_pb_t *o, unsigned field, const int64_t vt[2]) {
  fw_pb_len(o, field,
            fw_pb_uint_len(FW_VALUE_TYPE_TYPE, (uint64_t)vt[0]) + fw_pb_uint_len(FW_VALUE_TYPE_UNIT, (uint64_t)vt[1]));
  fw_pb_uint(o, FW_VALUE_TYPE_TYPE, (uint64_t)vt[0]);
  fw_pb_uint(o, FW_VALUE_TYPE_UNIT, (uint64_t)vt[1]);
}

static void fw_pb_sample(fw_pb_t *o, const fw_pprof_t *p, const fw_pprof_sample_t *s) {
  const uint32_t *ids = fw_pprof_stack(p, s);
  size_t ids_len = 0, values_len = 0;
  for (uint32_t i = 0; i < s->nlocs; i++) ids_len += fw_pb_varint_len(ids[i]);
  for (int i = 0; i < p->ntypes; i++) values_len += fw_pb_varint_len((uint64_t)s->values[i]);
  size_t body = (s->nlocs ? fw_pb_len_len(FW_SAMPLE_LOCATION_ID, ids_len) : 0) +
                fw_pb_len_len(FW_SAMPLE_VALUE, values_len);
  fw_pb_len(o, FW_PROFILE_SAMPLE, body);
  /* repeated numbers, packed */
  if (s->nlocs) {
    fw_pb_len(o, FW_SAMPLE_LOCATION_ID, ids_len);
    for (uint32_t i = 0; i < s->nlocs; i++) fw_pb_varint(o, ids[i]);
  }
  fw_pb_len(o, FW_SAMPLE_VALUE, values_len);
  for (int i = 0; i < p->ntypes; i++) fw_pb_varint(o, (uint64_t)s->values[i]);
}

static void fw_pb_mapping(fw_pb_t *o, const fw_pprof_map_t *m) {
  fw_pb_len(o, FW_PROFILE_MAPPING,
            fw_pb_uint_len(FW_MAPPING_ID, m->id) + fw_pb_uint_len(FW_MAPPING_MEMORY_START, m->start) +
                fw_pb_uint_len(FW_MAPPING_MEMORY_LIMIT, m->end) + fw_pb_uint_len(FW_MAPPING_FILE_OFFSET, m->offset) +
                fw_pb_uint_len(FW_MAPPING_FILENAME, (uint64_t)m->file) +
                fw_pb_uint_len(FW_MAPPING_BUILD_ID, (uint64_t)m->build_id));
  fw_pb_uint(o, FW_MAPPING_ID, m->id);
  fw_pb_uint(o, FW_MAPPING_MEMORY_START, m->start);
  fw_pb_uint(o, FW_MAPPING_MEMORY_LIMIT, m->end);
  fw_pb_uint(o, FW_MAPPING_FILE_OFFSET, m->offset);
  fw_pb_uint(o, FW_MAPPING_FILENAME, (uint64_t)m->file);
  fw_pb_uint(o, FW_MAPPING_BUILD_ID, (uint64_t)m->build_id);
  /* has_functions and the other has_* stay false: pprof symbolises */
}

static void fw_pb_location(fw_pb_t *o, const fw_pprof_t *p, uint32_t id) {
  uintptr_t pc = fw_pprof_loc_pc(p, id);
  uintptr_t a = pc ? pc - 1 : 0;  /* inside the call: see the top of the file */
  uint32_t map = fw_pprof_map_of(p, a);
  fw_pb_len(o, FW_PROFILE_LOCATION,
            fw_pb_uint_len(FW_LOCATION_ID, id) + fw_pb_uint_len(FW_LOCATION_MAPPING_ID, map) +
                fw_pb_uint_len(FW_LOCATION_ADDRESS, a));
  fw_pb_uint(o, FW_LOCATION_ID, id);
  fw_pb_uint(o, FW_LOCATION_MAPPING_ID, map);
  fw_pb_uint(o, FW_LOCATION_ADDRESS, a);
}

bool fw_pprof_write(fw_pprof_t *p, int fd) {
  if (!p) return false;
  p->maps.len = 0;
  p->maps_failed = false;
  /* without /proc the profile goes without mappings: pprof still reads it,
   * and can symbolise a program that is not position independent */
  fw_os_mappings(fw_pprof_map_one, p);
  bool ok = !p->maps_failed;
  fw_pprof_map_t *maps = (fw_pprof_map_t *)(void *)p->maps.p;
  size_t nmaps = p->maps.len / sizeof *maps;
  uint32_t next = 1;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < nmaps; i++)
      if (maps[i].is_main == (pass == 0)) maps[i].id = next++;

  fw_pb_t o = {fw_os_map(FW_PB_BUF, 0, 0), 0, fd, true};
  if (!o.buf) return false;
  for (int i = 0; i < p->ntypes; i++) fw_pb_value_type(&o, FW_PROFILE_SAMPLE_TYPE, p->types[i]);
  for (size_t i = 1; i <= p->nsamples; i++) fw_pb_sample(&o, p, fw_pprof_sample_at(p, (uint32_t)i));
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < nmaps; i++)
      if (maps[i].is_main == (pass == 0)) fw_pb_mapping(&o, &maps[i]);
  size_t nlocs = p->locs.len / sizeof(uintptr_t);
  for (size_t i = 1; i <= nlocs; i++) fw_pb_location(&o, p, (uint32_t)i);
  for (size_t i = 0; i < fw_pprof_nstrings(p); i++) {
    size_t len;
    const char *s = fw_pprof_str_at(p, i, &len);
    fw_pb_len(&o, FW_PROFILE_STRING_TABLE, len);
    fw_pb_bytes(&o, s, len);
  }
  fw_pb_uint(&o, FW_PROFILE_DROP_FRAMES, (uint64_t)p->drop_frames);
  fw_pb_uint(&o, FW_PROFILE_TIME_NANOS, (uint64_t)fw_os_time_ns());
  if (p->period_type[0] || p->period_type[1]) fw_pb_value_type(&o, FW_PROFILE_PERIOD_TYPE, p->period_type);
  fw_pb_uint(&o, FW_PROFILE_PERIOD, (uint64_t)p->period);
  fw_pb_flush(&o);
  fw_os_unmap(o.buf, FW_PB_BUF);
  return ok && o.ok;
}
