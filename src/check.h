/* check.h — cautious mode's checks (FREEWAY_CAUTIOUS=1): hooks the front
 * end calls around its own work. They validate, mark blocks live or freed,
 * and report misuse; they never allocate or free. The block layout and the
 * report format are described at the top of check.c and in docs/cautious.md. */
#ifndef FW_CHECK_H
#define FW_CHECK_H
#include "types.h"
#include "os.h"

/* The form of allocation a block was made with, and what a free expects.
 * ANY: the block whose allocation read the options (operator new tests the
 * option before that): whatever frees it is right. */
enum { FW_FORM_MALLOC = 0, FW_FORM_NEW = 1, FW_FORM_NEW_ARRAY = 2, FW_FORM_ANY = 3 };
/* How a block is freed: a form, plus what the caller told about it. */
#define FW_HOW_SIZED 4u    /* size given: must be the requested size */
#define FW_HOW_ALIGNED 8u  /* alignment given: must be the one asked for */

/* Start-up: the self-test of the size-class table; in cautious mode also
 * the secret, the code range of freeway and the fault handler. */
FW_HIDDEN void fw_check_init(void);
/* Reports misuse of something that is not a block (a heap handle) and aborts. */
FW_HIDDEN __attribute__((noreturn)) void fw_check_fail(const char *what, const void *p, size_t size);

/* The block size a cautious request of size bytes needs (the request, at
 * least 16 bytes, and the trailer); 0 if that does not fit in a size_t. */
FW_HIDDEN size_t fw_check_padded(size_t size);
/* Before malloc pops the head of page's free list: a block handed out and
 * freed before in this page's life is checked for writes made while it was
 * free (its freed mark and pattern, its list link). */
FW_HIDDEN void fw_check_pop(fw_page_t *page);
/* After a cautious allocation: block b of page hands out user for a
 * request of size bytes aligned to align (0: no alignment asked for);
 * writes its trailer and canary. */
FW_HIDDEN void fw_check_malloc(fw_page_t *page, void *b, void *user, size_t size, size_t align);
/* operator new: records the form on a block just allocated. */
FW_HIDDEN void fw_check_set_form(void *p, unsigned form);
/* Before a free: p must be the user pointer of a live block made with the
 * form in how, and match the size and alignment how says were given.
 * Marks the block freed and returns its start (and page); aborts with a
 * report on any misuse. Runs exactly once per free. */
FW_HIDDEN fw_block_t *fw_check_free(void *p, unsigned how, size_t size, size_t align, fw_page_t **page);
/* realloc: p must be a live block of the malloc family; returns its
 * requested size and its page. */
/* align: the block's alignment as its trailer records it. */
FW_HIDDEN size_t fw_check_realloc(const void *p, fw_page_t **page, size_t *align);
/* realloc in place: p (checked by fw_check_realloc) now holds size bytes. */
FW_HIDDEN void fw_check_resize(void *p, size_t size, size_t align);
/* malloc_usable_size: the requested size of a live block. */
FW_HIDDEN size_t fw_check_usable(const void *p);

/* The heap queries, in the user's terms: requested sizes and pointers. */
FW_HIDDEN void fw_check_heap_stats(fw_heap_t *heap, fw_heap_stats_t *s);
FW_HIDDEN void fw_check_heap_visit(const fw_heap_t *heap, fw_block_visitor_t *visit, void *arg);
FW_HIDDEN bool fw_check_heap_contains(const fw_heap_t *heap, const void *p);
/* Cautious mode: whether the block at block (a block start of a small or
 * medium page, or a large page's area) is live; if so, the user's pointer,
 * requested size and up to 4 return addresses of its allocation (innermost
 * first, *npcs of them). For the leak report. */
/* The caller's call stack without freeway's frames, up to max (at most
 * 16) return addresses, innermost first; for the heap profiler. */
FW_HIDDEN size_t fw_check_stack(uintptr_t *pcs, size_t max);
/* The same through a cache of the thread's walks (os.h,
 * fw_os_backtrace_cached): its entry for the caller's stack, or NULL when
 * the stack must be taken with fw_check_stack. */
FW_HIDDEN fw_bt_walk_t *fw_check_stack_cached(fw_bt_cache_t *c);
FW_HIDDEN bool fw_check_block_live(const void *block, const uint8_t **user, size_t *size, uintptr_t pcs[4],
                                   size_t *npcs);
FW_HIDDEN size_t fw_check_heap_usable(const fw_heap_t *heap, const void *p);

#endif
