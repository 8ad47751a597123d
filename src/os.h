/* os.h — the OS layer: everything freeway asks of the platform, each
 * primitive with its contract. Only os.c (Linux and other POSIX systems)
 * and os_win.c (Windows) talk to the kernel, and the build compiles one of
 * them; a port to another platform adds its own (and its fw_thread_id and
 * thread-local access below) and changes nothing else.
 * Failures are reported to the caller through return values: this layer
 * prints nothing and decides nothing. */
#ifndef FW_OS_H
#define FW_OS_H
#include "base.h"

/* The thread pointer: unique among live threads, stable for a thread's
 * life, read without a call (the free fast path compares it). A new thread
 * may get the pointer of one that has exited. */
#if !defined(FW_SANITIZED) && (defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__))
#define FW_SANITIZED 1
#endif
#if !defined(FW_SANITIZED) && defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define FW_SANITIZED 1
#endif
#endif
FW_INLINE uintptr_t fw_thread_id(void) {
#if defined(_WIN32) && defined(__x86_64__)
  /* the thread environment block's pointer to itself, at gs:0x30 */
  return *(const uintptr_t __seg_gs *)0x30;
#elif defined(_WIN32) && defined(__i386__)
  /* the same at fs:0x18 */
  return *(const uintptr_t __seg_fs *)0x18;
#elif defined(__x86_64__) && defined(__SEG_FS) && !defined(__STRICT_ANSI__) && !defined(FW_SANITIZED)
  /* a plain load through the fs segment (word 0 of the thread block points
   * to itself): the compiler may fold it into the compare that uses it.
   * UBSan takes it for a load through a null pointer: sanitizer builds
   * (FW_SANITIZED) use the asm below. */
  return *(const uintptr_t __seg_fs *)0;
#elif defined(__x86_64__)
  uintptr_t tp;
  __asm__("mov %%fs:0, %0" : "=r"(tp));
  return tp;
#elif defined(__i386__)
  uintptr_t tp;
  __asm__("mov %%gs:0, %0" : "=r"(tp));
  return tp;
#elif defined(__aarch64__)
  uintptr_t tp;
  __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp));
  return tp;
#else
  return (uintptr_t)__builtin_thread_pointer();
#endif
}

/* Thread-local variables: FW_THREAD_LOCAL in the definition (and the
 * extern declaration) of each, FW_TLS(name) wherever it is read or written.
 * Elsewhere they are __thread variables, one load through the thread
 * pointer. MinGW's gcc only emulates __thread: each access calls
 * __emutls_get_address, which allocates a thread's block with malloc the
 * first time, so it would recurse when freeway is malloc, and it puts a
 * call on the fast paths. The variables are native PE thread-local data
 * instead, placed in the image's .tls section by hand, which the loader
 * copies for every thread (with their initial values, relocated): the
 * thread's copy is found in three loads with no call, through the thread
 * block's array of per-module blocks, indexed by the loader's _tls_index
 * for this image, at the offset of the variable in the section. */
#if defined(_WIN32)
#if defined(__x86_64__)
#define FW_OS_TLS_ARRAY (*(char *const *const __seg_gs *)0x58)
#else
#define FW_OS_TLS_ARRAY (*(char *const *const __seg_fs *)0x2c)
#endif
extern unsigned long _tls_index;  /* set by the loader; the CRT defines it */
#define FW_THREAD_LOCAL __attribute__((section(".tls$FW")))
#define FW_TLS(var)                                                                        \
  (*__extension__({                                                                        \
    char *fw_tls_b_ = FW_OS_TLS_ARRAY[_tls_index];                                          \
    __asm__("lea %c1@secrel32(%0), %0" : "+r"(fw_tls_b_) : "i"(&(var)));                   \
    (__typeof__(&(var)))(void *)fw_tls_b_;                                                 \
  }))
#else
#define FW_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))
#define FW_TLS(var) (var)
#endif

/* Size of an OS page, read from the system once (fw_os_init) and fixed for
 * the process: 4 KiB on x86, 16 or 64 KiB on some arm64 and ppc64 kernels. */
FW_HIDDEN extern size_t fw_os_page;  /* set by fw_os_init; 4096 until then */
FW_INLINE size_t fw_os_page_size(void) { return fw_os_page; }
FW_HIDDEN void fw_os_init(void);

/* Maps size bytes of fresh memory, reading as zero, such that
 * (result + offset) is a multiple of align. align is a power of two (below
 * the OS page size it means the page size: a mapping starts on a page
 * anyway); offset must be a multiple of the OS page size, or the request is
 * refused (NULL, nothing mapped). Address space is reserved without
 * counting against overcommit (MAP_NORESERVE); pages are backed as they are
 * touched. NULL when the OS refuses. */
FW_HIDDEN void *fw_os_map(size_t size, size_t align, size_t offset);
/* The address of a symbol of the process (any loaded object in the global
 * scope), or NULL. */
FW_HIDDEN void *fw_os_symbol(const char *name);
/* Returns a whole mapping (or a page-aligned part of one) to the OS. */
FW_HIDDEN void fw_os_unmap(void *p, size_t size);
/* Makes the OS pages of [p, p + size) inaccessible (guard) or accessible
 * again; false if the OS refused. Each guard splits its mapping. */
FW_HIDDEN bool fw_os_guard(void *p, size_t size, bool guard);
/* How many times freeway asked for each of the primitives above and below
 * (fw_os_map, fw_os_unmap, fw_os_purge, fw_os_guard, fw_os_thp, ...), for the
 * ledger: calls of the primitive, each one or a few system calls. */
enum { FW_OSC_MAP, FW_OSC_UNMAP, FW_OSC_PURGE, FW_OSC_GUARD, FW_OSC_THP, FW_OSC_RESIDENT, FW_OSC_POPULATE, FW_OSC_COUNT };
FW_HIDDEN extern _Atomic(uint64_t) fw_os_calls[FW_OSC_COUNT];
FW_INLINE void fw_os_count(int kind) { atomic_fetch_add_explicit(&fw_os_calls[kind], 1, memory_order_relaxed); }
/* Gives the memory of [p, p + size) back to the OS and makes it read as
 * zero. True: every byte of the range now reads as zero, and the whole OS
 * pages inside it no longer count as resident (the partial pages at either
 * end, if any, were cleared by writing). False: nothing was done (locked
 * memory, mlockall, a kernel that refuses), the contents are unchanged and
 * the memory stays resident: the caller must keep treating it as dirty. */
FW_HIDDEN bool fw_os_purge(void *p, size_t size);
/* The platform's part of fw_os_purge (os_purge.c does the rest): whole OS
 * pages, [p, p + size) page-aligned and not empty; the same contract. */
FW_HIDDEN bool fw_os_purge_pages(void *p, size_t size);
/* Asks the kernel to back the range with transparent huge pages (2 MiB, one
 * page fault each, taken at the first touch of a huge page's range) or not
 * to. False if it refused (no THP support): nothing changed. Splits the
 * mapping where the advice changes, so callers give it in whole chunks. */
FW_HIDDEN bool fw_os_thp(void *p, size_t size, bool huge);
/* Faults the whole OS pages inside [p, p + size) in, writable, in one call
 * instead of one fault per page. False if there is none, or if the OS
 * cannot (then nothing happened; the pages fault in at first touch as
 * before). */
FW_HIDDEN bool fw_os_populate(void *p, size_t size);
/* How many bytes of the whole OS pages inside [p, p + size) are resident
 * (size at most FW_OS_RESIDENT_MAX); SIZE_MAX if the OS cannot tell. One
 * system call that walks the range's page tables and touches no page. */
#define FW_OS_RESIDENT_MAX ((size_t)4 << 20)
FW_HIDDEN size_t fw_os_resident(const void *p, size_t size);
/* True if the page holding p is mapped (a probe; no access is made). */
FW_HIDDEN bool fw_os_is_mapped(const void *p);

/* Milliseconds of a monotonic clock, cheap enough for every page free
 * (a few ms of granularity). */
FW_HIDDEN uint64_t fw_os_clock_ms(void);
/* Fills buf with bytes an outsider cannot guess: the kernel's random source,
 * or, where that is refused, a mix of the clock and address-space layout. */
FW_HIDDEN void fw_os_random(void *buf, size_t n);
FW_HIDDEN void fw_os_sleep_ms(unsigned ms);
/* Nanoseconds since the epoch, by the wall clock (time stamps of reports). */
FW_HIDDEN int64_t fw_os_time_ns(void);
/* Writes all of s to fd (2: standard error), going on after short writes
 * and interrupted calls. False if the OS refused the rest (a full disk, a
 * closed pipe); callers with nowhere to report that ignore it. */
FW_HIDDEN bool fw_os_write(int fd, const char *s, size_t n);
FW_HIDDEN const char *fw_os_getenv(const char *name);
FW_HIDDEN __attribute__((noreturn)) void fw_os_abort(void);

/* ---- reports (docs/observability.md) -----------------------------------------
 * fw_os_create opens path for writing, created or truncated (mode 0644);
 * -1 on failure, with errno. fw_os_rss: the process's resident memory in
 * bytes, 0 where the platform does not tell. fw_os_time_ms: wall-clock
 * time (ms since 1970), for time stamps, not for measuring. */
FW_HIDDEN int fw_os_create(const char *path);
FW_HIDDEN void fw_os_close(int fd);
/* Renames a file over another, atomically for readers of the second. */
FW_HIDDEN bool fw_os_rename(const char *from, const char *to);
FW_HIDDEN size_t fw_os_rss(void);
/* The most resident memory the process has had (0 where not told). */
FW_HIDDEN size_t fw_os_rss_peak(void);
FW_HIDDEN long fw_os_pid(void);
FW_HIDDEN uint64_t fw_os_time_ms(void);
/* Calls fn (in a signal handler, on the thread the signal reaches) each
 * time signal sig arrives; false if sig cannot be caught. */
FW_HIDDEN bool fw_os_on_signal(int sig, void (*fn)(void));


/* ---- call stacks and faults (cautious mode's reports) ---------------------
 * fw_os_backtrace fills pcs with return addresses of the calling thread's
 * stack, outermost last, read with the unwinder (no frame pointers needed);
 * it never allocates. Leading frames whose address lies in [skip_lo,
 * skip_hi) are left out; with from_pc non-zero, every frame before the one
 * at from_pc is left out instead (a signal handler's own frames). Returns
 * the number of frames stored. */
FW_HIDDEN size_t fw_os_backtrace(uintptr_t *pcs, size_t max, uintptr_t skip_lo, uintptr_t skip_hi,
                                 uintptr_t from_pc);
/* The same walk (from_pc 0) from the frame of the caller of
 * fw_os_backtrace_quick on, at a small fraction of the cost once each
 * return address has been seen: the rule for stepping over a frame is
 * decoded from the unwind tables once per return address and kept (see
 * os.c). Returns SIZE_MAX, with pcs holding anything, when a frame needs a
 * rule it does not keep (a signal frame, say): the caller then walks with
 * fw_os_backtrace. fw_os_backtrace_init, called once before any thread
 * walks (it lists the objects loaded so far, whose rules may be kept),
 * turns it on; until then it returns SIZE_MAX. */
FW_HIDDEN void fw_os_backtrace_init(void);
FW_HIDDEN size_t fw_os_backtrace_quick(uintptr_t *pcs, size_t max, uintptr_t skip_lo, uintptr_t skip_hi);
/* The heap profiler takes the stack of the same few call sites again and
 * again. fw_os_backtrace_cached keeps, per thread, the last walks made from
 * each stack depth: where the walk started (the stack pointer, the return
 * address and, if a step used it, the frame pointer of the caller of
 * fw_os_backtrace_cached) and every stack word whose value steered it (the
 * return addresses, and the frame pointers and frame addresses read that a
 * later step used). A walk that starts from the same state and finds each
 * of those words unchanged in its place would read the same stack, step by
 * step: the entry's stack is then the stack, exactly, with a compare per
 * word instead of a step per frame. Only walks through code of objects
 * loaded before the walker was set up are kept (their rules never change).
 * The cache must be used by one thread only, and from one call site: its
 * words are read again only at the stack addresses that thread's own walks
 * read before, which stay mapped while it runs. */
#define FW_BT_FRAMES 16
#define FW_BT_READS 40
#define FW_BT_WAYS 16
typedef struct {
  uintptr_t sp, pc, bp;   /* where the walk started; sp 0: not kept */
  uint32_t nreads, npcs;
  uint32_t bp_used;       /* whether a step used the starting bp */
  uint32_t tag;           /* the caller's, for this stack (0 when new) */
  struct {
    uintptr_t at, val;    /* side by side: a check reads both */
  } rd[FW_BT_READS];
  uintptr_t pcs[FW_BT_FRAMES];
} fw_bt_walk_t;
typedef struct {
  uint32_t turn;          /* which way of a set the next new walk replaces */
  /* a bit per way that holds a walk: a way is read only when its bit says
   * so, so that a new cache (zeroed memory the OS has not given pages to
   * yet) has its pages touched by a write first, the walk's, not by a read
   * of zeros and then the write, a fault each; and emptied with one store */
  uint32_t valid;
  fw_bt_walk_t walk[FW_BT_WAYS];  /* a walk that cannot be kept is returned with sp 0 */
} fw_bt_cache_t;
_Static_assert(FW_BT_WAYS <= 32, "a valid bit per way");
/* The stack of the caller of fw_os_backtrace_cached, as fw_os_backtrace_quick
 * would find it (up to FW_BT_FRAMES frames): the cache's entry that holds
 * it, or NULL when the quick walk cannot step (walk with fw_os_backtrace
 * then). The entry's tag persists across calls that find the same stack. */
FW_HIDDEN fw_bt_walk_t *fw_os_backtrace_cached(fw_bt_cache_t *c, uintptr_t skip_lo, uintptr_t skip_hi);
/* The executable code of the loaded object (program or shared library) that
 * holds fn: [*lo, *hi). Returns true if that object is the main program. */
FW_HIDDEN bool fw_os_code_range(const void *fn, uintptr_t *lo, uintptr_t *hi);
/* Writes "symbol+0xoff (object)" or "object+0xoff" for a code address. */
FW_HIDDEN void fw_os_describe_pc(uintptr_t pc, char *buf, size_t n);

/* ---- the loaded code (reports that outlive the process) ------------------
 * fw_os_mappings calls fn for every mapping of the process that is
 * executable and backed by a file (its path starts with '/'; " (deleted)"
 * stays appended to a file that was removed), in address order: [start,
 * end), the offset in the file of start, and the path, valid during the
 * call only. It reads /proc/self/maps through a scratch mapping (no
 * allocation); a line longer than that buffer (16 KiB: only a path through
 * directories nested past PATH_MAX is that long) is left out whole, and so
 * is a file offset beyond uintptr_t. False if the list could not be read,
 * or not to its end (fn may have been called for some mappings). */
FW_HIDDEN bool fw_os_mappings(void (*fn)(uintptr_t start, uintptr_t end, uintptr_t offset, const char *path,
                                         void *arg),
                              void *arg);
/* The loaded object (program or shared library) one of whose executable
 * segments holds addr, as the dynamic loader lists them (no allocation):
 * *is_main tells whether it is the main program, and id receives up to max
 * bytes of its GNU build ID (the NT_GNU_BUILD_ID note), *id_len their
 * number (0 if it has none). False, with nothing set, if no loaded object
 * holds addr. */
FW_HIDDEN bool fw_os_object_at(uintptr_t addr, bool *is_main, uint8_t *id, size_t max, size_t *id_len);

/* Functions that read memory through a pointer the caller passed before
 * anything has validated it (the free fast path reads the slice descriptor
 * at the pointer's segment base) live in a section of their own, so that a
 * fault handler can tell a fault in them from any other. Only placement:
 * the code is the same. */
#ifdef _WIN32
/* no fault hook on Windows (fw_os_fault_hook): placement does not matter */
#define FW_PROBING __attribute__((noinline))
#else
#define FW_PROBING __attribute__((section("fw_probing"), noinline))
#endif
/* Installs a SIGSEGV and SIGBUS handler. A fault whose instruction lies in
 * an FW_PROBING function calls fn with the faulting data address, the
 * instruction's address and the general registers at the fault; fn is
 * expected not to return. Any other fault (or fn returning) puts the
 * previous handler back and lets the fault take its normal course. */
/* True if pc lies in an FW_PROBING function. */
FW_HIDDEN bool fw_os_probing(uintptr_t pc);
typedef void fw_os_fault_fn(uintptr_t addr, uintptr_t pc, const uintptr_t *regs, size_t nregs);
FW_HIDDEN bool fw_os_fault_hook(fw_os_fault_fn *fn);

/* For the internal unit tests: pretend the OS page is this size (a power of
 * two, at least the real one), to exercise the partial-page rules of
 * fw_os_purge on a 4 KiB kernel. 0 restores the real size. */
FW_HIDDEN void fw_os_page_size_override(size_t size);

/* ---- locks ------------------------------------------------------------------
 * The few process-wide locks (metadata, heap-struct pool, arena growth, the
 * list of abandoned huge mappings) guard rare paths only. They may be taken
 * again by the thread that holds them: fork's prepare handler holds them all,
 * and another library's prepare handler that runs after it on the same
 * thread may still allocate (a plain mutex would deadlock there). */
typedef struct fw_lock_s {
  _Atomic(uintptr_t) owner;  /* thread id of the holder, 0 when free */
  uint32_t depth;            /* re-entries by the holder */
} fw_lock_t;
#define FW_LOCK_INIT {0, 0}
FW_HIDDEN void fw_lock_acquire(fw_lock_t *l);
FW_HIDDEN void fw_lock_release(fw_lock_t *l);
/* In a fork child: the lock is free again, whoever held it. */
FW_HIDDEN void fw_lock_reset(fw_lock_t *l);

/* ---- threads and processes -------------------------------------------------
 * A thread-exit hook: fw_os_tkey_create registers fn once per key (false if
 * the OS has no key left); fw_os_tkey_set gives the calling thread a value
 * for the key (false if the OS refused). When a thread with a non-NULL value exits, fn(value) runs on
 * that thread, with its thread-local variables still readable; by then the
 * value is NULL again, and fn may set it anew, in which case fn may run again
 * (POSIX key destructors run in a few rounds; on Windows, fibre-local storage
 * callbacks run once). Perhaps not for the thread that ends the process by
 * returning from main or calling exit: its data dies with the process. */
typedef struct { uintptr_t v; } fw_os_tkey_t;
FW_HIDDEN bool fw_os_tkey_create(fw_os_tkey_t *key, void (*fn)(void *));
FW_HIDDEN bool fw_os_tkey_set(fw_os_tkey_t key, void *value);
/* Handlers around fork (pthread_atfork's contract); false where the platform
 * has no fork (Windows) or refused. */
FW_HIDDEN bool fw_os_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
/* Gives the CPU to another ready thread, if any. */
FW_HIDDEN void fw_os_yield(void);
/* The number of CPUs this process may run on, at least 1. */
FW_HIDDEN unsigned fw_os_cpu_count(void);

/* ---- code patching and foreign heaps (Windows: freeway-redirect.dll) --------
 * Only os_win.c defines these; nothing on other platforms calls them.
 * fw_os_read copies n bytes from p into buf when all of them are readable,
 * and returns false (buf unchanged or partly written) when any is not,
 * without a fault, however other threads change the address space
 * meanwhile: the test of memory that may not be ours. A system call: slow
 * paths only. */
FW_HIDDEN bool fw_os_read(const void *p, void *buf, size_t n);
/* The handle of a loaded module (DLL) by file name, or NULL; and an
 * exported name of a module, or NULL. Neither loads anything. */
FW_HIDDEN void *fw_os_module(const char *name);
FW_HIDDEN void *fw_os_module_symbol(void *module, const char *name);
/* size bytes of executable memory within reach of a 32-bit relative jump
 * from `from` (x64: within 2 GiB of it; x86: anywhere), read-only until
 * written with fw_os_code_write; NULL if none is free there. Never freed. */
FW_HIDDEN void *fw_os_code_near(const void *from, size_t size);
/* Writes n bytes over code at at (write access around the copy, the old
 * protection put back, the instruction cache flushed). When the bytes lie
 * in one aligned 8-byte word, that word is replaced by one atomic store, so
 * a thread running the code sees it whole before or after. False if the
 * protection could not be changed (nothing written). */
FW_HIDDEN bool fw_os_code_write(void *at, const void *bytes, size_t n);
/* Calls fn on the loading thread each time a module is loaded into the
 * process, once it is mapped and before its initialisation runs (under the
 * loader's lock: fn must not load modules or wait for other threads).
 * False if the system cannot tell. */
FW_HIDDEN bool fw_os_on_module_load(void (*fn)(void));
/* The system heap API, for blocks a C runtime took from its heap (heap:
 * that heap's handle; NULL for the process heap): the size of a block,
 * freeing it, and resizing it in place only (NULL when it cannot). The size
 * is SIZE_MAX when p is not a block of heap. */
FW_HIDDEN size_t fw_os_heap_size(void *heap, const void *p);
FW_HIDDEN void fw_os_heap_free(void *heap, void *p);
FW_HIDDEN void *fw_os_heap_resize_in_place(void *heap, void *p, size_t size);

/* ---- internal consistency checks (FW_DEBUG builds) ------------------------ */
FW_HIDDEN __attribute__((noreturn)) void fw_os_assert_fail(const char *file, int line, const char *cond);
#ifdef FW_DEBUG
#define FW_ASSERT(c) ((c) ? (void)0 : fw_os_assert_fail(__FILE__, __LINE__, #c))
#else
#define FW_ASSERT(c) ((void)0)
#endif

#endif
