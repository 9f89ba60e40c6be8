/*
 * control.h: the control socket's requests (docs/protocol.md, "Control"):
 * one JSON request in, one JSON reply out. Never blocks: everything it
 * reports is the main thread's own state. No sockets here.
 */
#ifndef WD_CONTROL_H
#define WD_CONTROL_H

#include <stddef.h>

#include "config.h"
#include "state.h"

struct spool;
struct result_batch;
struct alerts;

struct control {
	struct state *st;
	const struct wd_config *cfg;	/* the running config; reload swaps it */
	const char *engine;		/* wd_engine_describe() */
	struct spool *spool;
	/* SIGHUP's work: 0, or -1 with err (the old config stays) */
	int (*reload)(void *ctx, char *err, size_t errlen);
	void *reload_ctx;
	/* runs rm, with reload_ctx: 0 (steps and results forgotten), or -errno with err */
	int (*forget)(void *ctx, const char *run, size_t *steps, size_t *results, char *err,
		      size_t errlen);
	size_t compute_depth;			/* updated by the loop */
	struct alerts *alerts;
	/* the latest results per (study, step), for "drift" */
	struct result_batch **results;
	size_t n_results, cap_results;
};

/* Keeps b (taking it) as the latest result of its study and step. */
void control_add_result(struct control *c, struct result_batch *b);
void control_release(struct control *c);
/* Takes run out of the kept results (runs rm): its rows, and batches it was baseline of. */
void control_forget(struct control *c, const char *run);

/* Handles one request; returns the reply (malloc'd JSON). Never NULL. */
char *control_handle(struct control *c, const void *req, size_t len);

#endif
