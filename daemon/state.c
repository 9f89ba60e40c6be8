/* state.c: runs, durable steps and snapshot memory (see state.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "identity.h"
#include "logging.h"
#include "near_name.h"
#include "commit_ranks.h"
#include "state.h"
#include "utf8.h"

double now_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double now_wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct run *state_run(struct state *s, const char *name, int create)
{
	struct run *r;

	for (r = s->runs; r; r = r->next)
		if (!strcmp(r->name, name))
			return r;
	if (!create || !(r = calloc(1, sizeof(*r))) || !(r->name = strdup(name))) {
		free(r);
		return NULL;
	}
	r->next = s->runs;
	s->runs = r;
	s->n_runs++;
	return r;
}

const char *state_run_suggest(const struct state *s, const char *name, const char **tie)
{
	const char *best = NULL, *next = NULL;
	size_t bestd = SIZE_MAX;

	for (const struct run *r = s->runs; r; r = r->next) {
		size_t d = r->n_durable ? wd_name_near(name, r->name, strlen(r->name)) : SIZE_MAX;
		if (d == SIZE_MAX || d > bestd)
			continue;
		if (d < bestd) {
			best = r->name, next = NULL, bestd = d;
		} else if (strcmp(r->name, best) < 0) {
			next = best, best = r->name;
		} else if (!next || strcmp(r->name, next) < 0) {
			next = r->name;
		}
	}
	if (tie)
		*tie = next;
	return best;
}

/* Binary search: durable steps are kept sorted. */
static size_t lower_bound(const struct run *r, int64_t step)
{
	size_t lo = 0, hi = r->n_durable;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (r->durable[mid] < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Does r hold a durable step strictly between lo and hi? */
static int durable_between(const struct run *r, int64_t lo, int64_t hi)
{
	if (lo == INT64_MAX)
		return 0;
	size_t i = lower_bound(r, lo + 1);
	return i < r->n_durable && r->durable[i] < hi;
}

/* Adds session to the set v[0..n) of at most RUN_SESSIONS_MAX (full: more came, or no memory). */
static void session_add(uint64_t **v, uint32_t *n, int *full, uint64_t session)
{
	if (!session || *full)
		return;
	for (uint32_t i = 0; i < *n; i++)
		if ((*v)[i] == session)
			return;
	if (*n == RUN_SESSIONS_MAX) {
		*full = 1;
		return;
	}
	if ((*n & (*n - 1)) == 0) {	/* capacity: the next power of two */
		uint64_t *g = realloc(*v, (*n ? 2 * (size_t)*n : 1) * sizeof(*g));
		if (!g) {
			*full = 1;	/* cannot tell any more */
			return;
		}
		*v = g;
	}
	(*v)[(*n)++] = session;
}

void run_note_session(struct run *r, uint64_t session)
{
	session_add(&r->sessions, &r->n_sessions, &r->sessions_full, session);	/* full: every one known */
}

void run_note_clean_session(struct run *r, uint64_t session)
{
	session_add(&r->clean_sessions, &r->n_clean_sessions, &r->clean_sessions_full, session);
}

int run_clean_session(const struct run *r, uint64_t session)
{
	for (uint32_t i = 0; session && i < r->n_clean_sessions; i++)
		if (r->clean_sessions[i] == session)
			return 1;
	return 0;
}

int run_conflict_own(const struct run *r, uint64_t session)
{
	return !r->mixed && run_clean_session(r, session);
}

void run_note_from_start(struct run *r, uint64_t session, int64_t from)
{
	if (!session || run_rerun_of(r, session))
		return;
	if (r->n_reruns == RUN_RERUNS_MAX) {
		/*
		 * Full of jobs restarted from step 0 (a `wdrift send --step 0`
		 * of the same file, many times): one with no conflict gives way,
		 * so that a re-run coming now is still told. Full of re-runs,
		 * this one is not noted.
		 */
		uint32_t i = 0;
		while (i < r->n_reruns && r->reruns[i].conflict != RUN_NO_CONFLICT)
			i++;
		if (i == r->n_reruns)
			return;
		memmove(&r->reruns[i], &r->reruns[i + 1], (r->n_reruns - i - 1) * sizeof(r->reruns[0]));
		r->n_reruns--;
	}
	if ((r->n_reruns & (r->n_reruns - 1)) == 0) {	/* capacity: the next power of two */
		struct run_rerun *g = realloc(r->reruns, (r->n_reruns ? 2 * (size_t)r->n_reruns : 1) * sizeof(*g));
		if (!g)
			return;	/* not noted: its later steps are taken, as before */
		r->reruns = g;
	}
	r->reruns[r->n_reruns++] = (struct run_rerun){ session, from, RUN_NO_CONFLICT, RUN_NO_CONFLICT, 0 };
}

int run_rerun_conflict(const struct run *r, const struct run_rerun *rr, int64_t step)
{
	if (rr->conflict != RUN_NO_CONFLICT || (step <= rr->sent && run_conflict_own(r, rr->session)))
		return 0;
	int64_t lo = rr->sent < step ? rr->sent : step, hi = rr->sent < step ? step : rr->sent;
	return !durable_between(r, lo, hi) && durable_between(r, step, INT64_MAX);
}

struct run_rerun *run_rerun_of(const struct run *r, uint64_t session)
{
	for (uint32_t i = 0; session && i < r->n_reruns; i++)
		if (r->reruns[i].session == session)
			return &r->reruns[i];
	return NULL;
}

int run_knew_session(const struct run *r, uint64_t session, uint32_t n)
{
	if (!session || n == UINT32_MAX)
		return 1;
	for (uint32_t i = 0; i < n && i < r->n_sessions; i++)
		if (r->sessions[i] == session)
			return 1;
	return 0;
}

int run_knows_session(const struct run *r, uint64_t session)
{
	if (!session || r->sessions_full)
		return 1;
	for (uint32_t i = 0; i < r->n_sessions; i++)
		if (r->sessions[i] == session)
			return 1;
	return 0;
}

struct run_expiry *run_note_expired(struct run *r, int64_t step, const char *why, double wall)
{
	r->expired++;
	if (!r->expiries && !(r->expiries = calloc(RUN_EXPIRED_KEPT, sizeof(*r->expiries)))) {
		log_err("out of memory: run '%s' step %lld expired incomplete (%s); runs and drift cannot say it",
			r->name, (long long)step, why);
		return NULL;
	}
	struct run_expiry *e = &r->expiries[r->n_expiries++ % RUN_EXPIRED_KEPT];
	e->step = step;
	e->wall = wall;
	snprintf(e->why, sizeof(e->why), "%s", why);
	wd_utf8_scrub(e->why);	/* cut inside a name: runs and drift carry it as JSON */
	e->replayed = 0;
	return e;
}

const struct run_expiry *run_last_expiry(const struct run *r)
{
	return r->expiries && r->n_expiries ? &r->expiries[(r->n_expiries - 1) % RUN_EXPIRED_KEPT] : NULL;
}

const struct run_expiry *run_expiry_again(const struct run *r, const char *why)
{
	const struct run_expiry *e = run_last_expiry(r);
	char kept[sizeof(e->why)];

	if (!e || e->replayed)	/* the previous process logged it: this one says it whole once */
		return NULL;
	snprintf(kept, sizeof(kept), "%s", why);	/* as run_note_expired keeps it */
	wd_utf8_scrub(kept);
	return strcmp(kept, e->why) ? NULL : e;
}

void run_note_conflict(struct run *r, int64_t step, double wall, int own)
{
	r->conflict_step = step;
	r->conflicts++;
	r->conflicts_own += own != 0;
	r->conflict_wall = wall;
}

int run_note_mixed(struct run *r, int64_t step, const char *who, double wall)
{
	if (r->mixed++)
		return 0;
	/* the first: from then on its steps are both jobs' */
	r->mixed_step = step;
	r->mixed_wall = wall;
	snprintf(r->mixed_who, sizeof(r->mixed_who), "%s", who);
	return 1;
}

size_t run_durable_upto(const struct run *r, int64_t step)
{
	return step == INT64_MAX ? r->n_durable : lower_bound(r, step + 1);
}

int run_is_durable(const struct run *r, int64_t step)
{
	size_t i = lower_bound(r, step);
	return i < r->n_durable && r->durable[i] == step;
}

const struct snap_id *run_identity(const struct run *r, int64_t step)
{
	size_t i = lower_bound(r, step);
	return i < r->n_durable && r->durable[i] == step ? r->ids[i] : NULL;
}

void run_add_durable(struct run *r, int64_t step, struct snap_id *id)
{
	size_t i = lower_bound(r, step);
	if (i < r->n_durable && r->durable[i] == step) {
		if (!r->ids[i])
			r->ids[i] = id;
		else
			free(id);
		return;
	}
	if (r->n_durable == r->cap_durable) {
		size_t cap = r->cap_durable ? 2 * r->cap_durable : 64;
		int64_t *d = realloc(r->durable, cap * sizeof(*d));
		if (d)
			r->durable = d;
		struct snap_id **v = d ? realloc(r->ids, cap * sizeof(*v)) : NULL;
		if (!v) {
			free(id);
			return;	/* the WAL still has it; only the welcome list is short */
		}
		r->ids = v;
		r->cap_durable = cap;
	}
	memmove(r->durable + i + 1, r->durable + i, (r->n_durable - i) * sizeof(*r->durable));
	memmove(r->ids + i + 1, r->ids + i, (r->n_durable - i) * sizeof(*r->ids));
	r->durable[i] = step;
	r->ids[i] = id;
	r->n_durable++;
}

static void run_free(struct run *r)
{
	for (size_t i = 0; i < r->n_durable; i++)
		free(r->ids[i]);
	free(r->ids);
	free(r->left_study);
	free(r->sessions);
	free(r->clean_sessions);
	free(r->reruns);
	free(r->claims);
	free(r->mixed_told);
	free(r->expiries);
	free(r->name);
	free(r->durable);
	free(r);
}

void state_forget_run(struct state *s, struct run *r)
{
	for (struct run **p = &s->runs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			s->n_runs--;
			run_free(r);
			return;
		}
}

size_t state_pending(const struct state *s)
{
	size_t n = 0;

	for (const struct snapshot *p = s->pending; p; p = p->next)
		n += snapshot_pending(p);
	return n;
}

void state_note_removed(struct state *s, const char *name)
{
	char *copy = strdup(name);

	if (!copy || state_removed(s, name)) {
		free(copy);
		return;
	}
	if (s->n_removed == STATE_REMOVED_MAX) {	/* the oldest goes */
		free(s->removed[0]);
		memmove(s->removed, s->removed + 1, (STATE_REMOVED_MAX - 1) * sizeof(*s->removed));
		s->n_removed--;
	}
	s->removed[s->n_removed++] = copy;
}

int state_removed(const struct state *s, const char *name)
{
	for (size_t i = 0; i < s->n_removed; i++)
		if (!strcmp(s->removed[i], name))
			return 1;
	return 0;
}

/*
 * Its tensor buffers are kept for the next snapshot's tensors of the same
 * size (kept_bufs.h) where memory.budget has room beside what is reserved:
 * whatever ends it (stored, dropped, refused, runs rm).
 */
void snapshot_empty(struct state *s, struct snapshot *snap)
{
	s->reserved -= snap->bytes + snap->overhead;
	if (snap->run)
		snap->run->bytes_pending -= snap->bytes + snap->overhead;
	snap->bytes = snap->overhead = 0;
	for (size_t i = 0; i < snap->n_tensors; i++) {
		struct tensor_buf *t = &snap->tensors[i];
		uint64_t held = s->reserved + s->kept.bytes;
		free(t->name);
		free(t->ranges);
		free(t->crcs);
		kept_put(&s->kept, t->data, t->total * wd_dtype_size(t->dtype),
			 s->budget > held ? s->budget - held : 0, now_mono());
	}
	free(snap->tensors);
	snap->tensors = NULL;
	snap->n_tensors = snap->cap_tensors = 0;
	names_free(&snap->names);
	free(snap->waiters);
	snap->waiters = NULL;
	snap->n_waiters = 0;
	commit_ranks_free(snap);
}

void snapshot_free(struct state *s, struct snapshot *snap)
{
	snapshot_empty(s, snap);
	free(snap);
}

void state_release(struct state *s)
{
	struct snapshot *snap, *sn;
	struct run *r, *rn;

	for (snap = s->pending; snap; snap = sn) {
		sn = snap->next;
		snapshot_free(s, snap);
	}
	kept_release(&s->kept);
	for (r = s->runs; r; r = rn) {
		rn = r->next;
		run_free(r);
	}
	for (size_t i = 0; i < s->n_removed; i++)
		free(s->removed[i]);
	memset(s, 0, sizeof(*s));
}
