/* pprof.h — heap profiles in the format of pprof (google/pprof's
 * profile.proto, the message perftools.profiles.Profile), written without
 * compression: `go tool pprof` and google/pprof read it as it is.
 *
 * A builder collects samples: a call stack and one value per sample type
 * (say, objects and bytes). Samples with the same stack are merged, their
 * values summed. Writing adds the process's executable mappings, so that
 * pprof can symbolise the addresses from the binaries after the process has
 * gone; the profile carries no function names of its own.
 *
 * All memory comes from fw_os_map: the builder can run inside the
 * allocator, at exit or from a report. One builder is used by one thread at
 * a time. */
#ifndef FW_PPROF_H
#define FW_PPROF_H
#include "base.h"

/* At most this many values per sample. */
#define FW_PPROF_TYPES_MAX 8

typedef struct fw_pprof_s fw_pprof_t;

/* A builder for samples of ntypes values; types[i] names value i as
 * {type, unit}, e.g. {"inuse_space", "bytes"}. period_type ({"space",
 * "bytes"}) and period describe the sampling (a period of 1: every
 * event). NULL if ntypes is out of range or memory is refused. */
FW_HIDDEN fw_pprof_t *fw_pprof_new(const char *const (*types)[2], int ntypes, const char *const period_type[2],
                                   int64_t period);
/* Adds a sample: npcs return addresses, innermost first (what
 * fw_os_backtrace gives), and ntypes values. A stack added before gets its
 * values added to the earlier ones. False if memory was refused: the
 * profile then lacks this sample, and stays usable. */
FW_HIDDEN bool fw_pprof_add(fw_pprof_t *p, const uintptr_t *pcs, size_t npcs, const int64_t *values);
/* Frames whose function name matches this regular expression (pprof's
 * syntax), and the frames they call, are left out by pprof when it shows
 * the profile. */
FW_HIDDEN bool fw_pprof_drop_frames(fw_pprof_t *p, const char *regex);
/* Writes the profile to fd, with the process's executable mappings as they
 * are now, and the time of the call. False if memory or the write was
 * refused (part of the profile may have been written). */
FW_HIDDEN bool fw_pprof_write(fw_pprof_t *p, int fd);
FW_HIDDEN void fw_pprof_free(fw_pprof_t *p);

#endif
