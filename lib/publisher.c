/*
 * publisher.c: the publisher side of protocol v1 (wdrift.h, "Publishing").
 *
 * The caller's thread only copies tensors into a snapshot and queues it;
 * a background thread owns the ZeroMQ socket. It sends the oldest queued
 * snapshot, waits for its durable ack, and only then removes it, so a
 * snapshot whose ack never came (a timeout, a daemon restart) is simply
 * sent again on a fresh socket: re-sends are idempotent on the daemon.
 * One snapshot is in flight at a time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#include "keys.h"
#include "log.h"
#include "wire.h"

struct pub_tensor {
	struct wire_header h;	/* everything but the payload */
	void *data;
	size_t bytes;
};

struct pub_snapshot {
	int64_t step;
	struct pub_tensor *t;
	size_t n, cap;
	uint64_t bytes;
	int sent_before;	/* for the resent count */
	struct pub_snapshot *next;
};

struct wd_publisher {
	char endpoint[512], run[WIRE_NAME_MAX + 1];
	struct wd_publisher_opts opts;	/* server_key and key: NULL once loaded */
	struct wd_client_keys keys;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work, room;	/* queue grew; queue shrank */
	struct pub_snapshot *building;	/* the caller's, between begin and commit */
	struct pub_snapshot *head, *tail;	/* queued; head may be in flight */
	int head_in_flight, closing, abort_now;
	struct wd_publisher_stats st;
};

static void snapshot_free(struct pub_snapshot *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->t[i].data);
	free(s->t);
	free(s);
}

static int check_run(const char *run)
{
	size_t n = strlen(run);
	if (!n || n > WIRE_NAME_MAX || !strcmp(run, ".") || !strcmp(run, ".."))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = run[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("_.:-", c)))
			return -EINVAL;
	}
	return 0;
}

#define SEND_SLICE_MS 100	/* ZMQ_SNDTIMEO and ZMQ_RCVTIMEO: how soon close() is seen */

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

enum outcome { ACKED, REFUSED, RETRY };

/* The commit counts tensors, not messages: several shards make one tensor. */
static uint64_t distinct_tensors(const struct pub_snapshot *snap)
{
	uint64_t n = 0;
	for (size_t i = 0; i < snap->n; i++) {
		size_t j = 0;
		while (j < i && strcmp(snap->t[j].h.name, snap->t[i].h.name))
			j++;
		n += j == i;
	}
	return n;
}

/* Sends a snapshot and waits for its ack (or a refusal) for the timeout. */
static enum outcome send_snapshot(struct wd_publisher *p, void *s, struct pub_snapshot *snap)
{
	struct wire_limits lim = { WIRE_NAME_MAX, WIRE_MAX_DIMS, UINT64_MAX };
	struct wire_header *c = calloc(1, sizeof(*c)), *in = calloc(1, sizeof(*in));
	struct wire_error err;
	enum outcome out = RETRY;
	int send_waited = 0;	/* ms spent waiting for room, over the whole snapshot */

	if (!c || !in)
		goto done;
	for (size_t i = 0; i < snap->n; i++)
		if (send_message(p, s, &snap->t[i].h, snap->t[i].data, snap->t[i].bytes, &send_waited) < 0)
			goto done;
	c->type = WIRE_COMMIT;
	snprintf(c->run, sizeof(c->run), "%s", p->run);
	c->step = snap->step;
	c->tensors = distinct_tensors(snap);	/* shards of one tensor count once */
	if (send_message(p, s, c, NULL, 0, &send_waited) < 0)
		goto done;
	/* Wait in slices, so that close() need not wait out a whole timeout. */
	for (int waited = 0; waited < p->opts.ack_timeout_ms;) {
		char buf[8192];
		int n = zmq_recv(s, buf, sizeof(buf) - 1, 0);
		if (n < 0) {
			waited += 100;
			if (__atomic_load_n(&p->abort_now, __ATOMIC_ACQUIRE))
				break;
			continue;	/* no reply yet */
		}
		size_t len = (size_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1);
		if (wire_parse(buf, len, &lim, in, &err) < 0)
			continue;
		if (in->type == WIRE_WELCOME) {
			pthread_mutex_lock(&p->lock);
			p->st.connected = 1;
			pthread_mutex_unlock(&p->lock);
			continue;
		}
		if (in->type == WIRE_ACK && in->step == snap->step) {
			out = ACKED;
			break;
		}
		if (in->type == WIRE_ERROR) {
			/* full windows, conflicts and a snapshot the daemon dropped
			 * half-received (incomplete) pass: send it again; the rest is final */
			out = in->error.code == WIRE_OVER_WINDOW || in->error.code == WIRE_CONFLICT ||
			      in->error.code == WIRE_INTERNAL || in->error.code == WIRE_INCOMPLETE
				      ? RETRY : REFUSED;
			if (out == REFUSED)
				fprintf(stderr, "wdrift publisher: run '%s' step %lld refused: %s: %s\n", p->run,
					(long long)snap->step, wire_code_name(in->error.code), in->error.reason);
			else
				nanosleep(&(struct timespec){ 0, 200 * 1000 * 1000 }, NULL);
			break;
		}
	}
done:
	free(c);
	free(in);
	return out;
}

static void *sender_main(void *arg)
{
	struct wd_publisher *p = arg;
	void *ctx = zmq_ctx_new(), *s = NULL;
	int linger = 0, timeout = SEND_SLICE_MS;	/* a slice: see send_snapshot, send_frame */

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
		if (!s) {	/* a fresh socket: after a timeout the old one may hold stale replies */
			struct wire_header hello;
			memset(&hello, 0, sizeof(hello));
			hello.type = WIRE_HELLO;
			hello.step = -1;
			snprintf(hello.run, sizeof(hello.run), "%s", p->run);
			s = zmq_socket(ctx, ZMQ_DEALER);
			zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
			zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
			zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout, sizeof(timeout));
			int hello_waited = 0;
			if (wd_client_keys_apply(s, &p->keys) < 0 || zmq_connect(s, p->endpoint) < 0 ||
			    send_message(p, s, &hello, NULL, 0, &hello_waited) < 0) {
				zmq_close(s);
				s = NULL;
			}
		}
		enum outcome out = s ? send_snapshot(p, s, snap) : RETRY;
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
			continue;
		}
		p->head = snap->next;
		if (!p->head)
			p->tail = NULL;
		p->st.queued--;
		p->st.queued_bytes -= snap->bytes;
		if (out == ACKED) {
			p->st.acked++;
			p->st.connected = 1;
		} else {
			p->st.dropped++;
		}
		snapshot_free(snap);
		pthread_cond_broadcast(&p->room);
	}
	pthread_mutex_unlock(&p->lock);
	if (s)
		zmq_close(s);
	zmq_ctx_term(ctx);
	return NULL;
}

int wd_publisher_check_keys(const char *server_key, const char *key, char *err, size_t errlen)
{
	struct wd_client_keys k;
	int r = wd_client_keys_load(server_key, key, &k, err, errlen);

	memset(&k, 0, sizeof(k));
	return r < 0 ? -EINVAL : 0;
}

int wd_publisher_open(const char *endpoint, const char *run, const struct wd_publisher_opts *opts,
		      struct wd_publisher **out)
{
	struct wd_publisher *p;
	char why[600];

	*out = NULL;
	if (!endpoint || !run || check_run(run) < 0 || strlen(endpoint) >= sizeof(p->endpoint))
		return -EINVAL;
	if (!(p = calloc(1, sizeof(*p))))
		return -ENOMEM;
	snprintf(p->endpoint, sizeof(p->endpoint), "%s", endpoint);
	snprintf(p->run, sizeof(p->run), "%s", run);
	if (opts)
		p->opts = *opts;
	if (wd_client_keys_load(p->opts.server_key, p->opts.key, &p->keys, why, sizeof(why)) < 0) {
		wd_log(WD_LOG_ERR, "wdrift publisher: run '%s': %s", run, why);
		free(p);
		return -EINVAL;
	}
	p->opts.server_key = p->opts.key = NULL;	/* the caller's strings may go */
	if (!p->opts.queue_bytes)
		p->opts.queue_bytes = 1ull << 30;
	if (p->opts.ack_timeout_ms <= 0)
		p->opts.ack_timeout_ms = 30000;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->room, NULL);
	if (pthread_create(&p->thread, NULL, sender_main, p) != 0) {
		free(p);
		return -ENOMEM;
	}
	*out = p;
	return 0;
}

int wd_publisher_begin(struct wd_publisher *p, int64_t step)
{
	if (step < 0)
		return -EINVAL;
	snapshot_free(p->building);
	p->building = calloc(1, sizeof(*p->building));
	if (!p->building)
		return -ENOMEM;
	p->building->step = step;
	return 0;
}

int wd_publisher_tensor(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
			const void *data, const uint64_t *shape, int ndims, uint64_t offset,
			uint64_t count, uint64_t total)
{
	struct pub_snapshot *b = p->building;
	size_t esize = wd_dtype_size(dtype);

	if (!b || !name || !*name || strlen(name) > WIRE_NAME_MAX || !esize || !total ||
	    offset > total || count > total - offset || (count && !data) || ndims < 0 ||
	    ndims > WIRE_MAX_DIMS || (ndims && !shape))
		return -EINVAL;
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 16;
		struct pub_tensor *t = realloc(b->t, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		b->t = t;
		b->cap = cap;
	}
	struct pub_tensor *t = &b->t[b->n];
	memset(t, 0, sizeof(*t));
	t->bytes = count * esize;
	if (!(t->data = malloc(t->bytes ? t->bytes : 1)))
		return -ENOMEM;
	memcpy(t->data, data, t->bytes);	/* the one copy the caller pays for */
	t->h.type = WIRE_TENSOR;
	snprintf(t->h.run, sizeof(t->h.run), "%s", p->run);
	snprintf(t->h.name, sizeof(t->h.name), "%s", name);
	t->h.step = b->step;
	t->h.dtype = dtype;
	t->h.ndims = shape ? ndims : 1;
	for (int d = 0; d < t->h.ndims; d++)
		t->h.shape[d] = shape ? shape[d] : total;
	t->h.offset = offset;
	t->h.count = count;
	t->h.total = total;
	t->h.crc32 = wire_crc32(0, t->data, t->bytes);
	b->bytes += t->bytes;
	b->n++;
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

int wd_publisher_commit(struct wd_publisher *p)
{
	struct pub_snapshot *s = p->building;

	if (!s)
		return -EINVAL;
	p->building = NULL;
	pthread_mutex_lock(&p->lock);
	p->st.committed++;
	if (p->st.queued_bytes + s->bytes > p->opts.queue_bytes) {
		if (p->opts.policy == WD_DROP_OLDEST)
			drop_oldest(p, s->bytes);
		else if (p->opts.policy == WD_BLOCK)
			while (p->st.queued_bytes && p->st.queued_bytes + s->bytes > p->opts.queue_bytes &&
			       !p->closing)
				pthread_cond_wait(&p->room, &p->lock);
	}
	if (p->st.queued_bytes + s->bytes > p->opts.queue_bytes && p->st.queued_bytes) {
		p->st.dropped++;	/* drop_newest, or it cannot fit at all */
		pthread_mutex_unlock(&p->lock);
		snapshot_free(s);
		return 0;
	}
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

void wd_publisher_close(struct wd_publisher **pp, int timeout_ms)
{
	struct wd_publisher *p = *pp;
	if (!p)
		return;
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
	}
	snapshot_free(p->building);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->room);
	memset(&p->keys, 0, sizeof(p->keys));	/* a secret key */
	free(p);
	*pp = NULL;
}
