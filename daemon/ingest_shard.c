/*
 * ingest_shard.c: one tensor shard into its pending snapshot (see
 * ingest_internal.h): checked against the tensor's earlier shards and the
 * limits, its memory reserved (ingest_room.c), its range and CRC added
 * (pieces.c). Two senders that disagree about a (run, step) get it refused
 * whole. A shard of a step already durable is only checked against that
 * step's identity (identity.c), never stored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "identity.h"
#include "ingest_internal.h"
#include "logging.h"
#include "pieces.h"
#include "records.h"

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

const char *ingest_snapshot_lacks(const struct snapshot *snap, char *buf, size_t len)
{
	ingest_snapshot_complete(snap, snap->want, buf, len);
	const char *colon = strstr(buf, ": ");
	return colon ? colon + 2 : buf;
}

/*
 * Is snap complete: every tensor whole, and as many as want? 1, or 0 with
 * why naming the first tensor that lacks elements (and how many it has).
 */
int ingest_snapshot_complete(const struct snapshot *snap, uint64_t want, char *why, size_t len)
{
	size_t complete = 0;
	const struct tensor_buf *missing = NULL;

	for (size_t i = 0; i < snap->n_tensors; i++) {
		if (snap->tensors[i].covered == snap->tensors[i].total)
			complete++;
		else if (!missing)
			missing = &snap->tensors[i];
	}
	if (missing) {
		/* the first hole names the rank that did not send: offsets are the ranks' own */
		uint64_t b = 0, e = 0;
		size_t gaps = pieces_gaps(missing, &b, &e);
		char holes[96] = "";
		if (gaps == 1)
			snprintf(holes, sizeof(holes), ", missing [%llu, %llu)", (unsigned long long)b,
				 (unsigned long long)e);
		else if (gaps > 1)
			snprintf(holes, sizeof(holes), ", missing %zu ranges, the first [%llu, %llu)", gaps,
				 (unsigned long long)b, (unsigned long long)e);
		/* the name cut to 80 bytes: the holes, at the end, must fit a reply's 255 */
		snprintf(why, len, "commit says %llu tensor%s, %zu complete: '%.80s' has %llu of %llu "
			 "elements%s", (unsigned long long)want, want == 1 ? "" : "s", complete, missing->name,
			 (unsigned long long)missing->covered, (unsigned long long)missing->total, holes);
	}
	else if (complete != want)
		snprintf(why, len, "commit says %llu tensor%s, %zu received", (unsigned long long)want,
			 want == 1 ? "" : "s", complete);
	return !missing && complete == want;
}

/* A kept buffer taken for a tensor that was not made after all: kept again, room allowing. */
static void keep_again(struct state *s, void *buf, uint64_t size)
{
	uint64_t held = s->reserved + s->kept.bytes;

	kept_put(&s->kept, buf, size, s->budget > held ? s->budget - held : 0, now_mono());
}

static struct tensor_buf *find_tensor(struct snapshot *snap, const char *name)
{
	long i = names_find(&snap->names, name);
	return i >= 0 ? &snap->tensors[i] : NULL;
}

/*
 * Refuses snap whole, with code and why, to m and to every rank that
 * committed already: nothing of it will be stored, so its memory goes
 * now, and it stays only to refuse the rest of it (every later shard, and
 * its commit, which drops it); with no commit, it is forgotten quietly
 * after limits.pending_timeout (ingest_expire). A trial's `status` showed
 * such a snapshot pending, holding a rank's pieces, until it expired and
 * was counted dropped as well.
 */
static void refuse_whole(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			 struct snapshot *snap, enum wire_code code, const char *field, const char *why)
{
	if (!snap->conflict) {
		snap->conflict = 1;
		snap->code = code;
		snprintf(snap->field, sizeof(snap->field), "%s", field);
		snprintf(snap->why, sizeof(snap->why), "%.255s", why);
		if (snap->n_waiters)	/* ranks that committed already */
			ingest_fail_waiters(ix, snap, code, snap->field, snap->why);
		snapshot_empty(ix->st, snap);
	}
	ingest_fail(ix, m, h, code, snap->field, snap->why);
}

void ingest_note_told(struct snapshot *snap, uint64_t session)
{
	if (!session || ingest_was_told(snap, session))
		return;
	if (snap->n_told < sizeof(snap->told) / sizeof(snap->told[0]))
		snap->told[snap->n_told++] = session;
	else
		snap->told_full = 1;
}

int ingest_was_told(const struct snapshot *snap, uint64_t session)
{
	for (size_t i = 0; i < snap->n_told; i++)
		if (snap->told[i] == session)
			return 1;
	return snap->told_full;
}

int ingest_refused_code(const struct snapshot *snap)
{
	return snap->code ? snap->code : WIRE_CONFLICT;
}

/*
 * A snapshot being received got a shard whose elements it holds already,
 * with other bytes, from another connection than the one that sent them
 * first: two senders disagree about (run, step). Storing what
 * each sent of it would mix two processes' weights in one step, so the
 * snapshot is refused whole; logged once per (run, step).
 */
static void refuse_mixed(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			 struct snapshot *snap, const char *what)
{
	struct run *r = snap->run;
	char why[512];

	if (!snap->conflict) {
		/*
		 * A sharding mistake (two ranks given the same offset) reads as
		 * two senders too, and a trial's was told it had re-used a run
		 * name: named first when the run's commits said ranks, and among
		 * the causes before any did (its first step: no commit yet).
		 */
		if (r->ranks_of_step > 1)
			snprintf(why, sizeof(why), "run '%.40s' step %lld is refused whole: %.110s (two of its %llu "
				 "ranks sending overlapping pieces: each sends only its own, at its own offset; "
				 "else a re-used run name)", r->name, (long long)snap->step, what,
				 (unsigned long long)r->ranks_of_step);
		else
			snprintf(why, sizeof(why), "run '%.40s' step %lld is refused whole: %.110s (two ranks "
				 "of a sharded job sending overlapping pieces: each sends only its own, at its "
				 "own offset; a re-used run name; or a job restarted mid-snapshot that does not "
				 "send the same bytes)", r->name, (long long)snap->step, what);
		ingest_note_conflict(ix, r, snap->step, 0, why, what, 0);	/* two senders: no step count's */
		refuse_whole(ix, m, h, snap, WIRE_CONFLICT, "offset", why);
		return;
	}
	ingest_fail(ix, m, h, ingest_refused_code(snap), snap->field, snap->why);
}

/*
 * A snapshot whose tensors, with this one, hold more than a run's window
 * (half of memory.budget) could never be held whole: its reservation only
 * grows until its commit. Refused at once, whole, too_large, naming
 * memory.budget; a trial's publisher was told over_window ("retry after
 * acks") for ever. Logged once per run: each later step is as large.
 */
static void refuse_over_window(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			       struct snapshot *snap, uint64_t need)
{
	struct run *r = snap->run;
	char why[512];
	uint64_t held = snap->bytes + snap->overhead;

	snprintf(why, sizeof(why), "run '%.40s' step %lld is larger than a run's window, half of "
		 "memory.budget (%llu bytes): its %zu tensors so far take %llu, the next %llu; it could "
		 "never be held whole: raise memory.budget to at least twice the snapshot's size",
		 r->name, (long long)snap->step, (unsigned long long)ix->window, snap->n_tensors,
		 (unsigned long long)held, (unsigned long long)need);
	if (strcmp(ix->too_large_said, r->name)) {
		log_warning("ingest: refused: %.400s (said once for the run)", why);
		snprintf(ix->too_large_said, sizeof(ix->too_large_said), "%s", r->name);
	}
	refuse_whole(ix, m, h, snap, WIRE_TOO_LARGE, "snapshot", why);
}

/*
 * Adds one shard to snap (received, checked). Returns 0, or -1 after the
 * error reply: the shard was not taken (only out of memory can leave behind
 * a tensor it created, reserved until its snapshot ends).
 */
int ingest_add_shard(struct ingest *ix, const struct frames *m, const struct wire_header *h,
		     struct run *r, struct snapshot *snap)
{
	struct state *s = ix->st;
	size_t esize = wd_dtype_size(h->dtype);
	uint64_t bytes = h->count * esize;	/* wire_parse bounds it by max_message */
	char why[512];

	ingest_note_told(snap, h->session);	/* its sender keeps a refusal (refusal_outlived) */
	if (snap->conflict) {	/* refused whole (refuse_whole) */
		ingest_fail(ix, m, h, ingest_refused_code(snap), snap->field, snap->why);
		return -1;
	}
	struct tensor_buf *t = find_tensor(snap, h->name);
	if (t && (t->dtype != h->dtype || t->total != h->total || t->ndims != h->ndims ||
		  memcmp(t->shape, h->shape, (size_t)h->ndims * sizeof(h->shape[0])))) {
		/*
		 * Ranks that disagree on a tensor: the step cannot be whole, so
		 * every rank is told at once, naming what differs. It was a
		 * `conflict` (the code of a re-used run name) for this shard
		 * alone, and the others waited for limits.pending_timeout.
		 */
		char was[120], now[120];
		const char *field = t->dtype != h->dtype ? "dtype" : t->total != h->total ? "total" : "shape";
		if (t->dtype != h->dtype) {
			snprintf(was, sizeof(was), "%s", wd_dtype_name(t->dtype));
			snprintf(now, sizeof(now), "%s", wd_dtype_name(h->dtype));
		} else if (t->total != h->total) {
			snprintf(was, sizeof(was), "%llu", (unsigned long long)t->total);
			snprintf(now, sizeof(now), "%llu", (unsigned long long)h->total);
		} else {
			wd_shape_text(t->shape, t->ndims, was, sizeof(was));
			wd_shape_text(h->shape, h->ndims, now, sizeof(now));
		}
		snprintf(why, sizeof(why), "a shard of '%.100s' says %s %s, and an earlier one of it %s: every "
			 "piece of a tensor, from every rank, gives the same dtype, shape and total", h->name,
			 field, now, was);
		log_warning("ingest: run '%s' step %lld refused whole: %s", r->name, (long long)h->step, why);
		refuse_whole(ix, m, h, snap, WIRE_BAD_FIELD, field, why);
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
			ingest_fail(ix, m, h, WIRE_CONFLICT, "offset", why);
			return -1;
		}
		if (o < 0) {
			ingest_fail(ix, m, h, WIRE_INTERNAL, "memory", why);
			return -1;
		}
		if (sender_of(m) != t->sender)	/* another process's: not a rank's re-send after its ack timeout */
			snap->overlapped = 1;	/* what all_ranks_committed asks of a step not whole */
		if (t->covered > had)	/* only new elements keep it from being stale (ingest_make_room) */
			ingest_note_taken(snap, (t->covered - had) * esize, now_mono());
		ingest_hold_overhead(s, r, snap, t, ingest_tensor_overhead(t->name, t->n_ranges));
		s->count.tensors++;
		s->count.bytes_received += bytes;
		return 0;
	}
	if (t && t->n_ranges >= MAX_PIECES &&
	    pieces_is_new(t, (size_t)at, h->offset, h->offset + h->count)) {
		snprintf(why, sizeof(why), "'%.120s' would arrive in more than %d separate pieces; "
			 "send larger or adjacent shards", h->name, MAX_PIECES);
		ingest_fail(ix, m, h, WIRE_TOO_MANY, "offset", why);
		return -1;
	}
	if (!t) {
		if ((int64_t)snap->n_tensors >= ix->cfg->limits.max_tensors) {
			ingest_fail(ix, m, h, WIRE_TOO_MANY, "name",
				    "snapshot has limits.max_tensors tensors already");
			return -1;
		}
		char clash[240];
		if (names_check(&snap->names, h->name, clash, sizeof(clash)) < 0) {
			snprintf(why, sizeof(why), "tensor name '%.60s' cannot be stored: %.160s", h->name, clash);
			ingest_fail(ix, m, h, WIRE_BAD_NAME, "name", why);
			return -1;
		}
		/*
		 * A tensor is reserved whole at its first shard, within its run's
		 * window: one larger than the window could never fit, and was
		 * refused over_window, retried for ever (issue 11). total may be
		 * up to 2^63: compare before multiplying, or it wraps.
		 */
		if (h->total > (ix->window - ingest_tensor_overhead(h->name, 1)) / esize) {
			snprintf(why, sizeof(why), "tensor of %llu elements of %zu bytes is larger than a "
				 "run's window, half of memory.budget (%llu bytes): it could never be "
				 "held; raise memory.budget", (unsigned long long)h->total, esize,
				 (unsigned long long)ix->window);
			ingest_fail(ix, m, h, WIRE_TOO_LARGE, "total", why);
			return -1;
		}
		uint64_t need = h->total * esize, extra = ingest_tensor_overhead(h->name, 1);
		if (snap->bytes + snap->overhead + need + extra > ix->window) {
			refuse_over_window(ix, m, h, snap, need + extra);
			return -1;
		}
		void *buf = kept_take(&s->kept, need, now_mono());	/* the same tensor's a step ago */
		if (!ingest_make_room(ix, r, snap, need + extra)) {
			keep_again(s, buf, need);
			ingest_refuse_room(ix, m, h, r, need + extra);
			return -1;
		}
		if (snap->n_tensors == snap->cap_tensors) {
			size_t cap = snap->cap_tensors ? 2 * snap->cap_tensors : 16;
			struct tensor_buf *nt = realloc(snap->tensors, cap * sizeof(*nt));
			if (!nt) {
				keep_again(s, buf, need);
				ingest_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
				return -1;
			}
			snap->tensors = nt;
			snap->cap_tensors = cap;
		}
		t = &snap->tensors[snap->n_tensors];
		memset(t, 0, sizeof(*t));
		t->sender = sender_of(m);
		t->data = buf ? buf : malloc(need);
		t->name = strdup(h->name);
		if (!t->data || !t->name || names_add(&snap->names, t->name, snap->n_tensors) < 0) {
			if (buf)
				keep_again(s, buf, need);
			else
				free(t->data);
			free(t->name);
			ingest_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
			return -1;
		}
		snap->n_tensors++;
		s->kept.reused += buf != NULL;
		t->dtype = h->dtype;
		t->ndims = h->ndims;
		memcpy(t->shape, h->shape, sizeof(t->shape));
		t->total = h->total;
		snap->bytes += need;
		r->bytes_pending += need;
		s->reserved += need;
	}
	if (pieces_add(t, (size_t)at, h->offset, h->offset + h->count, h->crc32) < 0) {
		ingest_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
		return -1;
	}
	ingest_hold_overhead(s, r, snap, t, ingest_tensor_overhead(t->name, t->n_ranges));
	pieces_copy(t, &pl, h->offset);
	t->covered += h->count;
	ingest_note_taken(snap, bytes, now_mono());
	s->count.tensors++;
	s->count.bytes_received += bytes;
	return 0;
}

/*
 * A durable (run, step) differs from what is sent again: replied to m with
 * code conflict, remembered in snap for the commit's reply, logged once per
 * (run, step) and counted once per re-send.
 *
 * A re-run under a used name is the common cause. runs rm is refused
 * while either job is connected, and a re-run's refused steps are not
 * sent again: so both ways out, in full.
 */

/* Other connections than m's publish r now (ix->publishers_besides); -1: not known. */
static int others_connected(struct ingest *ix, const struct frames *m, const struct run *r)
{
	if (!ix->publishers_besides || !m->n)
		return -1;
	return ix->publishers_besides(ix->publishers_ctx, r->name, m->data[0], m->len[0]);
}

/* No other connection publishes r: the job that stored its steps has ended. */
static int first_job_gone(struct ingest *ix, const struct frames *m, const struct run *r)
{
	return !r->mixed && others_connected(ix, m, r) == 0;
}

#define HINT_NAME_MAX 40	/* a run's name in a hint; a longer one is not written cut, as a wrong command */

/* "`wdrift runs rm NAME`", or, for a name too long for a reason, a command that names no run wrongly. */
static void rm_command(char *buf, size_t len, const char *name)
{
	if (strlen(name) > HINT_NAME_MAX)
		snprintf(buf, len, "`wdrift runs rm` with its name");
	else
		snprintf(buf, len, "`wdrift runs rm %s`", name);
}

void ingest_conflict_reason(struct ingest *ix, const struct frames *m, char *why, size_t len,
			    const struct run *r, int64_t step, uint64_t session, const char *what)
{
	char head[128], hint[192], rm[HINT_NAME_MAX + 24];
	/* a re-run after the first job ended (the usual one): "stop both jobs" would send it looking */
	int alone = first_job_gone(ix, m, r);
	int n = snprintf(head, sizeof(head), "run '%.40s' step %lld is durable with other content: ", r->name,
			 (long long)step);
	/*
	 * Two jobs at once, each as its only rank (run_note_mixed): the one
	 * refused may be the first job, reaching a step the other stored
	 * first (a trial's: "a re-run?" sent it to kill the job it meant to
	 * keep). Its own job, whose publisher has committed the run before: a
	 * step count that went back (an epoch's, reset), not a re-run (a
	 * trial's was told to rename the job it ran alone).
	 */
	int own = run_conflict_own(r, session);
	rm_command(rm, sizeof(rm), r->name);
	int k = r->mixed ? snprintf(hint, sizeof(hint), " (two jobs have published it at once since step %lld: "
				    "stop the one started by mistake; `wdrift runs` names them)",
				    (long long)r->mixed_step)
		: own ? snprintf(hint, sizeof(hint), " (this publisher has published the run before: does the "
				 "job's step count go back, an epoch's reset? give each snapshot the global step)")
		: alone ? snprintf(hint, sizeof(hint), " (a re-run? the first job has ended: rename this one, or "
				   "stop it, %s, and start it again)", rm)
			 : snprintf(hint, sizeof(hint), " (a re-run under the same name? name it anew, or stop "
				    "both jobs, %s, and start the re-run again)", rm);
	/* the publisher shows 250 bytes of a reason (WD_CLIP): the hint ends within them */
	int room = 250 - n - k;

	snprintf(why, len, "%s%.*s%s", head, room > 0 ? room : 0, what, hint);
}

void ingest_rerun_reason(struct ingest *ix, const struct frames *m, char *why, size_t len,
			 const struct run *r, int64_t step, const struct run_rerun *rr)
{
	char head[96], what[128], hint[192], rm[HINT_NAME_MAX + 24];
	int n = snprintf(head, sizeof(head), "run '%.40s' step %lld: ", r->name, (long long)step);
	snprintf(what, sizeof(what), "a re-run: it sent step %lld again and had step %lld refused as a conflict",
		 (long long)rr->from, (long long)rr->conflict);
	/*
	 * A hint of its own, so that the publisher says the first refusal of
	 * this kind whole (publisher_send.c). "Both jobs" while another
	 * connection publishes the run, two jobs at once or not.
	 */
	rm_command(rm, sizeof(rm), r->name);
	int k = snprintf(hint, sizeof(hint), " (its later steps are refused too: rename it, or stop %s, %s, and "
			 "start it again)", others_connected(ix, m, r) == 0 ? "it" : "both jobs", rm);
	int room = 250 - n - k;

	snprintf(why, len, "%s%.*s%s", head, room > 0 ? room : 0, what, hint);
}

#define CONFLICT_FULL_EVERY 600.0	/* seconds: the way out said whole again */

void ingest_note_conflict(struct ingest *ix, struct run *r, int64_t step, uint64_t session, const char *why,
			  const char *what, int whole)
{
	int own = run_conflict_own(r, session);
	struct log_limit *l = &ix->refused[WIRE_CONFLICT];
	double t = now_mono();
	int said = r->conflict_logged && r->conflict_step == step;	/* a re-send of the step */

	char rec[NAME_MAX + 64];
	double wall = now_wall();

	ix->st->count.conflicts++;
	run_note_conflict(r, step, wall, own);
	snprintf(rec, sizeof(rec), "run '%s' step %lld's conflict", r->name, (long long)step);
	ingest_record(ix, record_conflict(r->name, step, wall, own), rec);	/* runs and drift say it after a restart too */
	if (said && !whole)
		return;
	r->conflict_logged = 1;
	if (whole || !r->conflict_full_at || t - r->conflict_full_at >= CONFLICT_FULL_EVERY) {
		r->conflict_full_at = t;
		r->conflict_full_step = step;
		log_warning("ingest: refused as a conflict: %.300s", why);
		return;
	}
	l->who = "ingest";
	l->what = "'refused as a conflict' lines";
	l->note = " (wdrift runs counts them by run)";
	if (log_limit_may(l, t))
		log_warning("ingest: refused as a conflict: run '%.100s' step %lld: %.200s (%llu of its "
			    "snapshots refused so; the way out as said at step %lld)", r->name, (long long)step, what,
			    (unsigned long long)r->conflicts, (long long)r->conflict_full_step);
}

void ingest_refuse_content(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			   struct snapshot *snap, const char *field, const char *what)
{
	struct run *r = snap->run;
	char why[WIRE_REASON_MAX + 1];

	ingest_conflict_reason(ix, m, why, sizeof(why), r, snap->step, h ? h->session : 0, what);
	if (!snap->conflict) {
		snap->conflict = 1;
		snprintf(snap->why, sizeof(snap->why), "%s", why);
		snprintf(snap->field, sizeof(snap->field), "%s", field);
		ingest_note_conflict(ix, r, snap->step, h ? h->session : 0, why, what, 0);
	}
	ingest_fail(ix, m, h, WIRE_CONFLICT, field, why);
	/* the ranks of a sharded re-send whose commits wait on it (commit_durable) */
	if (snap->recheck && snap->n_waiters) {
		ingest_fail_waiters(ix, snap, WIRE_CONFLICT, snap->field, snap->why);
		snap->n_waiters = 0;
	}
}

/*
 * A shard of a durable (run, step) whose identity is id: checked, never
 * stored. Its name, dtype and shape at once; its CRC once the re-send
 * covers the whole tensor (shard CRCs combined, as for a new snapshot).
 * Overlapping re-sent shards cannot be compared without the bytes: skipped.
 */
void ingest_recheck_shard(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			  struct snapshot *snap, const struct snap_id *id)
{
	char what[200];
	const struct tensor_id *tid = identity_find(id, identity_name_hash(h->name));

	if (!tid) {
		snprintf(what, sizeof(what), "tensor '%.80s' is not in it", h->name);
		return ingest_refuse_content(ix, m, h, snap, "name", what);
	}
	if (tid->dtype != (uint8_t)h->dtype || tid->shape_hash != identity_shape_hash(h->ndims, h->shape)) {
		int dt = tid->dtype != (uint8_t)h->dtype;
		snprintf(what, sizeof(what), "tensor '%.80s' %s differs", h->name, dt ? "dtype" : "shape");
		return ingest_refuse_content(ix, m, h, snap, dt ? "dtype" : "shape", what);
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
		ingest_refuse_content(ix, m, h, snap, "crc32", what);
	}
}
