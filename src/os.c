/* os.c — the file that talks to the kernel on Linux and other POSIX
 * systems (os_win.c does on Windows). Contracts are in os.h; the design is
 * at the top of alloc.c. */
#define _GNU_SOURCE
#include "os.h"
#include <sys/mman.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sched.h>
#include <signal.h>
#include <dlfcn.h>
#include <link.h>
#include <ucontext.h>
#include <unwind.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <pthread.h>

#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

static size_t fw_page_size_real;
size_t fw_os_page = 4096;

void fw_os_init(void) {
  if (fw_page_size_real) return;
  long v = sysconf(_SC_PAGESIZE);
  fw_page_size_real = v > 0 && fw_is_pow2((size_t)v) ? (size_t)v : 4096;
  fw_os_page = fw_page_size_real;
}

void fw_os_page_size_override(size_t size) {
  fw_os_init();
  fw_os_page = size >= fw_page_size_real && fw_is_pow2(size) ? size : fw_page_size_real;
}

static void *fw_mmap(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* The exact size first: the kernel often places it aligned already. If not,
 * over-map by align and unmap the head and tail, so that the kernel keeps
 * one mapping per call and neighbouring calls can merge. */
void *fw_os_map(size_t size, size_t align, size_t offset) {
  if (!fw_page_size_real) fw_os_init();
  fw_os_count(FW_OSC_MAP);
  if (size == 0) return NULL;
  size = fw_align_up(size, fw_page_size_real);
  if (align < fw_page_size_real) align = fw_page_size_real;
  /* the result is page-aligned, so no placement could align an offset
   * that is not a whole number of pages */
  if (offset & (fw_page_size_real - 1)) return NULL;
  offset &= align - 1;
  uint8_t *p = fw_mmap(size);
  if (!p) return NULL;
  if ((((uintptr_t)p + offset) & (align - 1)) == 0) return p;
  munmap(p, size);
  size_t over = size + align;
  if (over < size) return NULL;
  uint8_t *q = fw_mmap(over);
  if (!q) return NULL;
  uint8_t *a = (uint8_t *)(fw_align_up((uintptr_t)q + offset, align) - offset);
  if (a < q) a += align;
  size_t head = (size_t)(a - q);
  size_t tail = over - head - size;
  if (head) munmap(q, head);
  if (tail) munmap(a + size, tail);
  return a;
}

void fw_os_unmap(void *p, size_t size) {
  fw_os_count(FW_OSC_UNMAP);
  if (p && size) munmap(p, size);
}

void *fw_os_symbol(const char *name) { return dlsym(RTLD_DEFAULT, name); }

bool fw_os_guard(void *p, size_t size, bool guard) {
  fw_os_count(FW_OSC_GUARD);
  return mprotect(p, size, guard ? PROT_NONE : PROT_READ | PROT_WRITE) == 0;
}

/* MADV_DONTNEED rather than MADV_FREE: RSS falls at once (users watch it) and
 * the memory reads as zero afterwards, which calloc relies on. It does not
 * split mappings, so purging keeps vm.max_map_count safe. It fails on locked
 * memory (mlock, mlockall): then nothing is zeroed and the caller is told. */
bool fw_os_purge_pages(void *p, size_t size) { return madvise(p, size, MADV_DONTNEED) == 0; }

/* 0 not known yet, 1 huge pages can be had, 2 not (THP compiled out, or
 * set to "never": the advice would be taken and ignored). Read once, at the
 * first request for huge pages, so that a small program never looks. */
static _Atomic(int) fw_os_thp_state;

static bool fw_os_thp_usable(void) {
  int s = atomic_load_explicit(&fw_os_thp_state, memory_order_relaxed);
  if (s == 0) {
    s = 2;
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[128];
      ssize_t n = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (n > 0) {
        buf[n] = 0;
        if (!strstr(buf, "[never]")) s = 1;
      }
    }
    atomic_store_explicit(&fw_os_thp_state, s, memory_order_relaxed);
  }
  return s == 1;
}

bool fw_os_thp(void *p, size_t size, bool huge) {
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  if (huge && !fw_os_thp_usable()) return false;
  fw_os_count(FW_OSC_THP);
  if (madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0) return true;
  if (huge) atomic_store_explicit(&fw_os_thp_state, 2, memory_order_relaxed);
  return false;
#else
  (void)p; (void)size; (void)huge;
  return false;
#endif
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif
/* set when the kernel does not know the advice: asked once, not per page */
static _Atomic(bool) fw_os_populate_off;

bool fw_os_populate(void *p, size_t size) {
  /* whole OS pages only: the kernel refuses a start that is not one's with
   * EINVAL, which would read as an unknown advice (a page slot after the
   * segment header is 4 KiB-aligned, not 16 or 64 KiB-aligned) */
  uintptr_t ps = fw_os_page, start = ((uintptr_t)p + ps - 1) & ~(ps - 1);
  uintptr_t end = ((uintptr_t)p + size) & ~(ps - 1);
  if (end <= start || atomic_load_explicit(&fw_os_populate_off, memory_order_relaxed)) return false;
  p = (void *)start, size = end - start;
  fw_os_count(FW_OSC_POPULATE);
  int saved = errno;  /* a malloc that succeeds leaves errno as it was */
  if (madvise(p, size, MADV_POPULATE_WRITE) == 0) return true;
  if (errno == EINVAL) atomic_store_explicit(&fw_os_populate_off, true, memory_order_relaxed);
  errno = saved;
  return false;
}

size_t fw_os_resident(const void *p, size_t size) {
  size_t ps = fw_page_size_real ? fw_page_size_real : 4096, k = 0;
  uintptr_t start = ((uintptr_t)p + ps - 1) & ~(uintptr_t)(ps - 1);
  size_t n = size > start - (uintptr_t)p ? (size - (start - (uintptr_t)p)) / ps : 0;
  unsigned char vec[FW_OS_RESIDENT_MAX / 4096];
  if (n == 0 || n > sizeof vec) return SIZE_MAX;
  p = (const void *)start;
  fw_os_count(FW_OSC_RESIDENT);
  if (mincore((void *)p, n * ps, vec) != 0) return SIZE_MAX;
  /* Eight entries a step: bit 0 of each byte says resident, and the
   * multiply adds the eight masked bytes into the top one (at most 8, no
   * carry). A byte at a time, a look at a 4 MiB segment cost 6,200
   * instructions; an exiting thread that held 23 empty segments of big
   * blocks made 23 of them (bench_objects at 1 MiB, callgrind). */
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, vec + i, 8);
    k += (size_t)(((w & 0x0101010101010101ull) * 0x0101010101010101ull) >> 56);
  }
  for (; i < n; i++) k += vec[i] & 1;
  return k * ps;
}

bool fw_os_is_mapped(const void *p) {
  unsigned char vec;
  void *page = (void *)((uintptr_t)p & ~(uintptr_t)(fw_page_size_real ? fw_page_size_real - 1 : 4095));
  return mincore(page, 1, &vec) == 0;
}

uint64_t fw_os_clock_ms(void) {
  struct timespec ts;
  /* the coarse clock is a plain memory read (vDSO): cheap enough to consult
   * whenever a page is freed; its few ms of granularity suit purge delays */
#ifdef CLOCK_MONOTONIC_COARSE
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
  clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void fw_os_sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int64_t fw_os_time_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool fw_os_write(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    s += w;
    n -= (size_t)w;
  }
  return true;
}

const char *fw_os_getenv(const char *name) { return getenv(name); }

void fw_os_abort(void) { abort(); }

int fw_os_create(const char *path) { return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644); }

void fw_os_close(int fd) { close(fd); }

bool fw_os_rename(const char *from, const char *to) { return rename(from, to) == 0; }

size_t fw_os_rss(void) {
  /* statm: size resident shared ... in pages; read with plain system calls,
   * as stdio would allocate */
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char *s = buf;
  while (*s && *s != ' ') s++;
  size_t pages = 0;
  for (s++; *s >= '0' && *s <= '9'; s++) pages = pages * 10 + (size_t)(*s - '0');
  return pages * (size_t)sysconf(_SC_PAGESIZE);
}

size_t fw_os_rss_peak(void) {
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  size_t len = 0;
  ssize_t n;
  while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)n;
  close(fd);
  buf[len] = 0;
  const char *s = strstr(buf, "VmHWM:");
  if (!s) return 0;
  for (s += 6; *s == ' ' || *s == '\t'; s++) {
  }
  size_t kib = 0;
  for (; *s >= '0' && *s <= '9'; s++) kib = kib * 10 + (size_t)(*s - '0');
  return kib << 10;
}

long fw_os_pid(void) { return (long)getpid(); }

static void (*fw_signal_fn)(void);

static void fw_signal_handler(int sig) {
  (void)sig;
  int saved = errno;
  if (fw_signal_fn) fw_signal_fn();
  errno = saved;
}

bool fw_os_on_signal(int sig, void (*fn)(void)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fw_signal_handler;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  fw_signal_fn = fn;
  return sigaction(sig, &sa, NULL) == 0;
}

uint64_t fw_os_time_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- call stacks -------------------------------------------------------------- */
typedef struct {
  uintptr_t *pcs;
  size_t n, max, walked;
  uintptr_t skip_lo, skip_hi, from_pc;
  bool started;
} fw_bt_state_t;

static _Unwind_Reason_Code fw_bt_frame(struct _Unwind_Context *ctx, void *arg) {
  fw_bt_state_t *st = arg;
  uintptr_t pc = (uintptr_t)_Unwind_GetIP(ctx);
  if (!pc || ++st->walked > 64) return _URC_END_OF_STACK;
  if (!st->started) {
    if (st->from_pc ? pc != st->from_pc : (pc >= st->skip_lo && pc < st->skip_hi)) return _URC_NO_REASON;
    st->started = true;
  }
  st->pcs[st->n++] = pc;
  return st->n < st->max ? _URC_NO_REASON : _URC_END_OF_STACK;
}

size_t fw_os_backtrace(uintptr_t *pcs, size_t max, uintptr_t skip_lo, uintptr_t skip_hi, uintptr_t from_pc) {
  if (!max) return 0;
  fw_bt_state_t st = {pcs, 0, max, 0, skip_lo, skip_hi, from_pc, false};
  _Unwind_Backtrace(fw_bt_frame, &st);
  return st.n;
}

/* ---- call stacks, quickly ------------------------------------------------------
 * The unwinder finds and decodes a frame's unwind table entry (its FDE and
 * CIE, the DWARF call frame information) anew at every frame of every
 * walk: most of what cautious mode cost. At a return address, though, what
 * a walk needs is small and never changes: where the caller's frame
 * address (the CFA) is (the stack pointer or the frame pointer plus an
 * offset, or a word the frame pointer points near, for a function that
 * realigned its stack); that the return address is just below it; whether
 * the frame pointer was saved and where. fw_os_backtrace_quick keeps that,
 * packed in one word per return address, in a table every thread shares
 * (written once per address, then only read), and steps through a frame
 * with a few loads.
 *
 * The table only keeps addresses in objects loaded before the walker was
 * set up (the program, its libraries, preloaded ones): those stay mapped
 * until the process ends, while code that dlopen loaded may be unloaded
 * and other code mapped at its addresses. Frames elsewhere are decoded
 * anew at each walk, as the unwinder does. A frame whose rule the word
 * cannot express (a signal frame, another expression, a return address
 * kept elsewhere than below the CFA, a frame pointer needed but not known)
 * ends the quick walk: the caller walks again with the unwinder, which
 * knows every rule. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#if defined(__x86_64__)
enum { FW_DW_SP = 7, FW_DW_BP = 6, FW_DW_RA = 16 };
#else
enum { FW_DW_SP = 4, FW_DW_BP = 5, FW_DW_RA = 8 };
#endif
#define FW_W ((intptr_t)sizeof(uintptr_t))

/* libgcc's lookup of the unwind table entry that covers pc (also in LLVM's
 * libunwind); no public header declares it. */
struct fw_eh_bases { void *tbase, *dbase, *func; };
extern const void *_Unwind_Find_FDE(const void *pc, struct fw_eh_bases *bases);

/* A frame's rule. kind: FW_R_STEP (the rest says how), FW_R_END (the
 * stack ends here: no unwind entry, or the return address is undefined,
 * as in a thread's first frame), FW_R_HARD (the quick walk cannot step). */
enum { FW_R_NONE = 0, FW_R_STEP = 1, FW_R_END = 2, FW_R_HARD = 3 };
/* the CFA: SP + off, BP + off, or the word at BP + off */
enum { FW_CFA_SP = 0, FW_CFA_BP = 1, FW_CFA_AT_BP = 2 };
/* the caller's BP: unchanged, the word at CFA + off, not known, the word
 * at BP + off */
enum { FW_BP_SAME = 0, FW_BP_AT_CFA = 1, FW_BP_LOST = 2, FW_BP_AT_BP = 3 };
typedef struct {
  unsigned kind, cfa, bp;
  intptr_t cfa_off, bp_off;  /* in bytes */
} fw_rule_t;

/* The table: a word per return address, at an index drawn from the
 * address, holding the address's upper bits (so that the word names the
 * address exactly) and its rule:
 *   bits 0-1 kind, 2-3 cfa, 4-5 bp, 6-13 bp_off / FW_W (signed),
 *   14-29 cfa_off / FW_W (signed for FW_CFA_AT_BP, else unsigned: frames
 *   up to 64 Ki words), 30-63 the address >> FW_RULE_BITS. */
#define FW_RULE_BITS 13
#define FW_RULES ((size_t)1 << FW_RULE_BITS)
#define FW_RULE_TAG 30
static _Atomic(uint64_t) fw_rules[FW_RULES];
static size_t fw_rule_index(uintptr_t pc) { return (size_t)(pc ^ (pc >> FW_RULE_BITS)) & (FW_RULES - 1); }

static bool fw_rule_pack(const fw_rule_t *r, uintptr_t pc, uint64_t *w) {
  if ((uint64_t)(pc >> FW_RULE_BITS) >> (64 - FW_RULE_TAG)) return false;
  if (r->cfa_off % FW_W || r->bp_off % FW_W) return false;
  intptr_t c = r->cfa_off / FW_W, b = r->bp_off / FW_W;
  if (r->cfa == FW_CFA_AT_BP ? c < -32768 || c > 32767 : c < 0 || c > 65535) return false;
  if (b < -128 || b > 127) return false;
  *w = (uint64_t)(pc >> FW_RULE_BITS) << FW_RULE_TAG | (uint64_t)(uint16_t)c << 14 | (uint64_t)(uint8_t)b << 6 |
       (uint64_t)r->bp << 4 | (uint64_t)r->cfa << 2 | r->kind;
  return true;
}

/* The code of the objects loaded when the walker was set up. */
#define FW_FIXED_MAX 128
static struct { uintptr_t lo, hi; } fw_fixed[FW_FIXED_MAX];
static size_t fw_fixed_n;
static bool fw_quick_ready;

static bool fw_fixed_has(uintptr_t pc) {
  for (size_t i = 0; i < fw_fixed_n; i++)
    if (pc >= fw_fixed[i].lo && pc < fw_fixed[i].hi) return true;
  return false;
}

/* ---- reading the call frame information ---- */
typedef struct {
  const uint8_t *p, *end;
  bool bad;
} fw_cfi_rd_t;

static uint8_t fw_rd_u8(fw_cfi_rd_t *r) {
  if (r->p >= r->end) {
    r->bad = true;
    return 0;
  }
  return *r->p++;
}
static uint64_t fw_rd_fixed(fw_cfi_rd_t *r, size_t n) {
  uint64_t v = 0;
  if ((size_t)(r->end - r->p) < n) {
    r->bad = true;
    return 0;
  }
  for (size_t i = 0; i < n; i++) v |= (uint64_t)r->p[i] << (8 * i);  /* x86: little-endian */
  r->p += n;
  return v;
}
/* A LEB128 number; sign: extend from its last byte's bit 6 (SLEB128). */
static uint64_t fw_rd_leb(fw_cfi_rd_t *r, bool sign) {
  uint64_t v = 0;
  unsigned shift = 0;
  uint8_t b;
  do {
    b = fw_rd_u8(r);
    if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
  } while ((b & 0x80) && !r->bad);
  if (sign && shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
  return v;
}
static uint64_t fw_rd_uleb(fw_cfi_rd_t *r) { return fw_rd_leb(r, false); }
static int64_t fw_rd_sleb(fw_cfi_rd_t *r) { return (int64_t)fw_rd_leb(r, true); }
/* Skips a pointer in DW_EH_PE encoding enc; false for a form not known. */
static bool fw_rd_skip_ptr(fw_cfi_rd_t *r, uint8_t enc) {
  if (enc == 0xff) return true;  /* omitted */
  switch (enc & 0x0f) {
  case 0x00: fw_rd_fixed(r, sizeof(uintptr_t)); break;
  case 0x01: fw_rd_uleb(r); break;
  case 0x09: fw_rd_sleb(r); break;
  case 0x02: case 0x0a: fw_rd_fixed(r, 2); break;
  case 0x03: case 0x0b: fw_rd_fixed(r, 4); break;
  case 0x04: case 0x0c: fw_rd_fixed(r, 8); break;
  default: return false;
  }
  return !r->bad && (enc & 0x70) != 0x50;  /* aligned pointers: not used on x86 */
}

/* A DWARF expression of the one form the walk follows: DW_OP_breg of the
 * frame pointer with an offset, then DW_OP_deref if deref (what gcc emits
 * for a function that realigns its stack). Sets *off. */
static bool fw_expr_bp(const uint8_t *p, uint64_t len, bool deref, int64_t *off) {
  fw_cfi_rd_t e = {p, p + len, false};
  if (fw_rd_u8(&e) != 0x70 + FW_DW_BP) return false;
  *off = fw_rd_sleb(&e);
  if (deref && fw_rd_u8(&e) != 0x06) return false;
  return !e.bad && e.p == e.end;
}

/* What the CFA program says at one point, for what a walk needs. */
enum { FW_REG_SAME = 0, FW_REG_OFFSET = 1, FW_REG_UNDEF = 2, FW_REG_OTHER = 3, FW_REG_AT_BP = 4 };
enum { FW_HOW_REG = 0, FW_HOW_AT_BP = 1, FW_HOW_EXPR = 2 };
typedef struct {
  uint64_t cfa_reg;
  int64_t cfa_off;      /* FW_HOW_REG: CFA = cfa_reg + cfa_off */
  int64_t cfa_exp_off;  /* FW_HOW_AT_BP: CFA = the word at BP + cfa_exp_off */
  unsigned cfa_how;
  bool sp_ruled;
  unsigned ra, bp;
  int64_t ra_off, bp_off;
} fw_cfa_state_t;

static void fw_cfa_set(fw_cfa_state_t *st, uint64_t reg, unsigned kind, int64_t off) {
  if (reg == FW_DW_RA) {
    st->ra = kind;
    st->ra_off = off;
  } else if (reg == FW_DW_BP) {
    st->bp = kind;
    st->bp_off = off;
  } else if (reg == FW_DW_SP && kind != FW_REG_SAME) {
    st->sp_ruled = true;
  }
}
static void fw_cfa_restore(fw_cfa_state_t *st, const fw_cfa_state_t *init, uint64_t reg) {
  if (reg == FW_DW_RA) {
    st->ra = init->ra;
    st->ra_off = init->ra_off;
  } else if (reg == FW_DW_BP) {
    st->bp = init->bp;
    st->bp_off = init->bp_off;
  } else if (reg == FW_DW_SP) {
    st->sp_ruled = init->sp_ruled;
  }
}

/* Runs a CFA program up to (not including) the instructions for code at
 * or after target; init is the CIE's state (for DW_CFA_restore), NULL
 * while running the CIE's own. False on an instruction not known. */
static bool fw_cfa_run(fw_cfi_rd_t *r, fw_cfa_state_t *st, const fw_cfa_state_t *init, uintptr_t loc,
                       uintptr_t target, uint64_t code_align, int64_t data_align) {
  fw_cfa_state_t saved[8];
  size_t depth = 0;
  while (r->p < r->end && (!init || loc < target)) {
    uint8_t op = fw_rd_u8(r);
    uint64_t reg, v;
    int64_t off;
    switch (op >> 6) {
    case 1: loc += (op & 0x3f) * code_align; continue;
    case 2: fw_cfa_set(st, op & 0x3f, FW_REG_OFFSET, (int64_t)fw_rd_uleb(r) * data_align); continue;
    case 3: if (!init) return false; fw_cfa_restore(st, init, op & 0x3f); continue;
    default: break;
    }
    switch (op) {
    case 0x00: break;                                                          /* nop */
    case 0x02: loc += fw_rd_fixed(r, 1) * code_align; break;                   /* advance_loc1 */
    case 0x03: loc += fw_rd_fixed(r, 2) * code_align; break;                   /* advance_loc2 */
    case 0x04: loc += fw_rd_fixed(r, 4) * code_align; break;                   /* advance_loc4 */
    case 0x05: reg = fw_rd_uleb(r); fw_cfa_set(st, reg, FW_REG_OFFSET, (int64_t)fw_rd_uleb(r) * data_align); break;
    case 0x06: reg = fw_rd_uleb(r); if (!init) return false; fw_cfa_restore(st, init, reg); break;
    case 0x07: fw_cfa_set(st, fw_rd_uleb(r), FW_REG_UNDEF, 0); break;        /* undefined */
    case 0x08: fw_cfa_set(st, fw_rd_uleb(r), FW_REG_SAME, 0); break;         /* same_value */
    case 0x09: reg = fw_rd_uleb(r); fw_rd_uleb(r); fw_cfa_set(st, reg, FW_REG_OTHER, 0); break;  /* register */
    case 0x0a:                                                                 /* remember_state */
      if (depth == sizeof saved / sizeof saved[0]) return false;
      saved[depth++] = *st;
      break;
    case 0x0b:                                                                 /* restore_state */
      if (!depth) return false;
      *st = saved[--depth];
      break;
    case 0x0c:                                                                 /* def_cfa */
      st->cfa_reg = fw_rd_uleb(r);
      st->cfa_off = (int64_t)fw_rd_uleb(r);
      st->cfa_how = FW_HOW_REG;
      break;
    case 0x0d: st->cfa_reg = fw_rd_uleb(r); st->cfa_how = FW_HOW_REG; break;  /* def_cfa_register */
    case 0x0e: st->cfa_off = (int64_t)fw_rd_uleb(r); break;                    /* def_cfa_offset */
    case 0x0f:                                                                 /* def_cfa_expression */
      v = fw_rd_uleb(r);
      if (r->bad || v > (uint64_t)(r->end - r->p)) return false;
      st->cfa_how = fw_expr_bp(r->p, v, true, &st->cfa_exp_off) ? FW_HOW_AT_BP : FW_HOW_EXPR;
      r->p += v;
      break;
    case 0x10: case 0x16:                                                      /* (val_)expression */
      reg = fw_rd_uleb(r);
      v = fw_rd_uleb(r);
      if (r->bad || v > (uint64_t)(r->end - r->p)) return false;
      if (op == 0x10 && fw_expr_bp(r->p, v, false, &off)) fw_cfa_set(st, reg, FW_REG_AT_BP, off);
      else fw_cfa_set(st, reg, FW_REG_OTHER, 0);
      r->p += v;
      break;
    case 0x11: reg = fw_rd_uleb(r); fw_cfa_set(st, reg, FW_REG_OFFSET, fw_rd_sleb(r) * data_align); break;
    case 0x12:                                                                 /* def_cfa_sf */
      st->cfa_reg = fw_rd_uleb(r);
      st->cfa_off = fw_rd_sleb(r) * data_align;
      st->cfa_how = FW_HOW_REG;
      break;
    case 0x13: st->cfa_off = fw_rd_sleb(r) * data_align; break;               /* def_cfa_offset_sf */
    case 0x14: reg = fw_rd_uleb(r); fw_rd_uleb(r); fw_cfa_set(st, reg, FW_REG_OTHER, 0); break;  /* val_offset */
    case 0x15: reg = fw_rd_uleb(r); fw_rd_sleb(r); fw_cfa_set(st, reg, FW_REG_OTHER, 0); break;
    case 0x2e: fw_rd_uleb(r); break;                                           /* GNU_args_size */
    case 0x2f: reg = fw_rd_uleb(r); fw_cfa_set(st, reg, FW_REG_OFFSET, -(int64_t)fw_rd_uleb(r) * data_align); break;
    default: return false;                                                     /* set_loc and the rest */
    }
    if (r->bad) return false;
  }
  return !r->bad;
}

/* The rule at return address pc, from its unwind table entry. */
static void fw_rule_decode(uintptr_t pc, fw_rule_t *rule) {
  memset(rule, 0, sizeof *rule);
  rule->kind = FW_R_HARD;
  struct fw_eh_bases bases = {0, 0, 0};
  /* the call, not the instruction after it (that may be another function) */
  const uint8_t *fde = _Unwind_Find_FDE((const void *)(pc - 1), &bases);
  if (!fde) {
    rule->kind = FW_R_END;
    return;
  }
  uint32_t fde_len, cie_off, cie_len;
  memcpy(&fde_len, fde, 4);
  memcpy(&cie_off, fde + 4, 4);
  if (fde_len == 0 || fde_len == 0xffffffffu || cie_off == 0) return;
  const uint8_t *cie = fde + 4 - cie_off;
  memcpy(&cie_len, cie, 4);
  if (cie_len == 0xffffffffu) return;
  fw_cfi_rd_t r = {cie + 8, cie + 4 + cie_len, false};
  uint8_t version = fw_rd_u8(&r);
  if (version != 1 && version != 3 && version != 4) return;
  const char *aug = (const char *)r.p;
  while (r.p < r.end && *r.p) r.p++;
  fw_rd_u8(&r);
  if (version == 4) {  /* address and segment selector sizes */
    fw_rd_u8(&r);
    fw_rd_u8(&r);
  }
  uint64_t code_align = fw_rd_uleb(&r);
  int64_t data_align = fw_rd_sleb(&r);
  uint64_t ra_col = version == 1 ? fw_rd_u8(&r) : fw_rd_uleb(&r);
  uint8_t fde_enc = 0;
  bool z = aug[0] == 'z', signal = false;
  if (z) {
    uint64_t n = fw_rd_uleb(&r);
    if (r.bad || n > (uint64_t)(r.end - r.p)) return;
    const uint8_t *data_end = r.p + n;
    for (const char *a = aug + 1; *a && !r.bad; a++) {
      if (*a == 'R') fde_enc = fw_rd_u8(&r);
      else if (*a == 'L') fw_rd_u8(&r);
      else if (*a == 'P') {
        uint8_t penc = fw_rd_u8(&r);
        if (!fw_rd_skip_ptr(&r, penc)) return;
      } else if (*a == 'S') signal = true;
      else if (*a != 'B' && *a != 'G') break;  /* the length says where the data ends */
    }
    r.p = data_end;
  } else if (aug[0]) {
    return;
  }
  if (r.bad || signal || ra_col != FW_DW_RA) return;
  fw_cfa_state_t init;
  memset(&init, 0, sizeof init);
  init.cfa_reg = FW_DW_SP;
  init.ra = FW_REG_UNDEF;
  if (!fw_cfa_run(&r, &init, NULL, 0, 0, code_align, data_align)) return;
  fw_cfi_rd_t f = {fde + 8, fde + 4 + fde_len, false};
  if (!fw_rd_skip_ptr(&f, fde_enc) || !fw_rd_skip_ptr(&f, fde_enc & 0x0f)) return;
  if (z) {
    uint64_t n = fw_rd_uleb(&f);
    if (f.bad || n > (uint64_t)(f.end - f.p)) return;
    f.p += n;
  }
  fw_cfa_state_t st = init;
  if (!fw_cfa_run(&f, &st, &init, (uintptr_t)bases.func, pc, code_align, data_align)) return;
  if (st.ra == FW_REG_UNDEF) {
    rule->kind = FW_R_END;
    return;
  }
  if (st.sp_ruled || st.ra != FW_REG_OFFSET || st.ra_off != -FW_W) return;
  if (st.cfa_how == FW_HOW_AT_BP) {
    rule->cfa = FW_CFA_AT_BP;
    rule->cfa_off = (intptr_t)st.cfa_exp_off;
  } else if (st.cfa_how == FW_HOW_REG && (st.cfa_reg == FW_DW_SP || st.cfa_reg == FW_DW_BP) && st.cfa_off >= FW_W) {
    rule->cfa = st.cfa_reg == FW_DW_BP ? FW_CFA_BP : FW_CFA_SP;
    rule->cfa_off = (intptr_t)st.cfa_off;
  } else {
    return;
  }
  if (st.bp == FW_REG_SAME) {
    rule->bp = FW_BP_SAME;
  } else if (st.bp == FW_REG_OFFSET) {
    rule->bp = FW_BP_AT_CFA;
    rule->bp_off = (intptr_t)st.bp_off;
  } else if (st.bp == FW_REG_AT_BP) {
    rule->bp = FW_BP_AT_BP;
    rule->bp_off = (intptr_t)st.bp_off;
  } else {
    rule->bp = FW_BP_LOST;
  }
  rule->kind = FW_R_STEP;
}

/* The packed rule of pc when the table has no FW_R_STEP for it: the
 * table's end or refusal, or decoded, and kept when it is for good. A rule
 * the word cannot hold is FW_R_HARD. Threads that start at once meet the
 * same new return addresses and may each decode one: the same word, stored
 * twice. Waiting for the thread that decodes it instead cost more (on two
 * cores and sixteen threads, turns given up to a decoder that had lost its
 * core) than the decoding, a few thousand instructions per frame, without
 * a lock where the C library finds the object of an address without one. */
FW_NOINLINE static uint64_t fw_rule_miss(uintptr_t pc) {
  fw_rule_t rule;
  _Atomic(uint64_t) *slot = &fw_rules[fw_rule_index(pc)];
  uint64_t tag = (uint64_t)(pc >> FW_RULE_BITS) << FW_RULE_TAG;
  uint64_t w = atomic_load_explicit(slot, memory_order_acquire);
  if ((w & ~(((uint64_t)1 << FW_RULE_TAG) - 1)) == tag && (w & 3)) return w;
  fw_rule_decode(pc, &rule);
  uint64_t r;
  bool packed = fw_rule_pack(&rule, pc, &r);
  if (packed && fw_fixed_has(pc)) atomic_store_explicit(slot, r, memory_order_release);
  return packed ? r : FW_R_HARD;
}

static int fw_fixed_phdr(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  (void)arg;
  for (size_t i = 0; i < info->dlpi_phnum && fw_fixed_n < FW_FIXED_MAX; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    fw_fixed[fw_fixed_n].lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
    fw_fixed[fw_fixed_n].hi = fw_fixed[fw_fixed_n].lo + ph->p_memsz;
    fw_fixed_n++;
  }
  return 0;
}

void fw_os_backtrace_init(void) {
  if (fw_quick_ready) return;
  dl_iterate_phdr(fw_fixed_phdr, NULL);
  fw_quick_ready = true;
}

/* Reads the stack words the rules name; ASan knows nothing of frames it
 * did not lay out itself, and they are not its redzones. */
__attribute__((no_sanitize_address)) static uintptr_t fw_stack_word(uintptr_t a) {
  return *(const uintptr_t *)a;
}

/* A stack address a step may read: at or above the stack pointer, by less
 * than 1 GiB (a caller's frame is above its callee's). */
#define FW_ON_STACK(a, sp) ((uintptr_t)(a) - (sp) < ((uintptr_t)1 << 30))

/* What a walk read that steered it, for fw_os_backtrace_cached: the
 * return addresses and frame addresses it read, and the frame pointers it
 * read that a later step used. A frame pointer read is only noted once it
 * is used: code built without frame pointers keeps any value in that
 * register (a loop counter of the caller, say), and a walk that only
 * passed such a value on must not be told apart by it. */
typedef struct {
  fw_bt_walk_t *w;
  bool keep;        /* every step so far will step the same way again */
  bool bp_pending;  /* bp holds a value read and not yet used */
  bool bp_start;    /* ... the starting one, not a stack word */
  uintptr_t bp_at;  /* where that word was */
} fw_trace_t;

FW_INLINE void fw_trace_word(fw_trace_t *t, uintptr_t at, uintptr_t v) {
  if (!t) return;
  fw_bt_walk_t *w = t->w;
  if (w->nreads == FW_BT_READS) {
    t->keep = false;
    return;
  }
  w->rd[w->nreads].at = at;
  w->rd[w->nreads++].val = v;
}
FW_INLINE void fw_trace_bp_used(fw_trace_t *t, uintptr_t bp) {
  if (!t || !t->bp_pending) return;
  t->bp_pending = false;
  if (t->bp_start) t->w->bp_used = 1;
  else fw_trace_word(t, t->bp_at, bp);
}

/* One step of the walk: from the frame at *pc, whose stack pointer is *sp
 * and frame pointer *bp (0: not known), to its caller's. 1: done; 0: the
 * stack ends here; -1: the quick walk cannot step. t: NULL, or what the
 * step reads is noted there. */
FW_INLINE int fw_quick_step(uintptr_t *pc, uintptr_t *sp, uintptr_t *bp, fw_trace_t *t) {
  uint64_t want = (uint64_t)(*pc >> FW_RULE_BITS) << FW_RULE_TAG | FW_R_STEP;
  uint64_t w = atomic_load_explicit(&fw_rules[fw_rule_index(*pc)], memory_order_relaxed);
  if (fw_unlikely((w ^ want) & ~(((uint64_t)1 << FW_RULE_TAG) - 4))) {
    w = fw_rule_miss(*pc);
    /* the table keeps only the rules of code that stays: others are
     * decoded anew, from code that may have changed by the next walk */
    if (t && !fw_fixed_has(*pc)) t->keep = false;
    if ((w & 3) != FW_R_STEP) return (w & 3) == FW_R_END ? 0 : -1;
  }
  unsigned how = (unsigned)(w >> 2) & 3;
  uintptr_t cfa = ((uintptr_t)(w >> 14) & 0xffff) * (uintptr_t)FW_W;
  if (how == FW_CFA_SP) {
    cfa += *sp;
  } else {
    fw_trace_bp_used(t, *bp);
    if (!*bp) return -1;
    if (how == FW_CFA_AT_BP) {
      cfa = *bp + (uintptr_t)((intptr_t)(int16_t)(uint16_t)(w >> 14) * FW_W);
      if (!FW_ON_STACK(cfa, *sp)) return -1;
      uintptr_t at = cfa;
      cfa = fw_stack_word(at);
      fw_trace_word(t, at, cfa);
    } else {
      cfa += *bp;
    }
  }
  if (cfa == *sp || !FW_ON_STACK(cfa, *sp)) return -1;
  unsigned bp_rule = (unsigned)(w >> 4) & 3;
  if (bp_rule) {
    uintptr_t at = (bp_rule == FW_BP_AT_BP ? *bp : cfa) + (uintptr_t)((intptr_t)(int8_t)(uint8_t)(w >> 6) * FW_W);
    if (bp_rule == FW_BP_AT_BP) fw_trace_bp_used(t, *bp);
    if (bp_rule == FW_BP_LOST) {
      *bp = 0;
      if (t) t->bp_pending = false;
    } else if (bp_rule == FW_BP_AT_BP && (!*bp || !FW_ON_STACK(at, *sp))) {
      return -1;
    } else {
      *bp = fw_stack_word(at);
      if (t) {
        t->bp_pending = true;
        t->bp_start = false;
        t->bp_at = at;
      }
    }
  }
  *pc = fw_stack_word(cfa - (uintptr_t)FW_W);
  fw_trace_word(t, cfa - (uintptr_t)FW_W, *pc);
  *sp = cfa;
  return 1;
}

/* The walk from a caller's state (pc, sp, bp): the leading frames in
 * [skip_lo, skip_hi) stepped over, then up to max return addresses into
 * pcs; SIZE_MAX if the quick walk cannot step. t: NULL, or where the
 * words that steered it are noted. */
FW_INLINE size_t fw_quick_walk(uintptr_t pc, uintptr_t sp, uintptr_t bp, uintptr_t *pcs, size_t max,
                               uintptr_t skip_lo, uintptr_t skip_hi, fw_trace_t *t) {
  unsigned walked = 0;
  int r = 1;
  for (; pc - skip_lo < skip_hi - skip_lo; walked++) {
    if (walked == 64 || (r = fw_quick_step(&pc, &sp, &bp, t)) <= 0) return r ? SIZE_MAX : 0;
  }
  size_t n = 0;
  while (pc) {
    pcs[n++] = pc;
    if (n == max || ++walked == 64 || (r = fw_quick_step(&pc, &sp, &bp, t)) == 0) break;
    if (r < 0) return SIZE_MAX;
  }
  return n;
}

/* The state (pc, sp, bp) of the caller of the function this is used in,
 * which must not be inlined: asking for its frame address gives it a frame
 * pointer, from which its caller's state follows. */
#define FW_CALLER_STATE(pc, sp, bp)                                          \
  const uintptr_t *fp_ = __builtin_frame_address(0);                         \
  uintptr_t pc = (uintptr_t)__builtin_return_address(0);                     \
  uintptr_t sp = (uintptr_t)fp_ + 2 * (uintptr_t)FW_W, bp = fw_stack_word((uintptr_t)fp_)

FW_NOINLINE size_t fw_os_backtrace_quick(uintptr_t *pcs, size_t max, uintptr_t skip_lo, uintptr_t skip_hi) {
  if (!fw_quick_ready) return SIZE_MAX;
  if (!max) return 0;
  FW_CALLER_STATE(pc, sp, bp);
  return fw_quick_walk(pc, sp, bp, pcs, max, skip_lo, skip_hi, NULL);
}

/* The set of the cache for a walk that starts at sp: two ways per set,
 * the set chosen by the stack depth. */
FW_INLINE size_t fw_bt_set(uintptr_t sp) { return (size_t)((sp >> 4) ^ (sp >> 11)) & (FW_BT_WAYS / 2 - 1); }

/* A new walk from the caller's state, into the way of its set that the
 * turn names; out of line (a tail call, its arguments all in registers),
 * so that a walk found again keeps few registers. */
static FW_NOINLINE fw_bt_walk_t *fw_bt_walk_new(fw_bt_cache_t *c, uintptr_t pc, uintptr_t sp, uintptr_t bp,
                                               uintptr_t skip_lo, uintptr_t skip_hi) {
  size_t set = fw_bt_set(sp);
  unsigned k = (c->turn >> set) & 1;
  c->turn ^= 1u << set;
  fw_bt_walk_t *w = &c->walk[2 * set + k];
  fw_trace_t t = {w, true, true, true, 0};
  c->valid &= ~(1u << (2 * set + k));
  w->sp = 0;
  w->nreads = w->bp_used = w->tag = 0;
  size_t n = fw_quick_walk(pc, sp, bp, w->pcs, FW_BT_FRAMES, skip_lo, skip_hi, &t);
  if (n == SIZE_MAX) return NULL;
  w->npcs = (uint32_t)n;
  if (t.keep) {
    w->sp = sp;
    w->pc = pc;
    w->bp = bp;
    c->valid |= 1u << (2 * set + k);
  }
  return w;
}

/* Whether the walk w started where this one does and read the same words,
 * each compared in place. */
FW_INLINE bool fw_bt_same(const fw_bt_walk_t *w, uintptr_t pc, uintptr_t sp, uintptr_t bp) {
  if (w->sp != sp || w->pc != pc || (w->bp_used && w->bp != bp)) return false;
  for (const __typeof__(w->rd[0]) *r = w->rd, *end = r + w->nreads; r < end; r++)
    if (fw_stack_word(r->at) != r->val) return false;
  return true;
}

/* A walk found again costs the compare of its words, 6 instructions each,
 * and some 45 more; 60 more while the walk that misses was inlined here
 * (callgrind, bench_objects --threads 1 --total 12000 --size 1048576 under
 * build/libfreeway-prof.so, FREEWAY_PROFILE=1: 5 words). */
FW_NOINLINE fw_bt_walk_t *fw_os_backtrace_cached(fw_bt_cache_t *c, uintptr_t skip_lo, uintptr_t skip_hi) {
  if (!fw_quick_ready) return NULL;
  FW_CALLER_STATE(pc, sp, bp);
  size_t set = fw_bt_set(sp);
  fw_bt_walk_t *w = &c->walk[2 * set];
  unsigned valid = c->valid >> (2 * set);
  /* the other way goes first */
  if ((valid & 1) && fw_bt_same(w, pc, sp, bp)) {
    c->turn |= 1u << set;
    return w;
  }
  if ((valid & 2) && fw_bt_same(w + 1, pc, sp, bp)) {
    c->turn &= ~(1u << set);
    return w + 1;
  }
  return fw_bt_walk_new(c, pc, sp, bp, skip_lo, skip_hi);
}
#else
void fw_os_backtrace_init(void) {}
size_t fw_os_backtrace_quick(uintptr_t *pcs, size_t max, uintptr_t skip_lo, uintptr_t skip_hi) {
  (void)pcs, (void)max, (void)skip_lo, (void)skip_hi;
  return SIZE_MAX;
}
fw_bt_walk_t *fw_os_backtrace_cached(fw_bt_cache_t *c, uintptr_t skip_lo, uintptr_t skip_hi) {
  (void)c, (void)skip_lo, (void)skip_hi;
  return NULL;
}
#endif

typedef struct { uintptr_t base, lo, hi; } fw_range_query_t;

static int fw_range_phdr(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  fw_range_query_t *q = arg;
  if ((uintptr_t)info->dlpi_addr != q->base) return 0;
  for (size_t i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (!q->lo || lo < q->lo) q->lo = lo;
    if (hi > q->hi) q->hi = hi;
  }
  return 1;
}

bool fw_os_code_range(const void *fn, uintptr_t *lo, uintptr_t *hi) {
  Dl_info info;
  struct link_map *lm = NULL;
  *lo = *hi = 0;
  if (!dladdr1(fn, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm) return false;
  fw_range_query_t q = {(uintptr_t)lm->l_addr, 0, 0};
  dl_iterate_phdr(fw_range_phdr, &q);
  *lo = q.lo;
  *hi = q.hi;
  /* the program's own entry in the loader's list has an empty name */
  return lm->l_name == NULL || lm->l_name[0] == 0;
}

void fw_os_describe_pc(uintptr_t pc, char *buf, size_t n) {
  Dl_info info;
  if (!n) return;
  buf[0] = 0;
  /* a return address points after the call: look up the call itself */
  if (!dladdr((void *)(pc - 1), &info) || !info.dli_fname) {
    snprintf(buf, n, "%#lx", (unsigned long)pc);
    return;
  }
  const char *file = strrchr(info.dli_fname, '/');
  file = file ? file + 1 : info.dli_fname;
  if (info.dli_sname && info.dli_saddr)
    snprintf(buf, n, "%#lx %s+%#lx (%s)", (unsigned long)pc, info.dli_sname,
             (unsigned long)(pc - (uintptr_t)info.dli_saddr), file);
  else
    snprintf(buf, n, "%#lx %s+%#lx", (unsigned long)pc, file, (unsigned long)(pc - (uintptr_t)info.dli_fbase));
}

/* ---- the loaded code ---------------------------------------------------------- */
/* Reads a hexadecimal number at *s, at least one digit; false on none or on
 * a value beyond uintptr_t (a file offset past 4 GiB on 32-bit). */
static bool fw_maps_hex(const char **s, uintptr_t *v) {
  uintptr_t x = 0;
  const char *c = *s;
  for (;; c++) {
    unsigned d;
    if (*c >= '0' && *c <= '9') d = (unsigned)(*c - '0');
    else if (*c >= 'a' && *c <= 'f') d = (unsigned)(*c - 'a' + 10);
    else break;
    if (x >> (sizeof x * 8 - 4)) return false;
    x = x << 4 | d;
  }
  if (c == *s) return false;
  *s = c;
  *v = x;
  return true;
}

static const char *fw_maps_field(const char *c) {
  while (*c && *c != ' ') c++;
  while (*c == ' ') c++;
  return c;
}

/* One line of /proc/self/maps, "start-end perms offset dev inode   path". */
static void fw_maps_line(const char *c, void (*fn)(uintptr_t, uintptr_t, uintptr_t, const char *, void *),
                         void *arg) {
  uintptr_t start, end, offset;
  if (!fw_maps_hex(&c, &start) || *c++ != '-' || !fw_maps_hex(&c, &end) || *c++ != ' ') return;
  if (c[0] == 0 || c[1] == 0 || c[2] != 'x') return;
  c = fw_maps_field(c);
  if (!fw_maps_hex(&c, &offset)) return;
  c = fw_maps_field(fw_maps_field(fw_maps_field(c)));  /* to the device, the inode, the path */
  if (*c != '/' || end <= start) return;
  fn(start, end, offset, c, arg);
}

#define FW_MAPS_BUF ((size_t)16 << 10)

bool fw_os_mappings(void (*fn)(uintptr_t start, uintptr_t end, uintptr_t offset, const char *path, void *arg),
                    void *arg) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char *buf = fw_mmap(FW_MAPS_BUF);
  if (!buf) {
    close(fd);
    return false;
  }
  /* buf holds the start of a line not yet complete; one byte is kept free
   * for the NUL of a last line that has no newline */
  size_t len = 0;
  bool skipping = false, ok = true;
  for (;;) {
    ssize_t r = read(fd, buf + len, FW_MAPS_BUF - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      ok = false;
      break;
    }
    if (r == 0) {
      buf[len] = 0;
      if (len && !skipping) fw_maps_line(buf, fn, arg);
      break;
    }
    len += (size_t)r;
    size_t at = 0;
    for (char *nl; (nl = memchr(buf + at, '\n', len - at)) != NULL; at = (size_t)(nl - buf) + 1) {
      *nl = 0;
      if (!skipping) fw_maps_line(buf + at, fn, arg);
      skipping = false;
    }
    memmove(buf, buf + at, len - at);
    len -= at;
    if (len == FW_MAPS_BUF - 1) {
      /* a line longer than the buffer: dropped up to its newline */
      skipping = true;
      len = 0;
    }
  }
  munmap(buf, FW_MAPS_BUF);
  close(fd);
  return ok;
}

typedef struct {
  uintptr_t addr;
  unsigned seen;
  bool found, is_main;
  uint8_t *id;
  size_t max, id_len;
} fw_object_query_t;

/* The build ID among the notes of [p, p + n), notes aligned to align. */
static size_t fw_note_build_id(const uint8_t *p, size_t n, size_t align, uint8_t *id, size_t max) {
  while (n >= sizeof(ElfW(Nhdr))) {
    const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)(const void *)p;
    if (nh->n_namesz > n || nh->n_descsz > n) return 0;
    /* the descriptor and the next note start aligned; the header does not
     * count as padding */
    size_t desc = fw_align_up(sizeof *nh + nh->n_namesz, align);
    size_t next = fw_align_up(desc + nh->n_descsz, align);
    if (desc + nh->n_descsz > n) return 0;
    if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(p + sizeof *nh, "GNU", 4) == 0) {
      size_t k = nh->n_descsz < max ? nh->n_descsz : max;
      memcpy(id, p + desc, k);
      return k;
    }
    if (next >= n) return 0;
    p += next;
    n -= next;
  }
  return 0;
}

static int fw_object_phdr(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  fw_object_query_t *q = arg;
  /* the loader lists the main program first */
  bool first = q->seen++ == 0;
  bool holds = false;
  for (size_t i = 0; i < info->dlpi_phnum && !holds; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    /* the mapping starts at the page that holds the segment's start */
    uintptr_t lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    lo &= ~(uintptr_t)(fw_page_size_real ? fw_page_size_real - 1 : 4095);
    holds = q->addr >= lo && q->addr < hi;
  }
  if (!holds) return 0;
  q->found = true;
  q->is_main = first;
  for (size_t i = 0; i < info->dlpi_phnum && !q->id_len; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const uint8_t *p = (const uint8_t *)((uintptr_t)info->dlpi_addr + ph->p_vaddr);
    q->id_len = fw_note_build_id(p, ph->p_memsz, ph->p_align == 8 ? 8 : 4, q->id, q->max);
  }
  return 1;
}

bool fw_os_object_at(uintptr_t addr, bool *is_main, uint8_t *id, size_t max, size_t *id_len) {
  fw_object_query_t q = {addr, 0, false, false, id, max, 0};
  dl_iterate_phdr(fw_object_phdr, &q);
  if (!q.found) return false;
  *is_main = q.is_main;
  *id_len = q.id_len;
  return true;
}

/* ---- faults in FW_PROBING functions -------------------------------------------- */
/* Defined by the linker around the section; this one function makes sure
 * the section exists in every link that has the hook. */
extern const char __start_fw_probing[] __attribute__((visibility("hidden")));
extern const char __stop_fw_probing[] __attribute__((visibility("hidden")));
FW_PROBING void fw_os_probing_marker(void);
void fw_os_probing_marker(void) {}

bool fw_os_probing(uintptr_t pc) {
  return pc >= (uintptr_t)__start_fw_probing && pc < (uintptr_t)__stop_fw_probing;
}

static fw_os_fault_fn *fw_fault_fn;
static struct sigaction fw_fault_old[2];

static void fw_fault_handler(int sig, siginfo_t *si, void *ucv) {
  int saved = errno;
  ucontext_t *uc = ucv;
  uintptr_t pc = 0, regs[24];
  size_t nregs = 0;
#if defined(__x86_64__)
  pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
  static const int order[] = {REG_RDI, REG_RSI, REG_RDX, REG_RCX, REG_R8, REG_R9, REG_RAX, REG_RBX,
                              REG_RBP, REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) regs[nregs++] = (uintptr_t)uc->uc_mcontext.gregs[order[i]];
#elif defined(__i386__)
  pc = (uintptr_t)uc->uc_mcontext.gregs[REG_EIP];
  static const int order[] = {REG_EAX, REG_EDX, REG_ECX, REG_EBX, REG_ESI, REG_EDI, REG_EBP};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) regs[nregs++] = (uintptr_t)uc->uc_mcontext.gregs[order[i]];
  /* the first argument, on the stack at entry */
  uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_ESP];
  for (size_t i = 1; i <= 4; i++) regs[nregs++] = ((const uintptr_t *)sp)[i];
#elif defined(__aarch64__)
  pc = (uintptr_t)uc->uc_mcontext.pc;
  for (size_t i = 0; i < 19; i++) regs[nregs++] = (uintptr_t)uc->uc_mcontext.regs[i];
#else
  (void)uc;
#endif
  if (si->si_code > 0 && fw_os_probing(pc) && fw_fault_fn)
    fw_fault_fn((uintptr_t)si->si_addr, pc, regs, nregs);
  /* Not ours: the previous disposition takes over, for good. A fault of an
   * instruction happens again on return; a signal someone sent is raised
   * again (it stays pending until this handler returns). */
  sigaction(sig, &fw_fault_old[sig == SIGBUS], NULL);
  if (si->si_code <= 0) raise(sig);
  errno = saved;
}

bool fw_os_fault_hook(fw_os_fault_fn *fn) {
  fw_fault_fn = fn;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fw_fault_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGSEGV, &sa, &fw_fault_old[0]) == 0 && sigaction(SIGBUS, &sa, &fw_fault_old[1]) == 0;
}

/* ---- threads and processes ---------------------------------------------------- */
bool fw_os_tkey_create(fw_os_tkey_t *key, void (*fn)(void *)) {
  pthread_key_t k;
  if (pthread_key_create(&k, fn) != 0) return false;
  key->v = (uintptr_t)k;
  return true;
}

bool fw_os_tkey_set(fw_os_tkey_t key, void *value) {
  return pthread_setspecific((pthread_key_t)key.v, value) == 0;
}

bool fw_os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  return pthread_atfork(prepare, parent, child) == 0;
}

void fw_os_yield(void) { sched_yield(); }

unsigned fw_os_cpu_count(void) {
  long n = 0;
#ifdef CPU_COUNT
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
  if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1u;
}

void fw_os_assert_fail(const char *file, int line, const char *cond) {
  char buf[256];
  size_t n = 0;
  const char *parts[] = {"freeway: internal check failed: ", cond, " at ", file, ":"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    for (const char *c = parts[i]; *c && n < sizeof buf - 16; c++) buf[n++] = *c;
  char digits[12];
  int k = 0;
  unsigned v = (unsigned)line;
  do { digits[k++] = (char)('0' + v % 10); v /= 10; } while (v && k < 11);
  while (k) buf[n++] = digits[--k];
  buf[n++] = '\n';
  fw_os_write(2, buf, n);
  abort();
}

void fw_os_random(void *buf, size_t n) {
  uint8_t *out = buf;
  size_t got = 0;
#ifdef SYS_getrandom
  /* the raw system call: no library call that could allocate, and
   * GRND_NONBLOCK (1) so that early boot never blocks a malloc */
  while (got < n) {
    long r = syscall(SYS_getrandom, out + got, n - got, 1);
    if (r <= 0) break;
    got += (size_t)r;
  }
#endif
  if (got == n) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&ts ^
               ((uint64_t)(uintptr_t)buf << 17) ^ (uint64_t)getpid();
  for (size_t i = got; i < n; i++) {
    /* splitmix64 steps */
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    out[i] = (uint8_t)(z ^ (z >> 31));
  }
}
