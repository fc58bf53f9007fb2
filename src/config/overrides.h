/* overrides: `--set PATH=JSON`, applied to the parsed config tree before anything is validated (internal to
 * src/config/; README "--set PATH=JSON" is the user's manual).
 *
 * PATH is dotted, list indices are decimal numbers ("experiments.0.bits"); the value is strict JSON (json_scan),
 * so strings need quotes. The last component replaces an existing member or list item, or adds a new key to an
 * existing object (validation then decides whether the key is allowed). A missing intermediate key (naming the
 * nearest), an index out of range, descending into a number, string or null, an empty component, a missing '='
 * and a value that is not JSON are errors: "--set <arg, at most 60 bytes>: <what> (got ...)".
 *
 * May include: config/json.h, base/, cJSON. Used by config.c.
 */
#ifndef KVC_CONFIG_OVERRIDES_H
#define KVC_CONFIG_OVERRIDES_H

#include <cJSON.h>

/* Applies one "PATH=JSON" to root. Returns 0, or -1 with kvc_fail set (root is then unchanged). */
int overrides_apply(cJSON *root, const char *arg);

#endif
