/* os_calls.c — the count of calls to the OS primitives (os.h), kept the
 * same way on every platform; the ledger reports it (survey.c). */
#include "os.h"

_Atomic(uint64_t) fw_os_calls[FW_OSC_COUNT];
