/*
 * publisher.c: the publisher side of protocol v1 (wdrift.h, "Publishing";
 * docs/publishing.md).
 *
 * The caller's thread only copies tensors into a snapshot and queues it;
 * a background thread owns the ZeroMQ socket. It sends the oldest queued
 * snapshot, waits for its durable ack, and only then removes it, so a
 * snapshot whose ack never came (a timeout, a daemon restart) is simply
 * sent again on a fresh socket: re-sends are idempotent on the daemon.
 * One snapshot is in flight at a time.
 *
 * Every failure a user can cause is said once, where they look (stderr
 * through wd_log), and costs no spinning: a bad endpoint fails at open;
 * an absent daemon is retried with a growing, jittered pause and warned
 * about after stall_warn_ms; a refusal that a retry cannot fix (conflict,
 * a snapshot that expired waiting for other ranks, a malformed tensor) drops
 * the snapshot, counts it, and keeps its message for wd_publisher_refusals.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "keys.h"
#include "log.h"
#include "wire.h"

#define MAX_SHARDS 65536	/* pieces of one tensor at once: the daemon's cap */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define SEND_SLICE_MS 100	/* ZMQ_SNDTIMEO and ZMQ_RCVTIMEO: how soon close() is seen */

/* --- errors --- */

static _Thread_local char last_error[1024];

/* Sets this thread's wd_last_error() and returns -err's errno (negative). */
static int set_error(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int set_error(int r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return r;
}

const char *wd_last_error(void)
{
	return last_error;
}

const char *wd_strerror(int err)
{
	switch (-err) {
	case 0: return "success";
	case EINVAL: return "invalid argument";
	case ENOMEM: return "out of memory";
	case ETIMEDOUT: return "timed out";
	case ENODEV: return "no such device (no GPU, or a build without CUDA)";
	case EIO: return "input/output error (the device failed)";
	case ENOENT: return "no such file";
	case E2BIG: return "too many pieces";
	default: return err < 0 ? strerror(-err) : "not an error code (expected a negative errno)";
	}
}

/* --- snapshots being built and queued --- */

/*
 * One call's worth of a tensor: its elements this caller holds, copied
 * once, sent as n shards contiguous in the flattened whole (one, or one per
 * row of a column block). Each shard's checksum is the sending thread's.
 */
struct pub_tensor {
	char *name;
	enum wd_dtype dtype;
	int ndims;
	uint64_t shape[WIRE_MAX_DIMS];
	uint64_t total;
	void *data;
	uint64_t (*shard)[2];	/* offset, count */
	uint32_t *crc;
	size_t n_shards;
	int crc_done;
	uint64_t count;		/* elements here, over all shards */
	uint64_t name_covered;	/* on a name's first entry: the elements of all its entries */
};

struct pub_snapshot {
	int64_t step;
	struct pub_tensor *t;
	size_t n, cap;
	uint64_t bytes;
	uint64_t n_names;	/* distinct tensor names: what the commit counts */
	size_t *names;		/* open addressing over t[]: index + 1, 0 empty */
	size_t names_cap;
	int sent_before;	/* for the resent count */
	int internal_tries;	/* 'internal' refusals of another cause than disk or memory */
	struct pub_snapshot *next;
};

struct wd_publisher {
	char endpoint[512], run[WIRE_NAME_MAX + 1];
	char where[PATH_MAX + 600];	/* the endpoint as a user checks it: ipc's full path */
	struct wd_publisher_opts opts;	/* server_key and key: NULL once loaded */
	struct wd_client_keys keys;
	void *ctx;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work, room;	/* queue grew (or closing); queue shrank */
	struct pub_snapshot *building;	/* the caller's, between begin and commit */
	struct pub_snapshot *head, *tail;	/* queued; head may be in flight */
	int head_in_flight, closing, abort_now;
	int cancelled;		/* wd_publisher_cancel: commits wait for room no more */
	struct wd_publisher_stats st;
	/* said once: no ack for stall_warn_ms; and again when acks come back */
	double waiting_since;	/* monotonic s: the last ack, or the queue becoming non-empty */
	double last_heard;	/* monotonic s: the daemon's last reply of any kind; 0 never */
	int stalled;
	uint64_t dropped_at_stall;
	uint64_t refusals, conflicts_said;
	char refusal[768], conflict[768];
	char pushback[320];	/* the daemon's last refusal that a re-send may get past */
	int full;		/* that refusal was its disk or memory (internal): back off */
	uint64_t max_message;	/* the daemon's, from its welcome (sender thread); 0: not heard */
	int welcomed;		/* the current socket got its welcome (sender thread) */
	char say[1024];		/* a warning made under the lock, said after it (say_now) */
	unsigned rng;
};

static double now_mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void tensor_release(struct pub_tensor *t)
{
	free(t->name);
	free(t->data);
	free(t->shard);
	free(t->crc);
}

static void snapshot_free(struct pub_snapshot *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		tensor_release(&s->t[i]);
	free(s->t);
	free(s->names);
	free(s);
}

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;	/* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/*
 * Counts t[i]'s name once however many calls add pieces of it (the commit
 * says how many distinct tensors the snapshot has), and adds its elements
 * to the name's first entry. 0, or -ENOMEM.
 */
static int names_add(struct pub_snapshot *s, size_t i)
{
	if (2 * (s->n_names + 1) > s->names_cap) {
		size_t cap = s->names_cap ? 2 * s->names_cap : 64;
		size_t *nn = calloc(cap, sizeof(*nn));
		if (!nn)
			return -ENOMEM;
		for (size_t k = 0; k < s->names_cap; k++) {
			if (!s->names[k])
				continue;
			size_t at = name_hash(s->t[s->names[k] - 1].name) & (cap - 1);
			while (nn[at])
				at = (at + 1) & (cap - 1);
			nn[at] = s->names[k];
		}
		free(s->names);
		s->names = nn;
		s->names_cap = cap;
	}
	size_t at = name_hash(s->t[i].name) & (s->names_cap - 1);
	for (; s->names[at]; at = (at + 1) & (s->names_cap - 1))
		if (!strcmp(s->t[s->names[at] - 1].name, s->t[i].name)) {
			s->t[s->names[at] - 1].name_covered += s->t[i].count;
			return 0;
		}
	s->names[at] = i + 1;
	s->t[i].name_covered = s->t[i].count;
	s->n_names++;
	return 0;
}

static int check_run(const char *run)
{
	size_t n = strlen(run);
	if (!n || n > NAME_MAX || !strcmp(run, ".") || !strcmp(run, ".."))
		return -EINVAL;	/* it names a spool directory on the daemon */
	for (size_t i = 0; i < n; i++) {
		char c = run[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("_.:-", c)))
			return -EINVAL;
	}
	return 0;
}

/* --- the sending thread --- */

/*
 * Says what stall_check or refused() left in p->say. Called without the
 * lock: a log handler may call back into the publisher, and stderr may
 * block, neither of which may hold up the caller's commit.
 */
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
 * once more when an ack comes (recovered = 1), through p->say. Called
 * with the lock held.
 */
static void stall_check(struct wd_publisher *p, int recovered)
{
	double t = now_mono();
	if (recovered) {
		if (p->stalled)
			snprintf(p->say, sizeof(p->say), "publisher: run '%.200s': %.400s acks again after "
				 "%.0f s; %llu snapshots dropped meanwhile", p->run, p->where,
				 t - p->waiting_since,
				 (unsigned long long)(p->st.dropped - p->dropped_at_stall));
		p->stalled = 0;
		p->waiting_since = t;
		return;
	}
	if (p->stalled || p->opts.stall_warn_ms < 0 || !p->head ||
	    (t - p->waiting_since) * 1000 < p->opts.stall_warn_ms)
		return;
	p->stalled = 1;
	p->dropped_at_stall = p->st.dropped;
	int answers = p->last_heard >= p->waiting_since;
	snprintf(p->say, sizeof(p->say), "publisher: run '%.200s': no ack from %.400s for %.0f s; "
		 "%llu snapshots waiting (%s): %s", p->run, p->where, t - p->waiting_since,
		 (unsigned long long)p->st.queued,
		 answers ? "it answers, but acks nothing" : "no answer at all",
		 !answers ? "is wdriftd running and listening there?"
		 : p->pushback[0] ? p->pushback
		 : p->opts.ranks > 1 ? "is every rank publishing its part (ranks > 1)?"
		 : "is its memory budget full (wdrift status)?");
}

static void stall_tick(struct wd_publisher *p)
{
	pthread_mutex_lock(&p->lock);
	stall_check(p, 0);
	pthread_mutex_unlock(&p->lock);
	say_now(p);
}

/*
 * Queues one frame, waiting in send-timeout slices (SEND_SLICE_MS) while
 * ZeroMQ has no room: the daemon's push-back, or no connection at all
 * (ZeroMQ drops a peer that refused the handshake for good, and a send
 * with no timeout would then wait forever, and close() with it). Gives up,
 * -1, on an error, on close(), or once *waited reaches the ack timeout.
 */
static int send_frame(struct wd_publisher *p, void *s, const void *data, size_t len, int flags,
		      int *waited)
{
	while (zmq_send(s, data, len, flags) < 0) {
		if (errno != EAGAIN || __atomic_load_n(&p->abort_now, __ATOMIC_ACQUIRE) ||
		    *waited >= p->opts.ack_timeout_ms)
			return -1;
		*waited += SEND_SLICE_MS;
		stall_tick(p);
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

/* Sends every shard of one call's tensor; checksums them the first time. */
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
			t->crc[i] = wire_crc32(0, at, t->shard[i][1] * esize);
			at += t->shard[i][1] * esize;
		}
		t->crc_done = 1;
		at = t->data;
	}
	h->type = WIRE_TENSOR;
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
			h->crc32 = n == t->shard[i][1] ? t->crc[i] : wire_crc32(0, at, n * esize);
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
	snprintf(p->refusal, sizeof(p->refusal), "run '%.100s' step %lld refused: %s: %s%s%.200s%s%s",
		 p->run, (long long)snap->step, wire_code_name(in->error.code), in->error.reason,
		 named ? "" : " (tensor '", named ? "" : in->name, named ? "" : "')", tries);
	p->refusals++;
	if (in->error.code == WIRE_CONFLICT) {
		p->st.conflicts++;
		memcpy(p->conflict, p->refusal, sizeof(p->conflict));
	} else {
		p->st.refused++;
	}
	snprintf(p->say, sizeof(p->say), "publisher: %s", p->refusal);
	pthread_mutex_unlock(&p->lock);
	say_now(p);
}

/* Sends a snapshot and waits for its ack (or a refusal) for the timeout. */
static enum outcome send_snapshot(struct wd_publisher *p, void *s, struct pub_snapshot *snap,
				  int *duplicate)
{
	struct wire_limits lim = { WIRE_NAME_MAX, WIRE_MAX_DIMS, UINT64_MAX };
	struct wire_header *h = calloc(1, sizeof(*h)), *in = calloc(1, sizeof(*in));
	struct wire_error err;
	enum outcome out = RETRY;
	int send_waited = 0;	/* ms spent waiting for room, over the whole snapshot */

	if (!h || !in)
		goto done;
	/*
	 * A fresh connection: its welcome says the daemon's limits.max_message,
	 * which sizes the messages. Waited for briefly; without it (no daemon
	 * yet) the messages are a frame each, 64 MiB.
	 */
	for (int w = 0; !p->welcomed && w < WELCOME_WAIT_MS &&
	     !__atomic_load_n(&p->abort_now, __ATOMIC_ACQUIRE); w += SEND_SLICE_MS) {
		char buf[4096];
		int n = zmq_recv(s, buf, sizeof(buf) - 1, 0);
		if (n < 0)
			continue;
		if (wire_parse(buf, (size_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1), &lim, in,
			       &err) == 0 && in->type == WIRE_WELCOME) {
			pthread_mutex_lock(&p->lock);
			p->st.connected = 1;
			p->last_heard = now_mono();
			pthread_mutex_unlock(&p->lock);
			p->max_message = in->max_message;
			p->welcomed = 1;
		}
	}
	for (size_t i = 0; i < snap->n; i++)
		if (send_tensor(p, s, h, snap->step, &snap->t[i], &send_waited) < 0)
			goto done;
	memset(h, 0, sizeof(*h));
	h->type = WIRE_COMMIT;
	snprintf(h->run, sizeof(h->run), "%s", p->run);
	h->step = snap->step;
	h->tensors = snap->n_names;	/* shards of one tensor count once */
	h->ranks = (uint64_t)p->opts.ranks;
	if (send_message(p, s, h, NULL, 0, &send_waited) < 0)
		goto done;
	/* Wait in slices, so that close() need not wait out a whole timeout. */
	for (int waited = 0; waited < p->opts.ack_timeout_ms;) {
		char buf[8192];
		int n = zmq_recv(s, buf, sizeof(buf) - 1, 0);
		if (n < 0) {
			waited += SEND_SLICE_MS;
			if (__atomic_load_n(&p->abort_now, __ATOMIC_ACQUIRE))
				break;
			stall_tick(p);
			continue;	/* no reply yet */
		}
		size_t len = (size_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1);
		if (wire_parse(buf, len, &lim, in, &err) < 0)
			continue;
		pthread_mutex_lock(&p->lock);
		p->last_heard = now_mono();
		pthread_mutex_unlock(&p->lock);
		if (in->type == WIRE_WELCOME) {
			pthread_mutex_lock(&p->lock);
			p->st.connected = 1;
			pthread_mutex_unlock(&p->lock);
			p->max_message = in->max_message;
			p->welcomed = 1;
			continue;
		}
		if (in->type == WIRE_ACK && in->step == snap->step) {
			*duplicate = in->duplicate;
			out = ACKED;
			pthread_mutex_lock(&p->lock);
			p->pushback[0] = 0;
			pthread_mutex_unlock(&p->lock);
			break;
		}
		if (in->type == WIRE_ERROR && in->step >= 0 && in->step != snap->step)
			continue;	/* about an earlier snapshot, sent before a timeout */
		if (in->type == WIRE_ERROR) {
			if (error_is_final(in, snap)) {
				refused(p, snap, in);
				out = REFUSED;
			} else {
				wd_log(WD_LOG_DEBUG, "publisher: run '%s' step %lld: %s: %s; "
				       "sending it again", p->run, (long long)snap->step,
				       wire_code_name(in->error.code), in->error.reason);
				pthread_mutex_lock(&p->lock);	/* for the stall warning: why */
				snprintf(p->pushback, sizeof(p->pushback), "the daemon said %s: %.256s",
					 wire_code_name(in->error.code), in->error.reason);
				/* a full disk or memory is not a moment's: back off as from no daemon */
				p->full = in->error.code == WIRE_INTERNAL;
				pthread_mutex_unlock(&p->lock);
			}
			break;
		}
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
	long ms = *backoff_ms * (75 + (long)((p->rng >> 16) % 51)) / 100;
	struct timespec end;

	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += ms / 1000;
	end.tv_nsec += (ms % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
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
		  wd_client_keys_apply(s, &p->keys) < 0 || zmq_connect(s, p->endpoint) < 0))
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
	zmq_close(s);
	free(hello);
	return NULL;
}

static void *sender_main(void *arg)
{
	struct wd_publisher *p = arg;
	void *s = NULL;
	int backoff_ms = BACKOFF_MIN_MS;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->head && !p->closing)
			pthread_cond_wait(&p->work, &p->lock);
		if (!p->head || p->abort_now)
			break;
		struct pub_snapshot *snap = p->head;
		p->head_in_flight = 1;
		if (snap->sent_before)
			p->st.resent++;
		snap->sent_before = 1;
		pthread_mutex_unlock(&p->lock);
		say_now(p);	/* what the backoff or the last ack left to say */
		/* a fresh socket: after a timeout the old one may hold stale replies */
		if (!s)
			s = connect_socket(p);
		int duplicate = 0;
		double tried = now_mono();
		enum outcome out = s ? send_snapshot(p, s, snap, &duplicate) : RETRY;
		pthread_mutex_lock(&p->lock);
		p->head_in_flight = 0;
		if (out == RETRY) {
			p->st.connected = 0;
			if (s) {
				zmq_close(s);
				s = NULL;
			}
			if (p->closing && p->abort_now)
				break;
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
		p->head = snap->next;
		if (!p->head)
			p->tail = NULL;
		p->st.queued--;
		p->st.queued_bytes -= snap->bytes;
		if (out == ACKED) {
			p->st.acked++;
			p->st.duplicates += duplicate != 0;
			p->st.connected = 1;
		} else {
			p->st.dropped++;
		}
		stall_check(p, 1);	/* the daemon answered: an ack or a final refusal */
		snapshot_free(snap);
		pthread_cond_broadcast(&p->room);
	}
	pthread_mutex_unlock(&p->lock);
	say_now(p);
	if (s)
		zmq_close(s);
	return NULL;
}

/* --- the caller's side --- */

int wd_publisher_check_keys_as(const char *server_key, const char *key, const char *server_arg,
			       const char *key_arg, char *err, size_t errlen)
{
	struct wd_client_keys k;
	int r = wd_client_keys_load_as(server_key, key, server_arg, key_arg, &k, err, errlen);

	memset(&k, 0, sizeof(k));
	return r < 0 ? -EINVAL : 0;
}

int wd_publisher_check_keys(const char *server_key, const char *key, char *err, size_t errlen)
{
	return wd_publisher_check_keys_as(server_key, key, "server_key", "key", err, errlen);
}

/*
 * Refuses what can never reach a daemon: another scheme than tcp://, ipc://
 * or inproc://, or an address ZeroMQ rejects; says what an ipc:// path
 * means from here when nothing listens there yet. Fills p->where.
 */
static int check_endpoint(struct wd_publisher *p, const char *endpoint)
{
	if (strncmp(endpoint, "tcp://", 6) && strncmp(endpoint, "ipc://", 6) &&
	    strncmp(endpoint, "inproc://", 9))
		return set_error(-EINVAL, "endpoint '%.400s' is not a ZeroMQ endpoint: tcp://HOST:PORT, "
				 "ipc://PATH or inproc://NAME", endpoint);
	const char *port = strrchr(endpoint, ':');	/* tcp://HOST:PORT, not "tcp://h" or "tcp://h:" */
	if (!strncmp(endpoint, "tcp://", 6) && (port < endpoint + 6 || !port[1]))
		return set_error(-EINVAL, "endpoint '%.400s' has no port: tcp://HOST:PORT", endpoint);
	void *s = zmq_socket(p->ctx, ZMQ_DEALER);
	int linger = 0;
	if (!s)
		return set_error(-ENOMEM, "endpoint '%.400s': cannot make a socket: %s", endpoint,
				 zmq_strerror(errno));
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	int r = zmq_connect(s, endpoint);
	int e = errno;
	zmq_close(s);
	if (r < 0)
		return set_error(-EINVAL, "endpoint '%.400s': ZeroMQ refuses it: %s", endpoint,
				 zmq_strerror(e));
	snprintf(p->where, sizeof(p->where), "%s", endpoint);
	if (!strncmp(endpoint, "inproc://", 9)) {
		wd_log(WD_LOG_WARNING, "publisher: run '%s': endpoint '%s' reaches only sockets "
		       "of this publisher's own ZeroMQ context, never a wdriftd: use tcp:// or ipc://",
		       p->run, endpoint);
	} else if (!strncmp(endpoint, "ipc://", 6)) {
		const char *path = endpoint + 6;
		char cwd[PATH_MAX], full[PATH_MAX + 512];

		while (path[0] == '.' && path[1] == '/')
			path += 2;	/* ./run/x.sock: say /cwd/run/x.sock */
		struct stat st;
		if (path[0] != '/' && getcwd(cwd, sizeof(cwd)))
			snprintf(full, sizeof(full), "%s/%s", cwd, path);
		else
			snprintf(full, sizeof(full), "%s", path);
		if (path[0] != '/')
			snprintf(p->where, sizeof(p->where), "%s (%s)", endpoint, full);
		if (stat(full, &st) < 0)
			wd_log(WD_LOG_WARNING, "publisher: run '%s': no socket at %s yet (%s%s): "
			       "snapshots wait until a wdriftd listens there", p->run, full, endpoint,
			       path[0] != '/' ? ", a path relative to this process's working directory" : "");
	}
	return 0;
}

int wd_publisher_open(const char *endpoint, const char *run, const struct wd_publisher_opts *opts,
		      struct wd_publisher **out)
{
	struct wd_publisher *p;
	char why[600];
	int r;

	*out = NULL;
	last_error[0] = 0;
	if (!endpoint || !run)
		return set_error(-EINVAL, "no %s", !endpoint ? "endpoint" : "run name");
	if (check_run(run) < 0)
		return set_error(-EINVAL, "run name '%.300s': 1 to %d bytes of A-Z a-z 0-9 _ . : -, not "
				 "'.' or '..'", run, NAME_MAX);
	if (strlen(endpoint) >= sizeof(p->endpoint))
		return set_error(-EINVAL, "endpoint is %zu bytes; at most %zu", strlen(endpoint),
				 sizeof(p->endpoint) - 1);
	if (opts && (opts->ranks < 0 || opts->ranks > (1 << 20)))
		return set_error(-EINVAL, "ranks %d: 1 to %d", opts->ranks, 1 << 20);
	if (!(p = calloc(1, sizeof(*p))))
		return -ENOMEM;
	snprintf(p->endpoint, sizeof(p->endpoint), "%s", endpoint);
	snprintf(p->run, sizeof(p->run), "%s", run);
	if (opts)
		p->opts = *opts;
	if (wd_client_keys_load_as(p->opts.server_key, p->opts.key, "server_key", "key", &p->keys, why,
				   sizeof(why)) < 0) {
		r = set_error(-EINVAL, "run '%s': %s", run, why);
		goto fail;
	}
	p->opts.server_key = p->opts.key = NULL;	/* the caller's strings may go */
	if (!p->opts.queue_bytes)
		p->opts.queue_bytes = 1ull << 30;
	if (p->opts.ack_timeout_ms <= 0)
		p->opts.ack_timeout_ms = 30000;
	if (p->opts.stall_warn_ms == 0)
		p->opts.stall_warn_ms = 30000;
	if (p->opts.ranks < 1)
		p->opts.ranks = 1;
	p->rng = (unsigned)getpid() ^ (unsigned)(uintptr_t)p;
	if (!(p->ctx = zmq_ctx_new())) {
		r = set_error(-ENOMEM, "cannot make a ZeroMQ context: %s", zmq_strerror(errno));
		goto fail;
	}
	if ((r = check_endpoint(p, endpoint)) < 0)
		goto fail;
	p->waiting_since = now_mono();
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->room, NULL);
	if (pthread_create(&p->thread, NULL, sender_main, p) != 0) {
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->work);
		pthread_cond_destroy(&p->room);
		r = set_error(-ENOMEM, "cannot start the sending thread");
		goto fail;
	}
	*out = p;
	return 0;
fail:
	if (p->ctx)
		zmq_ctx_term(p->ctx);
	memset(&p->keys, 0, sizeof(p->keys));
	free(p);
	return r;
}

int wd_publisher_begin(struct wd_publisher *p, int64_t step)
{
	if (step < 0)
		return set_error(-EINVAL, "step %lld: steps are integers >= 0", (long long)step);
	snapshot_free(p->building);
	p->building = calloc(1, sizeof(*p->building));
	if (!p->building)
		return -ENOMEM;
	p->building->step = step;
	return 0;
}

/*
 * Appends a tensor entry of n_shards shards and count elements to the
 * snapshot being built, its data still to be filled; NULL with the error
 * set.
 */
static struct pub_tensor *tensor_add(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
				     const uint64_t *shape, int ndims, uint64_t total,
				     uint64_t count, size_t n_shards)
{
	struct pub_snapshot *b = p->building;
	size_t esize = wd_dtype_size(dtype);

	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 16;
		struct pub_tensor *t = realloc(b->t, cap * sizeof(*t));
		if (!t) {
			set_error(-ENOMEM, "out of memory");
			return NULL;
		}
		b->t = t;
		b->cap = cap;
	}
	struct pub_tensor *t = &b->t[b->n];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	t->data = malloc(count ? count * esize : 1);
	t->shard = malloc(n_shards * sizeof(*t->shard));
	t->crc = malloc(n_shards * sizeof(*t->crc));
	if (!t->name || !t->data || !t->shard || !t->crc) {
		tensor_release(t);
		set_error(-ENOMEM, "tensor '%.200s': out of memory for %llu bytes", name,
			  (unsigned long long)(count * esize));
		return NULL;
	}
	t->dtype = dtype;
	t->ndims = shape ? ndims : 1;
	for (int d = 0; d < t->ndims; d++)
		t->shape[d] = shape ? shape[d] : total;
	t->total = total;
	t->n_shards = n_shards;
	t->count = count;
	if (names_add(b, b->n) < 0) {
		tensor_release(t);
		set_error(-ENOMEM, "out of memory");
		return NULL;
	}
	b->n++;
	b->bytes += count * esize;
	return t;
}

static int check_tensor_args(const struct wd_publisher *p, const char *name, enum wd_dtype dtype,
			     int ndims)
{
	if (!p->building)
		return set_error(-EINVAL, "no snapshot begun: wd_publisher_begin first");
	char why[64];

	if (!name || !*name || strlen(name) > WIRE_NAME_MAX)
		return set_error(-EINVAL, "tensor name must be 1 to %d bytes", WIRE_NAME_MAX);
	if (wire_name_rule(name, why, sizeof(why)) < 0)	/* the daemon would refuse it: bad_name */
		return set_error(-EINVAL, "tensor name '%.200s' cannot be stored: %s (a name is an HDF5 "
				 "path: parts split by '/', none empty, '.' or '..')", name, why);
	if (!wd_dtype_size(dtype))
		return set_error(-EINVAL, "tensor '%.200s': dtype %d is not one of f32, f64, f16, bf16",
				 name, (int)dtype);
	if (ndims < 0 || ndims > WIRE_MAX_DIMS)
		return set_error(-EINVAL, "tensor '%.200s': %d dimensions; 0 to %d", name, ndims,
				 WIRE_MAX_DIMS);
	return 0;
}

int wd_publisher_tensor(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
			const void *data, const uint64_t *shape, int ndims, uint64_t offset,
			uint64_t count, uint64_t total)
{
	size_t esize = wd_dtype_size(dtype);
	int r = check_tensor_args(p, name, dtype, ndims);

	if (r < 0)
		return r;
	if (!total || offset > total || count > total - offset || (count && !data) || (ndims && !shape))
		return set_error(-EINVAL, "tensor '%.200s': shard [%llu, +%llu) of %llu elements is not "
				 "inside the tensor", name, (unsigned long long)offset,
				 (unsigned long long)count, (unsigned long long)total);
	struct pub_tensor *t = tensor_add(p, name, dtype, shape, ndims, total, count, 1);
	if (!t)
		return -ENOMEM;
	if (count)	/* data may be NULL for none */
		memcpy(t->data, data, count * esize);	/* the one copy the caller pays for */
	t->shard[0][0] = offset;
	t->shard[0][1] = count;
	return 0;
}

int wd_publisher_block(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
		       const void *data, const uint64_t *shape, const uint64_t *start,
		       const uint64_t *local, int ndims)
{
	size_t esize = wd_dtype_size(dtype);
	uint64_t total = 1, count = 1;
	int r = check_tensor_args(p, name, dtype, ndims);

	if (r < 0)
		return r;
	if (ndims && (!shape || !start || !local))
		return set_error(-EINVAL, "tensor '%.200s': shape, start and local are needed", name);
	for (int d = 0; d < ndims; d++) {
		if (!shape[d] || start[d] > shape[d] || local[d] > shape[d] - start[d])
			return set_error(-EINVAL, "tensor '%.200s': dimension %d: block [%llu, +%llu) is "
					 "not inside [0, %llu)", name, d, (unsigned long long)start[d],
					 (unsigned long long)local[d], (unsigned long long)shape[d]);
		if (total > UINT64_MAX / 2 / esize / shape[d])
			return set_error(-EINVAL, "tensor '%.200s': too many elements", name);
		total *= shape[d];
		count *= local[d];
	}
	if (count && !data)
		return set_error(-EINVAL, "tensor '%.200s': no data", name);
	/*
	 * Dimensions past `inner` are whole, so each index of the dimensions
	 * before it starts one contiguous run of local[inner] * (their extent).
	 */
	int inner = ndims - 1;
	while (inner > 0 && start[inner] == 0 && local[inner] == shape[inner])
		inner--;
	uint64_t run = 1, runs = 1;
	for (int d = ndims - 1; d >= 0; d--) {
		if (d >= inner)
			run *= local[d];
		else
			runs *= local[d];
	}
	if (!count)
		runs = 1, run = 0;	/* this rank holds nothing of it: still named, for the commit */
	if (runs > MAX_SHARDS)
		return set_error(-E2BIG, "tensor '%.200s': this block is %llu pieces in the flattened "
				 "tensor; at most %d (send a block of whole rows)", name,
				 (unsigned long long)runs, MAX_SHARDS);
	struct pub_tensor *t = tensor_add(p, name, dtype, shape, ndims, total, count, (size_t)runs);
	if (!t)
		return -ENOMEM;
	if (count)	/* data may be NULL for an empty block */
		memcpy(t->data, data, count * esize);	/* the one copy: the runs are in its order */
	uint64_t idx[WIRE_MAX_DIMS] = { 0 };
	for (uint64_t k = 0; k < runs; k++) {
		uint64_t flat = 0;	/* row-major index of the run's first element in the whole */
		for (int d = 0; d < ndims; d++)
			flat = flat * shape[d] + start[d] + (d < inner ? idx[d] : 0);
		t->shard[k][0] = count ? flat : 0;
		t->shard[k][1] = run;
		for (int d = inner - 1; d >= 0; d--) {	/* the next index of the outer dimensions */
			if (++idx[d] < local[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

/* Drops the oldest queued snapshots not in flight until need fits. */
static void drop_oldest(struct wd_publisher *p, uint64_t need)
{
	struct pub_snapshot **at = &p->head;
	if (p->head_in_flight && *at)
		at = &(*at)->next;
	while (*at && p->st.queued_bytes + need > p->opts.queue_bytes) {
		struct pub_snapshot *s = *at;
		*at = s->next;
		if (p->tail == s) {
			p->tail = NULL;
			for (struct pub_snapshot *x = p->head; x; x = x->next)
				p->tail = x;
		}
		p->st.queued--;
		p->st.queued_bytes -= s->bytes;
		p->st.dropped++;
		snapshot_free(s);
	}
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Refuses a snapshot that names a tensor and a group of it ("a" and
 * "a/b"): the daemon could store only one (bad_name). Each '/'-prefix of
 * each name is looked up in the sorted names.
 */
static int check_groups(const struct pub_snapshot *s)
{
	const char **v = malloc((s->n_names ? s->n_names : 1) * sizeof(*v));
	size_t n = 0;
	int r = 0;

	if (!v)
		return set_error(-ENOMEM, "out of memory");
	for (size_t k = 0; k < s->names_cap; k++)
		if (s->names[k])
			v[n++] = s->t[s->names[k] - 1].name;
	qsort(v, n, sizeof(*v), by_name);
	for (size_t i = 0; i < n && !r; i++)
		for (const char *sl = strchr(v[i], '/'); sl && !r; sl = strchr(sl + 1, '/')) {
			char group[WIRE_NAME_MAX + 1];
			const char *key = group;
			snprintf(group, sizeof(group), "%.*s", (int)(sl - v[i]), v[i]);
			if (bsearch(&key, v, n, sizeof(*v), by_name))
				r = set_error(-EINVAL, "tensors '%.200s' and '%.200s' cannot both be in one "
					      "snapshot: a name is an HDF5 path, and '%.200s' would be a group "
					      "and a tensor", group, v[i], group);
		}
	free(v);
	return r;
}

int wd_publisher_commit(struct wd_publisher *p)
{
	struct pub_snapshot *s = p->building;

	if (!s)
		return set_error(-EINVAL, "no snapshot begun: wd_publisher_begin first");
	if (p->opts.ranks == 1) {	/* no other rank will bring what is missing */
		for (size_t k = 0; k < s->names_cap; k++) {
			const struct pub_tensor *t = s->names[k] ? &s->t[s->names[k] - 1] : NULL;
			if (t && t->name_covered != t->total)
				return set_error(-EINVAL, "tensor '%.200s': the snapshot holds %llu of its %llu "
						 "elements; with ranks = 1 every tensor is whole (a sharded job "
						 "gives each rank's publisher ranks = the number of ranks)", t->name,
						 (unsigned long long)t->name_covered,
						 (unsigned long long)t->total);
		}
	}
	int r = check_groups(s);
	if (r < 0)
		return r;
	p->building = NULL;
	pthread_mutex_lock(&p->lock);
	p->st.committed++;
	uint64_t in_flight = p->head_in_flight && p->head ? p->head->bytes : 0;
	if (p->st.queued_bytes + s->bytes > p->opts.queue_bytes) {
		/* only when that makes room: beside the one in flight it may never fit */
		if (p->opts.policy == WD_DROP_OLDEST &&
		    (!in_flight || in_flight + s->bytes <= p->opts.queue_bytes))
			drop_oldest(p, s->bytes);
		else if (p->opts.policy == WD_BLOCK)
			while (p->st.queued_bytes && p->st.queued_bytes + s->bytes > p->opts.queue_bytes &&
			       !p->closing && !p->cancelled)
				pthread_cond_wait(&p->room, &p->lock);
	}
	if (p->st.queued_bytes + s->bytes > p->opts.queue_bytes && p->st.queued_bytes) {
		p->st.dropped++;	/* drop_newest, or it cannot fit at all */
		pthread_mutex_unlock(&p->lock);
		snapshot_free(s);
		return 0;
	}
	if (!p->head)	/* the wait for an ack starts now */
		p->waiting_since = now_mono();
	if (p->tail)
		p->tail->next = s;
	else
		p->head = s;
	p->tail = s;
	p->st.queued++;
	p->st.queued_bytes += s->bytes;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

void wd_publisher_get_stats(struct wd_publisher *p, struct wd_publisher_stats *out)
{
	pthread_mutex_lock(&p->lock);
	*out = p->st;
	pthread_mutex_unlock(&p->lock);
}

uint64_t wd_publisher_refusals(struct wd_publisher *p, int conflicts, char *buf, size_t len)
{
	pthread_mutex_lock(&p->lock);
	uint64_t n = conflicts ? p->st.conflicts : p->refusals;
	if (buf && len)
		snprintf(buf, len, "%s", conflicts ? p->conflict : p->refusal);
	pthread_mutex_unlock(&p->lock);
	return n;
}

int wd_publisher_flush(struct wd_publisher *p, int timeout_ms)
{
	struct timespec end;
	int r = 0;

	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += timeout_ms / 1000;
	end.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&p->lock);
	while (p->head && r == 0)
		r = pthread_cond_timedwait(&p->room, &p->lock, &end);
	r = p->head ? -ETIMEDOUT : 0;
	pthread_mutex_unlock(&p->lock);
	return r;
}

void wd_publisher_cancel(struct wd_publisher *p)
{
	pthread_mutex_lock(&p->lock);
	p->cancelled = 1;
	pthread_cond_broadcast(&p->room);
	pthread_mutex_unlock(&p->lock);
}

uint64_t wd_publisher_close(struct wd_publisher **pp, int timeout_ms)
{
	struct wd_publisher *p = *pp;
	uint64_t left = 0;

	if (!p)
		return 0;
	wd_publisher_flush(p, timeout_ms);
	pthread_mutex_lock(&p->lock);
	p->closing = 1;
	__atomic_store_n(&p->abort_now, 1, __ATOMIC_RELEASE);	/* what is left is given up */
	pthread_cond_broadcast(&p->work);
	pthread_cond_broadcast(&p->room);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	for (struct pub_snapshot *s = p->head, *n; s; s = n) {
		n = s->next;
		snapshot_free(s);
		left++;
	}
	snapshot_free(p->building);
	p->st.dropped += left;
	if (p->st.dropped)
		wd_log(WD_LOG_WARNING, "publisher: run '%s': closed with %llu of %llu snapshots "
		       "never made durable (%llu left unsent at close, %llu conflicts, %llu refused, "
		       "%llu dropped by the queue's policy)", p->run,
		       (unsigned long long)p->st.dropped, (unsigned long long)p->st.committed,
		       (unsigned long long)left, (unsigned long long)p->st.conflicts,
		       (unsigned long long)p->st.refused,
		       (unsigned long long)(p->st.dropped - left - p->st.conflicts - p->st.refused));
	uint64_t dropped = p->st.dropped;
	zmq_ctx_term(p->ctx);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->room);
	memset(&p->keys, 0, sizeof(p->keys));	/* a secret key */
	free(p);
	*pp = NULL;
	return dropped;
}
