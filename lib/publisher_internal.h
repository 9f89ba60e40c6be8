/*
 * publisher_internal.h: what the three files of the publisher share (the
 * public API is wdrift.h, "Publishing"; the design is publisher.c's).
 *
 *   publisher.c           the caller's side: open, the queue (commit and
 *                         its drop policy), stats, flush and close; errors
 *   publisher_snapshot.c  a snapshot being built: tensors, blocks cut into
 *                         shards, the names the commit counts
 *   publisher_send.c      the sending thread: the connection, the messages,
 *                         acks and refusals, the one retry loop, the
 *                         stall warning
 *
 * Internal to libwdrift; libc, pthreads, libzmq (as void *) and wire.h.
 */
#ifndef WD_PUBLISHER_INTERNAL_H
#define WD_PUBLISHER_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "handshake.h"
#include "keys.h"
#include "log.h"
#include "wdrift.h"
#include "wire.h"

#define PUB_MAX_SHARDS 65536	/* pieces of one tensor at once: the daemon's cap */

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
	size_t name_entries;	/* on a name's first entry: how many entries name it */
};

struct pub_snapshot {
	int64_t step;
	struct pub_tensor *t;
	size_t n, cap;
	uint64_t bytes;
	uint64_t n_names;	/* distinct tensor names: what the commit counts */
	size_t *names;		/* open addressing over t[]: index + 1, 0 empty */
	size_t names_cap;
	int tries;		/* sends so far: the resent count, and wd_publisher_set_tries */
	int internal_tries;	/* 'internal' refusals of another cause than disk or memory */
	int commit_refused;	/* wd_publisher_commit refused it: kept, to be mended or discarded */
	uint64_t pieces_refused;	/* tensor or block calls refused while it was built: it is spoilt */
	char piece_refusal[512];	/* the first one's, wd_last_error's words */
	int sent_whole;		/* its commit went to a daemon that had welcomed the socket */
	struct pub_snapshot *next;
};

/* That nothing listens at the endpoint, as the diagnosis says it. */
enum pub_unreachable {
	PUB_REACHED,		/* it is not that, or nothing is known */
	PUB_NO_SOCKET_FILE,	/* wd_publisher_open found no ipc socket file, and said so */
	PUB_NOT_SOCKET,		/* wd_publisher_open found a file there that is no socket, and said so */
	PUB_DENIED,		/* wd_publisher_open found the path closed to this user, and said so */
	PUB_UNREACHABLE,	/* a connect of our own was refused, or found no file (publisher_peer.c) */
	PUB_GONE,		/* the daemon closed the connection it had handshook (publisher_peer.c) */
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
	int64_t top_step;	/* the highest step begun; -1 none (the caller's thread) */
	int back_said;		/* a step begun below top_step said (once) */
	struct pub_snapshot *head, *tail;	/* queued; head may be in flight */
	int head_in_flight, closing, abort_now;
	int cancelled;		/* wd_publisher_cancel: commits wait for room no more */
	int max_tries;		/* wd_publisher_set_tries; 0: a snapshot is never given up */
	int rank;		/* wd_publisher_set_rank: this rank of opts.ranks; -1 not said (lock) */
	uint64_t session;	/* random, nonzero, for this publisher's life: its commits' "session" */
	struct wd_publisher_stats st;
	struct wd_publisher_outcome last;	/* the last snapshot to leave the queue */
	/* said once: no ack for stall_warn_ms; and again when acks come back */
	double waiting_since;	/* monotonic s: the last ack, or the queue becoming non-empty */
	double last_heard;	/* monotonic s: the daemon's last reply of any kind; 0 never */
	int stalled;
	uint64_t dropped_at_stall;
	uint64_t acked_at_stall;	/* st.acked when the stall was said: 0, no "acks again" */
	int heard_at_stall;	/* the daemon had answered at all by then: "answers again" */
	int ranks_at_stall;	/* the stall was a commit waiting for the other ranks, connected */
	/*
	 * A wait for the other ranks has ended in a refusal, said, since the
	 * last ack: a dead rank has every later step wait and expire alike, so
	 * the next such waits are not said (stall_quiet), and the refusal's
	 * short line is each step's one line.
	 */
	int ranks_wait_told;
	double told_wait;	/* seconds that told wait lasted: a quiet one is said past twice it */
	int stall_quiet;	/* this stall was not said (yet): nor is its end */
	uint64_t refusals;
	uint64_t given_up;	/* snapshots given up after wd_publisher_set_tries' tries */
	/*
	 * Snapshots whose commit was refused (-EINVAL) and that the caller then
	 * discarded, by a begin or by close: never queued, so in no count of
	 * the stats; close says them and counts them in its return. A C
	 * program that ignores commit's return lost them without a word.
	 */
	uint64_t unqueued;
	int64_t unqueued_step;		/* the last one's */
	char commit_refusal[512];	/* the building snapshot's refusal, wd_last_error's words */
	char unqueued_why[512];		/* the last one's */
	char refusal[768], conflict[768];
	/*
	 * The refusal last logged whole: its code, its step, and what tells
	 * the next ones alike (publisher_send.c: said_before). A re-run has
	 * every step refused alike, and so has a job with a dead rank: the
	 * next ones are logged in one short line each.
	 */
	int said_code;		/* enum wire_code; 0: none logged yet */
	int64_t said_step;
	char said_key[WIRE_REASON_MAX + 1];
	char pushback[320];	/* the daemon's last refusal that a re-send may get past */
	int full;		/* that refusal was its disk or memory (internal): back off */
	uint64_t max_message;	/* the daemon's, from its welcome (sender thread); 0: not heard */
	int welcomed;		/* the current socket got its welcome (sender thread) */
	char notice[WIRE_NOTICE_MAX + 1];	/* the first welcome's notice, "" if none (lock) */
	char ack_notice[WIRE_NOTICE_MAX + 1];	/* the last ack or pong notice said; sender thread only */
	char last_notice[WIRE_NOTICE_MAX + 1];	/* the same, for wd_publisher_last_notice (lock) */
	char say[2048];		/* a warning made under the lock, said after it (say_now) */
	/* publisher_peer.c: why the peer does not answer as an ingest socket */
	char diagnosis[1024];	/* "": none known (under the lock) */
	int diagnosis_how;	/* WD_DIAGNOSIS_SURE or _GUESS (under the lock) */
	enum pub_unreachable unreachable;	/* what the diagnosis says of the endpoint (lock) */
	double refused_since;	/* monotonic s: connects refused since, over sockets; 0 (sender) */
	double next_probe;	/* monotonic s: the next connect of our own (sender thread) */
	char server_key_arg[32], key_arg[32];	/* opts' names of the keys, copied */
	struct wd_hs_names names;	/* the ingest socket, and those names */
	void *mon;		/* the current socket's monitor, until it told (sender thread) */
	void *mon_of;		/* that socket */
	struct wd_hs hs;	/* what it told so far */
	int hs_refused;		/* that socket's handshake was refused: final for it (pub_peer_tick) */
	unsigned rng;
};

/* Sets this thread's wd_last_error() and returns r, a negative errno. */
int pub_error(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * -EINVAL, said, from a public call given no publisher: what close leaves
 * in the handle, so "a call after close" is an error, not a crash.
 */
#define PUB_NEED(p)                                                                     \
	do {                                                                            \
		if (!(p))                                                               \
			return pub_error(-EINVAL, "no publisher: NULL (closed, or never opened)"); \
	} while (0)

/* The library's one clip of user text for a message (log.h). */
#define PUB_CLIP(s) WD_CLIP(s)

/* publisher_peer.c: the peer at the endpoint, when it does not answer as wdriftd's ingest. */

/* Starts a monitor of s, before its connect. */
void pub_peer_watch(struct wd_publisher *p, void *s);
/* Stops it, before s closes. */
void pub_peer_unwatch(struct wd_publisher *p, void *s);
/*
 * Reads its events, in a wait slice: a failed handshake, explained, is said
 * once; so is the daemon closing the connection. Nonzero while the socket's
 * connection is so lost (closed, or its handshake refused): the caller
 * gives up on the socket, and tries a fresh one after its backoff.
 */
int pub_peer_tick(struct wd_publisher *p);
/* A reply (its last frame, len bytes) that is not the ingest protocol: named, once. */
void pub_peer_foreign(struct wd_publisher *p, const char *last, size_t len);
/*
 * A publisher's own kind of message came back: the connection reached this
 * socket itself (a TCP self-connect to an unused local port in the
 * ephemeral range), so nothing listens there. Said as that guess, once;
 * the caller drops the socket, and a fresh one connects from another port.
 */
void pub_peer_echo(struct wd_publisher *p);
/* The daemon answered as an ingest socket: no reason to give any more. */
void pub_peer_answered(struct wd_publisher *p);

/* CLOCK_MONOTONIC in seconds. */
double pub_now(void);
/* CLOCK_MONOTONIC ms from now, for pthread_cond_timedwait on p->work and p->room. */
void pub_deadline(int ms, struct timespec *end);

void pub_snapshot_free(struct pub_snapshot *s);
/*
 * What the daemon would refuse of a snapshot about to be committed: a
 * tensor not whole when this publisher is the only rank, or a tensor and
 * a group of the same name. 0, or a negative errno with the error set.
 */
int pub_snapshot_check(const struct wd_publisher *p, const struct pub_snapshot *s);
/* Frees the snapshot being built, counting it in p->unqueued when its commit was refused. */
void pub_building_discard(struct wd_publisher *p);

/* The sending thread's body (publisher_send.c); arg is the publisher. */
void *pub_sender_main(void *arg);

#endif
