/* override.c — the standard C names, for LD_PRELOAD and static linking. Each
 * inlines the fast path from fast.h, so malloc and free make no call in the
 * common case. glibc's internal aliases (__libc_malloc, ...) are provided too
 * so that memory glibc allocates for itself and hands to the program (or
 * frees for it) stays within freeway. See alloc.c for the design. */
#define _GNU_SOURCE
#include "fast.h"
#include "check.h"
#include "options.h"
#include <stdlib.h>
#include <malloc.h>

#define FW_EXPORT __attribute__((visibility("default")))

FW_EXPORT void *malloc(size_t size) { return fw_malloc_fast(size); }
FW_EXPORT FW_PROBING void free(void *p) { fw_free_fast(p); }
FW_EXPORT void *calloc(size_t n, size_t size) { return fw_calloc(n, size); }
FW_EXPORT void *realloc(void *p, size_t size) { return fw_realloc(p, size); }
FW_EXPORT void *reallocarray(void *p, size_t n, size_t size) { return fw_reallocarray(p, n, size); }
FW_EXPORT int posix_memalign(void **out, size_t align, size_t size) { return fw_posix_memalign(out, align, size); }
FW_EXPORT void *aligned_alloc(size_t align, size_t size) { return fw_aligned_alloc(align, size); }
FW_EXPORT void *memalign(size_t align, size_t size) { return fw_memalign(align, size); }
FW_EXPORT void *valloc(size_t size) { return fw_valloc(size); }
FW_EXPORT void *pvalloc(size_t size) { return fw_pvalloc(size); }
FW_EXPORT size_t malloc_usable_size(void *p) { return fw_malloc_usable_size(p); }
FW_EXPORT FW_PROBING void cfree(void *p) { fw_free_fast(p); }
/* The size and alignment are hints only, but for cautious mode's checks. */
FW_EXPORT FW_PROBING void free_sized(void *p, size_t size) {
  if (fw_unlikely(fw_cautious)) {
    fw_free_checked(p, FW_FORM_MALLOC | FW_HOW_SIZED, size, 0);
    return;
  }
  fw_free_fast(p);
}
FW_EXPORT FW_PROBING void free_aligned_sized(void *p, size_t align, size_t size) {
  if (fw_unlikely(fw_cautious)) {
    fw_free_checked(p, FW_FORM_MALLOC | FW_HOW_SIZED | FW_HOW_ALIGNED, size, align);
    return;
  }
  fw_free_fast(p);
}
FW_EXPORT int malloc_trim(size_t pad) { (void)pad; fw_collect(true); return 1; }

#ifndef _WIN32
FW_EXPORT void *__libc_malloc(size_t size) { return fw_malloc_fast(size); }
FW_EXPORT FW_PROBING void __libc_free(void *p) { fw_free_fast(p); }
FW_EXPORT void *__libc_calloc(size_t n, size_t size) { return fw_calloc(n, size); }
FW_EXPORT void *__libc_realloc(void *p, size_t size) { return fw_realloc(p, size); }
FW_EXPORT void *__libc_memalign(size_t align, size_t size) { return fw_memalign(align, size); }
FW_EXPORT void *__libc_valloc(size_t size) { return fw_valloc(size); }
FW_EXPORT void *__libc_pvalloc(size_t size) { return fw_pvalloc(size); }
FW_EXPORT int __posix_memalign(void **out, size_t align, size_t size) { return fw_posix_memalign(out, align, size); }
#endif
