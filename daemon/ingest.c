/*
 * ingest.c: protocol v1 on the daemon's side (see ingest.h). Every failure
 * is an error reply naming the field and a counter; nothing here stops the
 * daemon. Memory for a tensor is reserved from its header, before its
 * payload is copied, so a flood cannot grow memory past the budget.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity.h"
#include "ingest.h"
#include "logging.h"
#include "pieces.h"
#include "spool.h"

static void reply(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	char *body = wire_build(h);
	if (body) {
		ix->sink.send(ix->sink.ctx, m->data[0], m->len[0], body);
		free(body);
	}
}

/* Sends an error reply echoing what the header had; counts it. */
static void reply_error(struct ingest *ix, const struct frames *m, const struct wire_header *in,
			const struct wire_error *err)
{
	struct wire_header h;

	memset(&h, 0, sizeof(h));
	h.type = WIRE_ERROR;
	h.step = in ? in->step : -1;
	if (in) {
		memcpy(h.run, in->run, sizeof(h.run));
		memcpy(h.name, in->name, sizeof(h.name));
	}
	h.error = *err;
	ix->st->count.errors[err->code]++;
	log_debug("ingest: %s %s: %s", wire_code_name(err->code), err->field, err->reason);
	reply(ix, m, &h);
}

static void reply_fail(struct ingest *ix, const struct frames *m, const struct wire_header *in,
		       enum wire_code code, const char *field, const char *reason)
{
	struct wire_error err = { .code = code };
	snprintf(err.field, sizeof(err.field), "%s", field);
	snprintf(err.reason, sizeof(err.reason), "%.255s", reason);
	reply_error(ix, m, in, &err);
}

/*
 * Who sent m: a hash of its routing id, which ZeroMQ keeps for the life of
 * a connection. Another process (a restart, a re-used run name) is another
 * connection.
 */
static uint64_t sender_of(const struct frames *m)
{
	uint64_t x = 0xcbf29ce484222325ull;	/* FNV-1a */
	const unsigned char *p = m->data[0];
	for (size_t i = 0; i < m->len[0]; i++)
		x = (x ^ p[i]) * 0x100000001b3ull;
	return x;
}

/* The frames of a reply to one waiter: its routing id only. */
#define WAITER_FRAMES(w) { 1, (const void *const[]){ (w)->id }, (const size_t[]){ (w)->len } }

/* Adds the sender of m to snap's waiters (once); 0, or -1 when there are too many. */
static int add_waiter(struct snapshot *snap, const struct frames *m)
{
	size_t len = m->len[0] < IDENTITY_MAX ? m->len[0] : IDENTITY_MAX;

	for (size_t i = 0; i < snap->n_waiters; i++)
		if (snap->waiters[i].len == len && !memcmp(snap->waiters[i].id, m->data[0], len))
			return 0;
	if (snap->n_waiters >= WAITERS_MAX)
		return -1;
	size_t n = snap->n_waiters;
	if ((n & (n - 1)) == 0) {	/* capacity: the next power of two */
		struct waiter *w = realloc(snap->waiters, (n ? 2 * n : 1) * sizeof(*w));
		if (!w)
			return -1;
		snap->waiters = w;
	}
	snap->waiters[n].len = len;
	memcpy(snap->waiters[n].id, m->data[0], len);
	snap->n_waiters++;
	return 0;
}

/* Sends every waiter of snap the error code (field, reason). */
static void fail_waiters(struct ingest *ix, const struct snapshot *snap, enum wire_code code,
			 const char *field, const char *reason)
{
	struct wire_header h;

	memset(&h, 0, sizeof(h));
	snprintf(h.run, sizeof(h.run), "%s", snap->run->name);
	h.step = snap->step;
	for (size_t i = 0; i < snap->n_waiters; i++) {
		struct frames w = WAITER_FRAMES(&snap->waiters[i]);
		reply_fail(ix, &w, &h, code, field, reason);
	}
}

/*
 * Is snap complete: every tensor whole, and as many as want? 1, or 0 with
 * why naming the first tensor that lacks elements (and how many it has).
 */
static int snapshot_complete(const struct snapshot *snap, uint64_t want, char *why, size_t len)
{
	size_t complete = 0;
	const struct tensor_buf *missing = NULL;

	for (size_t i = 0; i < snap->n_tensors; i++) {
		if (snap->tensors[i].covered == snap->tensors[i].total)
			complete++;
		else if (!missing)
			missing = &snap->tensors[i];
	}
	if (missing)
		snprintf(why, len, "commit says %llu tensors, %zu complete: '%.120s' has %llu of %llu "
			 "elements", (unsigned long long)want, complete, missing->name,
			 (unsigned long long)missing->covered, (unsigned long long)missing->total);
	else if (complete != want)
		snprintf(why, len, "commit says %llu tensors, %zu received", (unsigned long long)want,
			 complete);
	return !missing && complete == want;
}

static struct snapshot *find_snapshot(struct state *s, const struct run *r, int64_t step)
{
	for (struct snapshot *p = s->pending; p; p = p->next)
		if (p->run == r && p->step == step)
			return p;
	return NULL;
}

static struct tensor_buf *find_tensor(struct snapshot *snap, const char *name)
{
	long i = names_find(&snap->names, name);
	return i >= 0 ? &snap->tensors[i] : NULL;
}

static void hello(struct ingest *ix, const struct frames *m, const struct wire_header *in)
{
	struct wire_header h;
	struct run *r = state_run(ix->st, in->run, 0);

	memset(&h, 0, sizeof(h));
	h.type = WIRE_WELCOME;
	h.step = -1;
	memcpy(h.run, in->run, sizeof(h.run));
	h.window = ix->window;
	h.max_message = ix->cfg->limits.max_message;
	char *body = wire_build(&h);
	if (!body)
		return;
	/* durable_steps: the last 64, so a restarted publisher skips them */
	size_t len = strlen(body), cap = len + 64 * 22 + 32;
	char *full = malloc(cap);
	if (full) {
		size_t at = (size_t)snprintf(full, cap, "%.*s,\"durable_steps\":[", (int)len - 1, body);
		size_t first = r && r->n_durable > 64 ? r->n_durable - 64 : 0;
		for (size_t i = first; r && i < r->n_durable; i++)
			at += (size_t)snprintf(full + at, cap - at, "%s%lld", i > first ? "," : "",
					       (long long)r->durable[i]);
		snprintf(full + at, cap - at, "]}");
		ix->sink.send(ix->sink.ctx, m->data[0], m->len[0], full);
		free(full);
	}
	free(body);
}

static void unlink_snapshot(struct state *s, struct snapshot *snap);
static void drop_snapshot(struct ingest *ix, struct snapshot *snap);

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

/* A re-send of a durable step being checked is dropped after this long idle. */
#define RECHECK_SECONDS 30.0

/* snap took bytes of new elements at t: its totals and its rate's window. */
static void note_taken(struct snapshot *snap, uint64_t bytes, double t)
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
static int make_room(struct ingest *ix, struct run *r, const struct snapshot *keep, uint64_t need)
{
	struct state *s = ix->st;
	double t = now_mono();

	for (;;) {
		int budget = s->reserved + need > s->budget, window = r->bytes_pending + need > ix->window;
		if (!budget && !window)
			return 1;
		struct snapshot *worst = NULL;
		const char *why = NULL;
		for (struct snapshot *p = s->pending; p; p = p->next) {
			const char *w;
			if (p == keep || (!budget && p->run != r) || !(w = stalled(ix, p, t)))
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
			fail_waiters(ix, worst, WIRE_INCOMPLETE, "tensors", msg);
		}
		drop_snapshot(ix, worst);
		s->count.dropped++;
		s->count.dropped_for_room++;
	}
}

/* The over_window refusal: names the limit that is full, the budget or the run's window. */
static void refuse_room(struct ingest *ix, const struct frames *m, const struct wire_header *h,
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
	reply_fail(ix, m, h, WIRE_OVER_WINDOW, "", why);
}

/*
 * The bytes tensor t holds besides its elements: its entry (and as much
 * again of unused capacity), its name, its slots in the names index, its
 * pieces' arrays, and the allocator's headers. Reserved with the elements:
 * 100,000 one-element tensors held 120 MB that the budget did not see,
 * and nothing was ever evicted (an outside attack, issue 11).
 */
static uint64_t tensor_overhead(const char *name, size_t n_ranges)
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
static void hold_overhead(struct state *s, struct run *r, struct snapshot *snap, struct tensor_buf *t,
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

/*
 * A snapshot being received got a shard whose elements it holds already,
 * with other bytes, from another connection than the one that sent them
 * first: two senders disagree about (run, step). Storing what
 * each sent of it would mix two processes' weights in one step, so the
 * snapshot is refused whole: this shard, every later one, and its commit
 * (which drops it) get the conflict; logged once per (run, step). The
 * step may then be sent again, whole.
 */
static void refuse_mixed(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			 struct snapshot *snap, const char *what)
{
	struct run *r = snap->run;
	char why[512];

	if (!snap->conflict) {
		snap->conflict = 1;
		snprintf(snap->field, sizeof(snap->field), "offset");
		snprintf(why, sizeof(why), "run '%.40s' step %lld is refused whole: %.110s (a re-used "
			 "run name, or a job restarted mid-snapshot that does not send the same bytes)",
			 r->name, (long long)snap->step, what);
		snprintf(snap->why, sizeof(snap->why), "%.255s", why);
		ix->st->count.conflicts++;
		if (!r->conflict_logged || r->conflict_step != snap->step)
			log_warning("ingest: refused: %s", snap->why);
		r->conflict_logged = 1;
		r->conflict_step = snap->step;
		if (snap->n_waiters)	/* ranks that committed already */
			fail_waiters(ix, snap, WIRE_CONFLICT, snap->field, snap->why);
	}
	reply_fail(ix, m, h, WIRE_CONFLICT, snap->field, snap->why);
}

/*
 * Adds one shard to snap (received, checked). Returns 0, or -1 after the
 * error reply: the shard was not taken (only out of memory can leave behind
 * a tensor it created, reserved until its snapshot ends).
 */
static int add_shard(struct ingest *ix, const struct frames *m, const struct wire_header *h,
		     struct run *r, struct snapshot *snap)
{
	struct state *s = ix->st;
	size_t esize = wd_dtype_size(h->dtype);
	uint64_t bytes = h->count * esize;	/* wire_parse bounds it by max_message */
	char why[256];

	if (snap->conflict) {	/* refused whole (refuse_mixed) */
		reply_fail(ix, m, h, WIRE_CONFLICT, snap->field, snap->why);
		return -1;
	}
	struct tensor_buf *t = find_tensor(snap, h->name);
	if (t && (t->dtype != h->dtype || t->total != h->total || t->ndims != h->ndims ||
		  memcmp(t->shape, h->shape, (size_t)h->ndims * sizeof(h->shape[0])))) {
		snprintf(why, sizeof(why), "shard disagrees with earlier shards of '%.120s' (dtype, "
			 "shape or total)", h->name);
		reply_fail(ix, m, h, WIRE_CONFLICT, "shape", why);
		return -1;
	}
	long at = t ? pieces_slot(t, h->offset, h->offset + h->count) : 0;
	struct payload pl = { m->n - 2, m->data + 2, m->len + 2 };
	if (at < 0) {	/* a re-sent shard: the same bytes are harmless */
		uint64_t had = t->covered;
		int o = pieces_overlap(t, &pl, h->offset, h->offset + h->count, why, sizeof(why));
		if (o > 0 && sender_of(m) != t->sender) {	/* two processes disagree */
			refuse_mixed(ix, m, h, snap, why);
			return -1;
		}
		if (o > 0) {	/* the same sender's bad shard: only it is refused */
			reply_fail(ix, m, h, WIRE_CONFLICT, "offset", why);
			return -1;
		}
		if (o < 0) {
			reply_fail(ix, m, h, WIRE_INTERNAL, "memory", why);
			return -1;
		}
		if (t->covered > had)	/* only new elements keep it from being stale (make_room) */
			note_taken(snap, (t->covered - had) * esize, now_mono());
		hold_overhead(s, r, snap, t, tensor_overhead(t->name, t->n_ranges));
		s->count.tensors++;
		s->count.bytes_received += bytes;
		return 0;
	}
	if (t && t->n_ranges >= MAX_PIECES &&
	    pieces_is_new(t, (size_t)at, h->offset, h->offset + h->count)) {
		snprintf(why, sizeof(why), "'%.120s' would arrive in more than %d separate pieces; "
			 "send larger or adjacent shards", h->name, MAX_PIECES);
		reply_fail(ix, m, h, WIRE_TOO_MANY, "offset", why);
		return -1;
	}
	if (!t) {
		if ((int64_t)snap->n_tensors >= ix->cfg->limits.max_tensors) {
			reply_fail(ix, m, h, WIRE_TOO_MANY, "name",
				   "snapshot has limits.max_tensors tensors already");
			return -1;
		}
		char clash[240];
		if (names_check(&snap->names, h->name, clash, sizeof(clash)) < 0) {
			snprintf(why, sizeof(why), "tensor name '%.60s' cannot be stored: %.160s", h->name, clash);
			reply_fail(ix, m, h, WIRE_BAD_NAME, "name", why);
			return -1;
		}
		/*
		 * A tensor is reserved whole at its first shard, within its run's
		 * window: one larger than the window could never fit, and was
		 * refused over_window, retried for ever (issue 11). total may be
		 * up to 2^63: compare before multiplying, or it wraps.
		 */
		if (h->total > (ix->window - tensor_overhead(h->name, 1)) / esize) {
			snprintf(why, sizeof(why), "tensor of %llu elements of %zu bytes is larger than a "
				 "run's window, half of memory.budget (%llu bytes): it could never be "
				 "held; raise memory.budget", (unsigned long long)h->total, esize,
				 (unsigned long long)ix->window);
			reply_fail(ix, m, h, WIRE_TOO_LARGE, "total", why);
			return -1;
		}
		uint64_t need = h->total * esize, extra = tensor_overhead(h->name, 1);
		if (!make_room(ix, r, snap, need + extra)) {
			refuse_room(ix, m, h, r, need + extra);
			return -1;
		}
		if (snap->n_tensors == snap->cap_tensors) {
			size_t cap = snap->cap_tensors ? 2 * snap->cap_tensors : 16;
			struct tensor_buf *nt = realloc(snap->tensors, cap * sizeof(*nt));
			if (!nt) {
				reply_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
				return -1;
			}
			snap->tensors = nt;
			snap->cap_tensors = cap;
		}
		t = &snap->tensors[snap->n_tensors];
		memset(t, 0, sizeof(*t));
		t->sender = sender_of(m);
		t->data = malloc(need);
		t->name = strdup(h->name);
		if (!t->data || !t->name || names_add(&snap->names, t->name, snap->n_tensors) < 0) {
			free(t->data);
			free(t->name);
			reply_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
			return -1;
		}
		snap->n_tensors++;
		t->dtype = h->dtype;
		t->ndims = h->ndims;
		memcpy(t->shape, h->shape, sizeof(t->shape));
		t->total = h->total;
		snap->bytes += need;
		r->bytes_pending += need;
		s->reserved += need;
	}
	if (pieces_add(t, (size_t)at, h->offset, h->offset + h->count, h->crc32) < 0) {
		reply_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
		return -1;
	}
	hold_overhead(s, r, snap, t, tensor_overhead(t->name, t->n_ranges));
	pieces_copy(t, &pl, h->offset);
	t->covered += h->count;
	note_taken(snap, bytes, now_mono());
	s->count.tensors++;
	s->count.bytes_received += bytes;
	return 0;
}

/*
 * The first time run r sends a snapshot in this daemon's life: a run that
 * belongs to no study is stored and never compared, which a typo in a run
 * name causes; one notice names the studies' runs, so that it shows.
 */
static void note_study(struct ingest *ix, struct run *r)
{
	const struct wd_config *cfg = ix->cfg;
	char list[512];
	size_t at = 0;

	if (r->study_checked)
		return;
	r->study_checked = 1;
	for (size_t i = 0; i < cfg->n_studies; i++) {
		const struct wd_config_study *st = &cfg->studies[i];
		int in = !strcmp(st->baseline, r->name);
		for (size_t k = 0; !in && k < st->candidates.n; k++)
			in = !strcmp(st->candidates.names[k], r->name);
		for (size_t k = 0; !in && k < st->proxies.n; k++)
			in = !strcmp(st->proxies.v[k].run, r->name);
		if (in)
			return;
	}
	list[0] = 0;
	for (size_t i = 0; i < cfg->n_studies && at < sizeof(list) - 1; i++) {
		const struct wd_config_study *st = &cfg->studies[i];
		at += (size_t)snprintf(list + at, sizeof(list) - at, "%s'%s': %s", i ? "; " : "",
				       st->name, st->baseline);
		for (size_t k = 0; k < st->candidates.n && at < sizeof(list) - 1; k++)
			at += (size_t)snprintf(list + at, sizeof(list) - at, ", %s", st->candidates.names[k]);
		for (size_t k = 0; k < st->proxies.n && at < sizeof(list) - 1; k++)
			at += (size_t)snprintf(list + at, sizeof(list) - at, ", %s", st->proxies.v[k].run);
	}
	log_notice("run '%s' belongs to no study: its snapshots are stored but never compared "
		   "(studies: %s)", r->name, cfg->n_studies ? list : "none configured");
}

/*
 * A durable (run, step) differs from what is sent again: replied to m with
 * code conflict, remembered in snap for the commit's reply, logged once per
 * (run, step) and counted once per re-send.
 */
static void refuse_content(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			   struct snapshot *snap, const char *field, const char *what)
{
	struct run *r = snap->run;
	char why[256];

	snprintf(why, sizeof(why), "run '%.40s' step %lld is durable with other content: %s "
		 "(re-used run name? `wdrift runs rm %.40s` frees it)", r->name,
		 (long long)snap->step, what, r->name);
	if (!snap->conflict) {
		snap->conflict = 1;
		snprintf(snap->why, sizeof(snap->why), "%s", why);
		snprintf(snap->field, sizeof(snap->field), "%s", field);
		ix->st->count.conflicts++;
		if (!r->conflict_logged || r->conflict_step != snap->step)
			log_warning("ingest: refused: %s", why);
		r->conflict_logged = 1;
		r->conflict_step = snap->step;
	}
	reply_fail(ix, m, h, WIRE_CONFLICT, field, why);
}

/*
 * A shard of a durable (run, step) whose identity is id: checked, never
 * stored. Its name, dtype and shape at once; its CRC once the re-send
 * covers the whole tensor (shard CRCs combined, as for a new snapshot).
 * Overlapping re-sent shards cannot be compared without the bytes: skipped.
 */
static void recheck_shard(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			  struct snapshot *snap, const struct snap_id *id)
{
	char what[200];
	const struct tensor_id *tid = identity_find(id, identity_name_hash(h->name));

	if (!tid) {
		snprintf(what, sizeof(what), "tensor '%.80s' is not in it", h->name);
		return refuse_content(ix, m, h, snap, "name", what);
	}
	if (tid->dtype != (uint8_t)h->dtype || tid->shape_hash != identity_shape_hash(h->ndims, h->shape)) {
		int dt = tid->dtype != (uint8_t)h->dtype;
		snprintf(what, sizeof(what), "tensor '%.80s' %s differs", h->name, dt ? "dtype" : "shape");
		return refuse_content(ix, m, h, snap, dt ? "dtype" : "shape", what);
	}
	struct tensor_buf *t = find_tensor(snap, h->name);
	if (!t) {
		if (snap->n_tensors >= id->n)
			return;	/* cannot be: each name is in id, and found above */
		if (snap->n_tensors == snap->cap_tensors) {
			size_t cap = snap->cap_tensors ? 2 * snap->cap_tensors : 16;
			struct tensor_buf *nt = realloc(snap->tensors, cap * sizeof(*nt));
			if (!nt)
				return;
			snap->tensors = nt;
			snap->cap_tensors = cap;
		}
		t = &snap->tensors[snap->n_tensors];
		memset(t, 0, sizeof(*t));
		if (!(t->name = strdup(h->name)) || names_add(&snap->names, t->name, snap->n_tensors) < 0) {
			free(t->name);
			return;
		}
		snap->n_tensors++;
		t->dtype = h->dtype;
		t->total = h->total;
	}
	long at = pieces_slot(t, h->offset, h->offset + h->count);
	if (at < 0 || (t->n_ranges >= MAX_PIECES &&
		       pieces_is_new(t, (size_t)at, h->offset, h->offset + h->count)))
		return;
	if (pieces_add(t, (size_t)at, h->offset, h->offset + h->count, h->crc32) < 0)
		return;
	t->covered += h->count;
	snap->last_taken = now_mono();
	if (t->covered == t->total && t->crcs[0] != tid->crc) {
		snprintf(what, sizeof(what), "tensor '%.80s' crc32 differs", h->name);
		refuse_content(ix, m, h, snap, "crc32", what);
	}
}

/*
 * The pending snapshot (r, h->step), made when there is none (recheck: a
 * re-send of a durable step, which holds no data). NULL after an error reply.
 */
static struct snapshot *get_snapshot(struct ingest *ix, const struct frames *m,
				     const struct wire_header *h, struct run *r, int recheck)
{
	struct state *s = ix->st;
	struct snapshot *snap = find_snapshot(s, r, h->step);
	char why[256];

	if (snap)
		return snap;
	size_t pend = 0;	/* re-sends being checked count apart: they hold no memory */
	for (struct snapshot *p = s->pending; p; p = p->next)
		pend += p->run == r && p->recheck == recheck;
	if ((int64_t)pend >= ix->cfg->limits.max_pending) {
		snprintf(why, sizeof(why), "run has %zu snapshots pending, the limit "
			 "(limits.max_pending); commit them first", pend);
		reply_fail(ix, m, h, WIRE_TOO_MANY, "step", why);
		return NULL;
	}
	if (!(snap = calloc(1, sizeof(*snap)))) {
		reply_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
		return NULL;
	}
	snap->run = r;
	snap->step = h->step;
	snap->recheck = recheck;
	snap->last_taken = snap->last_seen = snap->win_start = now_mono();
	snap->prev_rate = -1;
	snap->next = s->pending;
	s->pending = snap;
	s->n_pending++;
	return snap;
}

/*
 * Hands snap to the spool thread when it is complete and a commit said how
 * many tensors it has (snap->want). Returns 1 when it did.
 */
static int try_store(struct ingest *ix, struct snapshot *snap)
{
	char why[256];

	if (!snap->want || snap->committing || !snapshot_complete(snap, snap->want, why, sizeof(why)))
		return 0;
	snap->committing = 1;
	spool_submit(ix->spool, snap);
	return 1;
}

/*
 * Makes the run a message names, within limits.max_runs; NULL after the
 * error reply. *created is 1 when it was made here.
 */
static struct run *admit_run(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			     int *created)
{
	struct state *s = ix->st;
	struct run *r;
	char why[128];

	*created = 0;
	if ((int64_t)s->n_runs >= ix->cfg->limits.max_runs) {
		snprintf(why, sizeof(why), "already %zu runs, the limit (limits.max_runs)", s->n_runs);
		reply_fail(ix, m, h, WIRE_TOO_MANY, "run", why);
		return NULL;
	}
	if (!(r = state_run(s, h->run, 1))) {
		reply_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
		return NULL;
	}
	*created = 1;
	return r;
}

static void tensor(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	struct state *s = ix->st;
	struct wire_error err;
	int new_run = 0;

	/* Frame sizes and checksum first: nothing is reserved for a bad message. */
	if (wire_check_payload(h, m->len + 2, m->data + 2, m->n - 2, &err) < 0)
		return reply_error(ix, m, h, &err);
	struct run *r = state_run(s, h->run, 0);
	if (r && run_is_durable(r, h->step)) {	/* a re-send: already durable */
		const struct snap_id *id = run_identity(r, h->step);
		struct snapshot *snap;
		s->count.duplicate_tensors++;
		r->last_seen = now_mono();
		note_study(ix, r);
		if (id && (snap = get_snapshot(ix, m, h, r, 1))) {
			snap->last_seen = now_mono();
			recheck_shard(ix, m, h, snap, id);
		}
		return;	/* no identity (an old WAL record): the content cannot be checked */
	}
	if (!r && !(r = admit_run(ix, m, h, &new_run)))
		return;
	r->last_seen = now_mono();
	struct snapshot *snap = find_snapshot(s, r, h->step);
	if (snap && snap->committing)
		return;	/* being stored: a re-sent shard; its ack is on the way */
	if (!snap && !(snap = get_snapshot(ix, m, h, r, 0))) {
		if (new_run)
			state_forget_run(s, r);
		return;
	}
	snap->last_seen = now_mono();
	/*
	 * A refused shard leaves no trace: a snapshot that holds nothing (made
	 * for this shard) would count against max_pending and show as pending
	 * until it expired as "dropped".
	 */
	if (add_shard(ix, m, h, r, snap) < 0) {
		if (snap->n_tensors == 0 && !snap->n_waiters)
			drop_snapshot(ix, snap);	/* and a run that holds nothing */
		return;
	}
	note_study(ix, r);
	if (snap->n_waiters)	/* ranks committed before this shard came: it may complete it */
		try_store(ix, snap);
}

/* A commit of a durable (run, step): a duplicate, or other content (conflict). */
static void commit_durable(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			   struct run *r)
{
	struct state *s = ix->st;
	const struct snap_id *id = run_identity(r, h->step);
	struct snapshot *snap = find_snapshot(s, r, h->step);
	char what[200];

	if (snap && snap->recheck && !snap->conflict && id && h->tensors != id->n) {
		snprintf(what, sizeof(what), "it has %zu tensors, the commit says %llu", id->n,
			 (unsigned long long)h->tensors);
		refuse_content(ix, m, h, snap, "tensors", what);
	} else if (snap && snap->recheck && snap->conflict) {
		reply_fail(ix, m, h, WIRE_CONFLICT, snap->field, snap->why);
	} else if (!snap && id && h->tensors != id->n) {
		/* no shard came (all skipped?): the count alone can still differ */
		struct wire_header a = *h;
		char why[256];
		snprintf(why, sizeof(why), "run '%.40s' step %lld is durable with other content: it has "
			 "%zu tensors, the commit says %llu (re-used run name? `wdrift runs rm %.40s` frees "
			 "it)", r->name, (long long)h->step, id->n, (unsigned long long)h->tensors, r->name);
		s->count.conflicts++;
		log_warning("ingest: refused: %s", why);
		reply_fail(ix, m, &a, WIRE_CONFLICT, "tensors", why);
	} else {
		struct wire_header a = { .type = WIRE_ACK, .step = h->step, .tensors = h->tensors,
					 .duplicate = 1 };
		memcpy(a.run, h->run, sizeof(a.run));
		s->count.duplicates++;
		reply(ix, m, &a);
	}
	if (snap && snap->recheck) {	/* checked: the next re-send starts afresh */
		unlink_snapshot(s, snap);
		snapshot_free(s, snap);
	}
}

static void commit(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	struct state *s = ix->st;
	struct run *r = state_run(s, h->run, 0);
	char why[256];

	s->count.commits++;
	if (r && run_is_durable(r, h->step))
		return commit_durable(ix, m, h, r);
	struct snapshot *snap = r ? find_snapshot(s, r, h->step) : NULL;
	if (snap && snap->committing) {	/* being stored: this one gets the ack too */
		if (add_waiter(snap, m) < 0)
			reply_fail(ix, m, h, WIRE_TOO_MANY, "ranks", "too many publishers wait for this snapshot");
		return;
	}
	if (snap && snap->conflict) {	/* refused whole (refuse_mixed): gone */
		reply_fail(ix, m, h, WIRE_CONFLICT, snap->field, snap->why);
		fail_waiters(ix, snap, WIRE_CONFLICT, snap->field, snap->why);
		drop_snapshot(ix, snap);
		return;
	}
	if (snap && snap->want && snap->want != h->tensors) {
		snprintf(why, sizeof(why), "commit says %llu tensors, an earlier commit of this step %llu: "
			 "every rank gives the whole snapshot's count", (unsigned long long)h->tensors,
			 (unsigned long long)snap->want);
		return reply_fail(ix, m, h, WIRE_BAD_FIELD, "tensors", why);
	}
	if (snap && snapshot_complete(snap, h->tensors, why, sizeof(why))) {
		if (add_waiter(snap, m) < 0)
			return reply_fail(ix, m, h, WIRE_TOO_MANY, "ranks", "too many publishers wait for "
					  "this snapshot");
		snap->want = h->tensors;
		try_store(ix, snap);
		return;
	}
	if (!snap)
		snprintf(why, sizeof(why), "commit says %llu tensors, 0 received",
			 (unsigned long long)h->tensors);
	if (h->ranks <= 1)
		return reply_fail(ix, m, h, WIRE_INCOMPLETE, "tensors", why);
	/*
	 * Several ranks share this snapshot: the others' shards may still come.
	 * Not an error: this rank waits for the ack, or for the expiry.
	 */
	int created;
	if (!r && !(r = admit_run(ix, m, h, &created)))
		return;
	r->last_seen = now_mono();
	if (!snap && !(snap = get_snapshot(ix, m, h, r, 0)))
		return;
	if (add_waiter(snap, m) < 0)
		return reply_fail(ix, m, h, WIRE_TOO_MANY, "ranks", "too many publishers wait for this "
				  "snapshot");
	snap->want = h->tensors;
	snap->last_seen = now_mono();
}

void ingest_handle(struct ingest *ix, const struct frames *m, struct ingest_seen *seen)
{
	struct wire_limits lim = {
		.max_name = (size_t)ix->cfg->limits.max_name,
		.max_dims = (int)ix->cfg->limits.max_dims,
		.max_message = ix->cfg->limits.max_message,
	};
	struct wire_header *h = malloc(sizeof(*h));
	struct wire_error err;

	ix->st->count.messages++;
	seen->type = -1;
	seen->step = -1;
	seen->run[0] = 0;
	if (!h)
		return;
	if (m->n < 2) {
		reply_fail(ix, m, NULL, WIRE_BAD_FRAME, "", "message has no header frame");
		goto out;
	}
	if (wire_parse(m->data[1], m->len[1], &lim, h, &err) < 0) {
		reply_error(ix, m, h, &err);
		goto out;
	}
	seen->type = (int)h->type;
	seen->step = h->step;
	snprintf(seen->run, sizeof(seen->run), "%.63s", h->run);
	if (h->type != WIRE_PING && strlen(h->run) > NAME_MAX) {
		/* the run names a directory of the spool: it could never be stored */
		char why[128];
		snprintf(why, sizeof(why), "run name is %zu bytes; at most %d, as it names a spool "
			 "directory", strlen(h->run), NAME_MAX);
		reply_fail(ix, m, h, WIRE_BAD_FIELD, "run", why);
	} else if (h->type != WIRE_TENSOR && m->n != 2) {
		reply_fail(ix, m, h, WIRE_BAD_FRAMES, "frames", "only tensor messages carry payload frames");
	} else {
		switch (h->type) {
		case WIRE_HELLO: hello(ix, m, h); break;
		case WIRE_TENSOR: tensor(ix, m, h); break;
		case WIRE_COMMIT: commit(ix, m, h); break;
		case WIRE_PING: {
			struct wire_header p = { .type = WIRE_PONG, .step = -1 };
			reply(ix, m, &p);
			break;
		}
		default:
			reply_fail(ix, m, h, WIRE_BAD_FIELD, "type", "that message type goes from the daemon");
			break;
		}
	}
out:
	free(h);
}

static void unlink_snapshot(struct state *s, struct snapshot *snap)
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
static void drop_snapshot(struct ingest *ix, struct snapshot *snap)
{
	struct state *s = ix->st;
	struct run *r = snap->run;

	unlink_snapshot(s, snap);
	snapshot_free(s, snap);
	if (!r || r->n_durable)
		return;
	for (struct snapshot *p = s->pending; p; p = p->next)
		if (p->run == r)
			return;
	state_forget_run(s, r);
}

/*
 * The field of an 'internal' error says whether a re-send can help:
 * "disk" (full, or over quota) and "memory" pass when room is made; any
 * other cause is "storage", which a publisher retries a few times only.
 */
static const char *internal_field(int err)
{
	switch (err) {
	case -ENOSPC:
	case -EDQUOT:
		return "disk";
	case -ENOMEM:
		return "memory";
	default:
		return "storage";
	}
}

void ingest_spooled(struct ingest *ix, struct snapshot *snap, int err, const char *why)
{
	struct state *s = ix->st;
	struct wire_header h;

	memset(&h, 0, sizeof(h));
	snprintf(h.run, sizeof(h.run), "%s", snap->run->name);
	h.step = snap->step;
	if (!err) {
		run_add_durable(snap->run, snap->step, identity_of_snapshot(snap));
		s->count.snapshots_durable++;
		h.type = WIRE_ACK;
		h.tensors = snap->n_tensors;
		h.bytes = snap->bytes;
		log_info("durable: run '%s' step %lld, %zu tensors", snap->run->name,
			 (long long)snap->step, snap->n_tensors);
		for (size_t i = 0; i < snap->n_waiters; i++) {	/* every rank that committed */
			struct frames w = WAITER_FRAMES(&snap->waiters[i]);
			reply(ix, &w, &h);
		}
		if (ix->on_durable)
			ix->on_durable(ix->durable_ctx, snap->run->name, snap->step);
	} else {
		s->count.spool_failures++;
		/* a full disk fails every re-send alike: one line in 10 s, with a count */
		double t = now_mono();
		if (t - ix->fail_said >= 10.0) {
			char more[80] = "";
			if (ix->fail_unsaid)
				snprintf(more, sizeof(more), " (%llu more failures since the last such line)",
					 (unsigned long long)ix->fail_unsaid);
			log_err("spool: run '%s' step %lld not stored: %s%s", snap->run->name,
				(long long)snap->step, why, more);
			ix->fail_said = t;
			ix->fail_unsaid = 0;
		} else {
			ix->fail_unsaid++;
		}
		fail_waiters(ix, snap, WIRE_INTERNAL, internal_field(err), why);
	}
	drop_snapshot(ix, snap);
}

size_t ingest_expire(struct ingest *ix, double timeout)
{
	struct state *s = ix->st;
	double t = now_mono();
	size_t n = 0;
	struct snapshot *snap = s->pending, *next;
	char why[256], lacks[200];

	for (; snap; snap = next) {
		next = snap->next;
		/* a re-send being checked whose commit never came: retries after an ack */
		double limit = snap->recheck && timeout > RECHECK_SECONDS ? RECHECK_SECONDS : timeout;
		/*
		 * Ranks that wait re-send their shards and commit after their ack
		 * timeout, which is shorter than this one: only new elements
		 * keep such a snapshot alive, or a dead rank's would never expire.
		 */
		double idle = t - (snap->n_waiters ? snap->last_taken : snap->last_seen);
		if (snap->committing || idle < limit)
			continue;
		if (snap->n_waiters) {	/* ranks committed; another never finished its part */
			snapshot_complete(snap, snap->want, lacks, sizeof(lacks));
			const char *colon = strstr(lacks, ": ");
			snprintf(why, sizeof(why), "expired after %.0f s waiting for the other ranks: %s",
				 timeout, colon ? colon + 2 : lacks);
			log_warning("ingest: run '%s' step %lld: %s (%zu commits waited)", snap->run->name,
				    (long long)snap->step, why, snap->n_waiters);
			fail_waiters(ix, snap, WIRE_INCOMPLETE, "ranks", why);
		} else if (!snap->recheck) {
			log_notice("ingest: dropping run '%s' step %lld: no commit for %.0f s (%zu tensors)",
				   snap->run->name, (long long)snap->step, timeout, snap->n_tensors);
		}
		if (!snap->recheck)
			s->count.dropped++;
		drop_snapshot(ix, snap);
		n++;
	}
	return n;
}
