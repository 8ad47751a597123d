/* freeway_redirect.h — the queries of freeway-redirect.dll (Windows), the
 * DLL that sends a running process's C runtime allocation calls to freeway
 * (docs/windows.md). The DLL exports the fw_* API of freeway.h too. */
#ifndef FREEWAY_REDIRECT_H
#define FREEWAY_REDIRECT_H
#include "freeway.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True if p is a block freeway handed out (its start, or an interior
 * pointer of an aligned block); false for the C runtime's own blocks and
 * anything else. Never faults. */
FW_API bool fw_redirect_owns(const void *p);
/* How many entry points of the C runtime DLL named dll ("msvcrt.dll",
 * "ucrtbase.dll", ...) now jump to freeway: 0 if that runtime is not
 * loaded or not one the DLL knows. */
FW_API unsigned fw_redirect_patched(const char *dll);

#ifdef __cplusplus
}
#endif
#endif
