/*
 * events.h: what the daemon publishes on its events socket
 * (docs/protocol.md, "Events"): two frames, a topic and a JSON object.
 *
 *   drift.STUDY  a study's results at one step: per compared run its role,
 *                W1 mean and max, and their ratios to each proxy
 *   alert.NAME   an alert's transition; its body is alerts.c's, which also
 *                hands it to the alert's command
 *
 * The topics and the drift body are made here, and every event leaves
 * through events_publish. The socket is bound by main.c; never blocks (a
 * slow subscriber loses events, as PUB does). Depends on libzmq, jansson.
 */
#ifndef WD_EVENTS_H
#define WD_EVENTS_H

#include <stddef.h>

struct result_batch;

struct events {
	void *sock;	/* the bound PUB socket; NULL: events go nowhere */
};

/* Sends one event; a failure is logged at debug (no subscriber, or a full queue). */
void events_publish(struct events *ev, const char *topic, const char *json);
/* events_publish with ctx an events: the alerts' sink (alerts_new). */
void events_sink(void *ctx, const char *topic, const char *json);
/* The drift.STUDY event of a batch, topic and body. */
void events_drift(struct events *ev, const struct result_batch *b);

/* The topic of study's drift events, cut to fit size. */
void event_drift_topic(char *topic, size_t size, const char *study);
/* The body of a batch's drift event: malloc'd JSON, NULL when out of memory. */
char *event_drift_json(const struct result_batch *b);

#endif
