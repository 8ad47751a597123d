/* options.h — every tunable, from the one table in options.def. Values are
 * relaxed atomics: fw_option_set may change a "live" option while other
 * threads read it, and a plain load is all a read costs on common CPUs. */
#ifndef FW_OPTIONS_H
#define FW_OPTIONS_H
#include "base.h"

#define FW_OPTION(id, name, def, lo, hi, doc) FW_OPT_##id,
#define FW_TEXT_OPTION(id, name, doc)
typedef enum {
#include "options.def"
  FW_OPT_COUNT_
} fw_option_id_t;
#undef FW_OPTION
#undef FW_TEXT_OPTION
/* The options whose value is text (a path), unset by default. */
#define FW_OPTION(id, name, def, lo, hi, doc)
#define FW_TEXT_OPTION(id, name, doc) FW_TOPT_##id,
typedef enum {
#include "options.def"
  FW_TOPT_COUNT_
} fw_text_option_id_t;
#undef FW_OPTION
#undef FW_TEXT_OPTION
/* The value of a text option, read from the environment at start-up; NULL
 * when unset. */
FW_HIDDEN const char *fw_text_option(fw_text_option_id_t id);
#define fw_topt(id) fw_text_option(FW_TOPT_##id)
FW_HIDDEN extern _Atomic(long) fw_options[FW_OPT_COUNT_];
FW_HIDDEN void fw_options_init(void);
FW_HIDDEN void fw_options_print(int fd);
/* The options in effect as the members of a JSON object ("name": value). */
struct fw_out_s;
FW_HIDDEN void fw_options_print_json(struct fw_out_s *o);
#define fw_opt(id) atomic_load_explicit(&fw_options[FW_OPT_##id], memory_order_relaxed)
/* FREEWAY_THP's values */
enum { FW_THP_NEVER = 0, FW_THP_ALWAYS = 1, FW_THP_AUTO = 2 };
/* FREEWAY_CAUTIOUS, a start-up option, as a plain byte set once by
 * fw_options_init: the entry points that test it on every call (operator
 * new and delete, the sized frees) pay one compare with memory for it. */
FW_HIDDEN extern bool fw_cautious;
/* FREEWAY_SECURE without cautious mode (which checks all of it and more):
 * the slow paths test it, the fast paths never run while it is set. */
FW_HIDDEN extern bool fw_secure;

#endif
