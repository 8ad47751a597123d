/* override_crt.c — the Microsoft C runtime's own allocation names, for a
 * MinGW program that links libfreeway.a (Windows builds only; override.c
 * has the standard names). The runtime's headers declare these names as
 * imports from its DLL, so a call reads the address to jump to from the
 * import slot __imp_<name> rather than calling <name>: each name here is
 * defined twice, as a function and as that slot, pointing to it, and the
 * link takes both from here before it reaches the runtime's import library.
 * The functions of the runtime DLL that allocate for the caller (_strdup,
 * _wcsdup, ...) use the runtime's own heap: their blocks must be freed by
 * the runtime. The _strdup family is defined here for that reason. */
#include "fast.h"
#include "options.h"
/* no <string.h> or <wchar.h>: they declare _strdup and _wcsdup as imports,
 * which the definitions below are not */
#define memcpy __builtin_memcpy
#define memset __builtin_memset
#define strlen __builtin_strlen

#define FW_STR2(x) #x
#define FW_STR(x) FW_STR2(x)
/* The import slot of name, holding fn. */
#define FW_IMPORT_SLOT(name, fn)                                                               \
  extern __typeof__(&fn) fw_imp_##name __asm__("__imp_" FW_STR(__USER_LABEL_PREFIX__) #name); \
  __typeof__(&fn) fw_imp_##name = fn

static void *fw_crt_msize_err(void) {
  errno = EINVAL;
  return NULL;
}

size_t fw_crt_msize(void *p) {
  if (!p) {
    fw_crt_msize_err();
    return (size_t)-1;
  }
  return fw_malloc_usable_size(p);
}

/* Resizes in place or not at all: a block's size class is its usable size. */
void *fw_crt_expand(void *p, size_t size) {
  if (!p) return fw_crt_msize_err();
  if (size <= fw_malloc_usable_size(p)) return p;
  errno = ENOMEM;
  return NULL;
}

/* The bytes past the old usable size come out as zero, as the runtime's own
 * _recalloc makes them. */
void *fw_crt_recalloc(void *p, size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  size_t old = p ? fw_malloc_usable_size(p) : 0;
  void *r = fw_realloc(p, bytes);
  if (r && bytes > old) memset((char *)r + old, 0, bytes - old);
  return r;
}

void *fw_crt_aligned_malloc(size_t size, size_t align) {
  if (!fw_is_pow2(align)) return fw_crt_msize_err();
  return fw_malloc_aligned(size ? size : 1, align);
}

void fw_crt_aligned_free(void *p) { fw_free(p); }

size_t fw_crt_aligned_msize(void *p, size_t align, size_t offset) {
  (void)align, (void)offset;
  return fw_crt_msize(p);
}

/* A block that keeps its place when it is large enough and aligned; else a
 * new aligned block and a copy. */
void *fw_crt_aligned_realloc(void *p, size_t size, size_t align) {
  if (!fw_is_pow2(align)) return fw_crt_msize_err();
  if (!p) return fw_crt_aligned_malloc(size, align);
  if (!size) {
    fw_free(p);
    return NULL;
  }
  size_t old = fw_malloc_usable_size(p);
  if (size <= old && ((uintptr_t)p & (align - 1)) == 0) return p;
  void *r = fw_malloc_aligned(size, align);
  if (!r) return NULL;
  memcpy(r, p, old < size ? old : size);
  fw_free(p);
  return r;
}

void *fw_crt_aligned_recalloc(void *p, size_t n, size_t size, size_t align) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  size_t old = p ? fw_malloc_usable_size(p) : 0;
  void *r = fw_crt_aligned_realloc(p, bytes, align);
  if (r && bytes > old) memset((char *)r + old, 0, bytes - old);
  return r;
}

char *fw_crt_strdup(const char *s) {
  if (!s) return fw_crt_msize_err();
  size_t n = strlen(s) + 1;
  char *r = fw_malloc(n);
  if (r) memcpy(r, s, n);
  return r;
}

wchar_t *fw_crt_wcsdup(const wchar_t *s) {
  if (!s) return fw_crt_msize_err();
  size_t n = sizeof(wchar_t);
  for (const wchar_t *c = s; *c; c++) n += sizeof(wchar_t);
  wchar_t *r = fw_malloc(n);
  if (r) memcpy(r, s, n);
  return r;
}

/* The names, as functions (calls made without the import declaration) and
 * as import slots (calls made with it). */
#define FW_CRT_NAME(name, fn)                                    \
  extern __typeof__(fn) name __attribute__((alias(#fn)));        \
  FW_IMPORT_SLOT(name, fn)

FW_CRT_NAME(_msize, fw_crt_msize);
FW_CRT_NAME(_expand, fw_crt_expand);
FW_CRT_NAME(_recalloc, fw_crt_recalloc);
FW_CRT_NAME(_aligned_malloc, fw_crt_aligned_malloc);
FW_CRT_NAME(_aligned_free, fw_crt_aligned_free);
FW_CRT_NAME(_aligned_msize, fw_crt_aligned_msize);
FW_CRT_NAME(_aligned_realloc, fw_crt_aligned_realloc);
FW_CRT_NAME(_aligned_recalloc, fw_crt_aligned_recalloc);
FW_CRT_NAME(_strdup, fw_crt_strdup);
FW_CRT_NAME(strdup, fw_crt_strdup);
FW_CRT_NAME(_wcsdup, fw_crt_wcsdup);
FW_CRT_NAME(wcsdup, fw_crt_wcsdup);
