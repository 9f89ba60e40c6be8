/*
 * publisher_send.c: the publisher's sending thread, the one protocol
 * client of libwdrift (docs/protocol.md): it owns the ZeroMQ socket, sends
 * the oldest queued snapshot, waits for its durable ack, and only then
 * removes it. A snapshot whose ack never came (a timeout, a daemon
 * restart) is simply sent again on a fresh socket, in the one retry loop
 * (pub_sender_main): re-sends are idempotent on the daemon. The pause
 * between tries grows while the daemon does not answer, so an absent one
 * costs no spinning; push-back that passes with time is sent again soon.
 * One snapshot is in flight at a time.
 *
 * Every wait is cut in SEND_SLICE_MS slices, so that close() is seen
 * within one, and the stall warning is checked in each.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "crc32.h"
#include "log.h"
#include "publisher_internal.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define SEND_SLICE_MS 100	/* ZMQ_SNDTIMEO and ZMQ_RCVTIMEO: how soon close() is seen */
#define IDLE_TICK_MS 250	/* how often an idle connection's monitor is read */

/*
 * Says what stall_check or refused() left in p->say. Called without the
 * lock: a log handler may call back into the publisher, and stderr may
 * block, neither of which may hold up the caller's commit.
 */
/*
 * An ack's or an unasked pong's notice, not the one said last: said on
 * stderr, and kept for wd_publisher_last_notice (a trial's job could not
 * tell from code that its names matched none of the baseline's).
 */
static void pub_said_notice(struct wd_publisher *p, const char *notice)
{
	snprintf(p->ack_notice, sizeof(p->ack_notice), "%s", notice);
	pthread_mutex_lock(&p->lock);
	snprintf(p->last_notice, sizeof(p->last_notice), "%s", notice);
	pthread_mutex_unlock(&p->lock);
	wd_log(WD_LOG_WARNING, "publisher: wdriftd at %s: %s", p->where, notice);
}

static void say_now(struct wd_publisher *p)
{
	char msg[sizeof(p->say)];

	pthread_mutex_lock(&p->lock);
	snprintf(msg, sizeof(msg), "%s", p->say);
	p->say[0] = 0;
	pthread_mutex_unlock(&p->lock);
	if (msg[0])
		wd_log(WD_LOG_WARNING, "%s", msg);
}

/*
 * Warns once when snapshots have waited stall_warn_ms with no ack, and
 * once more when the daemon answers one for good (answered: ANSWER_ACK or
 * ANSWER_REFUSAL, 0 for a check), through p->say. "Again" only when the
 * daemon had acked (or answered) before the stall: a daemon started after
 * the job acks its first snapshot. Called with the lock held.
 */
enum { ANSWER_ACK = 1, ANSWER_REFUSAL };
static void stall_check(struct wd_publisher *p, int answered)
{
	double t = pub_now();
	if (answered) {
		if (answered == ANSWER_ACK)
			p->ranks_wait_told = 0;
		if (p->stalled && p->stall_quiet) {
			/* not said, nor is its end: a refusal's own line says it, as the one before */
		} else if (p->stalled && p->ranks_at_stall && answered == ANSWER_REFUSAL) {
			/* it answered all along: what ended was the wait for the other ranks */
			snprintf(p->say, sizeof(p->say), "publisher: run '%.200s': the wait at %.400s for the "
				 "other ranks' parts ended after %.0f s, with the refusal above; %llu snapshot%s "
				 "dropped meanwhile, the refused one among them", p->run, p->where, t - p->waiting_since,
				 (unsigned long long)(p->st.dropped - p->dropped_at_stall),
				 p->st.dropped - p->dropped_at_stall == 1 ? "" : "s");
			p->ranks_wait_told = 1;
			p->told_wait = t - p->waiting_since;
		} else if (p->stalled) {	/* a refusal was said on its own line: no "acks" */
			snprintf(p->say, sizeof(p->say), "publisher: run '%.200s': %.400s %s after %.0f s%s; "
				 "%llu snapshot%s dropped meanwhile%s", p->run, p->where,
				 answered == ANSWER_ACK ? (p->acked_at_stall ? "acks again" : "acks its first snapshot")
				 : p->heard_at_stall ? "answers again" : "answers", t - p->waiting_since,
				 answered == ANSWER_ACK ? "" : ", with the refusal above",
				 (unsigned long long)(p->st.dropped - p->dropped_at_stall),
				 p->st.dropped - p->dropped_at_stall == 1 ? "" : "s",
				 answered == ANSWER_ACK ? "" : ", the refused one among them");
		}
		p->stalled = 0;
		p->stall_quiet = 0;
		p->waiting_since = t;
		return;
	}
	double waited = t - p->waiting_since;
	if (p->opts.stall_warn_ms < 0 || !p->head || waited * 1000 < p->opts.stall_warn_ms)
		return;
	/*
	 * A quiet stall is said after all once it has lasted twice the wait
	 * that ended in the refusal before it, and a second more: the daemon's
	 * expiry did not come this time (it hangs, or the network does), and
	 * a job must not wait without a word (a review).
	 */
	if (p->stalled && !(p->stall_quiet && waited > 2 * p->told_wait + 1))
		return;
	int answers = p->last_heard >= p->waiting_since;
	/* a rank's commit waits for the others' shards with no reply: connected is the answer */
	int ranks_wait = !answers && !p->diagnosis[0] && p->opts.ranks > 1 && p->st.connected;
	if (!p->stalled) {
		p->stalled = 1;
		p->dropped_at_stall = p->st.dropped;
		p->acked_at_stall = p->st.acked;
		p->heard_at_stall = p->last_heard > 0;
		/* either way the hint is the other ranks: what ends the wait is theirs, not the daemon's */
		p->ranks_at_stall = ranks_wait || (answers && !p->pushback[0] && p->opts.ranks > 1);
		/* a dead rank's next step, waiting as the last one did: its refusal's short line will say it */
		p->stall_quiet = p->ranks_at_stall && p->ranks_wait_told;
		if (p->stall_quiet)
			return;
	}
	p->stall_quiet = 0;
	snprintf(p->say, sizeof(p->say), "publisher: run '%.200s': no ack from %.400s for %.0f s; "
		 "%llu snapshot%s waiting (%s): %s", p->run, p->where, t - p->waiting_since,
		 (unsigned long long)p->st.queued, p->st.queued == 1 ? "" : "s",
		 answers ? "it answers, but acks nothing"
		 : ranks_wait ? "connected, the snapshot not yet whole"
		 : p->diagnosis[0] && p->unreachable == PUB_REACHED ? "reached, but not taken" : "no answer at all",
		 ranks_wait ? "is every rank publishing its part (ranks > 1)?"
		 /* our own words, the paths of a socket named in them whole (a trial's was cut) */
		 : !answers ? (p->diagnosis[0] ? wd_log_clip((char[1100]){ 0 }, 1100, p->diagnosis, 1000)
			       : "is wdriftd running and listening there?")
		 : p->pushback[0] ? p->pushback
		 : p->opts.ranks > 1 ? "is every rank publishing its part (ranks > 1)?"
		 : "is its memory budget full (wdrift status)?");
}

/* One wait slice's checks; nonzero when the daemon closed the socket's connection. */
static int stall_tick(struct wd_publisher *p)
{
	int lost = pub_peer_tick(p);	/* first: the stall warning then has its reason */
	pthread_mutex_lock(&p->lock);
	stall_check(p, 0);
	pthread_mutex_unlock(&p->lock);
	say_now(p);
	return lost;
}

/*
 * Queues one frame, waiting in send-timeout slices (SEND_SLICE_MS) while
 * ZeroMQ has no room: the daemon's push-back, or no connection at all
 * (ZeroMQ drops a peer that refused the handshake for good, and a send
 * with no timeout would then wait forever, and close() with it). Gives up,
 * -1, on an error, on close(), once *waited reaches the ack timeout, or
 * when the daemon closed the connection.
 */
static int send_frame(struct wd_publisher *p, void *s, const void *data, size_t len, int flags,
		      int *waited)
{
	while (zmq_send(s, data, len, flags) < 0) {
		if (errno != EAGAIN || __atomic_load_n(&p->abort_now, __ATOMIC_ACQUIRE) ||
		    *waited >= p->opts.ack_timeout_ms)
			return -1;
		*waited += SEND_SLICE_MS;
		if (stall_tick(p))
			return -1;
	}
	return 0;
}

/*
 * Sends a header frame (built from h) and the payload in ≤ 64 MiB frames.
 * A failure may leave half a message queued: the caller drops the socket.
 */
static int send_message(struct wd_publisher *p, void *s, const struct wire_header *h,
			const void *data, size_t bytes, int *waited)
{
	char *hdr = wire_build(h);
	int r = hdr && send_frame(p, s, hdr, strlen(hdr), bytes ? ZMQ_SNDMORE : 0, waited) == 0 ? 0 : -1;
	free(hdr);
	for (size_t off = 0; !r && off < bytes; off += WIRE_MAX_FRAME) {
		size_t len = bytes - off < WIRE_MAX_FRAME ? bytes - off : WIRE_MAX_FRAME;
		r = send_frame(p, s, (const char *)data + off, len, off + len < bytes ? ZMQ_SNDMORE : 0,
			       waited);
	}
	return r;
}

/*
 * The most payload bytes of one tensor message: a frame (64 MiB), or the
 * daemon's limits.max_message when its welcome said less. A shard larger
 * than that goes in several messages, each a shard of its own.
 */
static uint64_t message_bytes(const struct wd_publisher *p)
{
	uint64_t m = WIRE_MAX_FRAME;
	return p->max_message && p->max_message < m ? p->max_message : m;
}

/* Sends every shard of one call's tensor; checksums them the first time. */
static int send_tensor(struct wd_publisher *p, void *s, struct wire_header *h, int64_t step,
		       struct pub_tensor *t, int *waited)
{
	size_t esize = wd_dtype_size(t->dtype);
	const char *at = t->data;
	uint64_t chunk = message_bytes(p) / esize;	/* elements of one message */

	if (!chunk)
		chunk = 1;
	if (!t->crc_done) {
		for (size_t i = 0; i < t->n_shards; i++) {
			t->crc[i] = wd_crc32(0, at, t->shard[i][1] * esize);
			at += t->shard[i][1] * esize;
		}
		t->crc_done = 1;
		at = t->data;
	}
	h->type = WIRE_TENSOR;
	h->session = p->session;	/* a shard of a refused step, re-sent, is told from a new job's */
	snprintf(h->run, sizeof(h->run), "%s", p->run);
	snprintf(h->name, sizeof(h->name), "%s", t->name);
	h->step = step;
	h->dtype = t->dtype;
	h->ndims = t->ndims;
	memcpy(h->shape, t->shape, (size_t)t->ndims * sizeof(h->shape[0]));
	h->total = t->total;
	for (size_t i = 0; i < t->n_shards; i++) {
		if (!t->shard[i][1])
			continue;	/* nothing of it here: named only, for the commit's count */
		for (uint64_t done = 0; done < t->shard[i][1];) {
			uint64_t n = t->shard[i][1] - done < chunk ? t->shard[i][1] - done : chunk;
			h->offset = t->shard[i][0] + done;
			h->count = n;
			/* the whole shard's CRC is kept across re-sends; a part's is cheap beside the send */
			h->crc32 = n == t->shard[i][1] ? t->crc[i] : wd_crc32(0, at, n * esize);
			if (send_message(p, s, h, at, n * esize, waited) < 0)
				return -1;
			at += n * esize;
			done += n;
		}
	}
	return 0;
}

enum outcome { ACKED, REFUSED, RETRY };

/*
 * A re-send of one snapshot that the daemon failed to store for a cause
 * other than a full disk or memory is tried this often, then given up:
 * such a cause (a name HDF5 cannot hold, a broken storage.dir) does not
 * pass with time, and the snapshots behind it must not wait forever.
 */
#define INTERNAL_TRIES 3

#define WELCOME_WAIT_MS 1000	/* for a fresh connection's welcome, before a snapshot */

/*
 * Which errors a re-send cannot fix. over_window, a plain incomplete
 * (shards dropped to free the budget) and too_many pending snapshots or
 * runs pass with time; so does internal with field "disk" or "memory"
 * (room is made). internal of another cause ("storage") is final at its
 * INTERNAL_TRIES-th time. conflict is final: the (run, step) is durable
 * with other content, or a shard overlaps others with other bytes; so is
 * bad_name. incomplete with field "ranks": the snapshot expired waiting
 * for the other ranks' shards.
 */
static int error_is_final(const struct wire_header *in, struct pub_snapshot *snap)
{
	switch (in->error.code) {
	case WIRE_OVER_WINDOW:
		return 0;
	case WIRE_INTERNAL:
		if (!strcmp(in->error.field, "disk") || !strcmp(in->error.field, "memory"))
			return 0;
		return ++snap->internal_tries >= INTERNAL_TRIES;
	case WIRE_INCOMPLETE:
		return !strcmp(in->error.field, "ranks");
	case WIRE_TOO_MANY:	/* pending snapshots and runs come and go; a snapshot's size does not */
		return !strcmp(in->error.field, "name") || !strcmp(in->error.field, "offset");
	default:
		return 1;
	}
}

/*
 * Whether a refusal was said already, as far as the user needs it: the
 * same code and the same key as the refusal last logged whole. A
 * conflict's key is its hint, the way out (the reason's last " (...)"): a
 * re-run has each step refused alike, and the reasons name their steps.
 * Another code's key is its whole reason: a dead rank has each later step
 * expire with the same words. Keeps this one as said when not. Under the
 * lock.
 */
static int said_before(struct wd_publisher *p, const struct pub_snapshot *snap, const struct wire_header *in)
{
	const char *key = in->error.reason;

	if (in->error.code == WIRE_CONFLICT) {
		key = strrchr(key, '(');
		key = key ? key : "";
	}
	/* no key (an older daemon's conflict, with no hint): each one whole, as nothing tells them alike */
	if (p->said_code == (int)in->error.code && key[0] && !strncmp(key, p->said_key, sizeof(p->said_key)))
		return 1;
	p->said_code = (int)in->error.code;
	p->said_step = snap->step;
	snprintf(p->said_key, sizeof(p->said_key), "%s", key);
	return 0;
}

/* Keeps a refusal's message for wd_publisher_refusals and says it once. */
static void refused(struct wd_publisher *p, const struct pub_snapshot *snap,
		    const struct wire_header *in)
{
	pthread_mutex_lock(&p->lock);
	/* the tensor, unless the daemon's reason already names it */
	char quoted[220];
	snprintf(quoted, sizeof(quoted), "'%.200s'", in->name);
	int named = !in->name[0] || strstr(in->error.reason, quoted);
	char tries[48] = "";
	if (in->error.code == WIRE_INTERNAL)
		snprintf(tries, sizeof(tries), " (given up after %d tries)", snap->internal_tries);
	/* escaped: a name with a newline is what the daemon refuses, and must not break the line */
	snprintf(p->refusal, sizeof(p->refusal), "run '%.100s' step %lld refused: %s: %.300s%s%.220s%s%s",
		 PUB_CLIP(p->run), (long long)snap->step, wire_code_name(in->error.code),
		 PUB_CLIP(in->error.reason), named ? "" : " (tensor '", named ? "" : PUB_CLIP(in->name),
		 named ? "" : "')", tries);
	p->refusals++;
	int conflict = in->error.code == WIRE_CONFLICT;
	if (conflict) {
		p->st.conflicts++;
		memcpy(p->conflict, p->refusal, sizeof(p->conflict));
	} else {
		p->st.refused++;
	}
	if (said_before(p, snap, in))
		snprintf(p->say, sizeof(p->say), "publisher: run '%.100s' step %lld refused: %s, as step %lld "
			 "was (%llu %s so far)", PUB_CLIP(p->run), (long long)snap->step,
			 wire_code_name(in->error.code), (long long)p->said_step,
			 (unsigned long long)(conflict ? p->st.conflicts : p->st.refused),
			 conflict ? "conflicts" : "refused");
	else
		snprintf(p->say, sizeof(p->say), "publisher: %s", p->refusal);
	pthread_mutex_unlock(&p->lock);
	say_now(p);
}

/*
 * Waits for the daemon's next message on s while *waited (ms, counted in
 * SEND_SLICE_MS slices with no message) is under budget_ms; stops on
 * close(), and when the daemon closed the connection (nothing more can
 * come on it). A welcome is taken on the way: the daemon answered, and its
 * limits.max_message sizes the messages. 0 with *in parsed, or -1.
 */
static int next_reply(struct wd_publisher *p, void *s, int *waited, int budget_ms,
		      struct wire_header *in)
{
	struct wire_limits lim = { WIRE_NAME_MAX, WIRE_MAX_DIMS, UINT64_MAX };
	struct wire_error err;
	char buf[8192];

	while (*waited < budget_ms && !__atomic_load_n(&p->abort_now, __ATOMIC_ACQUIRE)) {
		int n = zmq_recv(s, buf, sizeof(buf) - 1, 0);
		if (n < 0) {
			*waited += SEND_SLICE_MS;
			if (stall_tick(p))
				return -1;
			continue;	/* no reply yet */
		}
		size_t len = (size_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1);
		int more = 0;
		size_t more_len = sizeof(more);
		int parsed = wire_parse(buf, len, &lim, in, &err) == 0;
		/* a publisher's message (a hello, a commit, a tensor's header with its payload) */
		int ours = parsed && in->type != WIRE_WELCOME && in->type != WIRE_ACK && in->type != WIRE_ERROR &&
			   in->type != WIRE_PONG;
		/* the daemon's replies are one frame each; a peer that sends more is not it */
		if (!zmq_getsockopt(s, ZMQ_RCVMORE, &more, &more_len) && more) {
			while (more && (n = zmq_recv(s, buf, sizeof(buf) - 1, 0)) >= 0 &&
			       !zmq_getsockopt(s, ZMQ_RCVMORE, &more, &more_len))
				;
			len = n < 0 ? 0 : (size_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1);
			/* the control socket answers our frame, then its JSON error: named (pub_peer_foreign) */
			int control = memmem(buf, len, "\"ok\":", 5) && memmem(buf, len, "\"error\":", 8);
			if (!ours || control) {
				pub_peer_foreign(p, buf, len);
				continue;
			}
		}
		if (ours) {	/* our own message came back: this socket itself (pub_peer_echo) */
			pub_peer_echo(p);
			return -1;	/* a fresh socket, from another source port */
		}
		if (!parsed) {	/* the control socket's one-frame reply */
			pub_peer_foreign(p, buf, len);
			continue;
		}
		pub_peer_answered(p);
		pthread_mutex_lock(&p->lock);
		p->last_heard = pub_now();
		if (in->type == WIRE_WELCOME)
			p->st.connected = 1;
		pthread_mutex_unlock(&p->lock);
		if (in->type == WIRE_WELCOME) {
			p->max_message = in->max_message;
			p->welcomed = 1;
			/* the daemon's word for the job's user: a run in no study, a typo */
			pthread_mutex_lock(&p->lock);
			int first = in->notice[0] && !p->notice[0];
			if (first)
				snprintf(p->notice, sizeof(p->notice), "%s", in->notice);
			pthread_mutex_unlock(&p->lock);
			if (first)
				wd_log(WD_LOG_WARNING, "publisher: wdriftd at %s: %s", p->where, in->notice);
		}
		/* unasked, while a step waits: two ranks given one rank (daemon/ingest.c); said once */
		if (in->type == WIRE_PONG && in->notice[0] && strcmp(in->notice, p->ack_notice))
			pub_said_notice(p, in->notice);
		return 0;
	}
	return -1;
}

/*
 * Sends a snapshot and waits for its ack (or a refusal) for the timeout.
 * said gets what the daemon answered: the ack's counts, or its error.
 */
static enum outcome send_snapshot(struct wd_publisher *p, void *s, struct pub_snapshot *snap,
				  struct wd_publisher_outcome *said)
{
	struct wire_header *h = calloc(1, sizeof(*h)), *in = calloc(1, sizeof(*in));
	enum outcome out = RETRY;
	int send_waited = 0;	/* ms spent waiting for room, over the whole snapshot */
	int waited = 0;

	said->code[0] = said->tensor[0] = said->reason[0] = 0;
	if (!h || !in)
		goto done;
	/*
	 * A fresh connection: its welcome says the daemon's limits.max_message,
	 * which sizes the messages. Waited for briefly; without it (no daemon
	 * yet) the messages are a frame each, 64 MiB.
	 */
	while (!p->welcomed && next_reply(p, s, &waited, WELCOME_WAIT_MS, in) == 0)
		;
	for (size_t i = 0; i < snap->n; i++)
		if (send_tensor(p, s, h, snap->step, &snap->t[i], &send_waited) < 0)
			goto done;
	memset(h, 0, sizeof(*h));
	h->type = WIRE_COMMIT;
	snprintf(h->run, sizeof(h->run), "%s", p->run);
	h->step = snap->step;
	h->tensors = snap->n_names;	/* shards of one tensor count once */
	h->ranks = (uint64_t)p->opts.ranks;
	h->session = p->session;	/* set at open, never changed */
	pthread_mutex_lock(&p->lock);
	h->rank = p->rank;	/* -1: not said, and not sent */
	pthread_mutex_unlock(&p->lock);
	if (send_message(p, s, h, NULL, 0, &send_waited) < 0)
		goto done;
	/* to a daemon that welcomed this socket: close says it apart from what never left */
	if (p->welcomed)
		snap->sent_whole = 1;
	for (waited = 0; next_reply(p, s, &waited, p->opts.ack_timeout_ms, in) == 0;) {
		/*
		 * Refused at one of its tensors (a job of one rank): the rest of
		 * them and the commit may still be queued here. They are waited
		 * out, to the commit's refusal (named by no tensor; it comes at
		 * once, as one rank's commit ends the snapshot), so that the
		 * daemon has read the commit that ends the refused snapshot: a
		 * process that exited on the refusal left its marker for
		 * limits.pending_timeout, and a trial's next `wdrift send` of a
		 * smaller file to the step was refused with the first file's
		 * counts.
		 */
		if (out == REFUSED) {
			if (in->step == snap->step && (in->type == WIRE_ACK || (in->type == WIRE_ERROR && !in->name[0])))
				break;
			continue;
		}
		if (in->type == WIRE_ACK && in->step == snap->step) {
			/* the daemon's word for the job's user: two jobs in one run; said once */
			if (in->notice[0] && strcmp(in->notice, p->ack_notice))
				pub_said_notice(p, in->notice);
			said->tensors = in->tensors;
			said->bytes = in->bytes;
			said->duplicate = in->duplicate;
			out = ACKED;
			pthread_mutex_lock(&p->lock);
			p->pushback[0] = 0;
			pthread_mutex_unlock(&p->lock);
			break;
		}
		if (in->type != WIRE_ERROR || (in->step >= 0 && in->step != snap->step))
			continue;	/* a welcome; or about an earlier snapshot, sent before a timeout */
		snprintf(said->code, sizeof(said->code), "%s", wire_code_name(in->error.code));
		snprintf(said->tensor, sizeof(said->tensor), "%.*s", (int)sizeof(said->tensor) - 1, in->name);
		snprintf(said->reason, sizeof(said->reason), "%.*s", (int)sizeof(said->reason) - 1,
			 in->error.reason);
		if (error_is_final(in, snap)) {
			refused(p, snap, in);
			out = REFUSED;
			/*
			 * A tensor's: to the commit's reply, above. One rank
			 * only: a sharded job's commit may wait for the other
			 * ranks (limits.pending_timeout), which must not hold
			 * this sender up.
			 */
			if (in->name[0] && p->opts.ranks <= 1)
				continue;
		} else {
			wd_log(WD_LOG_DEBUG, "publisher: run '%s' step %lld: %s: %s; sending it again",
			       p->run, (long long)snap->step, wire_code_name(in->error.code),
			       PUB_CLIP(in->error.reason));
			pthread_mutex_lock(&p->lock);	/* for the stall warning: why */
			snprintf(p->pushback, sizeof(p->pushback), "the daemon said %s: %.256s",
				 wire_code_name(in->error.code), PUB_CLIP(in->error.reason));
			/* a full disk or memory is not a moment's: back off as from no daemon */
			p->full = in->error.code == WIRE_INTERNAL;
			pthread_mutex_unlock(&p->lock);
		}
		break;
	}
done:
	free(h);
	free(in);
	return out;
}

/*
 * Waits before the next attempt: *backoff_ms, jittered to 75-125% so that
 * many ranks do not reconnect in step, then doubles it up to 5 s. Returns
 * early on close(). Called with the lock held.
 */
static void backoff_wait(struct wd_publisher *p, int *backoff_ms)
{
	p->rng = p->rng * 1103515245u + 12345u;
	struct timespec end;

	pub_deadline((int)(*backoff_ms * (75 + (long)((p->rng >> 16) % 51)) / 100), &end);
	while (!p->closing && pthread_cond_timedwait(&p->work, &p->lock, &end) == 0)
		;
	*backoff_ms = *backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : *backoff_ms * 2;
	stall_check(p, 0);
}
/* A fresh DEALER socket, connected, with hello sent; NULL on failure. */
static void *connect_socket(struct wd_publisher *p)
{
	int linger = 0, timeout = SEND_SLICE_MS, ivl_max = BACKOFF_MAX_MS;
	struct wire_header *hello = calloc(1, sizeof(*hello));
	void *s = hello ? zmq_socket(p->ctx, ZMQ_DEALER) : NULL;
	int waited = 0;

	if (s && (zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)) < 0 ||
		  zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout)) < 0 ||
		  zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout, sizeof(timeout)) < 0 ||
		  zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof(ivl_max)) < 0 ||
		  wd_client_keys_apply(s, &p->keys) < 0 || (pub_peer_watch(p, s), 0) ||
		  zmq_connect(s, p->endpoint) < 0))
		goto fail;
	p->welcomed = 0;
	if (s) {
		hello->type = WIRE_HELLO;
		hello->step = -1;
		snprintf(hello->run, sizeof(hello->run), "%s", p->run);
		if (send_message(p, s, hello, NULL, 0, &waited) < 0)
			goto fail;
	}
	free(hello);
	return s;
fail:
	if (s)
		pub_peer_unwatch(p, s);
	zmq_close(s);
	free(hello);
	return NULL;
}


/*
 * While idle on a socket not yet welcomed (the daemon went away): takes
 * its welcome if one came, without waiting (next_reply marks the publisher
 * connected, and says that the daemon answers again).
 */
static void idle_reply(struct wd_publisher *p, void *s)
{
	struct wire_header *in = calloc(1, sizeof(*in));
	int waited = 0;

	if (in && zmq_poll(&(zmq_pollitem_t){ .socket = s, .events = ZMQ_POLLIN }, 1, 0) == 1)
		next_reply(p, s, &waited, SEND_SLICE_MS, in);	/* a welcome: taken on the way */
	free(in);
}

/*
 * Takes the head snapshot, which the daemon acked or refused or which was
 * given up, off the queue, and keeps said as its outcome. Called with the
 * lock held.
 */
static void leave_queue(struct wd_publisher *p, struct pub_snapshot *snap,
			struct wd_publisher_outcome *said)
{
	p->head = snap->next;
	if (!p->head)
		p->tail = NULL;
	p->st.queued--;
	p->st.queued_bytes -= snap->bytes;
	if (said->kind == WD_OUTCOME_ACKED) {
		p->st.acked++;
		p->st.duplicates += said->duplicate != 0;
		p->st.connected = 1;
	} else {
		p->st.dropped++;
		p->given_up += said->kind == WD_OUTCOME_GIVEN_UP;
	}
	said->step = snap->step;
	said->tries = snap->tries;
	p->last = *said;
	pub_snapshot_free(snap);
	pthread_cond_broadcast(&p->room);
}

/* Says, through p->say, that a snapshot was given up. Called with the lock held. */
static void given_up(struct wd_publisher *p, const struct pub_snapshot *snap,
		     const struct wd_publisher_outcome *said)
{
	if (said->code[0])
		snprintf(p->say, sizeof(p->say), "publisher: run '%.200s' step %lld given up after %d "
			 "tries: the daemon said %s: %.500s", p->run, (long long)snap->step, snap->tries,
			 said->code, said->reason);
	else
		snprintf(p->say, sizeof(p->say), "publisher: run '%.200s' step %lld given up after %d "
			 "tries: no ack from %.400s", p->run, (long long)snap->step, snap->tries, p->where);
}

/*
 * The one retry loop: sends the head snapshot until the daemon acks or
 * refuses it for good, on a fresh socket after each failure, pausing in
 * between (backoff_wait); a snapshot sent max_tries times with no such
 * answer is given up.
 */
void *pub_sender_main(void *arg)
{
	struct wd_publisher *p = arg;
	void *s = NULL;
	int backoff_ms = BACKOFF_MIN_MS;
	double idle_lost_at = -1e9;	/* when an idle connection was last lost */

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->head && !p->closing) {
			if (!s) {
				pthread_cond_wait(&p->work, &p->lock);
				continue;
			}
			/*
			 * Idle with a connection: its monitor is read, so that a
			 * daemon gone between snapshots is said when it goes, not
			 * at the next snapshot, and its events do not pile up.
			 */
			struct timespec end;
			pub_deadline(IDLE_TICK_MS, &end);
			if (pthread_cond_timedwait(&p->work, &p->lock, &end) == 0)
				continue;
			pthread_mutex_unlock(&p->lock);
			if (pub_peer_tick(p)) {
				/*
				 * A fresh socket at once, whose hello ZeroMQ delivers when
				 * the daemon is back: its welcome says so while the job is
				 * still idle (stats, diagnosis), not at the next snapshot.
				 * Not again within BACKOFF_MAX_MS of the last such loss (a
				 * peer that takes the handshake and closes, each time): the
				 * next snapshot connects then.
				 */
				double now = pub_now();
				pub_peer_unwatch(p, s);
				zmq_close(s);
				s = now - idle_lost_at > BACKOFF_MAX_MS / 1000.0 ? connect_socket(p) : NULL;
				idle_lost_at = now;
			} else if (!p->welcomed) {
				idle_reply(p, s);
			}
			pthread_mutex_lock(&p->lock);
		}
		if (!p->head || p->abort_now)
			break;
		struct pub_snapshot *snap = p->head;
		p->head_in_flight = 1;
		if (snap->tries++)
			p->st.resent++;
		pthread_mutex_unlock(&p->lock);
		say_now(p);	/* what the backoff or the last ack left to say */
		/* a fresh socket: after a timeout the old one may hold stale replies */
		if (!s)
			s = connect_socket(p);
		struct wd_publisher_outcome said = { 0 };
		double tried = pub_now();
		enum outcome out = s ? send_snapshot(p, s, snap, &said) : RETRY;
		pthread_mutex_lock(&p->lock);
		p->head_in_flight = 0;
		if (out == RETRY) {
			p->st.connected = 0;
			if (s) {
				pub_peer_unwatch(p, s);
				zmq_close(s);
				s = NULL;
			}
			if (p->closing && p->abort_now)
				break;
			if (p->max_tries && snap->tries >= p->max_tries) {
				given_up(p, snap, &said);
				said.kind = WD_OUTCOME_GIVEN_UP;
				leave_queue(p, snap, &said);
				continue;
			}
			/*
			 * An absent daemon costs no CPU: the pause grows. One that
			 * answered (a full window, ranks still missing) gets the
			 * snapshot again soon, so that this publisher is connected
			 * when the daemon has something to say about it.
			 */
			if (p->last_heard >= tried && !p->full)
				backoff_ms = BACKOFF_MIN_MS;
			p->full = 0;
			backoff_wait(p, &backoff_ms);
			continue;
		}
		backoff_ms = BACKOFF_MIN_MS;
		said.kind = out == ACKED ? WD_OUTCOME_ACKED : WD_OUTCOME_REFUSED;
		leave_queue(p, snap, &said);
		stall_check(p, out == ACKED ? ANSWER_ACK : ANSWER_REFUSAL);
	}
	pthread_mutex_unlock(&p->lock);
	say_now(p);
	if (s) {
		pub_peer_unwatch(p, s);
		zmq_close(s);
	}
	return NULL;
}
