/* freeway — a scalable, thread-caching memory allocator.
 *
 * This header is the whole public C API. Every name is prefixed fw_. When the
 * library is built with overriding (the default for libfreeway.so), the
 * standard names (malloc, free, ...) are provided too and behave exactly as
 * the fw_ functions of the same name.
 *
 * Options are read from FREEWAY_* environment variables at start-up; see
 * docs/options.md (generated from src/options.def) for the list.
 */
#ifndef FREEWAY_H
#define FREEWAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FREEWAY_VERSION_MAJOR 0
#define FREEWAY_VERSION_MINOR 1
#define FREEWAY_VERSION_PATCH 0
#define FREEWAY_VERSION ((FREEWAY_VERSION_MAJOR * 10000) + (FREEWAY_VERSION_MINOR * 100) + FREEWAY_VERSION_PATCH)

#if defined(_WIN32) && defined(FW_BUILDING)
/* PE objects have no visibility: freeway.dll exports what is marked (and
 * an executable that links the static library exports it too, harmlessly). */
#define FW_API __declspec(dllexport)
#elif defined(_WIN32)
#define FW_API
#elif defined(__GNUC__)
#define FW_API __attribute__((visibility("default")))
#endif
#if defined(__GNUC__)
#define FW_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#define FW_ALLOC_SIZE(n) __attribute__((alloc_size(n)))
#define FW_ALLOC_SIZE2(n, m) __attribute__((alloc_size(n, m)))
#else
#ifndef FW_API
#define FW_API
#endif
#define FW_MALLOC_ATTR
#define FW_ALLOC_SIZE(n)
#define FW_ALLOC_SIZE2(n, m)
#endif

/* ---- The malloc family ------------------------------------------------- */
/* Failure returns NULL with errno = ENOMEM (EINVAL for a bad alignment). */
FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE(1) void *fw_malloc(size_t size);
FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE2(1, 2) void *fw_calloc(size_t count, size_t size);
FW_API FW_ALLOC_SIZE(2) void *fw_realloc(void *p, size_t size);
FW_API FW_ALLOC_SIZE2(2, 3) void *fw_reallocarray(void *p, size_t count, size_t size);
FW_API void fw_free(void *p);
/* Sized and aligned frees: size may be anything between the requested size
 * and fw_malloc_usable_size(p); alignment must be the one asked for. In
 * cautious mode (FREEWAY_CAUTIOUS=1, docs/cautious.md) both are checked,
 * and fw_malloc_usable_size(p) is the requested size. */
FW_API void fw_free_sized(void *p, size_t size);
FW_API void fw_free_aligned(void *p, size_t alignment);
FW_API void fw_free_aligned_sized(void *p, size_t alignment, size_t size);
FW_API size_t fw_malloc_usable_size(const void *p);

FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE(1) void *fw_malloc_aligned(size_t size, size_t alignment);
FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE(2) void *fw_aligned_alloc(size_t alignment, size_t size);
FW_API int fw_posix_memalign(void **out, size_t alignment, size_t size);
FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE(2) void *fw_memalign(size_t alignment, size_t size);
FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE(1) void *fw_valloc(size_t size);
FW_API FW_MALLOC_ATTR void *fw_pvalloc(size_t size);

/* The largest alignment that succeeds whenever the memory is there (1 GiB on
 * 64-bit systems, 16 MiB on 32-bit ones). Any larger power of two is accepted as well and fails
 * with ENOMEM only when the address space cannot place it. */
FW_API size_t fw_max_alignment(void);

/* ---- Heaps (heap groups) ----------------------------------------------- */
/* A heap is a set of pages owned by the thread that created it.
 *
 * Thread contract:
 * - Blocks of any heap may be freed (fw_free, free, realloc, delete) from
 *   any thread, at any time, also after the heap's thread has exited.
 * - Every other fw_heap_* call on a heap must come from the thread that
 *   created it; fw_heap_usable_size is the one exception. A call from any
 *   other thread is refused and changes nothing: allocation calls return
 *   NULL, fw_heap_stats returns -1, fw_heap_contains returns false, the
 *   others do nothing; errno is set to EPERM and the misuse is reported on
 *   standard error (the first few times). In cautious mode
 *   (FREEWAY_CAUTIOUS=1) it is reported with the heap's address and the
 *   process aborts.
 * - A heap ends with its thread: when the thread exits, the heap's live
 *   blocks stay valid (any thread may free them) and the handle is dead;
 *   calls on it are refused as above.
 * - A NULL heap is refused with EINVAL.
 * A heap holds only the blocks allocated from it: memory left by exited
 * threads is adopted by default heaps only. */
typedef struct fw_heap_s fw_heap_t;

FW_API fw_heap_t *fw_heap_new(void);
/* Live blocks stay valid and move to the calling thread's default heap. */
FW_API void fw_heap_delete(fw_heap_t *heap);
/* Frees every block of the heap at once, in time proportional to its pages. */
FW_API void fw_heap_destroy(fw_heap_t *heap);
FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE(2) void *fw_heap_malloc(fw_heap_t *heap, size_t size);
FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE2(2, 3) void *fw_heap_calloc(fw_heap_t *heap, size_t count, size_t size);
FW_API FW_ALLOC_SIZE(3) void *fw_heap_realloc(fw_heap_t *heap, void *p, size_t size);
FW_API FW_MALLOC_ATTR FW_ALLOC_SIZE(2) void *fw_heap_malloc_aligned(fw_heap_t *heap, size_t size, size_t alignment);
/* Usable size of p if p belongs to heap, 0 otherwise. */
FW_API size_t fw_heap_usable_size(const fw_heap_t *heap, const void *p);
/* Folds in blocks freed by other threads and returns empty pages; force also
 * releases cached memory to the OS at once. */
FW_API void fw_heap_collect(fw_heap_t *heap, bool force);
/* The calling thread's default heap (NULL once the thread's exit has begun:
 * a key destructor that runs after freeway's). */
FW_API fw_heap_t *fw_heap_get_default(void);
/* True if p was handed out by heap and is still live. */
FW_API bool fw_heap_contains(const fw_heap_t *heap, const void *p);

typedef struct fw_heap_stats_s {
  size_t size;           /* sizeof(fw_heap_stats_t), set by the caller */
  size_t blocks_live;    /* blocks allocated and not yet freed */
  size_t bytes_live;     /* bytes those blocks take: their size classes' block
                            sizes (usable size, plus the padding in front of an
                            aligned block) */
  size_t bytes_peak;     /* highest bytes_live seen by fw_heap_stats calls */
  size_t pages;          /* pages the heap holds */
  size_t bytes_reserved; /* bytes of those pages */
} fw_heap_stats_t;
/* Exact for blocks allocated and freed by the owning thread; blocks freed by
 * other threads are counted once the owner has collected them. In cautious
 * mode blocks_live and bytes_live count the live blocks with their
 * requested sizes (plus the padding in front of an aligned block), exact at
 * once whoever freed them. */
FW_API int fw_heap_stats(const fw_heap_t *heap, fw_heap_stats_t *out);

/* ---- Object pools -------------------------------------------------------- */
typedef struct fw_pool_s fw_pool_t;
typedef struct fw_pool_options_s {
  size_t size;          /* sizeof(fw_pool_options_t) */
  unsigned shards;      /* sub-pools; 0: chosen from the number of CPUs */
  unsigned cache_limit; /* objects kept per thread cache; 0: default */
  bool zero;            /* hand out zeroed objects */
} fw_pool_options_t;

FW_API fw_pool_t *fw_pool_new(size_t object_size, size_t alignment, const fw_pool_options_t *options);
FW_API FW_MALLOC_ATTR void *fw_pool_alloc(fw_pool_t *pool);
FW_API void fw_pool_free(fw_pool_t *pool, void *p);
FW_API void fw_pool_destroy(fw_pool_t *pool);
typedef struct fw_pool_stats_s {
  size_t size;            /* sizeof(fw_pool_stats_t), set by the caller */
  size_t object_size;     /* the size each object takes (rounded) */
  size_t objects_live;    /* allocated and not freed */
  size_t objects_peak;
  size_t bytes_reserved;  /* memory the pool holds */
  size_t slabs;
} fw_pool_stats_t;
FW_API int fw_pool_stats(const fw_pool_t *pool, fw_pool_stats_t *out);

/* ---- Whole-process control and statistics ------------------------------ */
/* Folds in remote frees, returns empty pages and (force) purges cached memory
 * to the OS now rather than after FREEWAY_PURGE_DELAY. */
FW_API void fw_collect(bool force);

typedef struct fw_stats_s {
  size_t size;             /* sizeof(fw_stats_t), set by the caller */
  size_t version;          /* FREEWAY_VERSION */
  size_t bytes_reserved;   /* address space mapped from the OS */
  size_t bytes_committed;  /* mapped and not purged (an upper bound on RSS) */
  size_t bytes_purged;     /* total ever returned with madvise */
  size_t segments;         /* live segments */
  size_t segments_abandoned;
  size_t threads;          /* threads with a heap now */
  size_t threads_total;    /* threads that ever had one */
  size_t heaps;            /* live heaps */
  size_t huge_allocs;      /* live blocks from dedicated mappings */
} fw_stats_t;
FW_API int fw_stats_get(fw_stats_t *out);
/* Writes a human-readable report (stats and options) to fd. */
FW_API void fw_stats_print(int fd);
/* The reports of docs/observability.md, on demand: the ledger as JSON
 * (format "freeway-stats"), the heap map (format "freeway-map"), and the
 * live blocks of the whole process, grouped by allocation call site in
 * cautious mode and by block size otherwise, as JSON (format
 * "freeway-leaks") or as text. Made from a walk of all of freeway's
 * memory: exact when other threads are not allocating meanwhile. */
FW_API void fw_stats_print_json(int fd);
FW_API void fw_heap_map_json(int fd);
FW_API void fw_leak_report_json(int fd);
FW_API void fw_leak_report_print(int fd);
/* The leak report as a pprof profile (leaked objects and bytes by call
 * site; cautious mode only has the sites, elsewhere the stacks are empty). */
FW_API void fw_leak_report_pprof(int fd);
/* With FREEWAY_PROFILE=1: writes the heap profile (sampled allocations by
 * call site: allocated and in-use objects and bytes, in pprof's format) to
 * path. 0 on success, -1 with errno if the file could not be written. */
FW_API int fw_prof_dump(const char *path);

/* Option access by name (without the FREEWAY_ prefix, any case). Returns -1
 * and sets errno = EINVAL for an unknown name. */
FW_API long fw_option_get(const char *name);
FW_API int fw_option_set(const char *name, long value);

/* ---- Leak search and heap walking -------------------------------------- */
/* Calls visit for every live block of heap (owner thread only, see above);
 * stops when visit returns false. FREEWAY_LEAK_REPORT=1 uses it at exit.
 * In cautious mode block and usable_size are the pointer handed out and
 * the requested size. */
typedef bool fw_block_visitor_t(const void *block, size_t usable_size, void *arg);
FW_API void fw_heap_visit(const fw_heap_t *heap, fw_block_visitor_t *visit, void *arg);

FW_API const char *fw_version_string(void);

#ifdef __cplusplus
}
#endif
#endif /* FREEWAY_H */
