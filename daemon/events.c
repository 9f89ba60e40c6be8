/* events.c: the events socket's messages (see events.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zmq.h>

#include "events.h"
#include "logging.h"
#include "result_batch.h"

void events_publish(struct events *ev, const char *topic, const char *json)
{
	if (!ev->sock)
		return;
	if (zmq_send(ev->sock, topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(ev->sock, json, strlen(json), ZMQ_DONTWAIT) < 0)
		log_debug("events: not sent: %s", zmq_strerror(errno));
}

void events_sink(void *ctx, const char *topic, const char *json)
{
	events_publish(ctx, topic, json);
}

void event_drift_topic(char *topic, size_t size, const char *study)
{
	snprintf(topic, size, "drift.%.200s", study);
}

/* Non-finite numbers are null: JSON has no NaN. */
static json_t *jnum(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

char *event_drift_json(const struct result_batch *b)
{
	json_t *runs = json_object();

	for (size_t i = 0; runs && i < b->n_rows; i++) {
		const struct drift_row *r = &b->rows[i];
		if (r->kind != ROW_MAX && r->kind != ROW_MEAN && !(r->kind == ROW_TENSOR && !r->numel))
			continue;
		json_t *run = json_object_get(runs, r->run);
		if (!run) {
			/* what a healthy-looking line hid (a trial): NaN or Inf, and tensors not compared */
			run = json_pack("{s:s,s:I,s:I}", "role", r->role == ROLE_CANDIDATE ? "candidate" : "proxy",
					"nonfinite", (json_int_t)0, "absent", (json_int_t)0);
			json_object_set_new(runs, r->run, run);
		}
		if (r->kind == ROW_TENSOR) {	/* no element compared: absent, empty or unreadable */
			json_int_t n = json_integer_value(json_object_get(run, "absent"));
			json_object_set_new(run, "absent", json_integer(n + 1));
			continue;
		}
		if (r->kind == ROW_MEAN)	/* the aggregate rows sum the tensors' counts */
			json_object_set_new(run, "nonfinite", json_integer((json_int_t)(r->nan + r->posinf + r->neginf)));
		json_t *ratios = json_object();
		for (size_t k = 0; k < b->n_proxies; k++)
			json_object_set_new(ratios, b->proxies[k], jnum(r->ratio[k]));
		json_object_set_new(run, r->kind == ROW_MAX ? "w1_max" : "w1_mean", jnum(r->w1));
		json_object_set_new(run, r->kind == ROW_MAX ? "ratio_max" : "ratio_mean", ratios);
	}
	json_t *ev = runs ? json_pack("{s:i,s:s,s:I,s:s,s:o}", "v", 1, "study", b->study, "step",
				      (json_int_t)b->step, "baseline", b->baseline, "runs", runs) : NULL;
	/*
	 * A reload's backfill (or the start's catch-up) computes past steps
	 * now: said, so that a subscriber does not take them for live ones (a
	 * watch printed a new study's whole history as if it were arriving).
	 */
	if (ev && b->backfill)
		json_object_set_new(ev, "history", json_true());
	char *body = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	return body;
}

void events_drift(struct events *ev, const struct result_batch *b)
{
	char topic[256];
	char *body = event_drift_json(b);

	event_drift_topic(topic, sizeof(topic), b->study);
	if (body)
		events_publish(ev, topic, body);
	free(body);
}
