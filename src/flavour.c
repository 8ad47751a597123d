/* flavour.c — what this build of the library is (CMakeLists.txt compiles
 * it, with the entry points, once per flavour; the rest of the allocator is
 * shared). */
#include "base.h"

#ifndef FW_PROF_ENTRIES
#define FW_PROF_ENTRIES 0
#endif
const bool fw_flavour_profiling = FW_PROF_ENTRIES;
