/*
 * ingest.c: protocol v1 on the daemon's side (see ingest.h). Every failure
 * is an error reply naming the field and a counter; nothing here stops the
 * daemon. Memory for a tensor is reserved from its header, before its
 * payload is copied, so a flood cannot grow memory past the budget.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest.h"
#include "logging.h"
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

static struct snapshot *find_snapshot(struct state *s, const struct run *r, int64_t step)
{
	for (struct snapshot *p = s->pending; p; p = p->next)
		if (p->run == r && p->step == step)
			return p;
	return NULL;
}

static struct tensor_buf *find_tensor(struct snapshot *snap, const char *name)
{
	for (size_t i = 0; i < snap->n_tensors; i++)
		if (!strcmp(snap->tensors[i].name, name))
			return &snap->tensors[i];
	return NULL;
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

/*
 * The received ranges of a tensor: sorted, disjoint, and coalesced (a shard
 * that touches its neighbours merges with them), so shards sent in order
 * cost one range, not one each. Their memory is outside the budget, so the
 * number of separate pieces is capped.
 */
#define MAX_PIECES 65536

/* Where [b, e) goes: the index of the first range after it; -1 on an overlap. */
static long range_slot(const struct tensor_buf *t, uint64_t b, uint64_t e)
{
	size_t lo = 0, hi = t->n_ranges;
	while (lo < hi) {	/* the first range that begins at or after e */
		size_t mid = (lo + hi) / 2;
		if (t->ranges[mid][0] < e)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && t->ranges[lo - 1][1] > b)
		return -1;	/* the range before it reaches into [b, e) */
	return (long)lo;
}

/* Would [b, e) (no overlap) make a new piece, rather than extend one? */
static int range_is_new_piece(const struct tensor_buf *t, size_t at, uint64_t b, uint64_t e)
{
	return !(at > 0 && t->ranges[at - 1][1] == b) && !(at < t->n_ranges && t->ranges[at][0] == e);
}

/* Adds [b, e) at its slot; 0, or -1 out of memory. */
static int range_add(struct tensor_buf *t, size_t at, uint64_t b, uint64_t e)
{
	int left = at > 0 && t->ranges[at - 1][1] == b;
	int right = at < t->n_ranges && t->ranges[at][0] == e;

	if (left && right) {
		t->ranges[at - 1][1] = t->ranges[at][1];
		memmove(t->ranges + at, t->ranges + at + 1, (t->n_ranges - at - 1) * sizeof(*t->ranges));
		t->n_ranges--;
	} else if (left) {
		t->ranges[at - 1][1] = e;
	} else if (right) {
		t->ranges[at][0] = b;
	} else {
		size_t n = t->n_ranges;
		if ((n & (n - 1)) == 0) {	/* capacity: the next power of two */
			uint64_t (*nr)[2] = realloc(t->ranges, (n ? 2 * n : 1) * sizeof(*nr));
			if (!nr)
				return -1;
			t->ranges = nr;
		}
		memmove(t->ranges + at + 1, t->ranges + at, (n - at) * sizeof(*t->ranges));
		t->ranges[at][0] = b;
		t->ranges[at][1] = e;
		t->n_ranges++;
	}
	return 0;
}

static void unlink_snapshot(struct state *s, struct snapshot *snap);

/*
 * Snapshots that took nothing for this long while the budget is full are
 * dropped to make room. Without it, partly received snapshots of several
 * runs can hold the whole budget with none able to complete: every run,
 * a new one included, is refused over_window until PENDING_TIMEOUT (10
 * minutes) expires them (t71_flood.py found it).
 */
#define STALE_SECONDS 5.0

/*
 * Drops the uncommitted snapshots other than keep that took no shard for
 * STALE_SECONDS; returns the bytes freed. Called when a reservation fails.
 * Their publishers get 'incomplete' on commit and re-send.
 */
static uint64_t evict_stale(struct ingest *ix, const struct snapshot *keep)
{
	struct state *s = ix->st;
	double t = now_mono();
	uint64_t freed = 0;

	for (struct snapshot *snap = s->pending, *next; snap; snap = next) {
		next = snap->next;
		if (snap == keep || snap->committing || t - snap->last_taken < STALE_SECONDS)
			continue;
		log_notice("ingest: dropping run '%s' step %lld to free the budget: no shard taken for "
			   "%.0f s (%zu tensors, %llu bytes)", snap->run->name, (long long)snap->step,
			   t - snap->last_taken, snap->n_tensors, (unsigned long long)snap->bytes);
		freed += snap->bytes;
		unlink_snapshot(s, snap);
		snapshot_free(s, snap);
		s->count.dropped++;
	}
	return freed;
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

	struct tensor_buf *t = find_tensor(snap, h->name);
	if (t && (t->dtype != h->dtype || t->total != h->total || t->ndims != h->ndims ||
		  memcmp(t->shape, h->shape, (size_t)h->ndims * sizeof(h->shape[0])))) {
		snprintf(why, sizeof(why), "shard disagrees with earlier shards of '%.120s' (dtype, "
			 "shape or total)", h->name);
		reply_fail(ix, m, h, WIRE_CONFLICT, "shape", why);
		return -1;
	}
	long at = t ? range_slot(t, h->offset, h->offset + h->count) : 0;
	if (at < 0) {
		reply_fail(ix, m, h, WIRE_CONFLICT, "offset", "shard overlaps one already received");
		return -1;
	}
	if (t && t->n_ranges >= MAX_PIECES &&
	    range_is_new_piece(t, (size_t)at, h->offset, h->offset + h->count)) {
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
		/* total may be up to 2^63: compare before multiplying, or it wraps */
		if (h->total > s->budget / esize) {
			snprintf(why, sizeof(why), "tensor of %llu elements of %zu bytes is larger than "
				 "memory.budget (%llu bytes)", (unsigned long long)h->total, esize,
				 (unsigned long long)s->budget);
			reply_fail(ix, m, h, WIRE_TOO_LARGE, "total", why);
			return -1;
		}
		uint64_t need = h->total * esize;
		int full = s->reserved + need > s->budget || r->bytes_pending + need > ix->window;
		if (full && evict_stale(ix, snap) > 0)
			full = s->reserved + need > s->budget || r->bytes_pending + need > ix->window;
		if (full) {
			snprintf(why, sizeof(why), "window full: %llu of %llu bytes in flight; retry after "
				 "acks", (unsigned long long)r->bytes_pending, (unsigned long long)ix->window);
			reply_fail(ix, m, h, WIRE_OVER_WINDOW, "", why);
			return -1;
		}
		if (snap->n_tensors == snap->cap_tensors) {
			size_t cap = snap->cap_tensors ? 2 * snap->cap_tensors : 16;
			struct tensor_buf *nt = realloc(snap->tensors, cap * sizeof(*nt));
			if (!nt) {
				reply_fail(ix, m, h, WIRE_INTERNAL, "", "out of memory");
				return -1;
			}
			snap->tensors = nt;
			snap->cap_tensors = cap;
		}
		t = &snap->tensors[snap->n_tensors];
		memset(t, 0, sizeof(*t));
		t->data = malloc(need);
		t->name = strdup(h->name);
		if (!t->data || !t->name) {
			free(t->data);
			free(t->name);
			reply_fail(ix, m, h, WIRE_INTERNAL, "", "out of memory");
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
	if (range_add(t, (size_t)at, h->offset, h->offset + h->count) < 0) {
		reply_fail(ix, m, h, WIRE_INTERNAL, "", "out of memory");
		return -1;
	}
	unsigned char *dst = (unsigned char *)t->data + h->offset * esize;
	for (size_t i = 2; i < m->n; i++) {
		memcpy(dst, m->data[i], m->len[i]);
		dst += m->len[i];
	}
	t->covered += h->count;
	snap->last_taken = now_mono();
	s->count.tensors++;
	s->count.bytes_received += bytes;
	return 0;
}

/* Removes a run made for a shard that was refused: nothing refers to it. */
static void forget_run(struct state *s, struct run *r)
{
	for (struct run **p = &s->runs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			s->n_runs--;
			free(r->name);
			free(r->durable);
			free(r);
			return;
		}
}

static void tensor(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	struct state *s = ix->st;
	struct wire_error err;
	char why[256];
	int new_run = 0;

	/* Frame sizes and checksum first: nothing is reserved for a bad message. */
	if (wire_check_payload(h, m->len + 2, m->data + 2, m->n - 2, &err) < 0)
		return reply_error(ix, m, h, &err);
	struct run *r = state_run(s, h->run, 0);
	if (r && run_is_durable(r, h->step)) {	/* a re-send: already durable */
		s->count.duplicates++;
		return;
	}
	if (!r) {
		if ((int64_t)s->n_runs >= ix->cfg->limits.max_runs) {
			snprintf(why, sizeof(why), "already %zu runs, the limit (limits.max_runs)", s->n_runs);
			return reply_fail(ix, m, h, WIRE_TOO_MANY, "run", why);
		}
		if (!(r = state_run(s, h->run, 1)))
			return reply_fail(ix, m, h, WIRE_INTERNAL, "", "out of memory");
		new_run = 1;
	}
	r->last_seen = now_mono();
	struct snapshot *snap = find_snapshot(s, r, h->step);
	if (snap && snap->committing)
		return reply_fail(ix, m, h, WIRE_CONFLICT, "step",
				  "this snapshot is being stored; wait for its ack");
	if (!snap) {
		size_t pend = 0;
		for (struct snapshot *p = s->pending; p; p = p->next)
			pend += p->run == r;
		if ((int64_t)pend >= ix->cfg->limits.max_pending) {
			snprintf(why, sizeof(why), "run has %zu snapshots pending, the limit "
				 "(limits.max_pending); commit them first", pend);
			return reply_fail(ix, m, h, WIRE_TOO_MANY, "step", why);
		}
		if (!(snap = calloc(1, sizeof(*snap))))
			return reply_fail(ix, m, h, WIRE_INTERNAL, "", "out of memory");
		snap->run = r;
		snap->step = h->step;
		snap->last_taken = now_mono();
		snap->next = s->pending;
		s->pending = snap;
		s->n_pending++;
	}
	snap->last_seen = now_mono();
	/*
	 * A refused shard leaves no trace: a snapshot that holds nothing (made
	 * for this shard) would count against max_pending and show as pending
	 * until it expired as "dropped".
	 */
	if (add_shard(ix, m, h, r, snap) < 0 && snap->n_tensors == 0) {
		unlink_snapshot(s, snap);
		snapshot_free(s, snap);
		if (new_run)	/* nor a run that holds nothing: it would use up limits.max_runs */
			forget_run(s, r);
	}
}

static void commit(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	struct state *s = ix->st;
	struct run *r = state_run(s, h->run, 0);
	char why[512];

	s->count.commits++;
	if (r && run_is_durable(r, h->step)) {
		struct wire_header a = { .type = WIRE_ACK, .step = h->step, .tensors = h->tensors,
					 .duplicate = 1 };
		memcpy(a.run, h->run, sizeof(a.run));
		s->count.duplicates++;
		return reply(ix, m, &a);
	}
	struct snapshot *snap = r ? find_snapshot(s, r, h->step) : NULL;
	if (snap && snap->committing)
		return;	/* its ack is on the way */
	size_t complete = 0;
	const struct tensor_buf *missing = NULL;
	for (size_t i = 0; snap && i < snap->n_tensors; i++) {
		if (snap->tensors[i].covered == snap->tensors[i].total)
			complete++;
		else if (!missing)
			missing = &snap->tensors[i];
	}
	if (!snap || complete != h->tensors || missing) {
		if (missing)
			snprintf(why, sizeof(why), "commit says %llu tensors, %zu complete: '%.200s' has %llu "
				 "of %llu elements", (unsigned long long)h->tensors, complete, missing->name,
				 (unsigned long long)missing->covered, (unsigned long long)missing->total);
		else
			snprintf(why, sizeof(why), "commit says %llu tensors, %zu received",
				 (unsigned long long)h->tensors, complete);
		return reply_fail(ix, m, h, WIRE_INCOMPLETE, "tensors", why);
	}
	snap->committing = 1;
	snap->identity_len = m->len[0] < IDENTITY_MAX ? m->len[0] : IDENTITY_MAX;
	memcpy(snap->identity, m->data[0], snap->identity_len);
	spool_submit(ix->spool, snap);
}

void ingest_handle(struct ingest *ix, const struct frames *m)
{
	struct wire_limits lim = {
		.max_name = (size_t)ix->cfg->limits.max_name,
		.max_dims = (int)ix->cfg->limits.max_dims,
		.max_message = ix->cfg->limits.max_message,
	};
	struct wire_header *h = malloc(sizeof(*h));
	struct wire_error err;

	ix->st->count.messages++;
	if (!h)
		return;
	if (m->n < 2) {
		reply_fail(ix, m, NULL, WIRE_BAD_FRAME, "", "message has no header frame");
	} else if (wire_parse(m->data[1], m->len[1], &lim, h, &err) < 0) {
		reply_error(ix, m, h, &err);
	} else if (h->type != WIRE_PING && strlen(h->run) > NAME_MAX) {
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

void ingest_spooled(struct ingest *ix, struct snapshot *snap, int ok, const char *why)
{
	struct state *s = ix->st;
	struct wire_header h;
	const void *id[1] = { snap->identity };
	size_t idlen[1] = { snap->identity_len };
	struct frames m = { 1, id, idlen };

	memset(&h, 0, sizeof(h));
	snprintf(h.run, sizeof(h.run), "%s", snap->run->name);
	h.step = snap->step;
	if (ok) {
		run_add_durable(snap->run, snap->step);
		s->count.snapshots_durable++;
		h.type = WIRE_ACK;
		h.tensors = snap->n_tensors;
		h.bytes = snap->bytes;
		log_info("durable: run '%s' step %lld, %zu tensors", snap->run->name,
			 (long long)snap->step, snap->n_tensors);
		reply(ix, &m, &h);
		if (ix->on_durable)
			ix->on_durable(ix->durable_ctx, snap->run->name, snap->step);
	} else {
		s->count.spool_failures++;
		log_err("spool: run '%s' step %lld not stored: %s", snap->run->name,
			(long long)snap->step, why);
		reply_fail(ix, &m, &h, WIRE_INTERNAL, "", why);
	}
	unlink_snapshot(s, snap);
	snapshot_free(s, snap);
}

size_t ingest_expire(struct ingest *ix, double timeout)
{
	struct state *s = ix->st;
	double t = now_mono();
	size_t n = 0;
	struct snapshot *snap = s->pending, *next;

	for (; snap; snap = next) {
		next = snap->next;
		if (snap->committing || t - snap->last_seen < timeout)
			continue;
		log_notice("ingest: dropping run '%s' step %lld: no commit for %.0f s (%zu tensors)",
			   snap->run->name, (long long)snap->step, timeout, snap->n_tensors);
		unlink_snapshot(s, snap);
		snapshot_free(s, snap);
		s->count.dropped++;
		n++;
	}
	return n;
}
