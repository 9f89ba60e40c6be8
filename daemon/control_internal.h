/*
 * control_internal.h: what the control requests' files share (control.c,
 * control_drift.c): the reply helpers, and the requests one of them
 * answers for control_request. Not for other modules: control.h is theirs.
 */
#ifndef WD_CONTROL_INTERNAL_H
#define WD_CONTROL_INTERNAL_H

#include <jansson.h>

#include "control.h"

/* o as a reply (o released); the out-of-memory error reply when it cannot be. */
char *control_dump(json_t *o);
/* {"ok": false, "error": fmt with arg} as a reply. */
char *control_fail(const char *fmt, const char *arg);
/*
 * drift: {"study", "step" or "latest", "tensors"}: the reply, or NULL when
 * the query thread builds it for env's client (control_drift.c).
 */
char *control_drift(struct control *c, json_t *req, const struct query_envelope *env);
/*
 * When b, a study's latest batch, has no candidate's rows: the latest
 * earlier one of its study and baseline that has (the step `drift` shows
 * with no step asked), or NULL, also when b has a candidate's rows.
 */
struct result_batch *control_latest_compared(const struct control *c, const struct wd_config_study *st,
					      const struct result_batch *b);

#endif
