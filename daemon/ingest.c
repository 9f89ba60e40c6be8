/*
 * ingest.c: protocol v1 on the daemon's side (see ingest.h): each message
 * parsed and dispatched (hello, tensor, commit, ping), the runs it names
 * admitted, and the pending snapshot (run, step) found or made, then
 * handed to the spool once complete and committed. Every failure is an
 * error reply naming the field and a counter; nothing here stops the
 * daemon. The parts beside it (ingest_internal.h): ingest_shard.c takes a
 * shard, ingest_room.c keeps memory within the budget, ingest_reply.c
 * answers.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commit_ranks.h"
#include "config_load.h"
#include "identity.h"
#include "ingest_internal.h"
#include "logging.h"
#include "near_name.h"
#include "records.h"
#include "spool.h"

static struct snapshot *find_snapshot(struct state *s, const struct run *r, int64_t step)
{
	for (struct snapshot *p = s->pending; p; p = p->next)
		if (p->run == r && p->step == step)
			return p;
	return NULL;
}

/* s's runs into names (room for 1 + WD_STUDY_STEP_RUNS_MAX): the baseline, the candidates, the trained proxies'. */
static size_t study_run_names(const struct wd_config_study *s, const char **names)
{
	names[0] = s->baseline;
	return 1 + wd_study_step_runs(s, names + 1, s->candidates.n + s->proxies.n);
}

/*
 * For a run a reload took out of study left: the run of left that has no
 * snapshot and whose name is nearest run's (the reload's typo, often), as
 * ", which names 'X' now, a run that has sent nothing (a typo in the
 * config?)", into out; "" when it has none.
 */
static void left_for(const struct wd_config *cfg, struct state *st, const char *left, const char *run,
		     char *out, size_t size)
{
	struct suggest near = { run, NULL, 0, SIZE_MAX };
	const char *names[1 + WD_STUDY_STEP_RUNS_MAX];

	out[0] = 0;
	for (size_t i = 0; i < cfg->n_studies; i++) {
		if (strcmp(cfg->studies[i].name, left))
			continue;
		size_t n = study_run_names(&cfg->studies[i], names);
		for (size_t k = 0; k < n; k++) {
			struct run *r = state_run(st, names[k], 0);
			if (!r || !r->n_durable)
				config_suggest_try(&near, names[k], strlen(names[k]));
		}
	}
	if (near.best)
		snprintf(out, size, ", which names '%.*s' now, a run that has sent nothing (a typo in the "
			 "config?)", (int)near.blen, near.best);
}

/*
 * Whether run belongs to no study of cfg: then out says so, names the
 * studies' runs and the nearest one, for the daemon's log and the
 * publisher's welcome (a typo in a run name is the usual cause, and its
 * snapshots would be stored and never compared). 1 then, else 0. A run
 * that a reload, or a config change before this start, took out of a
 * study (r->left_study) is told so, and the
 * name its study has now: not to take that name, which may be the typo.
 */
int ingest_no_study(const struct wd_config *cfg, struct state *st, const char *run, char *out, size_t size)
{
	struct run *r = state_run(st, run, 0);
	struct suggest near = { run, NULL, 0, SIZE_MAX };
	const char *names[1 + WD_STUDY_STEP_RUNS_MAX];
	char list[512] = "";
	size_t at = 0;
	int near_sends = 0;	/* the nearest name is a run that sends already */

	for (size_t i = 0; i < cfg->n_studies; i++) {
		const struct wd_config_study *s = &cfg->studies[i];
		size_t n = study_run_names(s, names);
		for (size_t k = 0; k < n; k++) {
			if (!strcmp(names[k], run))
				return 0;
			/*
			 * Of names as near, one that has sent nothing: a trial's
			 * proxy 'st2-fb' was offered the candidate 'st2-fa', which
			 * was publishing, where the proxy 'st2-bf' had sent nothing.
			 */
			size_t d = wd_name_near(run, names[k], strlen(names[k]));
			struct run *named = state_run(st, names[k], 0);
			int sends = named && named->n_durable;
			if (d != SIZE_MAX && (d < near.bestd || (d == near.bestd && near_sends && !sends))) {
				near.best = names[k];
				near.blen = strlen(names[k]);
				near.bestd = d;
				near_sends = sends;
			}
			if (at < sizeof(list) - 1)
				at += (size_t)(k ? snprintf(list + at, sizeof(list) - at, ", %s", names[k])
						 : snprintf(list + at, sizeof(list) - at, "%s'%s': %s",
							    i ? "; " : "", s->name, names[k]));
		}
	}
	if (r && r->left_study) {
		char now[600];
		left_for(cfg, st, r->left_study, run, now, sizeof(now));
		snprintf(out, size, "run '%s' belongs to no study since %s took it out of study "
			 "'%s'%s: its snapshots are stored but never compared (studies: %s)", run,
			 r->left_before_start ? "a config change before this start" : "a reload",
			 r->left_study, now, cfg->n_studies ? list : "none configured");
		return 1;
	}
	snprintf(out, size, "run '%s' belongs to no study: its snapshots are stored but never "
		 "compared (studies: %s)%s%.*s%s", run, cfg->n_studies ? list : "none configured",
		 near.best ? "; did you mean '" : "", near.best ? (int)near.blen : 0,
		 near.best ? near.best : "", near.best ? "'?" : "");
	return 1;
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
	ingest_no_study(ix->cfg, ix->st, in->run, h.notice, sizeof(h.notice));
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
		ix->sink.send(ix->sink.ctx, m->data[0], m->len[0], 0, full);
		free(full);
	}
	free(body);
}

/*
 * The first time run r sends a snapshot in this daemon's life: no_study's
 * notice, once. A run whose snapshots are all refused holds nothing, and is
 * forgotten after each (ingest_drop_snapshot): the last run told is kept
 * apart, so that its next snapshot does not say it again.
 */
static void note_study(struct ingest *ix, struct run *r)
{
	char msg[WIRE_NOTICE_MAX + 1];

	if (r->study_checked)
		return;
	r->study_checked = 1;
	if (!ingest_no_study(ix->cfg, ix->st, r->name, msg, sizeof(msg)))
		return;
	if (!strcmp(ix->no_study_said, r->name))
		return;
	snprintf(ix->no_study_said, sizeof(ix->no_study_said), "%s", r->name);
	log_notice("%s", msg);
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
	/* re-sends being checked count apart: they hold no memory; a refused one counts, bounding them */
	size_t pend = 0;
	for (struct snapshot *p = s->pending; p; p = p->next)
		pend += p->run == r && p->recheck == recheck;
	if ((int64_t)pend >= ix->cfg->limits.max_pending) {
		snprintf(why, sizeof(why), "run has %zu snapshots pending, the limit "
			 "(limits.max_pending); commit them first", pend);
		ingest_fail(ix, m, h, WIRE_TOO_MANY, "step", why);
		return NULL;
	}
	if (!(snap = calloc(1, sizeof(*snap)))) {
		ingest_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
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

	if (!snap->want || snap->committing || !ingest_snapshot_complete(snap, snap->want, why, sizeof(why)))
		return 0;
	snap->committing = 1;
	spool_submit(ix->spool, snap);
	return 1;
}

static int resent_refused(struct ingest *ix, const struct run *r, const struct wire_header *h,
			  struct expired_step **gone);

/*
 * The reply to a re-send (h, a shard or a commit) of a step refused to its
 * ranks at gone: why it comes now first (a reply's reason is cut at 255
 * bytes), then the first refusal's.
 */
static void refuse_resent(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			  const struct expired_step *gone)
{
	char why[700];

	snprintf(why, sizeof(why), "said again to a re-send %.0f s after (re-sends of a step so refused are "
		 "refused for %.0f s): %s", now_mono() - gone->at, INGEST_EXPIRED_SECONDS, gone->why);
	ingest_fail(ix, m, h, WIRE_INCOMPLETE, "ranks", why);
}

/*
 * A snapshot refused whole for its size (too_large, not a conflict of
 * content) whose senders went without committing it (killed: one that
 * exits reads its commit's refusal first, which drops it) refuses nothing
 * more to a publisher session that sent it nothing, once no other
 * connection of the run is open: no rank of the refused job is left.
 * Before, `wdrift send` of a smaller file after a killed one was refused
 * with the dead one's counts until limits.pending_timeout. A rank of the
 * job, or its sender on a new connection, is a session it told (or one
 * with none): still refused.
 */
static int refusal_outlived(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			    const struct run *r, const struct snapshot *snap)
{
	return snap->conflict && snap->code && snap->code != WIRE_CONFLICT && !snap->n_waiters &&
	       h->session && !ingest_was_told(snap, h->session) && ix->publishers_besides && m->n &&
	       ix->publishers_besides(ix->publishers_ctx, r->name, m->data[0], m->len[0]) == 0;
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
		ingest_fail(ix, m, h, WIRE_TOO_MANY, "run", why);
		return NULL;
	}
	if (!(r = state_run(s, h->run, 1))) {
		ingest_fail(ix, m, h, WIRE_INTERNAL, "memory", "out of memory");
		return NULL;
	}
	*created = 1;
	return r;
}

/*
 * Has the re-send being checked (snap, recheck) brought every element of
 * every tensor of the durable step id? Then each tensor's CRC was compared
 * (ingest_recheck_shard), and none differed unless snap->conflict.
 */
static int recheck_whole(const struct snapshot *snap, const struct snap_id *id)
{
	if (snap->n_tensors != id->n)
		return 0;
	for (size_t i = 0; i < snap->n_tensors; i++)
		if (snap->tensors[i].covered != snap->tensors[i].total)
			return 0;
	return 1;
}

static void tensor(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	struct state *s = ix->st;
	struct wire_error err;
	int new_run = 0;

	/* Frame sizes and checksum first: nothing is reserved for a bad message. */
	if (wire_check_payload(h, m->len + 2, m->data + 2, m->n - 2, &err) < 0)
		return ingest_reply_error(ix, m, h, &err);
	struct run *r = state_run(s, h->run, 0);
	if (r && run_is_durable(r, h->step)) {	/* a re-send: already durable */
		const struct snap_id *id = run_identity(r, h->step);
		struct snapshot *snap;
		s->count.duplicate_tensors++;
		r->last_seen = now_mono();
		note_study(ix, r);
		if (id && (snap = get_snapshot(ix, m, h, r, 1))) {
			snap->last_seen = now_mono();
			ingest_recheck_shard(ix, m, h, snap, id);
			/*
			 * Whole now, and the same: the ranks whose commits wait hear
			 * it, and the next re-send (another job's) is checked afresh,
			 * not taken as whole already.
			 */
			if (!snap->conflict && recheck_whole(snap, id)) {
				ingest_recheck_settle(ix, snap, id, 1);
				ingest_unlink_snapshot(s, snap);
				snapshot_free(s, snap);
			}
		}
		return;	/* no identity (an old WAL record): the content cannot be checked */
	}
	struct expired_step *gone;
	/*
	 * A shard of a step just refused to its ranks, re-sent by that job's
	 * publisher (its session gave it away): refused, not merged, where a
	 * new job's shards of the step may be assembling (its commit is refused
	 * too). Without a session it is merged, and its commit refused.
	 */
	if (r && h->session && resent_refused(ix, r, h, &gone))
		return refuse_resent(ix, m, h, gone);
	if (!r && !(r = admit_run(ix, m, h, &new_run)))
		return;
	r->last_seen = now_mono();
	struct snapshot *snap = find_snapshot(s, r, h->step);
	if (snap && snap->committing)
		return;	/* being stored: a re-sent shard; its ack is on the way */
	if (snap && refusal_outlived(ix, m, h, r, snap)) {
		log_notice("ingest: run '%s' step %lld: sent anew by another publisher after the one it "
			   "was refused to (%s) went without committing it: taken as new", r->name,
			   (long long)h->step, wire_code_name(ingest_refused_code(snap)));
		ingest_drop_snapshot(ix, snap);	/* and the run, when it held nothing else */
		snap = NULL;
		if (!(r = state_run(s, h->run, 0)) && !(r = admit_run(ix, m, h, &new_run)))
			return;
		r->last_seen = now_mono();
	}
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
	if (ingest_add_shard(ix, m, h, r, snap) < 0) {
		r->shard_refused = 1;	/* its rank may send it again: all ranks' commits do not end it */
		r->shard_refused_step = h->step;
		if (snap->n_tensors == 0 && !snap->n_waiters && !snap->conflict)
			ingest_drop_snapshot(ix, snap);	/* and a run that holds nothing */
		return;
	}
	note_study(ix, r);
	commit_ranks_part(snap, h->session, 0);
	if (snap->n_waiters)	/* ranks committed before this shard came: it may complete it */
		try_store(ix, snap);
}

/* The ack of a re-send found the same as what is durable, to the sender of m. */
static void ack_duplicate(struct ingest *ix, const struct frames *m, const char *run, int64_t step,
			  uint64_t tensors, uint64_t ranks)
{
	struct wire_header a = { .type = WIRE_ACK, .step = step, .tensors = tensors, .duplicate = 1 };
	struct run *r = state_run(ix->st, run, 0);

	snprintf(a.run, sizeof(a.run), "%s", run);
	/* a rank whose commit came after its step was stored, with another count of ranks (ingest_spooled's) */
	if (r && ranks && r->ranks_step == step && r->ranks_of_step && ranks != r->ranks_of_step)
		ingest_ranks_notice(a.notice, sizeof(a.notice), run, step, r->ranks_of_step, ranks);
	ix->st->count.duplicates++;
	ingest_reply(ix, m, &a);
}

void ingest_recheck_settle(struct ingest *ix, struct snapshot *snap, const struct snap_id *id, int whole)
{
	if (!whole)
		log_notice("ingest: run '%s' step %lld: a sharded re-send of this durable step was not "
			   "sent whole within %.0f s (%zu of %zu tensors begun): the parts that came were "
			   "checked, and its ranks are told it is a duplicate", snap->run->name,
			   (long long)snap->step, RECHECK_SECONDS, snap->n_tensors, id ? id->n : 0);
	for (size_t i = 0; i < snap->n_waiters; i++) {
		struct frames w = WAITER_FRAMES(&snap->waiters[i]);
		ack_duplicate(ix, &w, snap->run->name, snap->step, id ? id->n : snap->n_tensors, 0);
	}
	snap->n_waiters = 0;
}

/*
 * A commit of a durable (run, step): a duplicate, or other content
 * (conflict). A tensor's identity is the CRC of its whole, so one rank's
 * part of a sharded re-send cannot be checked alone: its commit waits for
 * the other ranks' parts, as a new snapshot's would, and the ranks hear
 * "duplicate" or "conflict" once the re-send is whole (a trial's re-run
 * of a sharded job, with other weights, was acked as a duplicate at every
 * step: each rank's commit ended the check before any tensor was whole).
 */
static void commit_durable(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			   struct run *r)
{
	struct state *s = ix->st;
	const struct snap_id *id = run_identity(r, h->step);
	struct snapshot *snap = find_snapshot(s, r, h->step);
	int sharded = h->ranks > 1;
	char what[200];

	if (snap && snap->recheck && !snap->conflict && id && h->tensors != id->n) {
		snprintf(what, sizeof(what), "it has %zu tensors, the commit says %llu", id->n,
			 (unsigned long long)h->tensors);
		ingest_refuse_content(ix, m, h, snap, "tensors", what);
	} else if (snap && snap->recheck && snap->conflict) {
		ingest_fail(ix, m, h, WIRE_CONFLICT, snap->field, snap->why);
	} else if (sharded && snap && snap->recheck && id && !recheck_whole(snap, id)) {
		/*
		 * Not last_taken: only new elements keep it (ingest_expire), or a
		 * rank re-committing after each ack timeout beside a dead one would
		 * keep it, and itself, waiting for ever (a review).
		 */
		if (ingest_add_waiter(snap, m) < 0)	/* too many: told as before, unchecked */
			ack_duplicate(ix, m, h->run, h->step, h->tensors, h->ranks);
		return;	/* the parts still to come settle it (tensor), or the expiry */
	} else if (!snap && id && h->tensors != id->n) {
		/* no shard came (all skipped?): the count alone can still differ */
		struct wire_header a = *h;
		char why[WIRE_REASON_MAX + 1], counts[96];
		snprintf(counts, sizeof(counts), "it has %zu tensors, the commit says %llu", id->n,
			 (unsigned long long)h->tensors);
		ingest_conflict_reason(ix, m, why, sizeof(why), r, h->step, h->session, counts);
		ingest_note_conflict(ix, r, h->step, h->session, why, counts, 0);
		ingest_fail(ix, m, &a, WIRE_CONFLICT, "tensors", why);
	} else {
		ack_duplicate(ix, m, h->run, h->step, h->tensors, h->ranks);
	}
	/*
	 * Checked: the next re-send starts afresh. A sharded one's, refused,
	 * stays until it expires (RECHECK_SECONDS without a message), so that
	 * the other ranks' commits hear the same; one found the same went
	 * when it was whole (tensor).
	 */
	if (snap && snap->recheck && !sharded) {
		if (snap->n_waiters && !snap->conflict)	/* ranks of a sharded re-send (a review) */
			ingest_recheck_settle(ix, snap, id, 1);
		else if (snap->n_waiters)
			ingest_fail_waiters(ix, snap, WIRE_CONFLICT, snap->field, snap->why);
		ingest_unlink_snapshot(s, snap);
		snapshot_free(s, snap);
	} else if (snap && snap->recheck) {
		snap->last_seen = now_mono();
	}
}

/*
 * Every rank has committed snap (their commits gave their ranks) and it is
 * not whole: two ranks sent the same piece, or a piece of another's, or a
 * rank sent less than its part. No shard can come now, so the ranks are
 * told at once, where they waited limits.pending_timeout; a re-send of the
 * step is refused as after an expiry.
 */
static void all_ranks_committed(struct ingest *ix, struct snapshot *snap)
{
	char lacks[300], why[512];

	/*
	 * No piece came twice: the ranks' pieces leave elements out, which no
	 * rank sends (a trial's 262144 // 3 dropped the last one), and "the
	 * same piece" sent it looking for an overlap there was not
	 */
	snprintf(why, sizeof(why), "every rank (%llu of %llu) committed, and the snapshot is not whole: %s: %s",
		 (unsigned long long)snap->n_ranked, (unsigned long long)snap->ranks_of,
		 ingest_snapshot_lacks(snap, lacks, sizeof(lacks)),
		 snap->overlapped ? "do two ranks send the same piece, or one another's? (each sends only its own)"
				  : "no rank sent it: does the job's split leave elements out (size // ranks, when the "
				    "size is no multiple of them)?");
	log_warning("ingest: run '%s' step %lld: %s", snap->run->name, (long long)snap->step, why);
	ingest_fail_waiters(ix, snap, WIRE_INCOMPLETE, "ranks", why);
	ingest_note_expired(ix, snap, now_mono(), why);
	ix->st->count.dropped++;
	ingest_drop_snapshot(ix, snap);
}

/*
 * A commit that would wait for a step refused to its waiting ranks a
 * moment ago (it expired, or every rank committed and it was not whole),
 * from a publisher that had committed this run before it (run_knew_session): a
 * rank that missed the refusal (its ack timeout had closed its socket)
 * sends it again. It gets the refusal now, and the shards its re-send
 * brought are dropped. A new job's publishers (sessions never seen: a job
 * restarted after a rank died) are not refused: their commits wait as
 * usual, and their step is not dropped here.
 */
static void refuse_expired(struct ingest *ix, const struct frames *m, const struct wire_header *h,
			   struct snapshot *snap, struct expired_step *gone)
{
	double ago = now_mono() - gone->at;

	if (!gone->said)
		log_notice("ingest: run '%s' step %lld: sent again by a rank %.0f s after it was refused "
			   "to the ranks that waited; refused at once, as then: %s", gone->run,
			   (long long)gone->step, ago, gone->why);
	gone->said = 1;
	refuse_resent(ix, m, h, gone);
	if (snap && !snap->n_waiters)	/* a new job's commits wait for it: theirs stays */
		ingest_drop_snapshot(ix, snap);
}

/*
 * Is h (a commit, or a shard) a re-send of a step refused to its ranks a
 * moment ago, from a publisher of the job it was refused to? Then *gone is
 * that refusal. A publisher that gives no session counts as that job's.
 */
static int resent_refused(struct ingest *ix, const struct run *r, const struct wire_header *h,
			  struct expired_step **gone)
{
	*gone = ingest_find_expired(ix, h->run, h->step);
	if (!*gone)
		return 0;
	if (!r || run_knew_session(r, h->session, (*gone)->sessions_then))
		return 1;
	if (!(*gone)->said_new && h->type == WIRE_COMMIT) {	/* a publisher never seen: a new job's */
		log_notice("ingest: run '%s' step %lld: sent again %.0f s after it was refused to the ranks "
			   "that waited, by a publisher that had not committed this run by then (a new job?): "
			   "taken as new", (*gone)->run, (long long)(*gone)->step, now_mono() - (*gone)->at);
		(*gone)->said_new = 1;
	}
	return 0;
}

static void commit_one(struct ingest *ix, const struct frames *m, const struct wire_header *h);

#define CLAIM_LIVE_S 60.0	/* a rank's publisher that committed this recently still publishes */

/*
 * Rank rank of run r committed by two sessions, other and session: said
 * once for each pair of sessions (a job with the same rank twice, at every
 * step, is said once; a job restarted at once and then one with the same
 * rank twice are each said), whichever path saw it: a step that waits
 * with it (commit_ranks_note), or a commit of any step (note_claim). In
 * the log, and to the job: a pong with a notice, which the library prints
 * (a trial's job heard of it only at the expiry, limits.pending_timeout
 * later), to every rank waiting for snap, or to the commit m without one.
 */
static void say_rank_twice(struct ingest *ix, const struct frames *m, const struct snapshot *snap,
			   struct run *r, int64_t step, int64_t rank, uint64_t ranks, uint64_t other,
			   uint64_t session)
{
	if (r->claims_said_pair == (other ^ session))
		return;
	r->claims_said_pair = other ^ session;
	struct wire_header *p = calloc(1, sizeof(*p));
	if (p) {	/* out of memory: the log alone */
		p->type = WIRE_PONG;
		p->step = -1;
		snprintf(p->notice, sizeof(p->notice), "run '%.200s' step %lld: rank %lld of %llu committed by two "
			 "publishers at once: two ranks of this job given the same rank (rank=, or RANK)? Each "
			 "rank gives its own; with the same rank twice, a step missing a part expires after "
			 "limits.pending_timeout (%lld s), naming the rank that never committed. (A job "
			 "restarted while its last ranks waited sends every rank's part again: then nothing is "
			 "wrong.)", r->name,
			 (long long)step, (long long)rank, (unsigned long long)ranks,
			 (long long)ix->cfg->limits.pending_timeout);
		for (size_t i = 0; snap && i < snap->n_waiters; i++) {
			struct frames w = WAITER_FRAMES(&snap->waiters[i]);
			ingest_reply(ix, &w, p);
		}
		if (!snap)
			ingest_reply(ix, m, p);
		free(p);
	}
	log_warning("ingest: run '%s' step %lld: rank %lld of %llu committed by a second publisher (another "
		    "session): two ranks of the job given the same rank= (RANK), or a job restarted at once? "
		    "Each rank gives its own: with the same rank twice, a step missing a part expires after "
		    "limits.pending_timeout naming the wrong rank (its parts whole, it is stored); a restarted "
		    "job sends every rank's part again, and nothing is wrong", r->name,
		    (long long)step, (long long)rank, (unsigned long long)ranks);
}

/*
 * A commit that gives its rank and session. Two sessions that claim one
 * rank, the earlier coming back within CLAIM_LIVE_S, are two publishers
 * given the same rank= (a restarted job's old session never comes back).
 * Said once for the pair, whatever became of its steps: a step whose
 * pieces came whole anyway was stored before the second claim was looked
 * at, and a trial's job went on with the same rank twice, said only by
 * chance (when a step waited, commit_ranks_note).
 */
static void note_claim(struct ingest *ix, const struct frames *m, struct run *r, const struct wire_header *h)
{
	/* sized by the rank, not by the count a commit says (a review: 1 MiB a run for one message) */
	if (h->rank < 0 || !h->session || h->rank >= RUN_CLAIMS_MAX || (uint64_t)h->rank >= h->ranks)
		return;
	if (r->n_claims <= (uint64_t)h->rank) {
		uint64_t n = (uint64_t)h->rank + 1;
		struct rank_claim *v = realloc(r->claims, n * sizeof(*v));
		if (!v)
			return;	/* out of memory: not said, as before */
		memset(v + r->n_claims, 0, (n - r->n_claims) * sizeof(*v));
		r->claims = v;
		r->n_claims = n;
	}
	struct rank_claim *c = &r->claims[h->rank];
	double t = now_mono();
	if (h->session == c->cur) {
		c->at_cur = t;
		return;
	}
	if (h->session == c->prev && t - c->at_cur < CLAIM_LIVE_S)	/* back: both publish */
		say_rank_twice(ix, m, NULL, r, h->step, h->rank, h->ranks, c->cur, h->session);
	c->prev = c->cur;
	c->cur = h->session;
	c->at_cur = t;
}

/*
 * A commit; then its publisher's session is known to the run, so that a
 * re-send of a step refused to that job is told from a new job's commit
 * (resent_refused asks before, commit_one's paths need not).
 */
static void commit(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	struct run *before = state_run(ix->st, h->run, 0);
	/* a step it had: a duplicate, or a re-check of a re-run's step, says nothing of whose job this is */
	int had = before && run_is_durable(before, h->step);
	/*
	 * Its first commit of the run sends step 0, the run's first, again: a
	 * job started over from training's start (struct run's reruns). Only
	 * step 0: a run first published at step 1000 is sent 1000 again first
	 * by a job resumed from a checkpoint at 500 too, which must go on
	 * (a review's).
	 */
	int from_start = had && h->step == 0 && before->durable[0] == 0 && !run_knows_session(before, h->session);
	commit_one(ix, m, h);
	struct run *r = state_run(ix->st, h->run, 0);
	if (!r)
		return;
	if (from_start)
		run_note_from_start(r, h->session, h->step);
	/*
	 * A re-run: refused at a step it had not sent before, the first
	 * job's, so not its own step count going back. Asked of its own
	 * steps, not of its session having had a commit taken: a re-run with
	 * a step new to the run before its first conflict (0 a duplicate, 5
	 * new, 10 refused) went on to have 30 and 40 stored (a review's).
	 * And only a job that walked the run from step 0, skipping none of
	 * its steps, towards a first job's history past the conflict: one
	 * that published step 0 and then resumed from a checkpoint at 500
	 * skipped 10 to 500 and goes on; a run seeded by `wdrift send` of
	 * step 0 alone, whose training's step 0 differs, has nothing of a
	 * first job to keep (a review's, both).
	 */
	struct run_rerun *rr = run_rerun_of(r, h->session);
	if (rr && had && ix->conflict_replied && run_rerun_conflict(r, rr, h->step)) {
		char what[NAME_MAX + 64];
		rr->conflict = h->step;	/* a re-run: its later new steps are refused (refuse_rerun) */
		snprintf(what, sizeof(what), "run '%s' re-run by a job (session %016llx)", r->name,
			 (unsigned long long)h->session);
		ingest_record(ix, record_rerun(r->name, h->session, rr->from, h->step), what);	/* and after a restart */
	}
	if (rr && !ix->conflict_replied && h->step > rr->sent)
		rr->sent = h->step;
	run_note_session(r, h->session);
	if (!ix->conflict_replied && !had)	/* a re-run's session, refused, is not the run's own job */
		run_note_clean_session(r, h->session);
	if (h->rank >= 0 && r->dead_rank == (uint64_t)h->rank + 1)
		r->dead_rank = 0;	/* the rank said dead commits again: a later lag of it is news */
	note_claim(ix, m, r, h);
	/*
	 * Commits of one step that say two counts of ranks (a job's ranks=
	 * mistyped on some), whatever became of the step: said once for the
	 * run. A step whose pieces made it whole anyway was stored in silence
	 * (a trial's), and the next one may not be so lucky.
	 */
	if (h->ranks && r->ranks_step == h->step && r->ranks_of_step && r->ranks_of_step != h->ranks &&
	    !r->ranks_differ_said) {
		r->ranks_differ_said = 1;
		char who[48] = "";
		if (h->rank >= 0)
			snprintf(who, sizeof(who), " (the latter rank %lld's)", (long long)h->rank);
		log_warning("ingest: run '%s' step %lld: commits say ranks %llu and %llu%s: every rank of a job "
			    "gives the job's count (ranks=, WORLD_SIZE); the step is stored once its parts make "
			    "it whole, and a rank missing is then named by none. A job restarted with another "
			    "world size, sending that step again, does this too: then nothing is wrong. Said "
			    "once for the run, and to the ranks in their acks", r->name, (long long)h->step,
			    (unsigned long long)r->ranks_of_step, (unsigned long long)h->ranks, who);
	}
	if (h->ranks) {
		r->ranks_step = h->step;
		r->ranks_of_step = h->ranks;
	}
}

/*
 * A new step from a job that sent the run's step 0 again and had a
 * conflict at a step it had not sent (a re-run under the name: struct
 * run's reruns): refused whole as a conflict, so that the run holds one
 * job's snapshots. Taken, its steps the run lacked were stored after the
 * first job's (a trial's re-run that caught the error went on so), and
 * drift's rows, said to be the first job's, mixed both. One rank's only
 * (ranks <= 1): a sharded re-run's ranks do not all hear their conflict
 * in a commit's reply (commit_durable's waiters), and refusing some
 * ranks' parts would leave the step to expire. Its tensors held for the
 * step go, unless commits wait on the step: another job's ranks, which
 * are no re-run and keep it (a review's).
 */
static void refuse_rerun(struct ingest *ix, const struct frames *m, const struct wire_header *h, struct run *r,
			 struct snapshot *snap, struct run_rerun *rr)
{
	char why[WIRE_REASON_MAX + 1], what[64];

	ingest_rerun_reason(ix, m, why, sizeof(why), r, h->step, rr);
	snprintf(what, sizeof(what), "a re-run's later step (its step %lld refused)", (long long)rr->conflict);
	/* its own way out, logged whole once, not "as said at" the conflict before */
	ingest_note_conflict(ix, r, h->step, h->session, why, what, !rr->said);
	rr->said = 1;
	ingest_fail(ix, m, h, WIRE_CONFLICT, "step", why);
	if (snap && !snap->n_waiters)
		ingest_drop_snapshot(ix, snap);
}

static void commit_one(struct ingest *ix, const struct frames *m, const struct wire_header *h)
{
	struct state *s = ix->st;
	struct run *r = state_run(s, h->run, 0);
	char why[256];

	s->count.commits++;
	if (r && run_is_durable(r, h->step))
		return commit_durable(ix, m, h, r);
	struct snapshot *snap = r ? find_snapshot(s, r, h->step) : NULL;
	struct run_rerun *rr = r ? run_rerun_of(r, h->session) : NULL;
	if (rr && rr->conflict != RUN_NO_CONFLICT && h->ranks <= 1 && !(snap && (snap->committing || snap->conflict)))
		return refuse_rerun(ix, m, h, r, snap, rr);
	/* two counts of ranks among the step's commits, whichever path each takes: said in the acks */
	if (snap && h->ranks && !snap->ranks_said)
		snap->ranks_said = h->ranks;
	else if (snap && h->ranks && snap->ranks_said != h->ranks)
		snap->ranks_differ = h->ranks;
	if (snap && snap->committing) {	/* being stored: this one gets the ack too */
		if (ingest_add_waiter(snap, m) < 0)
			ingest_fail(ix, m, h, WIRE_TOO_MANY, "ranks", "too many publishers wait for this snapshot");
		return;
	}
	if (snap && snap->conflict) {	/* refused whole (refuse_whole) */
		ingest_fail(ix, m, h, ingest_refused_code(snap), snap->field, snap->why);
		/*
		 * One rank's commit ends it; with several, another may still be
		 * sending its shards, which would start the step afresh: the
		 * marker stays for them, and expires quietly (ingest_expire).
		 */
		if (h->ranks <= 1)
			ingest_drop_snapshot(ix, snap);	/* its waiters were told, when it was refused */
		else
			snap->last_seen = now_mono();
		return;
	}
	if (snap && snap->want && snap->want != h->tensors) {
		snprintf(why, sizeof(why), "commit says %llu tensors, an earlier commit of this step %llu: "
			 "every rank gives the whole snapshot's count", (unsigned long long)h->tensors,
			 (unsigned long long)snap->want);
		return ingest_fail(ix, m, h, WIRE_BAD_FIELD, "tensors", why);
	}
	if (snap && ingest_snapshot_complete(snap, h->tensors, why, sizeof(why))) {
		if (ingest_add_waiter(snap, m) < 0)
			return ingest_fail(ix, m, h, WIRE_TOO_MANY, "ranks", "too many publishers wait for "
					   "this snapshot");
		snap->want = h->tensors;
		try_store(ix, snap);
		return;
	}
	if (!snap)
		snprintf(why, sizeof(why), "commit says %llu tensor%s, 0 received",
			 (unsigned long long)h->tensors, h->tensors == 1 ? "" : "s");
	if (h->ranks <= 1)
		return ingest_fail(ix, m, h, WIRE_INCOMPLETE, "tensors", why);
	struct expired_step *gone;
	if (resent_refused(ix, r, h, &gone))
		return refuse_expired(ix, m, h, snap, gone);
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
	if (ingest_add_waiter(snap, m) < 0)
		return ingest_fail(ix, m, h, WIRE_TOO_MANY, "ranks", "too many publishers wait for this "
				   "snapshot");
	commit_ranks_part(snap, h->session, 1);
	/*
	 * Ranks that disagree on their number (a job's ranks= mistyped on
	 * some): not refused, as the step may still come whole from the parts
	 * every rank sends (a trial's was stored, while the rank refused heard
	 * "never stored" and failed its job); said in the log (commit) and in
	 * every rank's ack. Such a commit names no rank: the count it gives
	 * cannot say which ranks are missing. The step is stored once whole.
	 */
	if (snap->ranks_said && snap->ranks_said != h->ranks) {	/* ranks_differ: set above */
		snap->want = h->tensors;
		snap->last_seen = now_mono();
		return;
	}
	snap->ranks_said = h->ranks;
	/* out of memory: not known, as before */
	if (h->rank >= 0 && !snap->first_ranked)
		snap->first_ranked = now_mono();
	if (h->rank >= 0 && commit_ranks_note(snap, (uint64_t)h->rank, h->ranks, h->session) == 1 &&
	    snap->n_twice == 1)	/* the other claimer: the rank's last commit before this one (note_claim) */
		say_rank_twice(ix, m, snap, r, snap->step, h->rank, h->ranks, (uint64_t)h->rank < r->n_claims ?
			       r->claims[h->rank].cur : 0, h->session);
	snap->want = h->tensors;
	snap->last_seen = now_mono();
	/*
	 * Every rank committed and it is not whole: no shard can come, unless
	 * one of its shards was refused for now (budget full, ...) and its rank
	 * sends it again: then it waits, as before ranks were known.
	 */
	if (commit_ranks_all(snap) && !(r->shard_refused && r->shard_refused_step == snap->step) &&
	    !commit_ranks_parts_pending(snap))
		all_ranks_committed(ix, snap);
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
	ix->conflict_replied = 0;
	seen->type = -1;
	seen->step = -1;
	seen->run[0] = 0;
	seen->conflict = 0;
	seen->session = seen->ranks = 0;
	seen->rank = -1;
	if (!h)
		return;
	if (m->n < 2) {
		ingest_fail(ix, m, NULL, WIRE_BAD_FRAME, "", "message has no header frame");
		goto out;
	}
	if (m->n == 3 && m->len[1] == 0) {
		/*
		 * A REQ socket's envelope: the CLI (or a control client) given
		 * this endpoint. A reply without the delimiter is dropped by REQ,
		 * and it waited its whole timeout for "not answering"; this one,
		 * in the control protocol's form, it reads and prints.
		 */
		struct wire_error req = { .code = WIRE_BAD_FRAME };
		snprintf(req.reason, sizeof(req.reason), "a REQ socket's request: a CLI given listen.ingest");
		ix->st->count.errors[WIRE_BAD_FRAME]++;
		ingest_say_refusal(ix, NULL, &req);
		seen->type = INGEST_SEEN_REQUEST;
		ix->sink.send(ix->sink.ctx, m->data[0], m->len[0], 1,
			      "{\"v\":1,\"ok\":false,\"error\":\"this is wdriftd's ingest socket "
			      "(listen.ingest), where publishers send snapshots: the CLI's requests go to "
			      "its control socket (listen.control)\"}");
		goto out;
	}
	if (wire_parse(m->data[1], m->len[1], &lim, h, &err) < 0) {
		ingest_reply_error(ix, m, h, &err);
		goto out;
	}
	seen->type = (int)h->type;
	seen->step = h->step;
	if (h->type == WIRE_COMMIT) {
		seen->session = h->session;
		seen->ranks = h->ranks;
		seen->rank = h->rank;
	}
	snprintf(seen->run, sizeof(seen->run), "%.*s", NAME_MAX, h->run);
	if (h->type != WIRE_PING && strlen(h->run) > NAME_MAX) {
		/* the run names a directory of the spool: it could never be stored */
		char why[128];
		snprintf(why, sizeof(why), "run name is %zu bytes; at most %d, as it names a spool "
			 "directory", strlen(h->run), NAME_MAX);
		ingest_fail(ix, m, h, WIRE_BAD_FIELD, "run", why);
	} else if (h->type != WIRE_TENSOR && m->n != 2) {
		ingest_fail(ix, m, h, WIRE_BAD_FRAMES, "frames", "only tensor messages carry payload frames");
	} else {
		switch (h->type) {
		case WIRE_HELLO: hello(ix, m, h); break;
		case WIRE_TENSOR: tensor(ix, m, h); break;
		case WIRE_COMMIT: commit(ix, m, h); break;
		case WIRE_PING: {
			struct wire_header p = { .type = WIRE_PONG, .step = -1 };
			ingest_reply(ix, m, &p);
			break;
		}
		default:
			ingest_fail(ix, m, h, WIRE_BAD_FIELD, "type", "that message type goes from the daemon");
			break;
		}
	}
out:
	seen->conflict = ix->conflict_replied;
	free(h);
}

int64_t ingest_waits_for_rank(struct ingest *ix, const char *run, uint64_t rank, uint64_t ranks)
{
	struct snapshot *low = NULL;

	/* not a step with a rank committed twice: said at once (say_rank_twice), the likelier cause */
	for (struct snapshot *p = ix->st->pending; p; p = p->next)
		if (!p->committing && !p->recheck && !p->conflict && !p->n_twice && !strcmp(p->run->name, run) &&
		    commit_ranks_lacks(p, rank, ranks) && (!low || p->step < low->step))
			low = p;
	if (!low)
		return -1;
	low->lag_said = 1;
	low->run->dead_rank = rank + 1;	/* later steps lack it too: no lag line for them (a review) */
	/*
	 * The ranks that wait are told too, once (the caller says a death once):
	 * a trial's surviving rank heard only "is every rank publishing its
	 * part?" at its stall warning, and the rank's number in the daemon's
	 * log alone.
	 */
	struct wire_header *p = calloc(1, sizeof(*p));
	if (p) {	/* out of memory: the log alone */
		double left = (double)ix->cfg->limits.pending_timeout - snapshot_idle(low, now_mono());
		p->type = WIRE_PONG;
		p->step = -1;
		snprintf(p->notice, sizeof(p->notice), "run '%.200s' step %lld waits for rank %llu of %llu, whose "
			 "connection closed and has not come back: a rank that died? This rank's part waits with "
			 "the step until limits.pending_timeout (%lld s) expires it, in %.0f s, and is then "
			 "refused; a job restarted sends the step again (`wdrift status` shows the wait)",
			 low->run->name, (long long)low->step, (unsigned long long)rank, (unsigned long long)ranks,
			 (long long)ix->cfg->limits.pending_timeout, left > 0 ? left : 0);
		for (size_t i = 0; i < low->n_waiters; i++) {
			struct frames w = WAITER_FRAMES(&low->waiters[i]);
			ingest_reply(ix, &w, p);
		}
		free(p);
	}
	return low->step;
}

void ingest_lag_tick(struct ingest *ix, double timeout, ingest_death_fn *death_coming, void *ctx)
{
	double t = now_mono(), after = ingest_lag_after(timeout);
	char lag[240];

	for (struct snapshot *p = ix->st->pending; p; p = p->next) {
		/*
		 * Not while elements still come (a rank streaming a large tensor:
		 * shards carry no rank), nor for a rank whose death is said or
		 * about to be (peers.c), at this step or a later one.
		 */
		if (p->lag_said || p->committing || p->recheck || p->conflict || !p->first_ranked ||
		    t - p->first_ranked < after || t - p->last_taken < after ||
		    !commit_ranks_not_yet(p, lag, sizeof(lag)) || death_coming(ctx, p))
			continue;
		if (p->run->dead_rank && commit_ranks_lacks(p, p->run->dead_rank - 1, p->ranks_of)) {
			p->lag_said = 1;
			continue;
		}
		/*
		 * A rank committed by two publishers: said at once (say_rank_twice),
		 * the likelier cause of the one lacking than a rank that never
		 * started, which a trial's log said 16 s after it
		 */
		if (p->n_twice) {
			p->lag_said = 1;
			continue;
		}
		p->lag_said = 1;
		log_warning("ingest: run '%.200s' step %lld waits for %s, which %s committed nothing of it %.0f s "
			    "after the first of the %llu that did: a rank that never started, is stuck, or died "
			    "before it connected? Their commits wait until limits.pending_timeout (%.0f s) expires "
			    "the step; `wdrift status` shows it", p->run->name, (long long)p->step, lag,
			    strncmp(lag, "ranks ", 6) ? "has" : "have", t - p->first_ranked,
			    (unsigned long long)p->n_ranked, timeout);
	}
}
