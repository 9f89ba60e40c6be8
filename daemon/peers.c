/*
 * peers.c: see peers.h. A table by file descriptor: the monitor names
 * connections by descriptor, and so does each message (ZMQ_SRCFD), while
 * routing ids appear in neither event. A descriptor is reused after a
 * close; its entry is reset when the monitor reports the new connection.
 * The monitor and the socket are read apart: a connection's last message
 * and its close, read together, come close first (peers_handle runs
 * before the messages). So an entry keeps its connection's routing id
 * once closed, and a message with that id on a closed entry, or any
 * message on an entry closed before a message of it was read, is that
 * connection's last, not a new connection's: it does not open it again
 * (it did, and the run kept a publisher connected for good: runs rm was
 * refused for a job long gone). A new connection's event is read before
 * its first message (libzmq sends it at the accept, on the one I/O
 * thread); were one late, that connection is tracked from the event on.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "auth.h"
#include "commit_ranks.h"
#include "fdlimit.h"
#include "ingest.h"
#include "log_limit.h"
#include "logging.h"
#include "monitor.h"
#include "peers.h"
#include "state.h"
#include "wire.h"

#define MONITOR_EP "inproc://wdrift.monitor.peers"
#define FD_WARN_STEP 8		/* tenths of the descriptor limit: the first warning */
#define FD_CALM_STEP 5		/* below this many tenths, the warnings end */
#define RID_MAX 32		/* libzmq's own routing ids are 5 bytes */

struct peer {
	int open;
	int closed;		/* the monitor said its connection closed; a message of it may follow */
	int accepted;		/* its connection event came (it may come after a message) */
	uint64_t messages;
	int last_type;		/* wire_type of the last message; -1: not parsed */
	int64_t step;
	uint64_t commits;	/* commits not refused as a conflict when they came */
	uint64_t conflicts;	/* messages refused as a conflict */
	int64_t conflict_step;	/* the latest of them */
	uint64_t session, ranks;	/* its last commit's; 0: none yet */
	int64_t rank;		/* its last commit's rank; -1: not given */
	int64_t committed;	/* its last commit's step */
	int mixed_said;		/* its commits beside another job's: logged */
	char run[NAME_MAX + 1];	/* whole (a longer one is refused): runs rm matches it */
	char addr[80];
	uint64_t told[4];	/* notices it was sent unasked (peers_each_publisher), the latest 4 */
	unsigned n_told;
	/* its routing id (the first RID_MAX bytes, and the length), kept after it closed */
	unsigned char rid[RID_MAX];
	size_t rid_len;
};

/*
 * A rank of a sharded job whose connection closed (its last commit gave
 * ranks > 1, its rank and session): watched until its publisher is back
 * (a connection of the same session) or a step of its run waits for it.
 */
#define GONE_MATES 8	/* sessions of its job's other ranks kept, at most */

struct gone_rank {
	char run[NAME_MAX + 1];
	uint64_t session, rank, ranks;
	/*
	 * The sessions of its run's other ranks connected when it closed: its
	 * job's. None of them open later, beside other connections of the
	 * run: another job's, whose lag is not this rank's death (a job
	 * restarted within GONE_GRACE named the old job's pid).
	 */
	uint64_t mates[GONE_MATES];
	size_t n_mates;
	int64_t step;		/* its last commit's (it may have sent more since) */
	char addr[80];
	double at;		/* monotonic s: the close */
};

#define GONE_MAX 64		/* watched at once; the oldest goes first */
#define GONE_GRACE 10.0		/* s: a publisher reconnects within its backoff (at most 5 s and a quarter) */
#define GONE_KEEP 3600.0	/* s: watched for a step that waits for it at most this long */

struct peers {
	void *sock, *pair;
	struct gone_rank gone[GONE_MAX];
	size_t n_gone;
	struct auth *auth;
	struct peer *v;		/* by descriptor */
	size_t cap;
	struct log_limit drops;	/* lines about drops: a few a minute, then a count */
	/* descriptors: libzmq aborts the daemon when it runs out (fdlimit.h) */
	size_t n_open;		/* ingest connections open */
	long others;		/* descriptors open besides them, at the last count */
	long limit;		/* RLIMIT_NOFILE at the last check; -1: none */
	int warned;		/* the tenth of it last warned about; 0: none */
};

struct peers *peers_start(void *zctx, void *sock, struct auth *a)
{
	struct peers *p = calloc(1, sizeof(*p));
	int hwm = 100000;	/* the monitor drops events when its queue is full */

	if (!p)
		return NULL;
	p->sock = sock;
	p->auth = a;
	p->drops = (struct log_limit){ .who = "ingest", .what = "peers disconnected mid-message" };
	if (zmq_socket_monitor(sock, MONITOR_EP, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
			       ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
			       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) < 0 ||
	    !(p->pair = zmq_socket(zctx, ZMQ_PAIR))) {
		free(p);
		return NULL;
	}
	zmq_setsockopt(p->pair, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	if (zmq_connect(p->pair, MONITOR_EP) < 0) {
		zmq_close(p->pair);
		free(p);
		return NULL;
	}
	p->others = fdlimit_in_use();
	return p;
}

void *peers_socket(const struct peers *p)
{
	return p ? p->pair : NULL;
}

/* The entry of descriptor fd, grown into; NULL when out of memory or range. */
static struct peer *entry(struct peers *p, int fd)
{
	if (fd < 0 || fd > (1 << 22))
		return NULL;
	if ((size_t)fd >= p->cap) {
		size_t cap = p->cap ? p->cap : 256;
		while (cap <= (size_t)fd)
			cap *= 2;
		struct peer *v = realloc(p->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		memset(v + p->cap, 0, (cap - p->cap) * sizeof(*v));
		p->v = v;
		p->cap = cap;
	}
	return &p->v[fd];
}

/*
 * Warns as the descriptors in use approach the limit: at 80% of it, and
 * again at each further tenth, not per connection; and says so once they
 * are back under half. fd is a connection's just accepted (-1 on a
 * disconnect). The kernel gives the lowest free descriptor, so fd + 1 were
 * open as it was made: that count also takes in what the daemon holds
 * besides ingest connections (control clients, files), which the last
 * count, others, may have missed. Every figure is a lower bound, and
 * cheap: no scan of /proc per connection.
 */
static void fd_check(struct peers *p, int fd)
{
	long used = p->others + (long)p->n_open, step;

	p->limit = fdlimit_get();	/* one syscall; prlimit(1) may change it */
	if (p->limit <= 0)
		return;
	if (fd >= 0 && fd + 1 > used) {
		p->others = fd + 1 - (long)p->n_open;
		used = fd + 1;
	}
	step = used * 10 / p->limit;
	if (step >= FD_WARN_STEP && step > p->warned) {
		p->warned = (int)step;
		log_warning("ingest: %zu connections open, %ld of the daemon's %ld file descriptors in "
			    "use (%ld%%): libzmq aborts the daemon when descriptors run out, it cannot "
			    "refuse a connection (raise LimitNOFILE, or find the peer that holds so "
			    "many open)", p->n_open, used, p->limit, used * 100 / p->limit);
	} else if (p->warned && used * 10 < (long)FD_CALM_STEP * p->limit) {
		p->warned = 0;
		log_notice("ingest: %zu connections open, %ld of the daemon's %ld file descriptors in "
			   "use: back under half", p->n_open, used, p->limit);
	}
}

/* A connection on fd is open: counted, and its descriptors checked. */
static void opened(struct peers *p, struct peer *e, int fd)
{
	if (!e->open)
		p->n_open++;
	fd_check(p, fd);
}

/* The address of the peer on fd, for the log: "tcp 10.0.0.7:41234" or "ipc". */
static void peer_address(int fd, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN];

	snprintf(out, len, "fd %d", fd);
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
		return;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(out, len, "tcp %s:%u", host, ntohs(in->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
		snprintf(out, len, "tcp [%s]:%u", host, ntohs(in->sin6_port));
	} else if (ss.ss_family == AF_UNIX) {
		/* the process on the other end: what a user looks for (ps, kill) */
		struct ucred uc;
		socklen_t ul = sizeof(uc);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) == 0 && uc.pid > 0)
			snprintf(out, len, "ipc pid %ld", (long)uc.pid);
		else
			snprintf(out, len, "ipc (fd %d)", fd);
	}
}

/* Whether e and o are two jobs that each publish run as its only rank. */
static int other_job(const struct peer *e, const struct peer *o)
{
	return o != e && o->open && o->session && o->session != e->session && o->ranks <= 1 &&
	       !strcmp(o->run, e->run);
}

/*
 * e committed its run as the only rank: is another job's connection,
 * committing the same run the same way, open too? Said once per
 * connection. Not refused: a job restarted while its old process lingers
 * (a hung rank, a notebook) would be refused until that one's connection
 * closed; the log and `wdrift runs` say it instead.
 */
static int mixed_check(struct peers *p, struct peer *e, char *who, size_t len)
{
	for (size_t fd = 0; !e->mixed_said && fd < p->cap; fd++) {
		struct peer *o = &p->v[fd];
		if (!other_job(e, o))
			continue;
		e->mixed_said = o->mixed_said = 1;	/* once for the pair, not again at the other's commit */
		log_warning("ingest: run '%.200s' is published by two jobs at once, each as its only rank: %s "
			    "(after step %lld) and %s (step %lld, its first commit beside it). Their steps "
			    "interleave in the run and nothing tells them apart later: a job started under "
			    "a name in use? Stop one; `wdrift runs` shows the run's jobs", e->run, o->addr,
			    (long long)o->step, e->addr, (long long)e->step);
		snprintf(who, len, "%s and %s", o->addr, e->addr);
		return 1;
	}
	return 0;
}

/* Is rid (len bytes) the routing id e keeps? */
static int same_rid(const struct peer *e, const void *rid, size_t len)
{
	return e->rid_len == len && !memcmp(e->rid, rid, len < RID_MAX ? len : RID_MAX);
}

int peers_message(struct peers *p, zmq_msg_t *frames, const struct ingest_seen *seen, char *who, size_t len)
{
	zmq_msg_t *header = &frames[1];
	const void *rid = zmq_msg_data(&frames[0]);
	size_t rid_len = zmq_msg_size(&frames[0]);
	int type = seen->type, conflict = seen->conflict;
	const char *run = seen->run;
	int64_t step = seen->step;

	if (!p)
		return 0;
	/*
	 * A connection's events and its messages arrive here on separate
	 * sockets, in either order: read the monitor first, so that a closed
	 * connection is closed here before a message on its reused descriptor
	 * (and a connection event that comes after its first message keeps
	 * that message: e->accepted).
	 */
	peers_handle(p);
	struct peer *e = entry(p, zmq_msg_get(header, ZMQ_SRCFD));
	if (!e)
		return 0;
	if (!e->open && e->closed && (!e->rid_len || same_rid(e, rid, rid_len)))
		return 0;	/* the last message of a connection whose close was read first */
	if (!e->open) {	/* its connection event is still in the monitor's queue */
		opened(p, e, zmq_msg_get(header, ZMQ_SRCFD));
		memset(e, 0, sizeof(*e));
		e->open = 1;
		peer_address(zmq_msg_get(header, ZMQ_SRCFD), e->addr, sizeof(e->addr));
	}
	memcpy(e->rid, rid, rid_len < RID_MAX ? rid_len : RID_MAX);
	e->rid_len = rid_len;
	e->messages++;
	e->last_type = type;
	e->step = step;
	e->commits += type == WIRE_COMMIT && !conflict;
	if (conflict) {
		e->conflicts++;
		e->conflict_step = step;
	}
	snprintf(e->run, sizeof(e->run), "%s", run);
	if (type == WIRE_COMMIT && !conflict && seen->session) {
		e->session = seen->session;
		e->ranks = seen->ranks;
		e->rank = seen->rank;
		e->committed = step;
		if (e->ranks <= 1)
			return mixed_check(p, e, who, len);
	}
	return 0;
}

/*
 * A list said in a buffer of len bytes: whole entries joined by "; ", then
 * "; and N more" for those that did not fit. A pid cut short would name
 * another process, so an entry is never clipped: room for the tail is kept.
 */
struct said_list {
	char *buf;
	size_t len, at, n, unsaid;
};

static void said_init(struct said_list *l, char *buf, size_t len)
{
	*l = (struct said_list){ buf, len, 0, 0, 0 };
	if (len)
		buf[0] = 0;
}

static void said_add(struct said_list *l, const char *entry)
{
	size_t need = strlen(entry) + (l->n ? 2 : 0);

	if (!l->unsaid && l->at + need + 24 < l->len)
		l->at += (size_t)snprintf(l->buf + l->at, l->len - l->at, "%s%s", l->n ? "; " : "", entry);
	else
		l->unsaid++;
	l->n++;
}

static void said_end(struct said_list *l)
{
	if (l->unsaid && l->at < l->len)
		snprintf(l->buf + l->at, l->len - l->at, "; and %zu more", l->unsaid);
}

size_t peers_jobs(struct peers *p, const char *run, char *who, size_t len)
{
	struct said_list l;

	said_init(&l, who, len);
	for (size_t fd = 0; p && fd < p->cap; fd++) {
		const struct peer *e = &p->v[fd];
		int seen_before = 0;
		if (!e->open || !e->session || e->ranks > 1 || strcmp(e->run, run))
			continue;
		for (size_t k = 0; k < fd && !seen_before; k++)	/* a job's second connection */
			seen_before = p->v[k].open && p->v[k].session == e->session && !strcmp(p->v[k].run, run);
		if (!seen_before)
			said_add(&l, e->addr);
	}
	said_end(&l);
	return l.n;
}

/* A sharded job's rank whose connection closed: watched (peers_tick), one entry per rank. */
static void gone_add(struct peers *p, const struct peer *e, double t)
{
	struct gone_rank *g = NULL;

	/* the same rank closing again: one entry, its grace from this close */
	for (size_t i = 0; i < p->n_gone && !g; i++)
		if (p->gone[i].session == e->session && p->gone[i].rank == (uint64_t)e->rank &&
		    !strcmp(p->gone[i].run, e->run))
			g = &p->gone[i];
	if (!g && p->n_gone == GONE_MAX)
		memmove(p->gone, p->gone + 1, --p->n_gone * sizeof(p->gone[0]));
	if (!g)
		g = &p->gone[p->n_gone++];
	snprintf(g->run, sizeof(g->run), "%s", e->run);
	snprintf(g->addr, sizeof(g->addr), "%s", e->addr);
	g->session = e->session;
	g->rank = (uint64_t)e->rank;
	g->ranks = e->ranks;
	g->step = e->committed;
	g->at = t;
	g->n_mates = 0;
	for (size_t fd = 0; fd < p->cap && g->n_mates < GONE_MATES; fd++) {
		const struct peer *m = &p->v[fd];
		int kept = 0;
		if (!m->open || !m->session || m->session == e->session || m->ranks <= 1 || strcmp(m->run, e->run))
			continue;
		for (size_t k = 0; k < g->n_mates && !kept; k++)
			kept = g->mates[k] == m->session;
		if (!kept)
			g->mates[g->n_mates++] = m->session;
	}
}

/* A connection on fd ended: a line when it ended in the middle of something. */
static void disconnected(struct peers *p, int fd)
{
	struct peer *e = entry(p, fd);
	char what[160];
	double t = now_mono();

	if (!e || !e->open)
		return;
	e->open = 0;
	e->closed = 1;
	p->n_open--;
	fd_check(p, -1);
	if (e->ranks > 1 && e->session && e->rank >= 0)
		gone_add(p, e, t);
	if (e->last_type == WIRE_COMMIT || e->last_type == WIRE_PING || e->last_type == INGEST_SEEN_REQUEST)
		return;	/* a publisher that closed after its snapshot, a liveness check, a CLI told */
	if (!e->messages) {
		/*
		 * Publishers check an endpoint by connecting a socket they close at
		 * once, and dropped DEALERs reconnect: this one is common and
		 * harmless, so it is debug: at info, every publisher's start wrote
		 * it (a trial read it as a fault, and its frame-size hint with it).
		 */
		log_debug("ingest: peer %s disconnected before any message of it arrived whole (a "
			 "frame over %u bytes as its first message would look the same)", e->addr,
			 WIRE_MAX_FRAME + WIRE_MAX_HEADER);
		return;
	}
	if (e->last_type == WIRE_TENSOR)
		snprintf(what, sizeof(what), "in the middle of run '%.60s' step %lld, before its commit",
			 e->run, (long long)e->step);
	else if (e->last_type == WIRE_HELLO)
		snprintf(what, sizeof(what), "after its hello from run '%.60s', before a tensor arrived "
			 "whole", e->run);
	else
		snprintf(what, sizeof(what), "after a message that was refused");
	if (!log_limit_may(&p->drops, t))
		return;
	log_warning("ingest: peer %s disconnected %s: a publisher that died or gave up on the connection (a send timeout), or a frame over %u bytes "
		    "(max_frame plus a header), which ZeroMQ refuses by closing the connection",
		    e->addr, what, WIRE_MAX_FRAME + WIRE_MAX_HEADER);
}

void peers_handle(struct peers *p)
{
	uint16_t event;
	uint32_t value;
	char endpoint[256] = "";
	struct peer *e;

	while (p && monitor_recv(p->pair, &event, &value, endpoint, sizeof(endpoint))) {
		if (event == ZMQ_EVENT_ACCEPTED && (e = entry(p, (int)value))) {
			if (e->open && !e->accepted) {
				e->accepted = 1;	/* late: its messages came first */
			} else {	/* a new connection, maybe on a reused descriptor */
				opened(p, e, (int)value);
				memset(e, 0, sizeof(*e));
				e->open = e->accepted = 1;
				e->last_type = -1;
				peer_address((int)value, e->addr, sizeof(e->addr));
			}
		} else if (event == ZMQ_EVENT_DISCONNECTED) {
			disconnected(p, (int)value);
		} else if (p->auth && (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
				       event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)) {
			auth_event(p->auth, "ingest", endpoint, event, value);
		}
	}
}

size_t peers_publishing(struct peers *p, const char *run, size_t *refused, char *who, size_t len)
{
	size_t nr = 0;
	char one[200];
	struct said_list l;

	peers_handle(p);
	said_init(&l, who, len);
	for (size_t fd = 0; p && fd < p->cap; fd++) {
		const struct peer *e = &p->v[fd];
		if (!e->open || strcmp(e->run, run))
			continue;
		/*
		 * Nothing of its own is in the run: every commit refused. A
		 * commit acked as a duplicate counts as its own: the job was
		 * told it is stored.
		 */
		int rerun = e->conflicts && !e->commits;
		int k = snprintf(one, sizeof(one), "%s", e->addr);
		if (!rerun && e->step >= 0)
			k += snprintf(one + k, sizeof(one) - (size_t)k, " after step %lld", (long long)e->step);
		if (e->conflicts)
			snprintf(one + k, sizeof(one) - (size_t)k, ", refused as a conflict at step %lld",
				 (long long)e->conflict_step);
		said_add(&l, one);
		nr += (size_t)rerun;
	}
	said_end(&l);
	if (refused)
		*refused = nr;
	return l.n;
}

size_t peers_others(struct peers *p, const char *run, const void *rid, size_t rid_len)
{
	size_t n = 0;

	peers_handle(p);	/* a job that has just exited: its close may be queued */
	for (size_t fd = 0; p && fd < p->cap; fd++) {
		const struct peer *e = &p->v[fd];
		n += e->open && !strcmp(e->run, run) && !same_rid(e, rid, rid_len) &&
		     !(e->conflicts && !e->commits);
	}
	return n;
}

size_t peers_each_publisher(struct peers *p, const char *run, uint64_t told, peers_each_fn *fn, void *ctx)
{
	size_t n = 0;

	peers_handle(p);	/* a job that has just exited: its close may be queued */
	for (size_t fd = 0; p && fd < p->cap; fd++) {
		struct peer *e = &p->v[fd];
		int had = 0;
		for (unsigned k = 0; k < sizeof(e->told) / sizeof(e->told[0]) && k < e->n_told; k++)
			had |= e->told[k] == told;
		/* a routing id longer than kept cannot be replied to from here */
		if (had || !e->open || !e->commits || strcmp(e->run, run) || e->rid_len > RID_MAX)
			continue;
		fn(ctx, e->rid, e->rid_len);
		e->told[e->n_told++ % (sizeof(e->told) / sizeof(e->told[0]))] = told;
		n++;
	}
	return n;
}

int peers_open(struct peers *p, const void *rid, size_t rid_len)
{
	peers_handle(p);	/* its close may be queued */
	for (size_t fd = 0; p && fd < p->cap; fd++)
		if (p->v[fd].open && same_rid(&p->v[fd], rid, rid_len))
			return 1;
	return 0;
}

/* What became of a gone rank's publisher, by the connections open now (gone_seen). */
enum gone_seen {
	GONE_MISSING,	/* the run's other connections are open, none of its session */
	GONE_COMING,	/* one naming its run has committed nothing yet: a re-send, its session unknown */
	GONE_ENDED,	/* no connection names the run: the job has ended */
	GONE_BACK,	/* a connection of its session is open: forgotten (a later close is watched anew) */
	GONE_OTHER_JOB,	/* the run's connections open are none of its job's: that job ended, another runs */
};

static enum gone_seen gone_seen(const struct peers *p, const struct gone_rank *g)
{
	int any = 0, unknown = 0, mate = 0;

	for (size_t fd = 0; fd < p->cap; fd++) {
		const struct peer *e = &p->v[fd];
		if (!e->open || strcmp(e->run, g->run))
			continue;
		if (e->session == g->session)
			return GONE_BACK;
		for (size_t k = 0; k < g->n_mates && !mate; k++)
			mate = e->session == g->mates[k];
		unknown |= !e->session;
		any = 1;
	}
	/* none of its job's ranks open, others are: another job (its ranks each a new session) */
	return unknown ? GONE_COMING : mate ? GONE_MISSING : any ? GONE_OTHER_JOB : GONE_ENDED;
}

void peers_tick(struct peers *p, double now, double pending_timeout, peers_waits_fn *waits, void *ctx)
{
	for (size_t i = 0; p && i < p->n_gone;) {
		struct gone_rank *g = &p->gone[i];
		enum gone_seen seen = gone_seen(p, g);
		double age = now - g->at;
		int64_t step = (seen == GONE_MISSING || seen == GONE_ENDED) && age >= GONE_GRACE ?
			       waits(ctx, g->run, g->rank, g->ranks) : -1;
		int waiting = seen != GONE_BACK && seen != GONE_ENDED && seen != GONE_OTHER_JOB && step < 0 &&
			      age < GONE_KEEP;
		if (waiting || (seen != GONE_BACK && age < GONE_GRACE)) {	/* its grace, or no step waits yet */
			i++;
			continue;
		}
		/*
		 * The whole job gone, a step still waiting for this rank: the rank
		 * died and took the others with it (torchrun, mp.spawn), which
		 * read as "a rank that never started" (a trial's, of a rank that
		 * had committed steps before)
		 */
		if (step >= 0 && seen == GONE_ENDED)
			log_warning("ingest: run '%.200s' step %lld waits for rank %llu of %llu, whose connection "
				    "(%s, its last commit step %lld) closed %.0f s ago, and every connection of the run "
				    "has closed since: the job ended (a rank that died, and the others with it?). The "
				    "step expires at limits.pending_timeout (%.0f s); a job restarted before then sends "
				    "it again", g->run, (long long)step, (unsigned long long)g->rank,
				    (unsigned long long)g->ranks, g->addr, (long long)g->step, now - g->at, pending_timeout);
		else if (step >= 0)	/* missing past its grace, and a step waits for it */
			log_warning("ingest: run '%.200s' step %lld waits for rank %llu of %llu, whose connection "
				    "(%s, its last commit step %lld) closed %.0f s ago and has not come back: a rank that "
				    "died? The other ranks' commits wait until limits.pending_timeout (%.0f s) "
				    "expires the step; `wdrift status` shows it", g->run, (long long)step,
				    (unsigned long long)g->rank, (unsigned long long)g->ranks, g->addr,
				    (long long)g->step, now - g->at, pending_timeout);
		memmove(g, g + 1, (--p->n_gone - i) * sizeof(*g));
	}
}

int peers_gone_lacking(struct peers *p, const struct snapshot *snap)
{
	for (size_t i = 0; p && i < p->n_gone; i++) {
		const struct gone_rank *g = &p->gone[i];
		enum gone_seen seen = gone_seen(p, g);
		/* ended too: said by peers_tick, not as a rank that never started (ingest_lag_tick) */
		if (!strcmp(g->run, snap->run->name) && seen != GONE_BACK && seen != GONE_OTHER_JOB &&
		    commit_ranks_lacks(snap, g->rank, g->ranks))
			return 1;
	}
	return 0;
}

void peers_forget_run(struct peers *p, const char *run)
{
	for (size_t fd = 0; p && fd < p->cap; fd++)
		if (p->v[fd].open && !strcmp(p->v[fd].run, run))
			p->v[fd].mixed_said = 0;
}

void peers_stop(struct peers **pp)
{
	struct peers *p = *pp;
	if (!p)
		return;
	zmq_socket_monitor(p->sock, NULL, 0);
	zmq_close(p->pair);
	free(p->v);
	free(p);
	*pp = NULL;
}
