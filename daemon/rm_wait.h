/*
 * rm_wait.h: `runs rm` requests waiting for the run's publishers to
 * disconnect (docs/daemon.md, "A snapshot on the main thread", runs rm).
 *
 * A job that has just exited is still connected for a moment: the daemon
 * learns of the disconnect from ZeroMQ's monitor, later on a loaded
 * machine (CI saw more than 250 ms). `python train.py; wdrift runs rm RUN`
 * must not be refused for it, and the loop that acks every job's snapshots
 * must not block while it waits. So such a request (and one refused for a
 * snapshot being received or stored) is kept here with its client's
 * envelope, asked again as the loop turns, and answered once: when the run
 * could be removed now, "again" (the client asks again, and that request
 * removes it), or when its wait is up, refused. A waiting request never
 * removes the run itself: its client may have given up meanwhile (Ctrl-C),
 * and ZeroMQ does not say so.
 */
#ifndef WD_RM_WAIT_H
#define WD_RM_WAIT_H

#include <stddef.h>

struct query_envelope;
struct query_waiter;

#define RM_WAIT_MAX_S 60	/* under the CLI's 120 s patience (WDRIFT_QUERY_TIMEOUT_MS) */
#define RM_WAITING_MAX 16	/* requests waiting at once; more are answered at once */

struct rm_wait {
	char *run;
	unsigned how;			/* FORGET_FORCE, or 0 */
	double wait;			/* seconds asked for */
	double deadline;		/* now_mono() */
	struct query_waiter *client;	/* its envelope, copied */
	struct rm_wait *next;
};

struct rm_waiting {
	struct rm_wait *head;		/* oldest first */
	size_t n;
};

/* Keeps a request for run from the client of env, until now + wait. 0, -EBUSY (full) or -ENOMEM. */
int rm_wait_add(struct rm_waiting *l, const char *run, unsigned how, double wait, double now,
		const struct query_envelope *env);
/* Takes w out of l; the caller frees it (rm_wait_free). */
void rm_wait_remove(struct rm_waiting *l, struct rm_wait *w);
/* The earliest deadline, or 0 when none waits. */
double rm_wait_next_deadline(const struct rm_waiting *l);
void rm_wait_free(struct rm_wait **w);

#endif
