/* options.c — the options table (options.def) turned into storage, parsing of
 * FREEWAY_* environment variables and access by name (the public
 * fw_option_get/fw_option_set). */
#include "options.h"
#include "message.h"
#include "os.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <ctype.h>

typedef struct { const char *id; const char *name; long def, lo, hi; const char *doc; } fw_option_desc_t;

#define FW_TEXT_OPTION(id, name, doc)
#define FW_OPTION(id, name, def, lo, hi, doc) { #id, name, def, lo, hi, doc },
static const fw_option_desc_t fw_option_descs[FW_OPT_COUNT_] = {
#include "options.def"
};
#undef FW_OPTION

#define FW_OPTION(id, name, def, lo, hi, doc) def,
_Atomic(long) fw_options[FW_OPT_COUNT_] = {
#include "options.def"
};
#undef FW_OPTION
#undef FW_TEXT_OPTION

#define FW_OPTION(id, name, def, lo, hi, doc)
#define FW_TEXT_OPTION(id, name, doc) #id,
static const char *const fw_text_option_ids[FW_TOPT_COUNT_ + 1] = {
#include "options.def"
  NULL};
#undef FW_OPTION
#undef FW_TEXT_OPTION

/* Copied at start-up: the program may change its environment later. */
#define FW_TEXT_OPTION_MAX 1024
static char fw_text_values[FW_TOPT_COUNT_ + 1][FW_TEXT_OPTION_MAX];

const char *fw_text_option(fw_text_option_id_t id) {
  return fw_text_values[id][0] ? fw_text_values[id] : NULL;
}

static long fw_option_clamp(int i, long v) {
  if (v < fw_option_descs[i].lo) v = fw_option_descs[i].lo;
  if (v > fw_option_descs[i].hi) v = fw_option_descs[i].hi;
  return v;
}

/* Accepts a number, or on/off/true/false/yes/no. Anything else is ignored
 * with a warning: a typo must not silently change behaviour. */
static bool fw_option_parse(const char *s, long *out) {
  if (!strcasecmp(s, "on") || !strcasecmp(s, "true") || !strcasecmp(s, "yes")) { *out = 1; return true; }
  if (!strcasecmp(s, "off") || !strcasecmp(s, "false") || !strcasecmp(s, "no")) { *out = 0; return true; }
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s) return false;
  while (isspace((unsigned char)*end)) end++;
  if (*end) return false;
  *out = v;
  return true;
}

bool fw_cautious;
bool fw_secure;

void fw_options_init(void) {
  char var[64];
  for (int i = 0; i < FW_OPT_COUNT_; i++) {
    fw_snprintf(var, sizeof var, "FREEWAY_%s", fw_option_descs[i].id);
    const char *s = fw_os_getenv(var);
    if (!s || !*s) continue;
    long v;
    if (fw_option_parse(s, &v))
      atomic_store_explicit(&fw_options[i], fw_option_clamp(i, v), memory_order_relaxed);
    else
      fw_message("warning: ignoring %s=%s (not a number)\n", var, s);
  }
  for (int i = 0; i < FW_TOPT_COUNT_; i++) {
    fw_snprintf(var, sizeof var, "FREEWAY_%s", fw_text_option_ids[i]);
    const char *s = fw_os_getenv(var);
    if (!s || !*s) continue;
    if (strlen(s) >= FW_TEXT_OPTION_MAX) {
      fw_message("warning: ignoring %s (longer than %d bytes)\n", var, FW_TEXT_OPTION_MAX - 1);
      continue;
    }
    memcpy(fw_text_values[i], s, strlen(s) + 1);
  }
  fw_cautious = fw_opt(CAUTIOUS) != 0;
  fw_secure = fw_opt(SECURE) != 0 && !fw_cautious;
}

static int fw_option_find(const char *name) {
  if (!name) return -1;
  if (!strncasecmp(name, "FREEWAY_", 8)) name += 8;
  for (int i = 0; i < FW_OPT_COUNT_; i++)
    if (!strcasecmp(name, fw_option_descs[i].id) || !strcasecmp(name, fw_option_descs[i].name)) return i;
  return -1;
}

long fw_option_get(const char *name) {
  int i = fw_option_find(name);
  if (i < 0) { errno = EINVAL; return -1; }
  return atomic_load_explicit(&fw_options[i], memory_order_relaxed);
}

int fw_option_set(const char *name, long value) {
  int i = fw_option_find(name);
  if (i < 0) { errno = EINVAL; return -1; }
  if (strncmp(fw_option_descs[i].doc, "live", 4) != 0) { errno = EPERM; return -1; }
  atomic_store_explicit(&fw_options[i], fw_option_clamp(i, value), memory_order_relaxed);
  return 0;
}

/* Used by fw_stats_print: one line per option. */
void fw_options_print(int fd) {
  char line[256];
  for (int i = 0; i < FW_OPT_COUNT_; i++) {
    int n = fw_snprintf(line, sizeof line, "option FREEWAY_%s=%ld\n", fw_option_descs[i].id,
                         atomic_load_explicit(&fw_options[i], memory_order_relaxed));
    fw_os_write(fd, line, (size_t)n);
  }
  for (int i = 0; i < FW_TOPT_COUNT_; i++) {
    const char *v = fw_text_option((fw_text_option_id_t)i);
    int n = fw_snprintf(line, sizeof line, "option FREEWAY_%s=%s\n", fw_text_option_ids[i], v ? v : "");
    fw_os_write(fd, line, (size_t)n);
  }
}

void fw_options_print_json(fw_out_t *o) {
  for (int i = 0; i < FW_OPT_COUNT_; i++)
    fw_out_printf(o, "%s\"%s\": %ld", i ? ", " : "", fw_option_descs[i].name,
                  atomic_load_explicit(&fw_options[i], memory_order_relaxed));
  for (int i = 0; i < FW_TOPT_COUNT_; i++) {
    /* a path goes out as a JSON string: quotes, backslashes and control
     * characters escaped */
    const char *v = fw_text_option((fw_text_option_id_t)i);
    char id[64];
    size_t k = 0;
    for (const char *c = fw_text_option_ids[i]; *c && k + 1 < sizeof id; c++) id[k++] = (char)tolower((unsigned char)*c);
    id[k] = 0;
    if (!v) {
      fw_out_printf(o, ", \"%s\": null", id);
      continue;
    }
    fw_out_printf(o, ", \"%s\": \"", id);
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
      if (*c == '"' || *c == '\\') fw_out_printf(o, "\\%c", *c);
      else if (*c < 0x20) fw_out_printf(o, "\\u%04x", *c);
      else fw_out_printf(o, "%c", *c);
    }
    fw_out_printf(o, "\"");
  }
}
