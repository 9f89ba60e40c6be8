/*
 * peers.h: who is connected to the ingest socket, and a line in the log
 * when one drops in the middle of something.
 *
 * ZeroMQ enforces the largest frame (ZMQ_MAXMSGSIZE, max_frame plus a
 * header's 64 KiB) by dropping the connection: the peer gets no reply, and
 * the daemon sees only a disconnect. A publisher that keeps losing its
 * connection must be able to find out why, so the ingest socket's monitor
 * reports connections and disconnects by file descriptor, every message
 * read notes its descriptor (ZMQ_SRCFD) and what it was, and a disconnect
 * after anything but a commit or a ping is logged with the peer's address:
 * a publisher killed mid-snapshot, or a frame over the limit (protocol.md,
 * "Frames"). At most 10 lines a minute, then a count of the rest.
 *
 * Handshake failures reported by the same monitor go to auth.c (a socket
 * has one monitor). Main thread only. Depends on libzmq, auth.h.
 */
#ifndef WD_PEERS_H
#define WD_PEERS_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

struct auth;
struct peers;

/* Watches sock (bound); a is NULL without CURVE. NULL with errno on failure. */
struct peers *peers_start(void *zctx, void *sock, struct auth *a);

/* The monitor's socket, for the loop's zmq_poll. */
void *peers_socket(const struct peers *p);

/*
 * A message was read: frames its routing id, then its frame 0 (for its
 * descriptor and the peer's address), seen what ingest made of it (ingest.h: its type, run,
 * step, whether it was refused as a conflict, a commit's session and
 * ranks). A commit of a run that one job publishes alone (ranks 1) from a
 * second job (another session) while the first's connection is open is
 * logged, once per pair of jobs: the two jobs' steps interleave in the
 * run. Returns 1 then, with both addresses in who ("ipc pid 4242 and ipc
 * pid 4300", clipped to len), for the run to keep (run_note_mixed); else 0.
 */
struct ingest_seen;
int peers_message(struct peers *p, zmq_msg_t *frames, const struct ingest_seen *seen, char *who, size_t len);

/*
 * How many jobs publish run as its only rank at once: distinct sessions
 * among the open connections whose last message named it and whose
 * commits said ranks 1 (a sharded job's ranks each have their own session,
 * and say ranks > 1). Their addresses go in who ("ipc pid 4242; ipc pid
 * 4300": whole entries, then "; and N more" when len holds no more).
 */
size_t peers_jobs(struct peers *p, const char *run, char *who, size_t len);

/* Reads the monitor's events: connections, disconnects, handshake failures. */
void peers_handle(struct peers *p);

/*
 * The open connections whose last message named run: its publishers still
 * attached (one keeps its connection between snapshots, and names its run
 * in the hello it sends on each new one). Returns how many; *refused (when
 * not NULL) is how many of them had every snapshot they committed refused
 * as a conflict (a re-run under the name, which has nothing of its own in
 * the run). who gets their addresses and last steps ("tcp 10.0.0.7:41234
 * after step 12; ipc pid 4242, refused as a conflict at step 0", clipped
 * to len; who may be NULL when len is 0). The monitor is read first: a
 * job that has just exited may have its disconnect queued there. Never
 * waits: runs rm waits for later disconnects off the loop (rm_wait.h).
 */
size_t peers_publishing(struct peers *p, const char *run, size_t *refused, char *who, size_t len);

/*
 * The open connections whose last message named run, other than the one
 * of routing id rid (rid_len bytes), and not a re-run's (every commit
 * refused): the jobs that may still be publishing run beside it. 0 tells a
 * conflict's re-run that the job whose steps it collides with has gone.
 */
size_t peers_others(struct peers *p, const char *run, const void *rid, size_t rid_len);
/*
 * Calls fn(ctx, rid, rid_len) for each open connection whose last message
 * named run, that committed some of it unrefused (not a re-run's), and
 * that was not sent told already (a notice's hash; each connection keeps
 * its latest 4): the job's ranks, for a notice they did not ask for, each
 * once, and a job started later too. Returns how many. The monitor is
 * read first.
 */
typedef void peers_each_fn(void *ctx, const void *rid, size_t rid_len);
size_t peers_each_publisher(struct peers *p, const char *run, uint64_t told, peers_each_fn *fn, void *ctx);
/*
 * Whether the connection of routing id rid (rid_len bytes) is open: a
 * commit's waiter may be a rank that died since (status says so).
 */
int peers_open(struct peers *p, const void *rid, size_t rid_len);
/*
 * A rank of a sharded job whose connection closed and whose publisher has
 * not come back (no connection of its session; GONE_GRACE seconds given),
 * while waits(ctx, run, rank, ranks) says a step of its run waits for it
 * (the step, or -1): logged once, naming the run, step, rank and process,
 * instead of nothing until limits.pending_timeout (pending_timeout s)
 * expires the step (a trial: 10 minutes of silence per step). Called
 * about once a second; now is monotonic seconds.
 */
typedef int64_t peers_waits_fn(void *ctx, const char *run, uint64_t rank, uint64_t ranks);
void peers_tick(struct peers *p, double now, double pending_timeout, peers_waits_fn *waits, void *ctx);
/*
 * Is a rank that snap lacks watched as gone (its connection closed, not
 * back): its death is peers_tick's to say, not a lag (ingest_lag_tick).
 */
struct snapshot;
int peers_gone_lacking(struct peers *p, const struct snapshot *snap);
/* runs rm forgot run: its connections' "two jobs" warning is said again, for the run anew. */
void peers_forget_run(struct peers *p, const char *run);

void peers_stop(struct peers **p);

#endif
