/*
 * publisher.c: the publisher side of protocol v1 (wdrift.h, "Publishing";
 * docs/publishing.md): the caller's side of it, and the library's errors.
 *
 * The caller's thread only copies tensors into a snapshot
 * (publisher_snapshot.c) and queues it here; a background thread
 * (publisher_send.c) owns the ZeroMQ socket, sends the oldest queued
 * snapshot and removes it once the daemon acked or refused it for good.
 * The queue holds at most opts.queue_bytes; past that the drop policy
 * applies at commit. Everything the two threads share is under p->lock.
 *
 * Every failure a user can cause is said once, where they look (stderr
 * through wd_log), and costs no spinning: a bad endpoint fails at open;
 * an absent daemon is retried with a growing, jittered pause and warned
 * about after stall_warn_ms; a refusal that a retry cannot fix (conflict,
 * a snapshot that expired waiting for other ranks, a malformed tensor) drops
 * the snapshot, counts it, and keeps its message for wd_publisher_refusals.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "error.h"
#include "handshake.h"
#include "log.h"
#include "near_name.h"
#include "clock.h"
#include "publisher_internal.h"
#include "relpath.h"
#include "zctx.h"
#include "zmtp_probe.h"

/* --- errors --- */

static _Thread_local char last_error[1024];

int pub_error(int r, const char *fmt, ...)
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
	case ENOENT: return "not found (none yet, or no such file: wd_last_error() says which)";
	case E2BIG: return "too many pieces";
	case EHOSTUNREACH: return "cannot reach the daemon until that is fixed (wd_publisher_diagnosis says why)";
	default: return err < 0 ? strerror(-err) : "not an error code (expected a negative errno)";
	}
}

/* --- time --- */

double pub_now(void)
{
	return wd_now();
}

/*
 * On the monotonic clock, as p->work and p->room wait (wd_publisher_open):
 * the time of day steps (NTP, a VM resumed), and a deadline on it ended a
 * flush at once, its snapshot not yet tried, or stretched a backoff by the
 * step.
 */
void pub_deadline(int ms, struct timespec *end)
{
	clock_gettime(CLOCK_MONOTONIC, end);
	end->tv_sec += ms / 1000;
	end->tv_nsec += (long)(ms % 1000) * 1000000;
	if (end->tv_nsec >= 1000000000) {
		end->tv_sec++;
		end->tv_nsec -= 1000000000;
	}
}

/* --- opening --- */

/* A run name names a spool directory on the daemon: 0, or -1 with why. */
static int check_run(const char *run, char *why, size_t len)
{
	size_t n = strlen(run);
	if (!n || n > NAME_MAX)
		return wd_error(why, len, "%zu bytes", n);
	if (!strcmp(run, ".") || !strcmp(run, ".."))
		return wd_error(why, len, "a directory's own name");
	for (size_t i = 0; i < n; i++) {
		char c = run[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("_.:-", c))) {
			if (c >= 0x20 && c < 0x7f)
				return wd_error(why, len, "'%c' at byte %zu", c, i);
			/* a newline read as '?' (a trial's): the byte itself */
			return wd_error(why, len, "byte 0x%02x%s at byte %zu", (unsigned char)c,
					c == '\n' ? " (a newline)" : c == '\t' ? " (a tab)" : c == '\r' ? " (a carriage return)" : "", i);
		}
	}
	return 0;
}

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
 * means from here when nothing listens there yet, and which socket beside
 * it the name may be a typo of (wd_suggest_socket). Fills p->where.
 */
static int check_endpoint(struct wd_publisher *p, const char *endpoint)
{
	if (strncmp(endpoint, "tcp://", 6) && strncmp(endpoint, "ipc://", 6) &&
	    strncmp(endpoint, "inproc://", 9))
		return pub_error(-EINVAL, "endpoint '%.400s' is not a ZeroMQ endpoint: tcp://HOST:PORT, "
				 "ipc://PATH or inproc://NAME", endpoint);
	const char *port = strrchr(endpoint, ':');	/* tcp://HOST:PORT, not "tcp://h" or "tcp://h:" */
	if (!strncmp(endpoint, "tcp://", 6) && (port < endpoint + 6 || !port[1]))
		return pub_error(-EINVAL, "endpoint '%.400s' has no port: tcp://HOST:PORT", endpoint);
	for (const char *c = endpoint; *c; c++)	/* a pasted line's end, as the CLI says it */
		if ((unsigned char)*c <= ' ' || *c == 0x7f)
			return pub_error(-EINVAL, "endpoint '%.400s' contains a space or a control character",
					 PUB_CLIP(endpoint));
	char slash[PATH_MAX + 200];
	if (wd_hs_trailing_slash(endpoint, slash, sizeof(slash)))
		return pub_error(-EINVAL, "endpoint '%.400s' %s", endpoint, slash);
	if (!strncmp(endpoint, "tcp://", 6)) {
		/* ZeroMQ takes a port of 82636 as 17100: a trial's snapshots went to another daemon */
		char *end;
		unsigned long n = strtoul(port + 1, &end, 10);
		/* a host or port of *, for a daemon to bind: ZeroMQ said only "Invalid argument" */
		const char *bind_only = wd_hs_bind_only(endpoint);
		if (bind_only || port[1] < '0' || port[1] > '9' || *end || n < 1 || n > 65535)
			return pub_error(-EINVAL, "endpoint '%.400s' %s", endpoint, bind_only ? bind_only :
					 "has a bad port: the port must be 1 to 65535");
	}
	void *s = zmq_socket(p->ctx, ZMQ_DEALER);
	int linger = 0;
	if (!s)
		return pub_error(-ENOMEM, "endpoint '%.400s': cannot make a socket: %s", endpoint,
				 zmq_strerror(errno));
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	int r = zmq_connect(s, endpoint);
	int e = errno;
	zmq_close(s);
	if (r < 0)
		return pub_error(-EINVAL, "endpoint '%.400s': ZeroMQ refuses it: %s", endpoint,
				 zmq_strerror(e));
	snprintf(p->where, sizeof(p->where), "%s", endpoint);
	if (!strncmp(endpoint, "inproc://", 9)) {
		/* the reason no ack will ever come (Publisher.diagnosis), not only a line on stderr */
		snprintf(p->diagnosis, sizeof(p->diagnosis), "endpoint '%.400s' reaches only sockets of "
			 "this publisher's own ZeroMQ context, never a wdriftd: use tcp:// or ipc://",
			 endpoint);
		p->diagnosis_how = WD_DIAGNOSIS_SURE;
		p->unreachable = PUB_UNREACHABLE;
		wd_log(WD_LOG_WARNING, "publisher: run '%s': %s", p->run, p->diagnosis);
	} else if (!strncmp(endpoint, "ipc://", 6) && endpoint[6] != '@') {	/* '@': abstract, no file */
		const char *path = wd_path_rest(endpoint + 6);	/* ./run/x.sock: say /cwd/run/x.sock */
		char full[PATH_MAX + 512];
		struct stat st;

		wd_path_whole(path, full, sizeof(full));
		if (path[0] != '/')
			snprintf(p->where, sizeof(p->where), "%s (%s)", endpoint, full);
		char kind[PATH_MAX + 1200], near[320];
		if (wd_hs_not_socket(endpoint, full, "ingest", kind, sizeof(kind))) {
			/*
			 * A connect there is refused as if a daemon had stopped, and
			 * no wdriftd binds over it (daemon/main.c): a trial's job
			 * waited on what it called a stale socket file. A typo of a
			 * socket beside it is named, as for a path with no file.
			 */
			wd_suggest_socket(endpoint, full, near, sizeof(near));
			snprintf(p->diagnosis, sizeof(p->diagnosis), "%.*s%s", WD_HS_NOT_SOCKET_MAX, kind, near);
			p->diagnosis_how = WD_DIAGNOSIS_SURE;
			p->unreachable = PUB_NOT_SOCKET;
			wd_log(WD_LOG_WARNING, "publisher: run '%s': %s: snapshots wait until that is fixed",
			       p->run, p->diagnosis);
		} else if (stat(full, &st) < 0 && errno == EACCES && wd_hs_denied(full, kind, sizeof(kind))) {
			/* there, maybe, but not for this user: not "no socket yet" (a trial's) */
			snprintf(p->diagnosis, sizeof(p->diagnosis), "cannot reach the socket file %.200s (%.150s): "
				 "%.600s", full, endpoint, kind);
			p->diagnosis_how = WD_DIAGNOSIS_SURE;
			p->unreachable = PUB_DENIED;
			wd_log(WD_LOG_WARNING, "publisher: run '%s': %s: snapshots wait until that is fixed",
			       p->run, p->diagnosis);
		} else if (stat(full, &st) < 0) {
			wd_suggest_socket(endpoint, full, near, sizeof(near));
			/* a lone name's directory is the working one, always there: no sign of a daemon's (a trial's) */
			if (!near[0] && path[0] != '/' && strchr(path, '/') && wd_socket_dir_there(full))
				/* the daemon's own directory, its socket gone: stopped, not elsewhere (a trial's hint
				 * sent the job to another project's daemon) */
				snprintf(near, sizeof(near), "; its directory is here: is this directory's wdriftd "
					 "running?");
			else if (!near[0])	/* no typo beside it: the same path under another directory? */
				wd_suggest_listening(path, full, near, sizeof(near));
			/* the reason no ack comes, until a daemon answers (publisher_peer.c) */
			snprintf(p->diagnosis, sizeof(p->diagnosis), "no socket at %.300s yet (%.200s%s%s)",
				 full, endpoint, path[0] != '/' ? ", a path relative to this process's "
				 "working directory" : "", near);
			p->diagnosis_how = WD_DIAGNOSIS_GUESS;
			p->unreachable = PUB_NO_SOCKET_FILE;
			wd_log(WD_LOG_WARNING, "publisher: run '%s': %s: snapshots wait until a wdriftd "
			       "listens there", p->run, p->diagnosis);
		}
	}
	return 0;
}

int wd_publisher_open(const char *endpoint, const char *run, const struct wd_publisher_opts *opts,
		      struct wd_publisher **out)
{
	struct wd_publisher *p;
	char why[600];
	int r;

	if (!out)
		return pub_error(-EINVAL, "no out: the handle's address is needed");
	*out = NULL;
	last_error[0] = 0;
	if (!endpoint || !run)
		return pub_error(-EINVAL, "no %s", !endpoint ? "endpoint" : "run name");
	if (check_run(run, why, sizeof(why)) < 0)	/* the daemon would refuse it: bad_field */
		return pub_error(-EINVAL, "run name '%s' refused: %s (a run name is 1 to %d bytes of "
				 "A-Z a-z 0-9 _ . : -, not '.' or '..')", PUB_CLIP(run), why, NAME_MAX);
	if (strlen(endpoint) >= sizeof(p->endpoint))
		return pub_error(-EINVAL, "endpoint is %zu bytes; at most %zu", strlen(endpoint),
				 sizeof(p->endpoint) - 1);
	if (opts && (opts->ranks < 0 || opts->ranks > (1 << 20)))
		return pub_error(-EINVAL, "ranks %d: 1 to %d", opts->ranks, 1 << 20);
	if (opts && opts->policy != WD_DROP_OLDEST && opts->policy != WD_DROP_NEWEST && opts->policy != WD_BLOCK)
		return pub_error(-EINVAL, "policy %d: WD_DROP_OLDEST, WD_DROP_NEWEST or WD_BLOCK", (int)opts->policy);
	if (opts && opts->ack_timeout_ms < 0)
		return pub_error(-EINVAL, "ack_timeout_ms %d: 0 (30000) or more", opts->ack_timeout_ms);
	if (!(p = calloc(1, sizeof(*p))))
		return -ENOMEM;
	snprintf(p->endpoint, sizeof(p->endpoint), "%s", endpoint);
	snprintf(p->run, sizeof(p->run), "%s", run);
	p->top_step = -1;
	if (opts)
		p->opts = *opts;
	snprintf(p->server_key_arg, sizeof(p->server_key_arg), "%s",
		 p->opts.server_key_arg ? p->opts.server_key_arg : "server_key");
	snprintf(p->key_arg, sizeof(p->key_arg), "%s", p->opts.key_arg ? p->opts.key_arg : "key");
	p->names = (struct wd_hs_names){ "ingest", "", p->server_key_arg, p->key_arg };
	if (wd_client_keys_load_as(p->opts.server_key, p->opts.key, p->server_key_arg, p->key_arg, &p->keys,
				   why, sizeof(why)) < 0) {
		r = pub_error(-EINVAL, "run '%s': %s", run, why);
		goto fail;
	}
	/* the caller's strings may go */
	p->opts.server_key = p->opts.key = p->opts.server_key_arg = p->opts.key_arg = NULL;
	if (!p->opts.queue_bytes)
		p->opts.queue_bytes = 1ull << 30;
	if (p->opts.ack_timeout_ms <= 0)
		p->opts.ack_timeout_ms = 30000;
	if (p->opts.stall_warn_ms == 0)
		p->opts.stall_warn_ms = 30000;
	if (p->opts.ranks < 1)
		p->opts.ranks = 1;
	p->rank = -1;
	/*
	 * The daemon tells this publisher's re-send of a step it refused from
	 * a new job's commit of it by this (docs/protocol.md, "Several ranks").
	 * Random, so that a restarted job's differ; 62 bits: a JSON integer.
	 */
	if (getrandom(&p->session, sizeof(p->session), GRND_NONBLOCK) != (ssize_t)sizeof(p->session))
		p->session = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)p ^ (uint64_t)pub_now();
	p->session = (p->session >> 2) | 1;
	p->rng = (unsigned)getpid() ^ (unsigned)(uintptr_t)p;
	if (!(p->ctx = wd_zmq_ctx_new())) {
		r = pub_error(-ENOMEM, "cannot make a ZeroMQ context: %s", zmq_strerror(errno));
		goto fail;
	}
	if ((r = check_endpoint(p, endpoint)) < 0)
		goto fail;
	p->waiting_since = pub_now();
	pthread_condattr_t mono;
	pthread_condattr_init(&mono);
	pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);	/* pub_deadline's clock */
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, &mono);
	pthread_cond_init(&p->room, &mono);
	pthread_condattr_destroy(&mono);
	if (pthread_create(&p->thread, NULL, pub_sender_main, p) != 0) {
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->work);
		pthread_cond_destroy(&p->room);
		r = pub_error(-ENOMEM, "cannot start the sending thread");
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

/* --- the queue --- */

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
		pub_snapshot_free(s);
	}
}

int wd_publisher_commit(struct wd_publisher *p)
{
	PUB_NEED(p);
	struct pub_snapshot *s = p->building;

	if (!s)
		return pub_error(-EINVAL, "no snapshot begun: wd_publisher_begin first");
	int r = pub_snapshot_check(p, s);
	if (r < 0) {	/* kept for the caller to mend; said at close if it is discarded instead */
		s->commit_refused = 1;
		snprintf(p->commit_refusal, sizeof(p->commit_refusal), "%s", wd_last_error());
		return r;
	}
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
		pub_snapshot_free(s);
		return 0;
	}
	if (!p->head)	/* the wait for an ack starts now */
		p->waiting_since = pub_now();
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
	if (!out)
		return;
	if (!p) {
		memset(out, 0, sizeof(*out));
		return;
	}
	pthread_mutex_lock(&p->lock);
	*out = p->st;
	pthread_mutex_unlock(&p->lock);
}

uint64_t wd_publisher_refusals(struct wd_publisher *p, int conflicts, char *buf, size_t len)
{
	if (!p) {
		if (buf && len)
			buf[0] = 0;
		return 0;
	}
	pthread_mutex_lock(&p->lock);
	uint64_t n = conflicts ? p->st.conflicts : p->refusals;
	if (buf && len)
		snprintf(buf, len, "%s", conflicts ? p->conflict : p->refusal);
	pthread_mutex_unlock(&p->lock);
	return n;
}

static size_t copy_locked(struct wd_publisher *p, const char *what, char *buf, size_t len)
{
	if (!p) {
		if (buf && len)
			buf[0] = 0;
		return 0;
	}
	pthread_mutex_lock(&p->lock);
	size_t n = strlen(what);
	if (buf && len)
		snprintf(buf, len, "%s", what);
	pthread_mutex_unlock(&p->lock);
	return n;
}

size_t wd_publisher_notice(struct wd_publisher *p, char *buf, size_t len)
{
	return copy_locked(p, p ? p->notice : "", buf, len);
}

size_t wd_publisher_last_notice(struct wd_publisher *p, char *buf, size_t len)
{
	return copy_locked(p, p ? p->last_notice : "", buf, len);
}

int wd_publisher_diagnosis(struct wd_publisher *p, char *buf, size_t len)
{
	if (!p) {
		if (buf && len)
			buf[0] = 0;
		return WD_DIAGNOSIS_NONE;
	}
	pthread_mutex_lock(&p->lock);
	int how = p->diagnosis[0] ? p->diagnosis_how : WD_DIAGNOSIS_NONE;
	if (buf && len)
		snprintf(buf, len, "%s", p->diagnosis);
	pthread_mutex_unlock(&p->lock);
	return how;
}

/*
 * Whether what waits can go nowhere until a person acts: a sure diagnosis
 * (an ipc:// path that is a file, inproc://, a handshake refused, another
 * socket's answer) and not a guess, which a daemon starting may end. A
 * file since replaced is no longer sure: the probe will say what it is.
 * Under the lock.
 */
static int hopeless(struct wd_publisher *p)
{
	if (!p->diagnosis[0] || p->diagnosis_how != WD_DIAGNOSIS_SURE)
		return 0;
	return p->unreachable != PUB_NOT_SOCKET || wd_ipc_not_socket(p->endpoint, 1);
}

/*
 * Waits up to timeout_ms for the queue to empty: 0, -ETIMEDOUT, or
 * -EHOSTUNREACH at once while hopeless when sure_ends says so (a program
 * that is ending). A flush waits even then: a reload that adds the job's
 * key lets it through (t72).
 */
static int drain(struct wd_publisher *p, int timeout_ms, int sure_ends)
{
	struct timespec end;
	int r = 0;

	PUB_NEED(p);
	pub_deadline(timeout_ms, &end);
	pthread_mutex_lock(&p->lock);
	while (p->head && r == 0 && !(sure_ends && hopeless(p)))
		r = pthread_cond_timedwait(&p->room, &p->lock, &end);
	r = !p->head ? 0 : sure_ends && hopeless(p) ? -EHOSTUNREACH : -ETIMEDOUT;
	/* words for wd_last_error, as every failing call has (a trial read an older call's) */
	if (r == -EHOSTUNREACH)
		pub_error(r, "%s", p->diagnosis);
	else if (r)
		pub_error(r, "%llu snapshot%s still queued after %d ms", (unsigned long long)p->st.queued,
			  p->st.queued == 1 ? "" : "s", timeout_ms);
	pthread_mutex_unlock(&p->lock);
	return r;
}

int wd_publisher_flush(struct wd_publisher *p, int timeout_ms)
{
	return drain(p, timeout_ms, 0);
}

int wd_publisher_settle(struct wd_publisher *p, int timeout_ms)
{
	return drain(p, timeout_ms, 1);
}

int wd_publisher_set_tries(struct wd_publisher *p, int tries)
{
	PUB_NEED(p);
	if (tries < 0)
		return pub_error(-EINVAL, "tries %d: 0 (never give up) or more", tries);
	pthread_mutex_lock(&p->lock);
	p->max_tries = tries;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int wd_publisher_set_rank(struct wd_publisher *p, int rank)
{
	PUB_NEED(p);
	if (p->opts.ranks <= 1)
		return pub_error(-EINVAL, "rank %d: this publisher has ranks %d, not several", rank,
				 p->opts.ranks);
	if (rank < 0 || rank >= p->opts.ranks)
		return pub_error(-EINVAL, "rank %d: from 0 to ranks - 1 (%d)", rank, p->opts.ranks - 1);
	pthread_mutex_lock(&p->lock);
	p->rank = rank;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int wd_publisher_last_outcome(struct wd_publisher *p, struct wd_publisher_outcome *out)
{
	PUB_NEED(p);
	if (!out)
		return pub_error(-EINVAL, "no out: where the outcome goes is needed");
	pthread_mutex_lock(&p->lock);
	*out = p->last;
	pthread_mutex_unlock(&p->lock);
	/* wd_strerror(-ENOENT) is generic: the words are these (a trial's) */
	return out->kind ? 0 : pub_error(-ENOENT, "no snapshot has left the queue yet");
}

void wd_publisher_cancel(struct wd_publisher *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->cancelled = 1;
	pthread_cond_broadcast(&p->room);
	pthread_mutex_unlock(&p->lock);
}

uint64_t wd_publisher_close(struct wd_publisher **pp, int timeout_ms)
{
	struct wd_publisher *p = pp ? *pp : NULL;
	uint64_t left = 0;

	if (!p)
		return 0;
	wd_publisher_settle(p, timeout_ms);
	pthread_mutex_lock(&p->lock);
	p->closing = 1;
	__atomic_store_n(&p->abort_now, 1, __ATOMIC_RELEASE);	/* what is left is given up */
	pthread_cond_broadcast(&p->work);
	pthread_cond_broadcast(&p->room);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	uint64_t left_sent = 0;	/* of them, sent whole: their acks had not come */
	for (struct pub_snapshot *s = p->head, *n; s; s = n) {
		n = s->next;
		left_sent += s->sent_whole;
		pub_snapshot_free(s);
		left++;
	}
	pub_building_discard(p);
	p->st.dropped += left;
	char tries[64] = "";	/* wd_publisher_set_tries: said only where it was set */
	if (p->given_up)
		snprintf(tries, sizeof(tries), "%llu given up after their tries, ", (unsigned long long)p->given_up);
	char unqueued[700] = "";
	if (p->unqueued)
		snprintf(unqueued, sizeof(unqueued), "%s%llu snapshot%s never queued: %s commit was refused "
			 "(publish() in Python, wd_publisher_commit in C) and the program went on (the last, "
			 "step %lld: %s)",
			 p->st.dropped ? "; and " : "", (unsigned long long)p->unqueued,
			 p->unqueued == 1 ? "" : "s", p->unqueued == 1 ? "its" : "their",
			 (long long)p->unqueued_step, p->unqueued_why);
	/*
	 * A snapshot sent whole whose ack had not come is not "unsent": with
	 * ranks > 1 it waited for the other ranks' parts (a trial's survivors
	 * of a killed rank read "left unsent" of a step the daemon held).
	 */
	char at_close[200];
	if (left_sent)
		snprintf(at_close, sizeof(at_close), "%llu left at close: %llu sent, %s, %llu never sent",
			 (unsigned long long)left, (unsigned long long)left_sent,
			 p->opts.ranks > 1 ? "waiting for its ack and the other ranks' parts" :
			 "waiting for its ack", (unsigned long long)(left - left_sent));
	else
		snprintf(at_close, sizeof(at_close), "%llu left unsent at close", (unsigned long long)left);
	if (p->st.dropped)
		wd_log(WD_LOG_WARNING, "publisher: run '%s': closed with %llu of %llu snapshots "
		       "never made durable (%s, %llu conflicts, %llu refused, "
		       "%s%llu dropped by the queue's policy)%s", p->run,
		       (unsigned long long)p->st.dropped, (unsigned long long)p->st.committed,
		       at_close, (unsigned long long)p->st.conflicts,
		       (unsigned long long)p->st.refused, tries,
		       (unsigned long long)(p->st.dropped - left - p->st.conflicts - p->st.refused - p->given_up),
		       unqueued);
	else if (p->unqueued)
		wd_log(WD_LOG_WARNING, "publisher: run '%s': closed with %s", p->run, unqueued);
	uint64_t dropped = p->st.dropped + p->unqueued;
	zmq_ctx_term(p->ctx);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->room);
	memset(&p->keys, 0, sizeof(p->keys));	/* a secret key */
	free(p);
	*pp = NULL;
	return dropped;
}
