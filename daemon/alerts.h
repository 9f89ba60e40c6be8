/*
 * alerts.h: alert rules over drift (docs/config.md, "alerts"), with the
 * lifecycle of Prometheus alerting: a rule's instance (one per candidate,
 * and per tensor for scope: tensors) goes pending when its value is above
 * the threshold, firing after `for` consecutive snapshots above it, and
 * resolved when it drops back. Each transition to firing or resolved goes
 * to the log (at the rule's priority), to the events socket (by the
 * caller), and to the rule's command, run with the alert JSON on stdin,
 * rate-limited, never waited for. Runs in the main thread.
 */
#ifndef WD_ALERTS_H
#define WD_ALERTS_H

#include <stddef.h>

#include "config.h"
#include "state.h"

struct alerts;
struct result_batch;

/* Called for each transition with the alert's JSON (topic "alert.NAME"). */
typedef void (*alert_sink)(void *ctx, const char *topic, const char *json);

struct alerts *alerts_new(alert_sink sink, void *ctx);
/* A new config: instances of rules that keep their name keep their state. */
void alerts_set_config(struct alerts *a, const struct wd_config *cfg);
/* Evaluates the rules of the batch's study on its candidates. */
void alerts_on_results(struct alerts *a, const struct result_batch *b);
/* Evaluates "stalled" rules: seconds since each run's last snapshot. */
void alerts_tick(struct alerts *a, const struct state *st);
/* Reaps finished alert commands and logs their failures. */
void alerts_reap(struct alerts *a);
/* {"alerts": [...]}: every rule and its instances, for the control socket. */
char *alerts_json(const struct alerts *a);
void alerts_free(struct alerts **a);

#endif
