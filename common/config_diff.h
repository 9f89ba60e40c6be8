/*
 * config_diff.h: what a reload changes, old configuration against new, as
 * the reply to `wdrift reload` and the daemon's log line say it (docs/config.md,
 * "Reload"). The one place that compares two configurations item by item;
 * wd_config_reload_check() (config.c) decides only whether a reload may happen.
 *
 * Studies, alerts and auth.clients are matched by name: each is added,
 * removed, or changed (with the keys that differ). Scalar keys are compared
 * as the file would write them. Depends on config.h and jansson.
 */
#ifndef WD_CONFIG_DIFF_H
#define WD_CONFIG_DIFF_H

#include <stddef.h>

#include "config.h"

struct json_t;

/*
 * {"studies": CHANGES, "alerts": CHANGES, "clients": CHANGES,
 *  "keys": [{"key": "log.level", "from": "notice", "to": "debug"}, ...]},
 * CHANGES being {"added": [NAME...], "removed": [NAME...],
 * "changed": [{"name": NAME, "keys": [KEY...]}...]}, every member present.
 * NULL when out of memory. The caller owns the reference.
 */
struct json_t *wd_config_diff(const struct wd_config *old, const struct wd_config *next);

/*
 * One line for a log: "studies +1 -0 ~1, alerts +0 -0 ~0, clients +0 -0 ~0,
 * keys: log.level: notice -> info" (each key from and to, '' when unset; "..."
 * ends a line cut at size) or "nothing changed". d may be NULL ("unknown").
 */
void wd_config_diff_summary(const struct json_t *d, char *buf, size_t size);

#endif
