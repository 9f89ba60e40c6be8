/*
 * ingest_reply.c: the ingest side's replies (see ingest_internal.h): an
 * error reply names the field and counts its code; the waiters of a
 * snapshot (every rank that committed it) get its ack or its error; and
 * the spool's outcome of a snapshot becomes that ack, or an error that
 * says whether a re-send can help.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity.h"
#include "ingest_internal.h"
#include "result_batch.h"
#include "log.h"
#include "logging.h"
#include "name_match.h"
#include "utf8.h"

void ingest_reply(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	char *body = wire_build(h);
	if (body) {
		ix->sink.send(ix->sink.ctx, m->data[0], m->len[0], 0, body);
		free(body);
	}
}

/*
 * The refusals that mean a publisher sends what it must not (a bug, or a
 * version skew): the operator hears of them, and from whom, a few a
 * minute for each code (log_limit.h). The rest are push-back that passes
 * (over_window, too_many), an ordinary wait (incomplete), or have lines of
 * their own (conflict, internal, and too_large of a whole snapshot, field
 * "snapshot": said once a run).
 */
static const char *const refusal_what[WIRE_CODE_COUNT] = {
	[WIRE_BAD_FRAME] = "bad_frame refusals", [WIRE_BAD_VERSION] = "bad_version refusals",
	[WIRE_BAD_FIELD] = "bad_field refusals", [WIRE_BAD_FRAMES] = "bad_frames refusals",
	[WIRE_BAD_CHECKSUM] = "bad_checksum refusals", [WIRE_TOO_LARGE] = "too_large refusals",
	[WIRE_BAD_NAME] = "bad_name refusals",
};

void ingest_say_refusal(struct ingest *ix, const struct wire_header *in, const struct wire_error *err)
{
	struct log_limit *l = &ix->refused[err->code];
	char who[400] = "";

	if (!refusal_what[err->code] || (err->code == WIRE_TOO_LARGE && !strcmp(err->field, "snapshot"))) {
		log_debug("ingest: %s %s: %s", wire_code_name(err->code), err->field, err->reason);
		return;
	}
	l->who = "ingest";
	l->what = refusal_what[err->code];
	l->note = " (status counts them all)";
	if (!log_limit_may(l, now_mono()))
		return;
	/* all of it the peer's text, which wire_parse copied before checking: escaped */
	if (in && in->run[0])
		snprintf(who, sizeof(who), " run '%s'", wd_log_clip((char[260]){ 0 }, 260, in->run, 120));
	if (in && in->step >= 0)
		snprintf(who + strlen(who), sizeof(who) - strlen(who), " step %lld", (long long)in->step);
	if (in && in->name[0])
		snprintf(who + strlen(who), sizeof(who) - strlen(who), " tensor '%s'",
			 wd_log_clip((char[260]){ 0 }, 260, in->name, 120));
	log_warning("ingest: refused%s%s: %s%s%s: %s", who, who[0] ? "" : " a message",
		    wire_code_name(err->code), err->field[0] ? " " : "", WD_CLIP(err->field),
		    WD_CLIP(err->reason));
}

void ingest_refusals_tick(struct ingest *ix)
{
	for (int k = 0; k < WIRE_CODE_COUNT; k++)
		if (ix->refused[k].suppressed)
			log_limit_roll(&ix->refused[k], now_mono());
}

/* Sends an error reply echoing what the header had; counts it. */
void ingest_reply_error(struct ingest *ix, const struct frames *m, const struct wire_header *in,
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
	ix->conflict_replied |= err->code == WIRE_CONFLICT;
	ingest_say_refusal(ix, in, err);
	ingest_reply(ix, m, &h);
}

void ingest_fail(struct ingest *ix, const struct frames *m, const struct wire_header *in,
		 enum wire_code code, const char *field, const char *reason)
{
	struct wire_error err = { .code = code };
	snprintf(err.field, sizeof(err.field), "%s", field);
	snprintf(err.reason, sizeof(err.reason), "%.255s", reason);
	wd_utf8_scrub(err.reason);	/* a name cut inside a character: the reply's JSON would lose it */
	ingest_reply_error(ix, m, in, &err);
}


/* Adds the sender of m to snap's waiters (once); 0, or -1 when there are too many. */
int ingest_add_waiter(struct snapshot *snap, const struct frames *m)
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
void ingest_fail_waiters(struct ingest *ix, const struct snapshot *snap, enum wire_code code,
			 const char *field, const char *reason)
{
	struct wire_header h;

	memset(&h, 0, sizeof(h));
	snprintf(h.run, sizeof(h.run), "%s", snap->run->name);
	h.step = snap->step;
	for (size_t i = 0; i < snap->n_waiters; i++) {
		struct frames w = WAITER_FRAMES(&snap->waiters[i]);
		ingest_fail(ix, &w, &h, code, field, reason);
	}
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

void ingest_ranks_notice(char *buf, size_t len, const char *run, int64_t step, uint64_t said, uint64_t other)
{
	snprintf(buf, len, "the commits of run '%.200s' step %lld said ranks %llu and %llu: every rank gives the "
		 "job's count (ranks=, WORLD_SIZE), unless the job was restarted with another; the step was "
		 "stored, its parts whole", run, (long long)step, (unsigned long long)said,
		 (unsigned long long)other);
}

/*
 * Whether the ack to waiter w of a run two jobs publish at once (struct
 * run, mixed) should say so: once per connection, so that each job's user
 * hears it, not only the operator's log (a trial's second job finished
 * without a word, its steps among the first's).
 */
static int mixed_untold(struct run *r, const struct waiter *w)
{
	if (!r->mixed || r->n_mixed_told >= MIXED_TOLD_MAX)
		return 0;
	for (size_t i = 0; i < r->n_mixed_told; i++)
		if (r->mixed_told[i].len == w->len && !memcmp(r->mixed_told[i].id, w->id, w->len))
			return 0;
	if (!r->mixed_told && !(r->mixed_told = calloc(MIXED_TOLD_MAX, sizeof(*r->mixed_told))))
		return 0;
	r->mixed_told[r->n_mixed_told++] = *w;
	return 1;
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
		snap->run->durable_wall = now_wall();
		snap->run->durable_mono = now_mono();
		s->count.snapshots_durable++;
		s->count.stored++;
		h.type = WIRE_ACK;
		h.tensors = snap->n_tensors;
		h.bytes = snap->bytes;
		log_info("durable: run '%s' step %lld, %zu tensors", snap->run->name,
			 (long long)snap->step, snap->n_tensors);
		for (size_t i = 0; i < snap->n_waiters; i++) {	/* every rank that committed */
			struct frames w = WAITER_FRAMES(&snap->waiters[i]);
			struct run *r = snap->run;
			h.notice[0] = 0;
			if (snap->ranks_differ)
				ingest_ranks_notice(h.notice, sizeof(h.notice), r->name, snap->step, snap->ranks_said,
						    snap->ranks_differ);
			else if (mixed_untold(r, &snap->waiters[i]))
				snprintf(h.notice, sizeof(h.notice), "run '%.200s' is published by two jobs at once, "
					 "each as its only rank, from step %lld (%s): their steps interleave in "
					 "the run, and nothing tells them apart later. Stop the one started by "
					 "mistake (`wdrift runs` shows the run)", r->name,
					 (long long)r->mixed_step, r->mixed_who);
			ingest_reply(ix, &w, &h);
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
		ingest_fail_waiters(ix, snap, WIRE_INTERNAL, internal_field(err), why);
	}
	ingest_drop_snapshot(ix, snap);
}

/* A notice to send: built at the first connection not yet told (most batches find none). */
struct told {
	struct ingest *ix;
	const struct wire_header *h;
	char *body;
	int failed;
};

static void tell_one(void *ctx, const void *rid, size_t rid_len)
{
	struct told *t = ctx;
	if (!t->body && !t->failed)
		t->failed = !(t->body = wire_build(t->h));
	if (t->body)
		t->ix->sink.send(t->ix->sink.ctx, rid, rid_len, 0, t->body);
}

/*
 * r's names told of the study of hash study: found, else a new one: a free
 * slot, else one whose names matched, else, for a note (noted), the
 * oldest's; else NULL. Also for a run whose names match: its latest step
 * keeps an older step's note, computed later, from its job; but a run in
 * more studies than slots does not push out what a job was told (a
 * review's).
 */
static struct names_told *names_told_of(struct run *r, uint64_t study, int noted)
{
	size_t cap = sizeof(r->names_told) / sizeof(r->names_told[0]);
	struct names_told *e = NULL;

	for (size_t i = 0; i < r->n_names_told && i < cap; i++)
		if (r->names_told[i].study == study)
			return &r->names_told[i];
	if (r->n_names_told < cap)
		e = &r->names_told[r->n_names_told++];
	for (size_t i = 0; !e && i < cap; i++)
		if (!r->names_told[i].text)
			e = &r->names_told[i];
	if (!e && !noted)
		return NULL;
	if (!e)
		e = &r->names_told[r->n_names_told++ % cap];
	*e = (struct names_told){ .study = study, .step = INT64_MIN };
	return e;
}

/*
 * b's note for r, when its step is not older than the latest seen of r in
 * b's study: the note (NULL: the names match, and a later difference is
 * told anew), with *e the study's entry of r. NULL with *e NULL: older,
 * or names that match with no slot free for them.
 */
static const char *names_now(struct ingest *ix, const struct result_batch *b, const char *run,
			     struct names_told **e, struct run **r)
{
	const char *note = result_batch_note_of(b, run);

	*e = NULL;
	if (!(*r = state_run(ix->st, run, 0)))
		return NULL;
	struct names_told *t = names_told_of(*r, identity_name_hash(b->study), note != NULL);
	if (!t || b->step < t->step)
		return NULL;
	t->step = b->step;
	*e = t;
	return note;
}

/*
 * A notice of what differs in a run's tensor names: head, the note with its
 * way out whole (name_match_fit), and where to look; scrubbed, for JSON.
 */
static void names_notice(char *out, size_t len, const char *head, const char *note, const char *study)
{
	char tail[200];

	snprintf(tail, sizeof(tail), "; `wdrift drift %.128s` says it", study);
	name_match_fit(out, len, head, note, tail);
	wd_utf8_scrub(out);	/* a cut inside a name */
}

void ingest_tell_names(struct ingest *ix, const struct result_batch *b)
{
	struct names_told *e;
	struct run *r;
	const char *last = NULL;

	if (b->backfill || !ix->each_publisher)
		return;
	/* a run with rows and no note: its names match now (rows come grouped by run: each run once) */
	for (size_t i = 0; i < b->n_rows; last = b->rows[i++].run) {
		if (!b->rows[i].run || (last && !strcmp(last, b->rows[i].run)) ||
		    result_batch_note_of(b, b->rows[i].run))
			continue;
		if (!names_now(ix, b, b->rows[i].run, &e, &r) && e && e->text) {
			e->text = 0;
			e->matched++;
		}
	}
	for (size_t k = 0; k < b->n_notes; k++) {
		const char *note = names_now(ix, b, b->notes[k].run, &e, &r);
		if (!note || !e)
			continue;
		e->text = identity_name_hash(note);
		char key[64];
		snprintf(key, sizeof(key), "%llx:%llx:%u", (unsigned long long)e->study, (unsigned long long)e->text,
			 e->matched);
		struct wire_header p;
		memset(&p, 0, sizeof(p));
		p.type = WIRE_PONG;
		p.step = -1;
		/* the study's step, the baseline's (a run's own may differ by alignment.tolerance), as the log says it */
		char head[400];
		snprintf(head, sizeof(head), "study '%.128s' step %lld: run '%.128s' ", b->study, (long long)b->step,
			 r->name);
		names_notice(p.notice, sizeof(p.notice), head, note, b->study);
		struct told t = { .ix = ix, .h = &p };
		/* each connection once; one that connects later is told at the next step's results */
		ix->each_publisher(ix->publishers_ctx, r->name, identity_name_hash(key), tell_one, &t);
		free(t.body);
		/* the prefix is the baseline's: its job is the one to change, and hears it too */
		struct told tb = { .ix = ix, .h = &p };
		if (b->baseline && name_match_baseline_clause(note)) {
			snprintf(head, sizeof(head), "study '%.128s' step %lld: run '%.128s', compared with this job's "
				 "run as its baseline, ", b->study, (long long)b->step, r->name);
			names_notice(p.notice, sizeof(p.notice), head, note, b->study);
			/*
			 * once for every study and run with this note (a baseline of five
			 * studies, each key pushing out another of the four a connection
			 * keeps, was told five times a step; a review's), and so not again
			 * after a run's names matched
			 */
			snprintf(key, sizeof(key), "b:%llx", (unsigned long long)e->text);
			ix->each_publisher(ix->publishers_ctx, b->baseline, identity_name_hash(key), tell_one, &tb);
			free(tb.body);
		}
		if (t.failed || tb.failed)
			log_err("study '%s' step %lld: run '%s' not told of its tensor names: out of memory",
				b->study, (long long)b->step, r->name);
	}
}
