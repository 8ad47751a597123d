/* os_win.c — the OS layer on Windows (built with MinGW-w64; os.c is the
 * POSIX one). Contracts are in os.h.
 *
 * Memory: Windows separates reserving address space from committing it, and
 * only releases a reservation whole. freeway's contract is the mmap one
 * (map, unmap any page-aligned part), so every mapping is reserved and
 * committed at once, an unmapped part is decommitted, and a reservation is
 * released once nothing of it is committed any more. Committed memory counts
 * against the system's commit limit (RAM plus page file) as soon as it is
 * mapped, though pages are only backed when touched. */
#include "os.h"
#include <windows.h>
#include <psapi.h>
#include <ntsecapi.h>
#include <string.h>
#include <stdio.h>

static size_t fw_page_size_real;
static size_t fw_granularity = 65536;  /* where a reservation may start */
size_t fw_os_page = 4096;

void fw_os_init(void) {
  if (fw_page_size_real) return;
  SYSTEM_INFO si;
  GetSystemInfo(&si);
  size_t page = si.dwPageSize;
  fw_page_size_real = page && fw_is_pow2(page) ? page : 4096;
  if (si.dwAllocationGranularity && fw_is_pow2(si.dwAllocationGranularity))
    fw_granularity = si.dwAllocationGranularity;
  fw_os_page = fw_page_size_real;
  /* The thread-exit callbacks (fw_os_tkey_create) and the heaps' memory
   * outlive any FreeLibrary: this module stays loaded to the end. */
  HMODULE self;
  GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                     (LPCSTR)(const void *)&fw_page_size_real, &self);
}

void fw_os_page_size_override(size_t size) {
  fw_os_init();
  fw_os_page = size >= fw_page_size_real && fw_is_pow2(size) ? size : fw_page_size_real;
}

static void *fw_commit_new(void *at, size_t size) {
  return VirtualAlloc(at, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

/* The exact size first: reservations start on the allocation granularity,
 * which often suits. Then a reservation of size + align shows where an
 * aligned one fits: it is released and the aligned range reserved in its
 * place, which another thread may take in between (then again). Last, when
 * that keeps failing or the place is not on the granularity, the aligned
 * part of a larger reservation is committed and returned: the rest stays
 * reserved, uncommitted, until fw_os_unmap releases the whole. */
void *fw_os_map(size_t size, size_t align, size_t offset) {
  if (!fw_page_size_real) fw_os_init();
  if (size == 0) return NULL;
  fw_os_count(FW_OSC_MAP);
  size = fw_align_up(size, fw_page_size_real);
  if (align < fw_page_size_real) align = fw_page_size_real;
  if (offset & (fw_page_size_real - 1)) return NULL;
  offset &= align - 1;
  uint8_t *p = fw_commit_new(NULL, size);
  if (!p) return NULL;
  if ((((uintptr_t)p + offset) & (align - 1)) == 0) return p;
  VirtualFree(p, 0, MEM_RELEASE);
  size_t over = size + align;
  if (over < size) return NULL;
  for (int tries = 0;; tries++) {
    uint8_t *q = VirtualAlloc(NULL, over, MEM_RESERVE, PAGE_NOACCESS);
    if (!q) return NULL;
    uint8_t *a = (uint8_t *)(fw_align_up((uintptr_t)q + offset, align) - offset);
    if (a < q) a += align;
    if (tries < 8 && ((uintptr_t)a & (fw_granularity - 1)) == 0) {
      VirtualFree(q, 0, MEM_RELEASE);
      uint8_t *r = fw_commit_new(a, size);
      if (r == a) return r;
      if (r) VirtualFree(r, 0, MEM_RELEASE);
      continue;
    }
    if (VirtualAlloc(a, size, MEM_COMMIT, PAGE_READWRITE) == a) return a;
    VirtualFree(q, 0, MEM_RELEASE);
    return NULL;
  }
}

/* Releases the reservation at base if none of it is committed any more. */
static void fw_release_if_empty(void *base) {
  uint8_t *at = base;
  MEMORY_BASIC_INFORMATION mi;
  while (VirtualQuery(at, &mi, sizeof mi) == sizeof mi && mi.AllocationBase == base) {
    if (mi.State == MEM_COMMIT) return;
    at = (uint8_t *)mi.BaseAddress + mi.RegionSize;
  }
  VirtualFree(base, 0, MEM_RELEASE);
}

/* Calls fn on each piece of [p, p + size) that lies in one region (one
 * reservation, one state, one protection): the calls of the memory API
 * refuse a range that spans reservations, and mappings made one after the
 * other may be neighbours. False as soon as fn is. */
static bool fw_each_region(void *p, size_t size, bool (*fn)(uint8_t *at, size_t n, const MEMORY_BASIC_INFORMATION *mi,
                                                            void *arg),
                           void *arg) {
  uint8_t *at = p, *end = at + size;
  while (at < end) {
    MEMORY_BASIC_INFORMATION mi;
    if (VirtualQuery(at, &mi, sizeof mi) != sizeof mi) return false;
    uint8_t *stop = (uint8_t *)mi.BaseAddress + mi.RegionSize;
    if (stop > end || stop <= at) stop = end;
    if (!fn(at, (size_t)(stop - at), &mi, arg)) return false;
    at = stop;
  }
  return true;
}

typedef struct {
  void *bases[8];
  size_t n;
} fw_bases_t;

static bool fw_unmap_piece(uint8_t *at, size_t n, const MEMORY_BASIC_INFORMATION *mi, void *arg) {
  fw_bases_t *b = arg;
  if (mi->State == MEM_COMMIT) VirtualFree(at, n, MEM_DECOMMIT);
  if (mi->State == MEM_FREE) return true;
  if (b->n && b->bases[b->n - 1] == mi->AllocationBase) return true;
  if (b->n == sizeof b->bases / sizeof b->bases[0]) {
    for (size_t i = 0; i < b->n; i++) fw_release_if_empty(b->bases[i]);
    b->n = 0;
  }
  b->bases[b->n++] = mi->AllocationBase;
  return true;
}

void fw_os_unmap(void *p, size_t size) {
  if (!p || !size) return;
  fw_os_count(FW_OSC_UNMAP);
  if (!fw_page_size_real) fw_os_init();
  fw_bases_t b = {{0}, 0};
  fw_each_region(p, fw_align_up(size, fw_page_size_real), fw_unmap_piece, &b);
  for (size_t i = 0; i < b.n; i++) fw_release_if_empty(b.bases[i]);
}

/* Exported names of loaded modules: the program's first, then this
 * module's (freeway.dll, or the program again when linked statically). */
void *fw_os_symbol(const char *name) {
  HMODULE self = NULL;
  void *r = fw_os_module_symbol(GetModuleHandleA(NULL), name);
  if (!r && GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                               (LPCSTR)(const void *)&fw_page_size_real, &self))
    r = fw_os_module_symbol(self, name);
  return r;
}

static bool fw_guard_piece(uint8_t *at, size_t n, const MEMORY_BASIC_INFORMATION *mi, void *arg) {
  (void)mi;
  DWORD old;
  return VirtualProtect(at, n, *(const DWORD *)arg, &old) != 0;
}

bool fw_os_guard(void *p, size_t size, bool guard) {
  fw_os_count(FW_OSC_GUARD);
  DWORD prot = guard ? PAGE_NOACCESS : PAGE_READWRITE;
  return fw_each_region(p, size, fw_guard_piece, &prot);
}

/* Decommitting drops the pages for good, and committing them again gives
 * zero pages: the only purge that meets the contract (MEM_RESET and
 * DiscardVirtualMemory keep the old contents until the system needs the
 * page). Each piece is committed again with the protection it had, so that
 * a guard page stays one. */
static bool fw_committed_piece(uint8_t *at, size_t n, const MEMORY_BASIC_INFORMATION *mi, void *arg) {
  (void)at, (void)n, (void)arg;
  return mi->State == MEM_COMMIT;
}

static bool fw_purge_piece(uint8_t *at, size_t n, const MEMORY_BASIC_INFORMATION *mi, void *arg) {
  (void)arg;
  if (mi->State != MEM_COMMIT) return false;
  DWORD prot = mi->Protect & ~(DWORD)PAGE_GUARD;
  if (!VirtualFree(at, n, MEM_DECOMMIT)) return false;
  for (int tries = 0; VirtualAlloc(at, n, MEM_COMMIT, prot) != at; tries++) {
    /* the memory is gone and cannot be had again (the commit limit was
     * reached in between): it can neither be handed out nor reported as
     * unchanged */
    if (tries == 100) {
      static const char msg[] = "freeway: cannot commit purged memory again (commit limit reached); aborting\n";
      fw_os_write(2, msg, sizeof msg - 1);
      fw_os_abort();
    }
    Sleep(1);
  }
  return true;
}

bool fw_os_purge_pages(void *p, size_t size) {
  /* all of it committed first, so that a refusal leaves it as it was */
  if (!fw_each_region(p, size, fw_committed_piece, NULL)) return false;
  return fw_each_region(p, size, fw_purge_piece, NULL);
}

bool fw_os_thp(void *p, size_t size, bool huge) {
  /* large pages need a privilege and are locked in memory: not transparent */
  (void)p, (void)size, (void)huge;
  return false;
}

bool fw_os_populate(void *p, size_t size) {
  /* committed memory faults in at first touch; nothing to ask ahead */
  (void)p, (void)size;
  return false;
}

size_t fw_os_resident(const void *p, size_t size) {
  /* QueryWorkingSetEx could tell, one entry a page; nothing asks it yet */
  (void)p, (void)size;
  return SIZE_MAX;
}

bool fw_os_is_mapped(const void *p) {
  MEMORY_BASIC_INFORMATION mi;
  if (VirtualQuery(p, &mi, sizeof mi) != sizeof mi) return false;
  return mi.State == MEM_COMMIT && !(mi.Protect & (PAGE_NOACCESS | PAGE_GUARD));
}

/* The tick count is a plain read of a shared page, updated every 10-16 ms:
 * coarse, like the Linux clock it stands for. */
uint64_t fw_os_clock_ms(void) { return (uint64_t)GetTickCount64(); }

void fw_os_sleep_ms(unsigned ms) { Sleep(ms); }

/* 100 ns units since 1601 to ns since 1970 */
int64_t fw_os_time_ns(void) {
  FILETIME ft;
  GetSystemTimePreciseAsFileTime(&ft);
  int64_t t = (int64_t)(((uint64_t)ft.dwHighDateTime << 32) | ft.dwLowDateTime);
  return (t - 116444736000000000LL) * 100;
}

uint64_t fw_os_time_ms(void) { return (uint64_t)(fw_os_time_ns() / 1000000); }

/* ---- files: standard error and the reports fw_os_create opens ------------------
 * The callers speak of descriptors; 1 and 2 stand for the standard handles,
 * and fw_os_create hands out FW_FD_FIRST and up, naming slots of a small
 * table of handles (no allocation). */
#define FW_FD_FIRST 3
#define FW_FILES 16
static _Atomic(HANDLE) fw_files[FW_FILES];

static HANDLE fw_handle(int fd) {
  if (fd == 1) return GetStdHandle(STD_OUTPUT_HANDLE);
  if (fd == 2) return GetStdHandle(STD_ERROR_HANDLE);
  if (fd < FW_FD_FIRST || fd >= FW_FD_FIRST + FW_FILES) return NULL;
  return atomic_load(&fw_files[fd - FW_FD_FIRST]);
}

bool fw_os_write(int fd, const char *s, size_t n) {
  HANDLE h = fw_handle(fd);
  if (h == NULL || h == INVALID_HANDLE_VALUE) return false;
  while (n) {
    DWORD chunk = n > 0x40000000u ? 0x40000000u : (DWORD)n, w = 0;
    if (!WriteFile(h, s, chunk, &w, NULL) || w == 0) return false;
    s += w;
    n -= w;
  }
  return true;
}

int fw_os_create(const char *path) {
  HANDLE h = CreateFileA(path, GENERIC_WRITE, FILE_SHARE_READ, NULL, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
  if (h == INVALID_HANDLE_VALUE) {
    DWORD e = GetLastError();
    errno = e == ERROR_ACCESS_DENIED ? EACCES : e == ERROR_PATH_NOT_FOUND ? ENOENT : EIO;
    return -1;
  }
  for (int i = 0; i < FW_FILES; i++) {
    HANDLE none = NULL;
    if (atomic_compare_exchange_strong(&fw_files[i], &none, h)) return FW_FD_FIRST + i;
  }
  CloseHandle(h);
  errno = EMFILE;
  return -1;
}

void fw_os_close(int fd) {
  if (fd < FW_FD_FIRST || fd >= FW_FD_FIRST + FW_FILES) return;
  HANDLE h = atomic_exchange(&fw_files[fd - FW_FD_FIRST], NULL);
  if (h) CloseHandle(h);
}

bool fw_os_rename(const char *from, const char *to) {
  return MoveFileExA(from, to, MOVEFILE_REPLACE_EXISTING) != 0;
}

/* The value of an environment variable, copied into a buffer that lives as
 * long as the process (callers keep the pointer; nothing may allocate
 * here). Options are read a few times at start-up: when the buffer is full,
 * later values are not found. */
const char *fw_os_getenv(const char *name) {
  static char buf[16384];
  static _Atomic(size_t) used;
  DWORD n = GetEnvironmentVariableA(name, NULL, 0);
  if (n == 0) return NULL;
  size_t at = atomic_fetch_add(&used, (size_t)n);
  if (at > sizeof buf || (size_t)n > sizeof buf - at) return NULL;
  DWORD got = GetEnvironmentVariableA(name, buf + at, n);
  if (got == 0 || got >= n) return NULL;
  return buf + at;
}

/* abort's exit status on Windows, without the C runtime's message box */
void fw_os_abort(void) {
  TerminateProcess(GetCurrentProcess(), 3);
  for (;;) Sleep(INFINITE);
}

size_t fw_os_rss(void) {
  PROCESS_MEMORY_COUNTERS pmc;
  if (!GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc)) return 0;
  return pmc.WorkingSetSize;
}

size_t fw_os_rss_peak(void) {
  PROCESS_MEMORY_COUNTERS pmc;
  if (!GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc)) return 0;
  return pmc.PeakWorkingSetSize;
}

long fw_os_pid(void) { return (long)GetCurrentProcessId(); }

bool fw_os_on_signal(int sig, void (*fn)(void)) {
  /* signal() here reaches only what the C runtime raises itself */
  (void)sig, (void)fn;
  return false;
}

/* ---- call stacks -------------------------------------------------------------
 * RtlCaptureStackBackTrace walks with the unwind tables on x64 and with the
 * frame pointer chain on x86 (where code built without frame pointers cuts
 * the stack short). It never allocates. */
size_t fw_os_backtrace(uintptr_t *pcs, size_t max, uintptr_t skip_lo, uintptr_t skip_hi, uintptr_t from_pc) {
  if (!max) return 0;
  void *frames[62];
  USHORT got = RtlCaptureStackBackTrace(1, 62, frames, NULL);
  size_t n = 0, i = 0;
  if (from_pc) {
    while (i < got && (uintptr_t)frames[i] != from_pc) i++;
    if (i == got) return 0;
  } else {
    while (i < got && (uintptr_t)frames[i] >= skip_lo && (uintptr_t)frames[i] < skip_hi) i++;
  }
  for (; i < got && n < max; i++) pcs[n++] = (uintptr_t)frames[i];
  return n;
}

void fw_os_backtrace_init(void) {}

size_t fw_os_backtrace_quick(uintptr_t *pcs, size_t max, uintptr_t skip_lo, uintptr_t skip_hi) {
  (void)pcs, (void)max, (void)skip_lo, (void)skip_hi;
  return SIZE_MAX;
}

fw_bt_walk_t *fw_os_backtrace_cached(fw_bt_cache_t *c, uintptr_t skip_lo, uintptr_t skip_hi) {
  (void)c, (void)skip_lo, (void)skip_hi;
  return NULL;
}

/* The module (program or DLL) whose image holds addr. */
static HMODULE fw_module_at(uintptr_t addr) {
  HMODULE m = NULL;
  if (!GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                          (LPCSTR)addr, &m))
    return NULL;
  return m;
}

bool fw_os_code_range(const void *fn, uintptr_t *lo, uintptr_t *hi) {
  *lo = *hi = 0;
  HMODULE m = fw_module_at((uintptr_t)fn);
  if (!m) return false;
  const uint8_t *base = (const uint8_t *)m;
  const IMAGE_DOS_HEADER *dos = (const IMAGE_DOS_HEADER *)(const void *)base;
  const IMAGE_NT_HEADERS *nt = (const IMAGE_NT_HEADERS *)(const void *)(base + dos->e_lfanew);
  const IMAGE_SECTION_HEADER *sec = IMAGE_FIRST_SECTION(nt);
  for (unsigned i = 0; i < nt->FileHeader.NumberOfSections; i++) {
    if (!(sec[i].Characteristics & IMAGE_SCN_MEM_EXECUTE)) continue;
    uintptr_t l = (uintptr_t)base + sec[i].VirtualAddress, h = l + sec[i].Misc.VirtualSize;
    if (!*lo || l < *lo) *lo = l;
    if (h > *hi) *hi = h;
  }
  return m == GetModuleHandleA(NULL);
}

void fw_os_describe_pc(uintptr_t pc, char *buf, size_t n) {
  if (!n) return;
  buf[0] = 0;
  /* a return address points after the call: look up the call itself */
  HMODULE m = fw_module_at(pc - 1);
  char path[MAX_PATH];
  if (!m || !GetModuleFileNameA(m, path, sizeof path)) {
    snprintf(buf, n, "%#llx", (unsigned long long)pc);
    return;
  }
  const char *file = path;
  for (const char *c = path; *c; c++)
    if (*c == '\\' || *c == '/') file = c + 1;
  snprintf(buf, n, "%#llx %s+%#llx", (unsigned long long)pc, file, (unsigned long long)(pc - (uintptr_t)m));
}

/* The list of loaded code as the reports want it (paths, file offsets, GNU
 * build IDs) is an ELF notion: not provided. */
bool fw_os_mappings(void (*fn)(uintptr_t start, uintptr_t end, uintptr_t offset, const char *path, void *arg),
                    void *arg) {
  (void)fn, (void)arg;
  return false;
}

bool fw_os_object_at(uintptr_t addr, bool *is_main, uint8_t *id, size_t max, size_t *id_len) {
  (void)id, (void)max;
  HMODULE m = fw_module_at(addr);
  if (!m) return false;
  *is_main = m == GetModuleHandleA(NULL);
  *id_len = 0;
  return true;
}

/* ---- faults ------------------------------------------------------------------ */
bool fw_os_probing(uintptr_t pc) {
  (void)pc;
  return false;
}

bool fw_os_fault_hook(fw_os_fault_fn *fn) {
  (void)fn;
  return false;
}

/* ---- threads and processes ----------------------------------------------------
 * Fibre-local storage callbacks run when a thread exits (after its start
 * routine returned or it called ExitThread), on that thread, before the
 * loader frees its thread-local data. They are stdcall on x86 and get only
 * the value: one forwarder per key finds the function. */
#define FW_TKEYS 4
static void (*fw_tkey_fns[FW_TKEYS])(void *);
static _Atomic(unsigned) fw_tkey_count;

#define FW_TKEY_FORWARDER(i) \
  static void WINAPI fw_tkey_fwd##i(void *value) { if (value) fw_tkey_fns[i](value); }
FW_TKEY_FORWARDER(0)
FW_TKEY_FORWARDER(1)
FW_TKEY_FORWARDER(2)
FW_TKEY_FORWARDER(3)
static PFLS_CALLBACK_FUNCTION const fw_tkey_fwd[FW_TKEYS] = {fw_tkey_fwd0, fw_tkey_fwd1, fw_tkey_fwd2, fw_tkey_fwd3};

bool fw_os_tkey_create(fw_os_tkey_t *key, void (*fn)(void *)) {
  unsigned i = atomic_fetch_add(&fw_tkey_count, 1);
  if (i >= FW_TKEYS) return false;
  fw_tkey_fns[i] = fn;
  DWORD k = FlsAlloc(fw_tkey_fwd[i]);
  if (k == FLS_OUT_OF_INDEXES) return false;
  key->v = (uintptr_t)k;
  return true;
}

bool fw_os_tkey_set(fw_os_tkey_t key, void *value) { return FlsSetValue((DWORD)key.v, value) != 0; }

bool fw_os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  (void)prepare, (void)parent, (void)child;
  return false;
}

void fw_os_yield(void) { SwitchToThread(); }

unsigned fw_os_cpu_count(void) {
  DWORD_PTR mine = 0, all = 0;
  unsigned n = 0;
  if (GetProcessAffinityMask(GetCurrentProcess(), &mine, &all))
    for (; mine; mine &= mine - 1) n++;
  if (!n) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    n = si.dwNumberOfProcessors;
  }
  return n ? n : 1u;
}

void fw_os_assert_fail(const char *file, int line, const char *cond) {
  char buf[256];
  int n = snprintf(buf, sizeof buf, "freeway: internal check failed: %s at %s:%d\n", cond, file, line);
  if (n > 0) fw_os_write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
  fw_os_abort();
}

void fw_os_random(void *buf, size_t n) {
  uint8_t *out = buf;
  size_t got = 0;
  /* advapi32's SystemFunction036: the system generator, no allocation */
  while (got < n) {
    ULONG chunk = n - got > 0x10000 ? 0x10000 : (ULONG)(n - got);
    if (!RtlGenRandom(out + got, chunk)) break;
    got += chunk;
  }
  if (got == n) return;
  LARGE_INTEGER t;
  QueryPerformanceCounter(&t);
  uint64_t x = (uint64_t)t.QuadPart ^ (uint64_t)(uintptr_t)&t ^ ((uint64_t)(uintptr_t)buf << 17) ^
               ((uint64_t)GetCurrentProcessId() << 40) ^ GetTickCount64();
  for (size_t i = got; i < n; i++) {
    /* splitmix64 steps */
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    out[i] = (uint8_t)(z ^ (z >> 31));
  }
}

/* ---- code patching and foreign heaps (freeway-redirect.dll) ------------------ */
bool fw_os_read(const void *p, void *buf, size_t n) {
  /* the kernel copies and reports what it could not read: no fault here,
   * whatever another thread unmaps meanwhile */
  SIZE_T got = 0;
  return ReadProcessMemory(GetCurrentProcess(), p, buf, n, &got) && got == n;
}

void *fw_os_module(const char *name) { return (void *)GetModuleHandleA(name); }

void *fw_os_module_symbol(void *module, const char *name) {
  if (!module) return NULL;
  FARPROC f = GetProcAddress((HMODULE)module, name);
  void *r;
  memcpy(&r, &f, sizeof r);  /* a code address as data, without a cast between the two kinds */
  return r;
}

static void *fw_code_at(uintptr_t at, size_t size) {
  return VirtualAlloc((void *)at, size, MEM_RESERVE | MEM_COMMIT, PAGE_EXECUTE_READ);
}

#if defined(__x86_64__)
/* The first free range of size bytes met walking away from `from` towards the
 * limit (down when down), on the allocation granularity; 0 if none. Each
 * step skips a whole region (VirtualQuery), so the walk is short. */
static uintptr_t fw_code_search(uintptr_t from, uintptr_t limit, size_t size, bool down) {
  uintptr_t g = fw_granularity;
  uintptr_t a = down ? fw_align_down(from, g) - g : fw_align_up(from, g);
  for (int steps = 0; steps < 4096; steps++) {
    if (down ? a < limit || a < g : a > limit) return 0;
    MEMORY_BASIC_INFORMATION mi;
    if (VirtualQuery((void *)a, &mi, sizeof mi) != sizeof mi) return 0;
    uintptr_t rs = (uintptr_t)mi.BaseAddress, re = rs + mi.RegionSize;
    if (mi.State == MEM_FREE && re - a >= size) {
      void *r = fw_code_at(a, size);
      if (r) return (uintptr_t)r;
    }
    if (down) {
      uintptr_t below = mi.State == MEM_FREE ? a : fw_align_down(mi.AllocationBase ? (uintptr_t)mi.AllocationBase : rs, g);
      if (below < g) return 0;
      a = below - g;
    } else {
      a = fw_align_up(re > a ? re : a + g, g);
    }
  }
  return 0;
}
#endif

void *fw_os_code_near(const void *from, size_t size) {
  if (!fw_page_size_real) fw_os_init();
  size = fw_align_up(size ? size : 1, fw_page_size_real);
#if defined(__x86_64__)
  /* a margin of 64 MiB below the 2 GiB reach: the callers jump from
   * anywhere in the module that holds `from` */
  const uintptr_t reach = ((uintptr_t)1 << 31) - ((uintptr_t)64 << 20);
  uintptr_t at = (uintptr_t)from;
  uintptr_t r = fw_code_search(at, at > reach ? at - reach : 0, size, true);
  if (!r) r = fw_code_search(at, at + reach - size, size, false);
  return (void *)r;
#else
  (void)from;
  return fw_code_at(0, size);
#endif
}

bool fw_os_code_write(void *at, const void *bytes, size_t n) {
  DWORD old;
  if (!VirtualProtect(at, n, PAGE_EXECUTE_READWRITE, &old)) return false;
  uintptr_t a = (uintptr_t)at, w = a & ~(uintptr_t)7;
  if (n <= 8 && a + n <= w + 8) {
    uint64_t v;
    memcpy(&v, (const void *)w, sizeof v);
    memcpy((uint8_t *)&v + (a - w), bytes, n);
    __atomic_store_n((uint64_t *)w, v, __ATOMIC_SEQ_CST);
  } else {
    memcpy(at, bytes, n);
  }
  DWORD ignored;
  VirtualProtect(at, n, old, &ignored);
  FlushInstructionCache(GetCurrentProcess(), at, n);
  return true;
}

/* ntdll's module-load notifications (Vista and later, and Wine): declared
 * here, the MinGW headers do not. */
typedef VOID(CALLBACK *fw_ldr_notify_fn)(ULONG reason, const void *data, PVOID ctx);
typedef LONG(NTAPI *fw_ldr_register_fn)(ULONG flags, fw_ldr_notify_fn fn, PVOID ctx, PVOID *cookie);
static void (*fw_module_load_fn)(void);

static VOID CALLBACK fw_module_notify(ULONG reason, const void *data, PVOID ctx) {
  (void)data, (void)ctx;
  if (reason == 1 /* LDR_DLL_NOTIFICATION_REASON_LOADED */ && fw_module_load_fn) fw_module_load_fn();
}

bool fw_os_on_module_load(void (*fn)(void)) {
  void *f = fw_os_module_symbol(fw_os_module("ntdll.dll"), "LdrRegisterDllNotification");
  if (!f) return false;
  fw_ldr_register_fn reg;
  memcpy(&reg, &f, sizeof reg);
  fw_module_load_fn = fn;
  PVOID cookie;
  return reg(0, fw_module_notify, NULL, &cookie) >= 0;
}

size_t fw_os_heap_size(void *heap, const void *p) {
  return (size_t)HeapSize(heap ? (HANDLE)heap : GetProcessHeap(), 0, p);
}

void fw_os_heap_free(void *heap, void *p) { HeapFree(heap ? (HANDLE)heap : GetProcessHeap(), 0, p); }

void *fw_os_heap_resize_in_place(void *heap, void *p, size_t size) {
  return HeapReAlloc(heap ? (HANDLE)heap : GetProcessHeap(), HEAP_REALLOC_IN_PLACE_ONLY, p, size);
}
