/* redirect_test.c — freeway-redirect.dll under Wine. Built against msvcrt
 * (MinGW's default) and against the UCRT (FWT_UCRT), each twice: loading
 * the DLL at run time (the program does not link it), and linked to it
 * (FWT_LINKED: the DLL is in place before main). Sections:
 *   load    blocks of the runtime from before the load keep working (free,
 *           realloc, _msize, _expand, _recalloc, the _aligned_* family),
 *           new ones are freeway's, frees across threads, a runtime DLL
 *           loaded afterwards is redirected too
 *   linked  the same without the blocks from before
 * msvcrt.dll has no _recalloc, _aligned_recalloc or _aligned_msize: those
 * are tested with the UCRT only. */
#include <windows.h>
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef FWT_LINKED
#include <freeway_redirect.h>
#endif

static bool (*owns)(const void *p);
static unsigned (*patched)(const char *dll);
static int failures;

#define CHECK(c)                                                             \
  do {                                                                       \
    if (!(c)) {                                                              \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);  \
      failures++;                                                            \
    }                                                                        \
  } while (0)

#ifdef FWT_UCRT
#define FWT_RUNTIME "ucrtbase.dll"
#define FWT_OTHER "msvcrt.dll"
#else
#define FWT_RUNTIME "msvcrt.dll"
#define FWT_OTHER "ucrtbase.dll"
#endif

static void fill(void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = (unsigned char)(seed + i * 7);
}

static bool filled(const void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (((const unsigned char *)p)[i] != (unsigned char)(seed + i * 7)) return false;
  return true;
}

static bool zero(const void *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (((const unsigned char *)p)[i]) return false;
  return true;
}

#ifdef FWT_UCRT
#define FWT_RECALLOC 1
/* in the UCRT, not declared by these headers */
__declspec(dllimport) size_t __cdecl _aligned_msize(void *p, size_t align, size_t offset);
#endif

/* ---- blocks of the runtime from before the DLL ------------------------------ */
#ifndef FWT_LINKED
enum { OLD_SMALL, OLD_MEDIUM, OLD_LARGE, OLD_CALLOC, OLD_ALIGNED, OLD_ALIGNED2, OLD_STRDUP, OLD_XTHREAD, OLD_EXPAND, OLD_N };
static void *old[OLD_N];
static const size_t old_size[OLD_N] = {24, 5000, 300000, 1000, 100, 3000, 6, 100, 64};

static void old_alloc(void) {
  for (size_t i = 0; i < OLD_N; i++) {
    switch (i) {
      case OLD_CALLOC: old[i] = calloc(10, 100); break;
      case OLD_ALIGNED: old[i] = _aligned_malloc(old_size[i], 64); break;
      case OLD_ALIGNED2: old[i] = _aligned_malloc(old_size[i], 256); break;
      case OLD_STRDUP: old[i] = strdup("hello"); break;
      default: old[i] = malloc(old_size[i]);
    }
    if (!old[i]) {
      fprintf(stderr, "the runtime allocated nothing\n");
      exit(2);
    }
    if (i != OLD_STRDUP && i != OLD_CALLOC) fill(old[i], old_size[i], (unsigned)i);
  }
}

static DWORD WINAPI free_one(LPVOID p) {
  free(p);
  return 0;
}

static void old_use(void) {
  for (size_t i = 0; i < OLD_N; i++) CHECK(!owns(old[i]));
  CHECK(_msize(old[OLD_SMALL]) >= old_size[OLD_SMALL]);
  char *r = realloc(old[OLD_SMALL], 1000);
  CHECK(r && owns(r) && filled(r, old_size[OLD_SMALL], OLD_SMALL));
  free(r);
  free(old[OLD_MEDIUM]);
  CHECK(_msize(old[OLD_LARGE]) >= old_size[OLD_LARGE]);
#ifdef FWT_RECALLOC
  r = _recalloc(old[OLD_LARGE], 1, 400000);
  CHECK(r && owns(r) && filled(r, old_size[OLD_LARGE], OLD_LARGE) && zero(r + old_size[OLD_LARGE], 100000));
#else
  r = realloc(old[OLD_LARGE], 400000);
  CHECK(r && owns(r) && filled(r, old_size[OLD_LARGE], OLD_LARGE));
#endif
  free(r);
  CHECK(zero(old[OLD_CALLOC], 1000));
  r = realloc(old[OLD_CALLOC], 10);  /* smaller: still moves to freeway */
  CHECK(r && owns(r) && zero(r, 10));
  free(r);
#ifdef FWT_RECALLOC
  CHECK(_aligned_msize(old[OLD_ALIGNED], 64, 0) >= old_size[OLD_ALIGNED]);
#endif
  r = _aligned_realloc(old[OLD_ALIGNED], 5000, 64);
  CHECK(r && owns(r) && ((uintptr_t)r & 63) == 0 && filled(r, old_size[OLD_ALIGNED], OLD_ALIGNED));
  _aligned_free(r);
  _aligned_free(old[OLD_ALIGNED2]);
  CHECK(strcmp(old[OLD_STRDUP], "hello") == 0);
  free(old[OLD_STRDUP]);
  char *e = _expand(old[OLD_EXPAND], 32);  /* in place or not at all */
  CHECK(e == NULL || e == old[OLD_EXPAND]);
  CHECK(filled(old[OLD_EXPAND], 32, OLD_EXPAND));
  free(old[OLD_EXPAND]);
  /* freed by another thread */
  HANDLE t = CreateThread(NULL, 0, free_one, old[OLD_XTHREAD], 0, NULL);
  CHECK(t != NULL);
  WaitForSingleObject(t, INFINITE);
  CloseHandle(t);
}
#endif

/* ---- new blocks -------------------------------------------------------------- */
static void new_blocks(void) {
  char *m = malloc(100);
  CHECK(m && owns(m));
  fill(m, 100, 1);
  m = realloc(m, 5000);
  CHECK(m && owns(m) && filled(m, 100, 1));
  CHECK(_msize(m) >= 5000);
  CHECK(_expand(m, 10) == m);
#ifdef FWT_RECALLOC
  m = _recalloc(m, 2, 4000);
  CHECK(m && owns(m) && filled(m, 100, 1) && zero(m + 5000, 3000));
#endif
  free(m);
  char *c = calloc(3, 50);
  CHECK(c && owns(c) && zero(c, 150));
  free(c);
  void *big = malloc((size_t)8 << 20);
  CHECK(big && owns(big));
  free(big);
  void *huge = malloc((size_t)80 << 20);  /* beyond an arena's segment sizes */
  CHECK(huge && owns(huge));
  CHECK(realloc(huge, 0) == NULL);
  for (size_t a = 16; a <= ((size_t)1 << 20); a <<= 2) {
    char *p = _aligned_malloc(a + 3, a);
    CHECK(p && owns(p) && ((uintptr_t)p & (a - 1)) == 0);
    fill(p, a + 3, 5);
    p = _aligned_realloc(p, 3 * a, a);
    CHECK(p && owns(p) && ((uintptr_t)p & (a - 1)) == 0 && filled(p, a + 3, 5));
#ifdef FWT_RECALLOC
    CHECK(_aligned_msize(p, a, 0) >= 3 * a);
    p = _aligned_recalloc(p, 4, a, a);
    CHECK(p && owns(p) && zero(p + 3 * a, a));
#endif
    _aligned_free(p);
  }
  /* the _aligned_offset_* functions stay the runtime's, on memory that now
   * comes from freeway */
  char *o = _aligned_offset_malloc(200, 64, 8);
  CHECK(o && ((uintptr_t)(o + 8) & 63) == 0);
  _aligned_free(o);
  errno = 0;
  CHECK(_aligned_malloc(10, 3) == NULL && errno == EINVAL);
  char *s = strdup("redirected");
  CHECK(s && owns(s) && strcmp(s, "redirected") == 0);
  free(s);
  s = _strdup("again");
  CHECK(s && owns(s));
  free(s);
  wchar_t *w = _wcsdup(L"wide");
  CHECK(w && owns(w));
  free(w);
}

/* ---- threads ----------------------------------------------------------------- */
#define XN 2000
static void *xblocks[XN];

static DWORD WINAPI alloc_many(LPVOID arg) {
  (void)arg;
  for (int i = 0; i < XN; i++) xblocks[i] = malloc(16 + (size_t)(i % 300) * 8);
  return 0;
}

static DWORD WINAPI free_many(LPVOID arg) {
  (void)arg;
  for (int i = 0; i < XN; i++) free(xblocks[i]);
  return 0;
}

static DWORD WINAPI churn(LPVOID arg) {
  unsigned x = (unsigned)(uintptr_t)arg;
  void *keep[64] = {0};
  for (int i = 0; i < 20000; i++) {
    x = x * 1103515245u + 12345u;
    unsigned k = (x >> 8) & 63;
    free(keep[k]);
    keep[k] = (x & 1) ? malloc((x >> 16) & 1023) : calloc(1, (x >> 20) & 255);
  }
  for (int k = 0; k < 64; k++) free(keep[k]);
  return 0;
}

static void run(LPTHREAD_START_ROUTINE fn, void *arg) {
  HANDLE t = CreateThread(NULL, 0, fn, arg, 0, NULL);
  CHECK(t != NULL);
  WaitForSingleObject(t, INFINITE);
  CloseHandle(t);
}

static void threads(void) {
  run(alloc_many, NULL);
  for (int i = 0; i < XN; i++) CHECK(owns(xblocks[i]));
  free_many(NULL);
  alloc_many(NULL);
  run(free_many, NULL);
  HANDLE t[4];
  for (int i = 0; i < 4; i++) t[i] = CreateThread(NULL, 0, churn, (void *)(uintptr_t)(i + 1), 0, NULL);
  for (int i = 0; i < 4; i++) {
    WaitForSingleObject(t[i], INFINITE);
    CloseHandle(t[i]);
  }
}

/* ---- the other runtime, loaded after the DLL --------------------------------- */
static bool loaded_late;

/* Wine loads both msvcrt.dll and ucrtbase.dll early; msvcr100.dll is
 * loaded here for the first time: redirected when the loader maps it. */
static void late_runtime(void) {
  CHECK(patched(FWT_OTHER) > 0);
  loaded_late = GetModuleHandleA("msvcr100.dll") == NULL;
  /* already there, it was patched with the others at the load of the DLL,
   * and the checks below would pass without a load notification */
  CHECK(loaded_late);
  HMODULE other = LoadLibraryA("msvcr100.dll");
  CHECK(other != NULL);
  if (!other) return;
  CHECK(patched("msvcr100.dll") > 0);
  void *(*m)(size_t);
  void (*f)(void *);
  FARPROC a = GetProcAddress(other, "malloc"), b = GetProcAddress(other, "free");
  CHECK(a && b);
  if (!a || !b) return;
  memcpy(&m, &a, sizeof m);
  memcpy(&f, &b, sizeof f);
  void *p = m(77);
  CHECK(p && owns(p));
  f(p);
#ifndef FWT_UCRT
  /* msvcrt.dll's operator new and delete */
  FARPROC n = GetProcAddress(GetModuleHandleA("msvcrt.dll"), sizeof(void *) == 8 ? "??2@YAPEAX_K@Z" : "??2@YAPAXI@Z");
  FARPROC d = GetProcAddress(GetModuleHandleA("msvcrt.dll"), sizeof(void *) == 8 ? "??3@YAXPEAX@Z" : "??3@YAXPAX@Z");
  CHECK(n && d);
  if (n && d) {
    memcpy(&m, &n, sizeof m);
    memcpy(&f, &d, sizeof f);
    p = m(40);
    CHECK(p && owns(p));
    f(p);
  }
#endif
}

void *fwt_cxx_new(void);
void fwt_cxx_delete(void *p);

int main(void) {
#ifdef FWT_LINKED
  owns = fw_redirect_owns;
  patched = fw_redirect_patched;
#else
  old_alloc();
  HMODULE dll = LoadLibraryA("freeway-redirect.dll");
  if (!dll) {
    fprintf(stderr, "cannot load freeway-redirect.dll (%lu)\n", GetLastError());
    return 1;
  }
  FARPROC o = GetProcAddress(dll, "fw_redirect_owns"), q = GetProcAddress(dll, "fw_redirect_patched");
  if (!o || !q) return 1;
  memcpy(&owns, &o, sizeof owns);
  memcpy(&patched, &q, sizeof patched);
#endif
  CHECK(patched(FWT_RUNTIME) >= 10);
#ifndef FWT_LINKED
  old_use();
#endif
  new_blocks();
  void *x = fwt_cxx_new();
  CHECK(x && owns(x));
  fwt_cxx_delete(x);
  threads();
  late_runtime();
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("ok: %u functions of %s redirected; %u of %s; %u of msvcr100.dll%s\n", patched(FWT_RUNTIME), FWT_RUNTIME,
         patched(FWT_OTHER), FWT_OTHER, patched("msvcr100.dll"), loaded_late ? ", loaded afterwards" : "");
  return 0;
}
