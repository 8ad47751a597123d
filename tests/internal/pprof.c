/* pprof.c — the pprof profile writer (src/pprof.h), read back two ways: by
 * a small protobuf reader here, which checks the message field by field
 * (strings, sample types, merged samples, locations inside mappings that
 * name this program), and by `go tool pprof` where Go is installed, which
 * must find the functions of the stacks, with their totals and the calling
 * lines, from this program's binary.
 *
 * The stacks are real: return addresses inside site_a and site_b, and of
 * the calls to them, taken with __builtin_return_address in functions
 * called through volatile pointers (so that no compiler inlines, clones or
 * renames them). */
#include "itest.h"
#include "pprof.h"
#include "os.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- a protobuf reader, for the fields of profile.proto ------------------ */
typedef struct {
  const uint8_t *p, *end;
} pb_rd;

static uint64_t pb_varint(pb_rd *r) {
  uint64_t v = 0;
  for (unsigned shift = 0;; shift += 7) {
    CHECKF(r->p < r->end && shift < 64, "a varint runs past its message");
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

/* The next field of r: its number, and its value (wire type 0) or its bytes
 * (wire type 2, in *sub). False at the end of r. */
static bool pb_next(pb_rd *r, unsigned *field, unsigned *wire, uint64_t *v, pb_rd *sub) {
  if (r->p == r->end) return false;
  uint64_t key = pb_varint(r);
  *field = (unsigned)(key >> 3);
  *wire = (unsigned)(key & 7);
  CHECKF(*field != 0, "field number 0");
  if (*wire == 0) {
    *v = pb_varint(r);
  } else if (*wire == 2) {
    uint64_t n = pb_varint(r);
    CHECKF(n <= (uint64_t)(r->end - r->p), "field %u: %llu bytes, %zu left", *field, (unsigned long long)n,
           (size_t)(r->end - r->p));
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
  } else {
    CHECKF(false, "field %u has wire type %u: the writer uses varints and lengths only", *field, *wire);
  }
  return true;
}

/* A repeated number, packed (a length) or not (one varint): appended. */
static void pb_repeated(unsigned wire, uint64_t v, pb_rd *sub, uint64_t **out, size_t *n) {
  if (wire == 0) {
    *out = realloc(*out, (*n + 1) * sizeof **out);
    CHECK(*out != NULL);
    (*out)[(*n)++] = v;
    return;
  }
  while (sub->p < sub->end) pb_repeated(0, pb_varint(sub), NULL, out, n);
}

static uint64_t pb_uint(unsigned wire, uint64_t v) {
  CHECKF(wire == 0, "a number with wire type %u", wire);
  return v;
}

typedef struct {
  int64_t type, unit;
} vt_t;
typedef struct {
  uint64_t *ids;
  size_t nids;
  uint64_t *values;
  size_t nvalues;
} sample_t;
typedef struct {
  uint64_t id, start, limit, offset;
  int64_t file, build_id;
  bool has_functions;
} mapping_t;
typedef struct {
  uint64_t id, mapping, address;
  size_t nlines;
} location_t;

typedef struct {
  vt_t types[16];
  size_t ntypes;
  sample_t *samples;
  size_t nsamples;
  mapping_t *maps;
  size_t nmaps;
  location_t *locs;
  size_t nlocs;
  char **strs;
  size_t nstrs;
  int64_t drop_frames, time_nanos, period, functions;
  vt_t period_type;
} profile_t;

#define GROW(a, n) \
  do { (a) = realloc((a), ((n) + 1) * sizeof *(a)); CHECK((a) != NULL); memset(&(a)[n], 0, sizeof *(a)); } while (0)

static vt_t decode_value_type(pb_rd *r) {
  vt_t t = {0, 0};
  unsigned f, w;
  uint64_t v;
  pb_rd sub;
  while (pb_next(r, &f, &w, &v, &sub)) {
    if (f == 1) t.type = (int64_t)pb_uint(w, v);
    else if (f == 2) t.unit = (int64_t)pb_uint(w, v);
  }
  return t;
}

static profile_t decode(const uint8_t *buf, size_t len) {
  profile_t p;
  memset(&p, 0, sizeof p);
  pb_rd r = {buf, buf + len}, sub, s2;
  unsigned f, w, f2, w2;
  uint64_t v, v2;
  while (pb_next(&r, &f, &w, &v, &sub)) {
    switch (f) {
    case 1:
      CHECK(w == 2 && p.ntypes < IT_COUNT(p.types));
      p.types[p.ntypes++] = decode_value_type(&sub);
      break;
    case 2: {
      CHECK(w == 2);
      GROW(p.samples, p.nsamples);
      sample_t *s = &p.samples[p.nsamples++];
      while (pb_next(&sub, &f2, &w2, &v2, &s2)) {
        if (f2 == 1) pb_repeated(w2, v2, &s2, &s->ids, &s->nids);
        else if (f2 == 2) pb_repeated(w2, v2, &s2, &s->values, &s->nvalues);
        else CHECKF(false, "sample field %u: no labels are written", f2);
      }
      break;
    }
    case 3: {
      CHECK(w == 2);
      GROW(p.maps, p.nmaps);
      mapping_t *m = &p.maps[p.nmaps++];
      while (pb_next(&sub, &f2, &w2, &v2, &s2)) {
        uint64_t x = pb_uint(w2, v2);
        switch (f2) {
        case 1: m->id = x; break;
        case 2: m->start = x; break;
        case 3: m->limit = x; break;
        case 4: m->offset = x; break;
        case 5: m->file = (int64_t)x; break;
        case 6: m->build_id = (int64_t)x; break;
        case 7: case 8: case 9: case 10: m->has_functions |= x != 0; break;
        default: CHECKF(false, "mapping field %u", f2);
        }
      }
      break;
    }
    case 4: {
      CHECK(w == 2);
      GROW(p.locs, p.nlocs);
      location_t *l = &p.locs[p.nlocs++];
      while (pb_next(&sub, &f2, &w2, &v2, &s2)) {
        if (f2 == 1) l->id = pb_uint(w2, v2);
        else if (f2 == 2) l->mapping = pb_uint(w2, v2);
        else if (f2 == 3) l->address = pb_uint(w2, v2);
        else if (f2 == 4) l->nlines++;
        else CHECKF(false, "location field %u", f2);
      }
      break;
    }
    case 5:
      p.functions++;
      break;
    case 6: {
      CHECK(w == 2);
      GROW(p.strs, p.nstrs);
      size_t n = (size_t)(sub.end - sub.p);
      char *s = malloc(n + 1);
      CHECK(s != NULL);
      memcpy(s, sub.p, n);
      s[n] = 0;
      CHECKF(strlen(s) == n, "string %zu holds a NUL", p.nstrs);
      p.strs[p.nstrs++] = s;
      break;
    }
    case 7: p.drop_frames = (int64_t)pb_uint(w, v); break;
    case 9: p.time_nanos = (int64_t)pb_uint(w, v); break;
    case 11: CHECK(w == 2); p.period_type = decode_value_type(&sub); break;
    case 12: p.period = (int64_t)pb_uint(w, v); break;
    default: CHECKF(false, "profile field %u is not written", f);
    }
  }
  return p;
}

static void profile_free(profile_t *p) {
  for (size_t i = 0; i < p->nsamples; i++) {
    free(p->samples[i].ids);
    free(p->samples[i].values);
  }
  for (size_t i = 0; i < p->nstrs; i++) free(p->strs[i]);
  free(p->samples);
  free(p->maps);
  free(p->locs);
  free(p->strs);
}

static const char *str(const profile_t *p, int64_t i) {
  CHECKF(i >= 0 && (size_t)i < p->nstrs, "string %lld of %zu", (long long)i, p->nstrs);
  return p->strs[i];
}

static const location_t *loc(const profile_t *p, uint64_t id) {
  for (size_t i = 0; i < p->nlocs; i++)
    if (p->locs[i].id == id) return &p->locs[i];
  CHECKF(false, "no location %llu", (unsigned long long)id);
  return NULL;
}

static const mapping_t *mapping(const profile_t *p, uint64_t id) {
  for (size_t i = 0; i < p->nmaps; i++)
    if (p->maps[i].id == id) return &p->maps[i];
  CHECKF(false, "no mapping %llu", (unsigned long long)id);
  return NULL;
}

/* Whether the stack of s is the return addresses pcs: each location holds
 * the address inside the call, the return address less one. */
static bool stack_is(const profile_t *p, const sample_t *s, const uintptr_t *pcs, size_t n) {
  if (s->nids != n) return false;
  for (size_t k = 0; k < n; k++)
    if (s->ids[k] > p->nlocs || p->locs[s->ids[k] - 1].address != (uint64_t)pcs[k] - 1) return false;
  return true;
}

/* The sample whose stack is pcs, or NULL. */
static const sample_t *find_sample(const profile_t *p, const uintptr_t *pcs, size_t n) {
  for (size_t i = 0; i < p->nsamples; i++)
    if (stack_is(p, &p->samples[i], pcs, n)) return &p->samples[i];
  return NULL;
}

/* The rules every profile the writer makes must follow. */
static void check_consistent(const profile_t *p, size_t ntypes) {
  CHECKF(p->nstrs >= 1 && p->strs[0][0] == 0, "string_table[0] must be \"\"");
  for (size_t i = 0; i < p->nstrs; i++)
    for (size_t j = i + 1; j < p->nstrs; j++) CHECKF(strcmp(p->strs[i], p->strs[j]) != 0, "string \"%s\" twice", p->strs[i]);
  CHECK(p->ntypes == ntypes);
  CHECK(p->functions == 0);
  for (size_t i = 0; i < p->nlocs; i++) {
    const location_t *l = &p->locs[i];
    CHECKF(l->id == i + 1, "location %zu has id %llu", i, (unsigned long long)l->id);
    CHECK(l->nlines == 0);
    for (size_t j = 0; j < i; j++)
      CHECKF(p->locs[j].address != l->address, "address %#llx in locations %zu and %zu",
             (unsigned long long)l->address, j, i);
    if (l->mapping) {
      const mapping_t *m = mapping(p, l->mapping);
      CHECKF(l->address >= m->start && l->address < m->limit, "location %#llx outside its mapping %#llx-%#llx",
             (unsigned long long)l->address, (unsigned long long)m->start, (unsigned long long)m->limit);
    }
  }
  for (size_t i = 0; i < p->nmaps; i++) {
    const mapping_t *m = &p->maps[i];
    CHECK(m->id == i + 1 && m->start < m->limit && !m->has_functions);
    CHECK(str(p, m->file)[0] == '/');
    const char *b = str(p, m->build_id);
    for (const char *c = b; *c; c++) CHECKF((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'), "build ID %s", b);
    CHECK(strlen(b) % 2 == 0);
    /* no two overlap */
    for (size_t j = 0; j < i; j++) CHECK(m->limit <= p->maps[j].start || m->start >= p->maps[j].limit);
  }
  for (size_t i = 0; i < p->nsamples; i++) {
    const sample_t *s = &p->samples[i];
    CHECK(s->nvalues == ntypes);
    for (size_t k = 0; k < s->nids; k++) CHECK(s->ids[k] >= 1 && s->ids[k] <= p->nlocs);
    /* merged: no stack twice */
    for (size_t j = 0; j < i; j++) {
      const sample_t *t = &p->samples[j];
      CHECKF(t->nids != s->nids || memcmp(t->ids, s->ids, s->nids * sizeof *s->ids) != 0, "samples %zu and %zu have one stack", j, i);
    }
  }
}

/* ---- the profile of known stacks ------------------------------------------ */
static const char *const heap_types[][2] = {{"inuse_objects", "count"}, {"inuse_space", "bytes"}};
static const char *const heap_period[2] = {"space", "bytes"};

/* the lines of the calls in site_a and site_b, and of the call of site_a
 * in known_profile (site_b's is the next) */
int line_a, line_b, call_line;

__attribute__((noinline)) uintptr_t here(void);
__attribute__((noinline)) uintptr_t here(void) { return (uintptr_t)__builtin_return_address(0); }
static uintptr_t (*volatile here_fn)(void) = here;

/* Each gives its own call's return address and its caller's. */
__attribute__((noinline)) void site_a(uintptr_t *pcs);
__attribute__((noinline)) void site_a(uintptr_t *pcs) {
  pcs[0] = here_fn(); line_a = __LINE__;
  pcs[1] = (uintptr_t)__builtin_return_address(0);
}
__attribute__((noinline)) void site_b(uintptr_t *pcs);
__attribute__((noinline)) void site_b(uintptr_t *pcs) {
  pcs[0] = here_fn(); line_b = __LINE__;
  pcs[1] = (uintptr_t)__builtin_return_address(0);
}
static void (*volatile site_a_fn)(uintptr_t *) = site_a;
static void (*volatile site_b_fn)(uintptr_t *) = site_b;

static char exe[4096];

static void find_exe(void) {
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  CHECK(n > 0);
  exe[n] = 0;
}

/* A temporary file holding what write(fd) puts there; the path. */
static char *write_profile(fw_pprof_t *p, const char *dir) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/profile-XXXXXX", dir);
  int fd = mkstemp(path);
  CHECKF(fd >= 0, "mkstemp %s: %s", path, strerror(errno));
  CHECK(fw_pprof_write(p, fd));
  CHECK(close(fd) == 0);
  return path;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  size_t cap = 1 << 16, n = 0;
  uint8_t *b = malloc(cap);
  for (size_t r; (r = fread(b + n, 1, cap - n, f)) > 0;) {
    n += r;
    if (n == cap) b = realloc(b, cap *= 2);
    CHECK(b != NULL);
  }
  fclose(f);
  *len = n;
  return b;
}

static const char *tmp_dir(void) {
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

/* The stacks of site_a (3 objects, 300 bytes, added as 2 + 1) and site_b
 * (1 object, 4096 bytes), called from here. */
static uintptr_t stack_a[2], stack_b[2];

static fw_pprof_t *known_profile(void) {
  call_line = __LINE__ + 1;
  site_a_fn(stack_a);
  site_b_fn(stack_b);
  fw_pprof_t *p = fw_pprof_new(heap_types, 2, heap_period, 1);
  CHECK(p != NULL);
  CHECK(fw_pprof_add(p, stack_a, 2, (const int64_t[]){2, 200}));
  CHECK(fw_pprof_add(p, stack_b, 2, (const int64_t[]){1, 4096}));
  CHECK(fw_pprof_add(p, stack_a, 2, (const int64_t[]){1, 100}));
  return p;
}

static void t_pprof_profile(void) {
  find_exe();
  fw_pprof_t *pp = known_profile();
  CHECK(fw_pprof_drop_frames(pp, "fw_.*"));
  const char *path = write_profile(pp, tmp_dir());
  fw_pprof_free(pp);
  size_t len;
  uint8_t *buf = read_file(path, &len);
  unlink(path);
  profile_t p = decode(buf, len);
  free(buf);
  check_consistent(&p, 2);

  CHECK(strcmp(str(&p, p.types[0].type), "inuse_objects") == 0 && strcmp(str(&p, p.types[0].unit), "count") == 0);
  CHECK(strcmp(str(&p, p.types[1].type), "inuse_space") == 0 && strcmp(str(&p, p.types[1].unit), "bytes") == 0);
  CHECK(strcmp(str(&p, p.period_type.type), "space") == 0 && strcmp(str(&p, p.period_type.unit), "bytes") == 0);
  CHECK(p.period == 1);
  CHECK(strcmp(str(&p, p.drop_frames), "fw_.*") == 0);
  int64_t now = (int64_t)time(NULL) * 1000000000;
  CHECKF(p.time_nanos > now - 60 * (int64_t)1000000000 && p.time_nanos < now + 60 * (int64_t)1000000000,
         "time_nanos %lld, now %lld", (long long)p.time_nanos, (long long)now);

  /* two stacks: site_a's merged */
  CHECKF(p.nsamples == 2, "%zu samples", p.nsamples);
  const sample_t *a = find_sample(&p, stack_a, 2), *b = find_sample(&p, stack_b, 2);
  CHECK(a && b);
  CHECKF(a->values[0] == 3 && a->values[1] == 300, "site_a: %llu objects, %llu bytes",
         (unsigned long long)a->values[0], (unsigned long long)a->values[1]);
  CHECK(b->values[0] == 1 && b->values[1] == 4096);
  /* four return addresses, four locations, all in this program: the first
   * mapping, named as /proc/self/exe names it */
  CHECK(p.nlocs == 4);
  CHECK(p.nmaps >= 1);
  for (size_t i = 0; i < p.nlocs; i++) {
    CHECKF(p.locs[i].mapping == 1, "location %#llx in mapping %llu", (unsigned long long)p.locs[i].address,
           (unsigned long long)p.locs[i].mapping);
  }
  CHECKF(strcmp(str(&p, p.maps[0].file), exe) == 0, "mapping 1 is %s, not %s", str(&p, p.maps[0].file), exe);
  /* the build ID is the loader's (tests/internal/os.c checks it against the file) */
  uint8_t id[64];
  size_t id_len;
  bool is_main;
  CHECK(fw_os_object_at((uintptr_t)site_a, &is_main, id, sizeof id, &id_len) && is_main);
  CHECKF(strlen(str(&p, p.maps[0].build_id)) == 2 * id_len, "build ID %s, %zu bytes", str(&p, p.maps[0].build_id), id_len);
  profile_free(&p);
}

/* ---- many stacks: merging and the tables' growth --------------------------- */
enum { POOL = 3000, STACKS = 20000, ADDS = 100000, DEPTH_MAX = 24 };

typedef struct {
  uintptr_t pcs[DEPTH_MAX];
  size_t n;
  int64_t values[3];
  bool used;
} ref_stack;

static void t_pprof_many(void) {
  /* addresses inside this program's code, so that they have a mapping */
  uintptr_t pool[POOL];
  uintptr_t base = (uintptr_t)here;
  for (size_t i = 0; i < POOL; i++) pool[i] = base + 1 + i;
  ref_stack *ref = calloc(STACKS, sizeof *ref);
  CHECK(ref != NULL);
  fwt_rng rng;
  fwt_rng_init(&rng, 42);
  for (size_t i = 0; i < STACKS; i++) {
    /* distinct: the first and the last frame say which stack it is */
    ref[i].n = fwt_range(&rng, 2, DEPTH_MAX);
    ref[i].pcs[0] = pool[i % POOL];
    ref[i].pcs[ref[i].n - 1] = pool[i / POOL];
    for (size_t k = 1; k + 1 < ref[i].n; k++) ref[i].pcs[k] = pool[fwt_range(&rng, 0, 63)];
  }
  static const char *const types[][2] = {{"alloc_objects", "count"}, {"alloc_space", "bytes"}, {"delta", "bytes"}};
  fw_pprof_t *pp = fw_pprof_new(types, 3, NULL, 0);
  CHECK(pp != NULL);
  for (size_t i = 0; i < ADDS; i++) {
    ref_stack *r = &ref[fwt_range(&rng, 0, STACKS - 1)];
    int64_t v[3] = {1, (int64_t)fwt_range(&rng, 1, 1 << 20), (int64_t)fwt_range(&rng, 0, 2000000) - 1000000};
    CHECK(fw_pprof_add(pp, r->pcs, r->n, v));
    for (int k = 0; k < 3; k++) r->values[k] += v[k];
    r->used = true;
  }
  CHECK(!fw_pprof_add(pp, NULL, 3, (const int64_t[]){1, 2, 3}));
  /* a sample without a stack (pprof shows it as its root alone), twice */
  CHECK(fw_pprof_add(pp, NULL, 0, (const int64_t[]){1, 10, -5}));
  CHECK(fw_pprof_add(pp, NULL, 0, (const int64_t[]){2, 20, INT64_MIN / 2}));
  const char *path = write_profile(pp, tmp_dir());
  fw_pprof_free(pp);
  size_t len;
  uint8_t *buf = read_file(path, &len);
  unlink(path);
  profile_t p = decode(buf, len);
  free(buf);
  check_consistent(&p, 3);
  CHECK(p.period == 0 && p.period_type.type == 0 && p.drop_frames == 0);
  size_t used = 0;
  bool pc_used[POOL] = {false};
  for (size_t i = 0; i < STACKS; i++) {
    if (!ref[i].used) continue;
    used++;
    for (size_t k = 0; k < ref[i].n; k++) pc_used[ref[i].pcs[k] - pool[0]] = true;
  }
  size_t pcs = 0;
  for (size_t i = 0; i < POOL; i++) pcs += pc_used[i];
  CHECKF(p.nsamples == used + 1, "%zu samples, %zu stacks and the empty one", p.nsamples, used);
  CHECKF(p.nlocs == pcs, "%zu locations, %zu addresses", p.nlocs, pcs);
  /* each sample's stack and sums; the first frame and the depth say which */
  for (size_t i = 0; i < p.nsamples; i++) {
    const sample_t *s = &p.samples[i];
    if (s->nids == 0) {
      CHECK(s->values[0] == 3 && s->values[1] == 30 && (int64_t)s->values[2] == INT64_MIN / 2 - 5);
      continue;
    }
    uintptr_t first = (uintptr_t)loc(&p, s->ids[0])->address + 1;
    const ref_stack *r = NULL;
    for (size_t j = first - pool[0]; j < STACKS && !r; j += POOL)
      if (ref[j].used && stack_is(&p, s, ref[j].pcs, ref[j].n)) r = &ref[j];
    CHECKF(r != NULL, "sample %zu has no stack of the reference", i);
    for (int k = 0; k < 3; k++)
      CHECKF((int64_t)s->values[k] == r->values[k], "sample %zu value %d: %lld, expected %lld", i, k,
             (long long)s->values[k], (long long)r->values[k]);
  }
  profile_free(&p);
  free(ref);
}

/* ---- go tool pprof ----------------------------------------------------------- */
/* Runs cmd through the shell; its standard output and error, and the exit
 * status in *status. */
static char *run(const char *cmd, int *status) {
  FILE *f = popen(cmd, "r");
  CHECK(f != NULL);
  size_t cap = 1 << 16, n = 0;
  char *out = malloc(cap);
  for (size_t r; (r = fread(out + n, 1, cap - n - 1, f)) > 0;) {
    n += r;
    if (n + 1 == cap) out = realloc(out, cap *= 2);
    CHECK(out != NULL);
  }
  out[n] = 0;
  *status = pclose(f);
  return out;
}

/* The line of out that holds both words (w2 may be NULL), or NULL. The
 * line is matched with its newline, so "x\n" matches x at its end. */
static const char *line_with(const char *out, const char *w1, const char *w2) {
  for (const char *l = out; *l;) {
    const char *e = strchr(l, '\n');
    size_t n = e ? (size_t)(e - l) + 1 : strlen(l);
    char *line = strndup(l, n);
    bool hit = strstr(line, w1) && (!w2 || strstr(line, w2));
    free(line);
    if (hit) return l;
    if (!e) break;
    l = e + 1;
  }
  return NULL;
}

static void t_pprof_go(void) {
  int status;
  char *out = run("command -v go", &status);
  bool have_go = status == 0 && out[0];
  free(out);
  if (!have_go) it_skip("go is not on PATH: the profile was not read with go tool pprof");
  find_exe();
  /* go tool pprof is built on its first use, into Go's build cache: the
   * user's, or one of our own when there is no home to keep it in */
  char gocache[4300] = "";
  const char *home = getenv("HOME");
  if (!getenv("GOCACHE") && !(home && *home && access(home, W_OK) == 0)) {
    snprintf(gocache, sizeof gocache, "GOCACHE='%s/fw-gocache' ", tmp_dir());
  }
  fw_pprof_t *pp = known_profile();
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/fw-pprof-XXXXXX", tmp_dir());
  CHECK(mkdtemp(dir) != NULL);
  const char *path = write_profile(pp, dir);
  fw_pprof_free(pp);

  /* -raw: the samples with the values as written, and the locations with
   * the functions pprof found; -lines: the calls' lines */
  char cmd[13000];
  snprintf(cmd, sizeof cmd, "%sgo tool pprof -raw '%s' '%s' 2>&1", gocache, exe, path);
  out = run(cmd, &status);
  printf("%s\n%s\n", cmd, out);
  fflush(stdout);
  CHECKF(status == 0, "go tool pprof -raw failed (status %#x)", status);
  CHECKF(!strstr(out, "mismatch"), "pprof refused the binary");
  CHECKF(line_with(out, "        3        300: ", NULL) && line_with(out, "        1       4096: ", NULL),
         "the samples' values are not 3/300 and 1/4096");
  CHECKF(line_with(out, " site_a ", NULL) && line_with(out, " site_b ", NULL), "site_a or site_b not found");
  free(out);

  snprintf(cmd, sizeof cmd, "%sgo tool pprof -top -lines -sample_index=inuse_space '%s' '%s' 2>&1", gocache, exe,
           path);
  out = run(cmd, &status);
  printf("%s\n%s\n", cmd, out);
  fflush(stdout);
  CHECKF(status == 0, "go tool pprof -top failed (status %#x)", status);
  /* the flat column holds what each site allocated, at the line of its
   * call; known_profile's cumulative column, at the line of each call: the
   * line before the return address */
  const struct {
    const char *fn;
    int line;
    const char *bytes[4];
  } want[] = {
    {"site_a", line_a, {"300B"}},
    {"site_b", line_b, {"4096B", "4kB", "4KB", "4KiB"}},
    {"known_profile", call_line, {"300B"}},
    {"known_profile", call_line + 1, {"4096B", "4kB", "4KB", "4KiB"}},
  };
  for (size_t i = 0; i < IT_COUNT(want); i++) {
    char fn[64], where[64], flat[32], cum[32];
    snprintf(fn, sizeof fn, " %s ", want[i].fn);
    snprintf(where, sizeof where, "pprof.c:%d\n", want[i].line);
    const char *l = line_with(out, fn, where);
    CHECKF(l != NULL, "no line for %s at pprof.c:%d", want[i].fn, want[i].line);
    CHECK(sscanf(l, "%31s %*s %*s %31s", flat, cum) == 2);
    const char *v = i < 2 ? flat : cum;
    bool ok = false;
    for (size_t k = 0; k < 4 && want[i].bytes[k]; k++) ok |= strcmp(v, want[i].bytes[k]) == 0;
    CHECKF(ok, "%s at pprof.c:%d: %s bytes, expected %s", want[i].fn, want[i].line, v, want[i].bytes[0]);
  }
  free(out);
  unlink(path);
  CHECK(rmdir(dir) == 0);
}

int main(int argc, char **argv) {
  static const it_section s[] = {
    {"pprof_profile", t_pprof_profile},
    {"pprof_many", t_pprof_many},
    {"pprof_go", t_pprof_go},
  };
  return it_main(argc, argv, s, IT_COUNT(s));
}
