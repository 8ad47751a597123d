/* redirect_win.c — freeway-redirect.dll: once loaded (linked by the program
 * or loaded at run time), the allocation functions of the C runtime DLLs in
 * the process jump to freeway.
 *
 * Technique: the entry of each function in the runtime DLL is overwritten
 * with a 5-byte relative jump (on x64 to a 14-byte absolute jump placed
 * within 2 GiB of the DLL, when freeway is further away). Patching the code
 * rather than the import tables of the modules catches every caller: each
 * module that imports the function, modules loaded later, and the
 * runtime's own calls (strdup, the buffers of fopen, ...). The original
 * code is never run again, so nothing of it is copied or decoded: a block
 * the runtime allocated before the patch (a "foreign" block) goes to the
 * runtime's heap (its _get_heap_handle) through the system heap API, which
 * is all the runtime's free, _msize and realloc do with it. A runtime DLL
 * loaded after this one is patched when the loader maps it (ntdll's module
 * notifications), before its own initialisation.
 *
 * Which block is whose: freeway's memory is recognised without touching
 * anything else (owns.h); everything else is the runtime's. The _aligned_*
 * functions of the runtime store the start of the underlying block in the
 * pointer-sized word below the aligned pointer (FW_SAVED); a foreign
 * aligned block is found through it, and so is a block of the unpatched
 * _aligned_offset_* functions, whose underlying block now comes from
 * freeway through the patched malloc. */
#include "freeway_redirect.h"
#include "owns.h"
#include "os.h"
#include <errno.h>
#include <string.h>
#include <strings.h>

/* The C runtime DLLs whose functions are redirected. api-ms-win-crt-heap-
 * l1-1-0.dll forwards to ucrtbase.dll. */
static const char *const fw_rt_names[] = {"msvcrt.dll", "ucrtbase.dll", "msvcr120.dll", "msvcr110.dll",
                                          "msvcr100.dll", "msvcr90.dll", "msvcr80.dll"};
#define FW_RTS (sizeof fw_rt_names / sizeof fw_rt_names[0])

typedef struct {
  void *module;           /* set once patched */
  intptr_t (*get_heap)(void);
  int *(*errno_at)(void);
  int (*callnewh)(size_t);
  _Atomic(void *) heap;   /* the runtime's heap, asked when first needed */
  uint8_t *tramp;         /* x64: absolute jumps near the module */
  size_t tramp_used;
  unsigned patched;
} fw_rt_t;

static fw_rt_t fw_rts[FW_RTS];
static fw_lock_t fw_rd_lock = FW_LOCK_INIT;

/* Asked at the first foreign block, not at the patch: a runtime patched
 * while it is being loaded has no heap yet. */
static void *fw_rt_heap(fw_rt_t *rt) {
  void *h = atomic_load_explicit(&rt->heap, memory_order_acquire);
  if (!h && rt->get_heap) {
    h = (void *)rt->get_heap();
    atomic_store_explicit(&rt->heap, h, memory_order_release);
  }
  return h;
}

/* The caller reads the errno of its own runtime, not this DLL's. */
static void fw_rt_errno(fw_rt_t *rt, int e) {
  errno = e;
  if (rt->errno_at) *rt->errno_at() = e;
}

#define FW_SAVED(p) ((void **)(((uintptr_t)(p) - sizeof(void *)) & ~(uintptr_t)(sizeof(void *) - 1)))

/* ---- the redirected functions, for the runtime rt ---------------------------- */
static void *fw_rd_malloc(fw_rt_t *rt, size_t n) {
  void *p = fw_malloc(n);
  if (!p) fw_rt_errno(rt, ENOMEM);
  return p;
}

static void *fw_rd_calloc(fw_rt_t *rt, size_t n, size_t size) {
  void *p = fw_calloc(n, size);
  if (!p) fw_rt_errno(rt, ENOMEM);
  return p;
}

static void fw_rd_free(fw_rt_t *rt, void *p) {
  if (!p) return;
  if (fw_owns_memory(p)) fw_free(p);
  else fw_os_heap_free(fw_rt_heap(rt), p);
}

static size_t fw_rd_msize(fw_rt_t *rt, void *p) {
  if (!p) {
    fw_rt_errno(rt, EINVAL);
    return SIZE_MAX;
  }
  if (fw_owns_memory(p)) return fw_malloc_usable_size(p);
  return fw_os_heap_size(fw_rt_heap(rt), p);
}

/* A foreign block moves to freeway: the runtime's heap is left to empty. */
static void *fw_rd_realloc(fw_rt_t *rt, void *p, size_t n) {
  if (!p) return fw_rd_malloc(rt, n);
  if (!n) {
    /* the Microsoft runtimes free and return NULL */
    fw_rd_free(rt, p);
    return NULL;
  }
  if (fw_owns_memory(p)) {
    void *r = fw_realloc(p, n);
    if (!r) fw_rt_errno(rt, ENOMEM);
    return r;
  }
  void *heap = fw_rt_heap(rt);
  size_t old = fw_os_heap_size(heap, p);
  if (old == SIZE_MAX) {
    fw_rt_errno(rt, EINVAL);
    return NULL;
  }
  void *r = fw_rd_malloc(rt, n);
  if (!r) return NULL;
  memcpy(r, p, old < n ? old : n);
  fw_os_heap_free(heap, p);
  return r;
}

static void *fw_rd_expand(fw_rt_t *rt, void *p, size_t n) {
  if (!p) {
    fw_rt_errno(rt, EINVAL);
    return NULL;
  }
  void *r;
  if (fw_owns_memory(p)) r = n <= fw_malloc_usable_size(p) ? p : NULL;
  else r = fw_os_heap_resize_in_place(fw_rt_heap(rt), p, n ? n : 1);
  if (!r) fw_rt_errno(rt, ENOMEM);
  return r;
}


static void *fw_rd_aligned_malloc(fw_rt_t *rt, size_t size, size_t align) {
  if (!fw_is_pow2(align)) {
    fw_rt_errno(rt, EINVAL);
    return NULL;
  }
  void *p = fw_malloc_aligned(size ? size : 1, align);
  if (!p) fw_rt_errno(rt, ENOMEM);
  return p;
}

static void fw_rd_aligned_free(fw_rt_t *rt, void *p) {
  if (!p) return;
  if (fw_owns_block(p)) {
    fw_free(p);
    return;
  }
  void *base = *FW_SAVED(p);
  if (fw_owns_memory(base)) fw_free(base);
  else fw_os_heap_free(fw_rt_heap(rt), base);
}

/* The bytes usable from p on, SIZE_MAX if p is no block. */
static size_t fw_rd_aligned_usable(fw_rt_t *rt, void *p) {
  if (fw_owns_block(p)) return fw_malloc_usable_size(p);
  uint8_t *base = *FW_SAVED(p);
  size_t n = fw_owns_memory(base) ? fw_malloc_usable_size(base) : fw_os_heap_size(fw_rt_heap(rt), base);
  size_t skip = (size_t)((uint8_t *)p - base);
  return n == SIZE_MAX || n < skip ? SIZE_MAX : n - skip;
}

static size_t fw_rd_aligned_msize(fw_rt_t *rt, void *p, size_t align, size_t offset) {
  (void)align, (void)offset;
  if (!p) {
    fw_rt_errno(rt, EINVAL);
    return SIZE_MAX;
  }
  return fw_rd_aligned_usable(rt, p);
}

static void *fw_rd_aligned_realloc(fw_rt_t *rt, void *p, size_t size, size_t align) {
  if (!fw_is_pow2(align)) {
    fw_rt_errno(rt, EINVAL);
    return NULL;
  }
  if (!p) return fw_rd_aligned_malloc(rt, size, align);
  if (!size) {
    fw_rd_aligned_free(rt, p);
    return NULL;
  }
  bool mine = fw_owns_block(p);
  size_t old = fw_rd_aligned_usable(rt, p);
  if (old == SIZE_MAX) old = 0;
  if (mine && size <= old && ((uintptr_t)p & (align - 1)) == 0) return p;
  void *r = fw_rd_aligned_malloc(rt, size, align);
  if (!r) return NULL;
  memcpy(r, p, old < size ? old : size);
  fw_rd_aligned_free(rt, p);
  return r;
}

/* _recalloc and _aligned_recalloc (aligned: the latter, with align): n * size
 * bytes, an overflow refused, and the bytes past the old size come out as
 * zero. */
static void *fw_rd_recalloc_ex(fw_rt_t *rt, void *p, size_t n, size_t size, bool aligned, size_t align) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    fw_rt_errno(rt, ENOMEM);
    return NULL;
  }
  size_t old = !p ? 0 : aligned ? fw_rd_aligned_usable(rt, p) : fw_rd_msize(rt, p);
  if (old == SIZE_MAX) old = 0;
  void *r = aligned ? fw_rd_aligned_realloc(rt, p, bytes, align) : fw_rd_realloc(rt, p, bytes);
  if (r && bytes > old) memset((char *)r + old, 0, bytes - old);
  return r;
}

static void *fw_rd_recalloc(fw_rt_t *rt, void *p, size_t n, size_t size) {
  return fw_rd_recalloc_ex(rt, p, n, size, false, 0);
}

static void *fw_rd_aligned_recalloc(fw_rt_t *rt, void *p, size_t n, size_t size, size_t align) {
  return fw_rd_recalloc_ex(rt, p, n, size, true, align);
}

/* msvcrt.dll's operator new: the new handler, then NULL (it does not
 * throw; the later runtimes' operator new is not redirected). */
static void *fw_rd_new(fw_rt_t *rt, size_t n) {
  for (;;) {
    void *p = fw_malloc(n ? n : 1);
    if (p) return p;
    if (!rt->callnewh || !rt->callnewh(n)) return NULL;
  }
}

/* One set of entry points per runtime: the runtime is their constant. */
#define FW_RT_HOOKS(i)                                                                                        \
  static void *fw_malloc_##i(size_t n) { return fw_rd_malloc(&fw_rts[i], n); }                                \
  static void *fw_calloc_##i(size_t n, size_t s) { return fw_rd_calloc(&fw_rts[i], n, s); }                   \
  static void *fw_realloc_##i(void *p, size_t n) { return fw_rd_realloc(&fw_rts[i], p, n); }                  \
  static void fw_free_##i(void *p) { fw_rd_free(&fw_rts[i], p); }                                             \
  static size_t fw_msize_##i(void *p) { return fw_rd_msize(&fw_rts[i], p); }                                  \
  static void *fw_expand_##i(void *p, size_t n) { return fw_rd_expand(&fw_rts[i], p, n); }                    \
  static void *fw_recalloc_##i(void *p, size_t n, size_t s) { return fw_rd_recalloc(&fw_rts[i], p, n, s); }   \
  static void *fw_amalloc_##i(size_t n, size_t a) { return fw_rd_aligned_malloc(&fw_rts[i], n, a); }          \
  static void fw_afree_##i(void *p) { fw_rd_aligned_free(&fw_rts[i], p); }                                    \
  static void *fw_arealloc_##i(void *p, size_t n, size_t a) { return fw_rd_aligned_realloc(&fw_rts[i], p, n, a); } \
  static void *fw_arecalloc_##i(void *p, size_t n, size_t s, size_t a) {                                      \
    return fw_rd_aligned_recalloc(&fw_rts[i], p, n, s, a);                                                    \
  }                                                                                                           \
  static size_t fw_amsize_##i(void *p, size_t a, size_t o) { return fw_rd_aligned_msize(&fw_rts[i], p, a, o); } \
  static void *fw_new_##i(size_t n) { return fw_rd_new(&fw_rts[i], n); }
FW_RT_HOOKS(0)
FW_RT_HOOKS(1)
FW_RT_HOOKS(2)
FW_RT_HOOKS(3)
FW_RT_HOOKS(4)
FW_RT_HOOKS(5)
FW_RT_HOOKS(6)

enum { H_MALLOC, H_CALLOC, H_REALLOC, H_FREE, H_MSIZE, H_EXPAND, H_RECALLOC, H_AMALLOC, H_AFREE, H_AREALLOC,
       H_ARECALLOC, H_AMSIZE, H_NEW, H_COUNT };

typedef void (*fw_code_t)(void);
#define FW_RT_TABLE(i)                                                                                    \
  {(fw_code_t)fw_malloc_##i, (fw_code_t)fw_calloc_##i, (fw_code_t)fw_realloc_##i, (fw_code_t)fw_free_##i, \
   (fw_code_t)fw_msize_##i, (fw_code_t)fw_expand_##i, (fw_code_t)fw_recalloc_##i, (fw_code_t)fw_amalloc_##i, \
   (fw_code_t)fw_afree_##i, (fw_code_t)fw_arealloc_##i, (fw_code_t)fw_arecalloc_##i, (fw_code_t)fw_amsize_##i, \
   (fw_code_t)fw_new_##i}
static const fw_code_t fw_hooks[FW_RTS][H_COUNT] = {FW_RT_TABLE(0), FW_RT_TABLE(1), FW_RT_TABLE(2), FW_RT_TABLE(3),
                                                     FW_RT_TABLE(4), FW_RT_TABLE(5), FW_RT_TABLE(6)};

#if defined(__x86_64__)
#define FW_NEW_NAME "??2@YAPEAX_K@Z"
#define FW_NEW_ARRAY_NAME "??_U@YAPEAX_K@Z"
#define FW_DELETE_NAME "??3@YAXPEAX@Z"
#define FW_DELETE_ARRAY_NAME "??_V@YAXPEAX@Z"
#else
#define FW_NEW_NAME "??2@YAPAXI@Z"
#define FW_NEW_ARRAY_NAME "??_U@YAPAXI@Z"
#define FW_DELETE_NAME "??3@YAXPAX@Z"
#define FW_DELETE_ARRAY_NAME "??_V@YAXPAX@Z"
#endif

/* In this order: the functions that take blocks first, those that hand
 * them out last, so that no block of freeway's ever reaches a function of
 * the runtime's that is not redirected yet. The _base names are the
 * UCRT's, which its other functions call. */
static const struct {
  const char *name;
  int hook;
  bool msvcrt_only; /* the later runtimes' operator new throws */
} fw_targets[] = {
    {"free", H_FREE, false},          {"_free_base", H_FREE, false},         {FW_DELETE_NAME, H_FREE, true},
    {FW_DELETE_ARRAY_NAME, H_FREE, true}, {"_aligned_free", H_AFREE, false}, {"_msize", H_MSIZE, false},
    {"_msize_base", H_MSIZE, false},  {"_aligned_msize", H_AMSIZE, false},   {"_expand", H_EXPAND, false},
    {"_expand_base", H_EXPAND, false}, {"realloc", H_REALLOC, false},       {"_realloc_base", H_REALLOC, false},
    {"_recalloc", H_RECALLOC, false}, {"_recalloc_base", H_RECALLOC, false}, {"_aligned_realloc", H_AREALLOC, false},
    {"_aligned_recalloc", H_ARECALLOC, false}, {"malloc", H_MALLOC, false}, {"_malloc_base", H_MALLOC, false},
    {"calloc", H_CALLOC, false},      {"_calloc_base", H_CALLOC, false},     {"_aligned_malloc", H_AMALLOC, false},
    {FW_NEW_NAME, H_NEW, true},       {FW_NEW_ARRAY_NAME, H_NEW, true},
};
#define FW_TARGETS (sizeof fw_targets / sizeof fw_targets[0])

/* Code already redirected: two exported names may share one function. */
static uint8_t *fw_patched_at[FW_RTS * FW_TARGETS];
static size_t fw_patched_count;

#define FW_TRAMP_PAGE 4096
#define FW_TRAMP_SIZE 16

/* Makes the code at fn jump to hook. */
static bool fw_patch(fw_rt_t *rt, uint8_t *fn, fw_code_t hook) {
  for (size_t i = 0; i < fw_patched_count; i++)
    if (fw_patched_at[i] == fn) return true;
  uintptr_t to;
  memcpy(&to, &hook, sizeof to);
  int64_t rel = (int64_t)to - (int64_t)(uintptr_t)(fn + 5);
#if defined(__x86_64__)
  if (rel != (int32_t)rel) {
    if (!rt->tramp || rt->tramp_used + FW_TRAMP_SIZE > FW_TRAMP_PAGE) {
      rt->tramp = fw_os_code_near(fn, FW_TRAMP_PAGE);
      rt->tramp_used = 0;
      if (!rt->tramp) return false;
    }
    /* jmp [rip+0] with the target after it, int3 filling */
    uint8_t jump[FW_TRAMP_SIZE] = {0xff, 0x25, 0, 0, 0, 0};
    memcpy(jump + 6, &to, 8);
    jump[14] = jump[15] = 0xcc;
    uint8_t *t = rt->tramp + rt->tramp_used;
    if (!fw_os_code_write(t, jump, sizeof jump)) return false;
    rt->tramp_used += FW_TRAMP_SIZE;
    rel = (int64_t)(uintptr_t)t - (int64_t)(uintptr_t)(fn + 5);
    if (rel != (int32_t)rel) return false;
  }
#else
  /* a 32-bit displacement reaches all of a 32-bit address space */
  (void)rt;
#endif
  int32_t rel32 = (int32_t)rel;
  uint8_t code[5] = {0xe9};
  memcpy(code + 1, &rel32, 4);
  if (!fw_os_code_write(fn, code, sizeof code)) return false;
  fw_patched_at[fw_patched_count++] = fn;
  return true;
}

static void fw_rt_patch(size_t i, void *module) {
  fw_rt_t *rt = &fw_rts[i];
  void *sym;
  sym = fw_os_module_symbol(module, "_get_heap_handle");
  memcpy(&rt->get_heap, &sym, sizeof sym);
  sym = fw_os_module_symbol(module, "_errno");
  memcpy(&rt->errno_at, &sym, sizeof sym);
  sym = fw_os_module_symbol(module, "_callnewh");
  memcpy(&rt->callnewh, &sym, sizeof sym);
  rt->module = module;
  for (size_t t = 0; t < FW_TARGETS; t++) {
    if (fw_targets[t].msvcrt_only && i != 0) continue;
    uint8_t *fn = fw_os_module_symbol(module, fw_targets[t].name);
    if (fn && fw_patch(rt, fn, fw_hooks[i][fw_targets[t].hook])) rt->patched++;
  }
}

/* Patches every known runtime that is loaded and not patched yet. */
static void fw_rd_scan(void) {
  fw_lock_acquire(&fw_rd_lock);
  for (size_t i = 0; i < FW_RTS; i++) {
    if (fw_rts[i].module) continue;
    void *m = fw_os_module(fw_rt_names[i]);
    if (m) fw_rt_patch(i, m);
  }
  fw_lock_release(&fw_rd_lock);
}

/* Runs when the DLL is loaded (its DLL_PROCESS_ATTACH). freeway is set up
 * first, so that the first redirected call finds it ready; this module
 * stays loaded for good (fw_os_init pins it): the patched code jumps here. */
__attribute__((constructor)) static void fw_redirect_start(void) {
  fw_os_init();
  fw_free(fw_malloc(1));
  fw_rd_scan();
  fw_os_on_module_load(fw_rd_scan);
}

bool fw_redirect_owns(const void *p) { return fw_owns_block(p); }

unsigned fw_redirect_patched(const char *dll) {
  if (!dll) return 0;
  for (size_t i = 0; i < FW_RTS; i++)
    if (!strcasecmp(dll, fw_rt_names[i])) return fw_rts[i].patched;
  return 0;
}
