/* check.h — cautious mode's checks (FREEWAY_CAUTIOUS=1): hooks the front
 * end calls around its own work. They validate and report; they never
 * allocate or free. */
#ifndef FW_CHECK_H
#define FW_CHECK_H
#include "types.h"

/* Reports misuse with the address and size, then aborts. */
FW_HIDDEN __attribute__((noreturn)) void fw_check_fail(const char *what, const void *p, size_t size);
/* The extra bytes a cautious allocation asks for (its trailer). */
#define FW_CHECK_PAD 8
FW_HIDDEN bool fw_check_pointer(const void *p);
/* After a cautious allocation: user is what the caller gets, size what it asked for. */
FW_HIDDEN void fw_check_after_malloc(void *user, size_t size);
/* Before a free (local or remote): the block must be live and unharmed. */
FW_HIDDEN void fw_check_free(fw_page_t *page, const void *block);
FW_HIDDEN void fw_check_resize(void *p, size_t size);
FW_HIDDEN size_t fw_check_usable(const void *p);
/* Start-up self-test of the generated size-class table. */
FW_HIDDEN void fw_check_init(void);

#endif
