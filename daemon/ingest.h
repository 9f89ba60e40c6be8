/*
 * ingest.h: the ingest side of protocol v1 (docs/protocol.md), on frames
 * the server loop received: decode, validate, reserve memory, assemble
 * shards, and hand a committed snapshot to the spool. Replies go back
 * through the sink. No sockets here: zmq.h stays in main.c. Written in
 * four parts that share ingest_internal.h (which names what each owns).
 */
#ifndef WD_INGEST_H
#define WD_INGEST_H

#include <stddef.h>

#include "config.h"
#include "state.h"

struct spool;

/* One message as received: frame 0 the peer's routing id, then the rest. */
struct frames {
	size_t n;
	const void *const *data;
	const size_t *len;
};

/* Where replies go: the server sends body to the peer with this id. */
struct reply_sink {
	void (*send)(void *ctx, const void *id, size_t id_len, const char *body);
	void *ctx;
};

struct ingest {
	struct state *st;
	const struct wd_config *cfg;
	struct spool *spool;
	struct reply_sink sink;
	uint64_t window;	/* bytes a run may hold in flight */
	/* a snapshot became durable (after its ack): the compute stage's cue */
	void (*on_durable)(void *ctx, const char *run, int64_t step);
	void *durable_ctx;
	double drop_said;	/* when a drop to free memory was last logged */
	uint64_t drop_unsaid;	/* drops since, not logged */
	double fail_said;	/* when a spool failure was last logged */
	uint64_t fail_unsaid;	/* failures since, not logged */
};

/* What a message was, for peers.c: its type (-1: not parsed), run and step. */
struct ingest_seen {
	int type;
	int64_t step;
	char run[64];
};

void ingest_handle(struct ingest *ix, const struct frames *m, struct ingest_seen *seen);

/*
 * The spool made snap durable (err 0) or failed with -errno err: ack, or an
 * error that says whether a retry can help; then free it.
 */
void ingest_spooled(struct ingest *ix, struct snapshot *snap, int err, const char *why);

/* Drops snapshots idle longer than timeout seconds; returns how many. */
size_t ingest_expire(struct ingest *ix, double timeout);

#endif
