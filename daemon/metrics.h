/*
 * metrics.h: the Prometheus text exposition (format 0.0.4) of what the
 * daemon knows (docs/metrics.md): its counters, queues and memory, the
 * latest drift summaries of each study's runs, and the alert rules' states.
 * Built on the main thread from the same state `wdrift status`, `drift` and
 * `alerts` read (struct control), so nothing is locked or copied. The HTTP
 * side is metrics_http.h's. Depends on control.h and alerts.h.
 */
#ifndef WD_METRICS_H
#define WD_METRICS_H

#include <stddef.h>

struct control;

/*
 * The /metrics body: every series, each family under its # HELP and
 * # TYPE, names starting with wdrift_. Returns a malloc'd string (its
 * length in *len), or NULL when out of memory. Main thread only.
 */
char *metrics_render(const struct control *c, size_t *len);

#endif
