/*
 * ingest_room.c: memory.budget on the ingest side (see ingest_internal.h
 * and docs/daemon.md, "Memory"). A tensor is reserved whole, with its
 * overhead, from its header, before its payload is copied, so a flood
 * cannot grow memory past the budget; when a reservation does not fit,
 * snapshots that are getting nowhere give way. Also the end of a pending
 * snapshot: dropped, and expired after limits.pending_timeout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commit_ranks.h"
#include "ingest_internal.h"
#include "logging.h"
#include "records.h"

/*
 * When a reservation does not fit, partly received snapshots that are not
 * getting anywhere give their memory up, so that they cannot hold the
 * budget against runs that are (their publishers get 'incomplete' and send
 * again). Not getting anywhere is either of:
 * - idle: no new element for STALE_SECONDS. Without it, partial snapshots
 *   of several runs held the whole budget, none able to complete, for the
 *   10 minutes of limits.pending_timeout (t71_flood.py found it);
 * - slow: elements still missing, and taking fewer bytes a second than
 *   limits.min_rate. Without it, two runs that reserved a 128 MiB tensor
 *   each and sent it one element every 2 s were never idle, and a good
 *   publisher got over_window for 20 s (an outside attack, issue 11).
 */
#define STALE_SECONDS 5.0
#define RATE_GRACE 1.0		/* a new snapshot's rate is over at least this */

/* snap took bytes of new elements at t: its totals and its rate's window. */
void ingest_note_taken(struct snapshot *snap, uint64_t bytes, double t)
{
	if (t - snap->win_start >= STALE_SECONDS) {
		snap->prev_rate = (double)snap->win_bytes / (t - snap->win_start);
		snap->win_start = t;
		snap->win_bytes = 0;
	}
	snap->win_bytes += bytes;
	snap->taken += bytes;
	snap->last_taken = t;
}

/* Bytes a second snap took lately: this window, with the one before when there was one. */
static double intake_rate(const struct snapshot *snap, double t)
{
	double in = t - snap->win_start;

	if (snap->prev_rate < 0)
		return (double)snap->win_bytes / (in > RATE_GRACE ? in : RATE_GRACE);
	return (snap->prev_rate * STALE_SECONDS + (double)snap->win_bytes) / (STALE_SECONDS + in);
}

/*
 * Why snap may give its memory up at t ("idle", "slow", "hoarding"); NULL
 * when it may not. Hoarding: at the rate it takes elements, what it still
 * lacks would take over FILL_SECONDS. Without it, a run that reserved a
 * 128 MiB tensor with a 2 MiB first shard, and did so again the moment it
 * was dropped, kept its memory for the 2 s its rate stayed over min_rate,
 * and a good publisher waited 2 s an ack (an outside attack, issue 11).
 */
#define FILL_SECONDS 30.0

static const char *stalled(const struct ingest *ix, const struct snapshot *snap, double t)
{
	if (snap->committing || snap->recheck || !snap->bytes)
		return NULL;	/* a recheck holds no data: nothing to free */
	if (t - snap->last_taken >= STALE_SECONDS)
		return "idle";
	if (snap->taken >= snap->bytes)
		return NULL;
	double rate = intake_rate(snap, t);
	if (rate < (double)ix->cfg->limits.min_rate)
		return "slow";
	if ((double)(snap->bytes - snap->taken) > rate * FILL_SECONDS)
		return "hoarding";
	return NULL;
}

/* Says a drop to free memory: the first at once, then at most one line in 10 s. */
static void say_dropped(struct ingest *ix, const struct snapshot *snap, const char *why, double t)
{
	if (t - ix->drop_said < 10.0) {
		ix->drop_unsaid++;
		return;
	}
	char more[64] = "";
	if (ix->drop_unsaid)
		snprintf(more, sizeof(more), "; %llu more since the last such line",
			 (unsigned long long)ix->drop_unsaid);
	log_notice("ingest: dropping run '%s' step %lld to free memory.budget: %s (%llu of %llu "
		   "bytes received, %.0f B/s lately; limits.min_rate is %llu B/s)%s", snap->run->name,
		   (long long)snap->step, why, (unsigned long long)snap->taken,
		   (unsigned long long)snap->bytes, intake_rate(snap, t),
		   (unsigned long long)ix->cfg->limits.min_rate, more);
	ix->drop_said = t;
	ix->drop_unsaid = 0;
}

/*
 * Makes room for need more bytes of run r: drops stalled snapshots other
 * than keep, the largest first, until it fits (the budget, and r's window:
 * only r's own snapshots free that). Returns whether it fits.
 */
int ingest_make_room(struct ingest *ix, struct run *r, const struct snapshot *keep, uint64_t need)
{
	struct state *s = ix->st;
	double t = now_mono();

	for (;;) {
		int budget = s->reserved + need > s->budget, window = r->bytes_pending + need > ix->window;
		if (!budget && !window) {
			/* kept buffers give way first (a dropped snapshot's join them): only a saving */
			if (s->reserved + s->kept.bytes + need > s->budget)
				kept_shed(&s->kept, s->budget - s->reserved - need);
			return 1;
		}
		struct snapshot *worst = NULL;
		const char *why = NULL;
		for (struct snapshot *p = s->pending; p; p = p->next) {
			const char *w;
			if (p == keep || (!budget && p->run != r) || !snapshot_pending(p) ||
			    !(w = stalled(ix, p, t)))
				continue;
			if (!worst || p->bytes > worst->bytes)
				worst = p, why = w;
		}
		if (!worst)
			return 0;
		char reason[128];
		if (!strcmp(why, "idle"))
			snprintf(reason, sizeof(reason), "no new element for %.0f s", t - worst->last_taken);
		else if (!strcmp(why, "slow"))
			snprintf(reason, sizeof(reason), "elements still missing arrive at %.0f B/s, below "
				 "limits.min_rate", intake_rate(worst, t));
		else
			snprintf(reason, sizeof(reason), "at %.0f B/s the %llu bytes it lacks would take over "
				 "%.0f s", intake_rate(worst, t),
				 (unsigned long long)(worst->bytes - worst->taken), FILL_SECONDS);
		say_dropped(ix, worst, reason, t);
		if (worst->n_waiters) {	/* ranks that committed: they may send it again */
			char msg[256];
			snprintf(msg, sizeof(msg), "dropped to free memory.budget: %s; send it again", reason);
			ingest_fail_waiters(ix, worst, WIRE_INCOMPLETE, "tensors", msg);
		}
		ingest_drop_snapshot(ix, worst);
		s->count.dropped++;
		s->count.dropped_for_room++;
	}
}

/* The over_window refusal: names the limit that is full, the budget or the run's window. */
void ingest_refuse_room(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			struct run *r, uint64_t need)
{
	struct state *s = ix->st;
	char why[256];
	size_t n = 0;

	for (struct snapshot *p = s->pending; p; p = p->next)
		n += p->bytes != 0;
	if (s->reserved + need > s->budget)
		snprintf(why, sizeof(why), "memory.budget full: %llu of %llu bytes held by %zu snapshots "
			 "being received or stored, none idle, slow or short of 30 s of its rate; this tensor "
			 "needs %llu; retry after acks", (unsigned long long)s->reserved,
			 (unsigned long long)s->budget, n, (unsigned long long)need);
	else
		snprintf(why, sizeof(why), "run '%.60s' window full: %llu of %llu bytes in flight (half "
			 "of memory.budget); this tensor needs %llu; retry after acks", r->name,
			 (unsigned long long)r->bytes_pending, (unsigned long long)ix->window,
			 (unsigned long long)need);
	ingest_fail(ix, m, h, WIRE_OVER_WINDOW, "", why);
}

/*
 * The bytes tensor t holds besides its elements: its entry (and as much
 * again of unused capacity), its name, its slots in the names index, its
 * pieces' arrays, and the allocator's headers. Reserved with the elements:
 * 100,000 one-element tensors held 120 MB that the budget did not see,
 * and nothing was ever evicted (an outside attack, issue 11).
 */
uint64_t ingest_tensor_overhead(const char *name, size_t n_ranges)
{
	size_t cap = 1;
	while (cap < n_ranges)
		cap *= 2;
	return 2 * sizeof(struct tensor_buf) + strlen(name) + 1 +
	       4 * 32 +					/* names.c: it and a group, at a load of 1/2 */
	       cap * (2 * sizeof(uint64_t) + sizeof(uint32_t)) +	/* pieces: ranges, CRCs */
	       4 * 32;					/* malloc's headers: data, name, ranges, CRCs */
}

/* Reserves more overhead for t in snap, of run r: the budget may go over by it, not more. */
void ingest_hold_overhead(struct state *s, struct run *r, struct snapshot *snap, struct tensor_buf *t,
			  uint64_t now)
{
	if (now <= t->overhead)
		return;
	uint64_t more = now - t->overhead;
	t->overhead = now;
	snap->overhead += more;
	r->bytes_pending += more;
	s->reserved += more;
}

void ingest_unlink_snapshot(struct state *s, struct snapshot *snap)
{
	for (struct snapshot **p = &s->pending; *p; p = &(*p)->next)
		if (*p == snap) {
			*p = snap->next;
			s->n_pending--;
			return;
		}
}

/*
 * Unlinks and frees snap. A run left holding nothing, no snapshot pending
 * and none durable, is forgotten with it: limits.max_runs counts the runs
 * the daemon holds something of, so runs whose every snapshot was dropped
 * (evicted, expired, refused) do not use it up until a restart.
 */
void ingest_drop_snapshot(struct ingest *ix, struct snapshot *snap)
{
	struct state *s = ix->st;
	struct run *r = snap->run;

	ingest_unlink_snapshot(s, snap);
	snapshot_free(s, snap);
	if (!r || r->n_durable || r->expired)	/* a step that expired stays said (runs, drift) */
		return;
	for (struct snapshot *p = s->pending; p; p = p->next)
		if (p->run == r)
			return;
	state_forget_run(s, r);
}

struct expired_step *ingest_find_expired(struct ingest *ix, const char *run, int64_t step)
{
	double t = now_mono();

	for (size_t i = 0; i < INGEST_EXPIRED_MAX; i++) {
		struct expired_step *e = &ix->expired[i];
		if (e->run[0] && e->step == step && t - e->at < INGEST_EXPIRED_SECONDS &&
		    !strcmp(e->run, run))
			return e;
	}
	return NULL;
}

void ingest_forget_expired(struct ingest *ix, const char *run)
{
	for (size_t i = 0; i < INGEST_EXPIRED_MAX; i++)
		if (!strcmp(ix->expired[i].run, run))
			ix->expired[i].run[0] = 0;
}

void ingest_note_expired(struct ingest *ix, const struct snapshot *snap, double t, const char *why)
{
	struct expired_step *e = &ix->expired[0];

	/* the same step's slot first (refused again), else a free one, else the oldest */
	for (size_t i = 1; i < INGEST_EXPIRED_MAX && e->run[0]; i++)
		if (!ix->expired[i].run[0] || ix->expired[i].at < e->at)
			e = &ix->expired[i];
	for (size_t i = 0; i < INGEST_EXPIRED_MAX; i++)
		if (ix->expired[i].run[0] && ix->expired[i].step == snap->step &&
		    !strcmp(ix->expired[i].run, snap->run->name))
			e = &ix->expired[i];
	snprintf(e->run, sizeof(e->run), "%s", snap->run->name);
	e->step = snap->step;
	e->at = t;
	e->said = e->said_new = 0;
	e->sessions_then = snap->run->sessions_full ? UINT32_MAX : snap->run->n_sessions;
	snprintf(e->why, sizeof(e->why), "%s", why);
	double wall = now_wall();
	char what[NAME_MAX + 64];
	run_note_expired(snap->run, snap->step, why, wall);	/* said by runs and drift, past these 30 s */
	snprintf(what, sizeof(what), "run '%s' step %lld's expiry", snap->run->name, (long long)snap->step);
	ingest_record(ix, record_expired(snap->run->name, snap->step, wall, why), what);	/* and after a restart */
}

void ingest_record(struct ingest *ix, char *payload, const char *what)
{
	int r = !ix->to_wal ? 0 : payload ? ix->to_wal(ix->wal_ctx, payload) : -ENOMEM;

	if (r < 0)
		log_warning("write-ahead log: %s not recorded (%s): runs and drift say it until the daemon stops, "
			    "not after", what, strerror(-r));
	free(payload);
}

size_t ingest_expire(struct ingest *ix, double timeout)
{
	struct state *s = ix->st;
	double t = now_mono();
	size_t n = 0;
	struct snapshot *snap = s->pending, *next;
	char why[512], lacks[200];

	for (; snap; snap = next) {
		next = snap->next;
		/* a re-send being checked whose commit never came: retries after an ack */
		double limit = snap->recheck && timeout > RECHECK_SECONDS ? RECHECK_SECONDS : timeout;
		double idle = snapshot_idle(snap, t);
		if (snap->committing || idle < limit)
			continue;
		if (snap->conflict && !snap->recheck) {	/* refused whole: said then, counted then */
			log_debug("ingest: run '%s' step %lld: the snapshot refused whole is forgotten after "
				  "%.0f s without a shard of it", snap->run->name, (long long)snap->step, timeout);
			ingest_drop_snapshot(ix, snap);
			n++;
			continue;
		}
		if (snap->recheck && snap->n_waiters) {	/* a sharded re-send never sent whole */
			ingest_recheck_settle(ix, snap, run_identity(snap->run, snap->step), 0);
		} else if (snap->n_waiters) {	/* ranks committed; another never finished its part */
			char missing[240];
			/* the ranks that never committed, when the commits gave theirs */
			int named = commit_ranks_missing(snap, missing, sizeof(missing)) > 0;
			snprintf(why, sizeof(why), "expired after %.0f s waiting for the other ranks: %s%s%s",
				 timeout, named ? missing : "", named ? "; " : "",
				 ingest_snapshot_lacks(snap, lacks, sizeof(lacks)));
			/*
			 * Waiters are connections: a rank whose ack timed out sends
			 * again on a fresh socket, a new one (a trial read "2 commits
			 * waited" beside one live rank as two ranks).
			 */
			const struct run_expiry *again = run_expiry_again(snap->run, why);
			if (again)	/* each later step of a dead rank's job: said short (a trial's log repeated it whole) */
				log_warning("ingest: run '%s' step %lld: expired after %.0f s as its step %lld did, for "
					    "the same reason%s%s (%llu steps of it expired; `wdrift runs` "
					    "says them)", snap->run->name, (long long)snap->step, timeout,
					    (long long)again->step, named ? ": " : "", named ? missing : "",
					    (unsigned long long)snap->run->expired + 1);
			else
				log_warning("ingest: run '%s' step %lld: %s (commits from %zu connection%s waited; "
					    "a rank that sent again on a new connection counts again)",
					    snap->run->name, (long long)snap->step, why, snap->n_waiters,
					    snap->n_waiters == 1 ? "" : "s");
			ingest_fail_waiters(ix, snap, WIRE_INCOMPLETE, "ranks", why);
			ingest_note_expired(ix, snap, t, why);
		} else if (!snap->recheck) {
			log_notice("ingest: dropping run '%s' step %lld: no commit for %.0f s (%zu tensors)",
				   snap->run->name, (long long)snap->step, timeout, snap->n_tensors);
		}
		if (!snap->recheck)
			s->count.dropped++;
		ingest_drop_snapshot(ix, snap);
		n++;
	}
	uint64_t kept = s->kept.bytes;
	if (kept_idle(&s->kept, t))
		log_info("ingest: %.1f MiB of kept tensor buffers given back: none taken for %.0f s",
			 (double)kept / 1048576, KEPT_IDLE_S);
	return n;
}
