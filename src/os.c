/* os.c — the only file that talks to the kernel (Linux and other POSIX
 * systems). Contracts are in os.h; the design is at the top of alloc.c. */
#define _GNU_SOURCE
#include "os.h"
#include <sys/mman.h>
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
  if (p && size) munmap(p, size);
}

void *fw_os_symbol(const char *name) { return dlsym(RTLD_DEFAULT, name); }

bool fw_os_guard(void *p, size_t size, bool guard) {
  return mprotect(p, size, guard ? PROT_NONE : PROT_READ | PROT_WRITE) == 0;
}

/* MADV_DONTNEED rather than MADV_FREE: RSS falls at once (users watch it) and
 * the memory reads as zero afterwards, which calloc relies on. It does not
 * split mappings, so purging keeps vm.max_map_count safe. It fails on locked
 * memory (mlock, mlockall): then nothing is zeroed and the caller is told. */
bool fw_os_purge(void *p, size_t size) {
  if (!size) return true;
  size_t page = fw_os_page_size();
  uintptr_t start = (uintptr_t)p, end = start + size;
  uintptr_t in_start = fw_align_up(start, page), in_end = fw_align_down(end, page);
  if (in_start < in_end) {
    if (madvise((void *)in_start, in_end - in_start, MADV_DONTNEED) != 0) return false;
  } else {
    in_start = in_end = end;
  }
  /* the partial pages at the ends are shared with memory still in use */
  if (in_start > start) memset(p, 0, in_start - start);
  if (end > in_end && in_end >= in_start) memset((void *)in_end, 0, end - in_end);
  return true;
}

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
  if (madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0) return true;
  if (huge) atomic_store_explicit(&fw_os_thp_state, 2, memory_order_relaxed);
  return false;
#else
  (void)p; (void)size; (void)huge;
  return false;
#endif
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

void fw_os_write(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

const char *fw_os_getenv(const char *name) { return getenv(name); }

void fw_os_abort(void) { abort(); }

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

/* ---- locks: a recursive spin-then-yield lock on one word ------------------ */
void fw_lock_acquire(fw_lock_t *l) {
  uintptr_t me = fw_thread_id();
  if (atomic_load_explicit(&l->owner, memory_order_relaxed) == me) {
    l->depth++;
    return;
  }
  for (unsigned spin = 0;; spin++) {
    uintptr_t expected = 0;
    if (atomic_compare_exchange_weak_explicit(&l->owner, &expected, me, memory_order_acquire,
                                              memory_order_relaxed))
      return;
    if (spin >= 64) sched_yield();
  }
}

void fw_lock_release(fw_lock_t *l) {
  if (l->depth) {
    l->depth--;
    return;
  }
  atomic_store_explicit(&l->owner, 0, memory_order_release);
}

void fw_lock_reset(fw_lock_t *l) {
  l->depth = 0;
  atomic_store_explicit(&l->owner, 0, memory_order_relaxed);
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
