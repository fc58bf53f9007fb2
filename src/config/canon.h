/* canon: the two writers of a config tree (internal to src/config/; config_parse and config_files_json call
 * them, and what they make is described to the rest of kvc in config.h and expid.h).
 *
 * canon_data: the canonical text behind experiment ids (src/config/expid.h), made once by config_parse into
 *   Config.canon. The config after the --set values with the top-level "seed" and "experiments" left out,
 *   compact, object keys sorted (byte order), numbers in shortest round-trip form (fmt_double), strings with
 *   only '"', '\' and control characters escaped. Key order, whitespace and the spelling of a number
 *   (0.5, 5e-1) do not change it.
 * canon_pretty: indented JSON in the config's own key order (kvc synth's files.json): a list of numbers and
 *   strings, and an object of those and such lists, on one line, else one member per line, two spaces per
 *   level; numbers and strings as canon_data writes them.
 *
 * May include: base/, cJSON. Both return a new NUL-terminated string (caller frees) and cannot fail but for
 * memory (then they abort with a message, as xmalloc does).
 */
#ifndef KVC_CONFIG_CANON_H
#define KVC_CONFIG_CANON_H

#include <cJSON.h>

char *canon_data(const cJSON *root);     /* root: the config object */
char *canon_pretty(const cJSON *root);

#endif
