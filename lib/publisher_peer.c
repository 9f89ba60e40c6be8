/*
 * publisher_peer.c: what the peer at the publisher's endpoint is, when it
 * is not a wdriftd ingest socket that answers. The stall warning alone
 * could only guess ("is wdriftd running?", "is its memory budget full?")
 * for a publisher pointed at a CURVE daemon without keys, at the events
 * socket or at the control socket (a new user's trial found each). So:
 * - each socket's monitor is read in the sender's wait slices, and a
 *   failed handshake is explained as the CLI explains it (handshake.c);
 * - a reply that is not the ingest protocol (the control socket answers a
 *   DEALER with the publisher's own frame and its JSON error) is named.
 * - nothing listening there (a typo in the port, a socket file a killed
 *   daemon left, a job started before its daemon), which ZeroMQ retries
 *   in silence, is found by a connect of our own, as the CLI finds it;
 * - a daemon that stops (or dies) under a running job closes the
 *   connection: the monitor says so at once, where the ack timeout (30 s)
 *   would have been the first sign, and the sender takes a fresh socket.
 *   While it is gone, the probe's "nothing listens" adds nothing.
 * The reason is said once, as a warning, when it is found or changes, and
 * the stall warning gives it instead of a guess; when the daemon answers
 * after all, that is said too. Sender thread only, except p->diagnosis
 * and what goes with it, which are under the lock.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <zmq.h>

#include "handshake.h"
#include "log.h"
#include "publisher_internal.h"
#include "zmtp_probe.h"

#define PROBE_TIMEOUT_MS 500	/* a refusal is at once; a silent host is ZeroMQ's to wait for */

/*
 * Keeps why as the reason no ack comes, with how sure it is (WD_HS_SURE
 * or WD_HS_GUESS), and says it once: when it is new.
 */
static void diagnosed(struct wd_publisher *p, const char *why, int how, enum pub_unreachable unreachable)
{
	char msg[sizeof(p->diagnosis) + 300];

	pthread_mutex_lock(&p->lock);
	int fresh = strcmp(p->diagnosis, why) != 0;
	if (fresh)
		snprintf(p->diagnosis, sizeof(p->diagnosis), "%s", why);
	p->diagnosis_how = how == WD_HS_SURE ? WD_DIAGNOSIS_SURE : WD_DIAGNOSIS_GUESS;
	p->unreachable = unreachable;
	if (unreachable == PUB_GONE)
		p->st.connected = 0;
	if (how == WD_HS_SURE)
		pthread_cond_broadcast(&p->room);	/* a settle waiting ends (wd_publisher_settle) */
	pthread_mutex_unlock(&p->lock);
	if (!fresh)
		return;
	snprintf(msg, sizeof(msg), "publisher: run '%.200s': %s; snapshots wait%s", p->run, why,
		 unreachable == PUB_GONE ? ", and go when it answers again" : " until that is fixed");
	wd_log(WD_LOG_WARNING, "%s", msg);
}

void pub_peer_watch(struct wd_publisher *p, void *s)
{
	memset(&p->hs, 0, sizeof(p->hs));
	p->hs_refused = 0;
	p->mon_of = s;
	p->mon = wd_hs_monitor(p->ctx, s);	/* none (out of memory): no reasons, as before */
}

void pub_peer_unwatch(struct wd_publisher *p, void *s)
{
	if (p->mon)
		wd_hs_monitor_close(s, &p->mon);
}

/*
 * Nothing listens at the endpoint: ZeroMQ's connects are refused, and it
 * retries them without a word. Once they have been refused for
 * WD_HS_UNREACHABLE_S, over the sockets of every try, with none getting
 * through, a connect of our own says why (wd_hs_unreachable), every
 * WD_HS_UNREACHABLE_S while it lasts. Only a guess:
 * the daemon may yet start (a job started first), so the publisher keeps
 * trying and the monitor stays.
 */
static void probe_unreachable(struct wd_publisher *p)
{
	char why[sizeof(p->diagnosis)];
	double now = pub_now();

	if (p->hs.connected || !p->hs.refused_since) {
		if (p->hs.connected)
			p->refused_since = 0;
		return;
	}
	if (!p->refused_since)
		p->refused_since = now;
	if (now - p->refused_since < WD_HS_UNREACHABLE_S || now < p->next_probe)
		return;
	p->next_probe = now + WD_HS_UNREACHABLE_S;
	int e = wd_endpoint_connect_errno(p->endpoint, PROBE_TIMEOUT_MS);
	pthread_mutex_lock(&p->lock);
	int absent_said = p->unreachable == PUB_NO_SOCKET_FILE, gone = p->unreachable == PUB_GONE;
	int denied_said = p->unreachable == PUB_DENIED;
	/* said at open, and still so (a socket made there since, that nothing listens on, is said) */
	int not_socket_said = p->unreachable == PUB_NOT_SOCKET && wd_ipc_not_socket(p->endpoint, 1);
	pthread_mutex_unlock(&p->lock);
	if ((e == ENOENT && absent_said) || (e && gone) || (e == ECONNREFUSED && not_socket_said) ||
	    ((e == EACCES || e == EPERM) && denied_said))
		return;	/* said already: no socket file (or none but a file) from the start, or the daemon gone since */
	/* the same words each time (WD_HS_UNREACHABLE_S, not the time so far): said once */
	if (wd_hs_unreachable(p->endpoint, p->names.socket, e, WD_HS_UNREACHABLE_S, why, sizeof(why)))
		diagnosed(p, why, WD_HS_GUESS, PUB_UNREACHABLE);
	else
		p->refused_since = 0;	/* it got through: ZeroMQ's next connect may too */
}

int pub_peer_tick(struct wd_publisher *p)
{
	char why[sizeof(p->diagnosis)];
	uint32_t value;
	int code, how;

	if (!p->mon)
		return p->hs_refused;	/* its monitor stopped once it told (below) */
	/* close() is not held up by the probe (up to 0.5 s) that settling may take */
	pthread_mutex_lock(&p->lock);
	int closing = p->closing;
	pthread_mutex_unlock(&p->lock);
	if (closing)
		return 0;
	while ((code = wd_hs_monitor_event(p->mon, 0, &value)) >= 0)
		if ((how = wd_hs_event(&p->hs, code, value, p->endpoint, &p->names, &p->keys, why, sizeof(why)))) {
			p->hs_refused = 1;
			goto settled;
		}
	if (p->hs.lost) {
		/* a guess at the cause: a restart looks the same until it answers again */
		snprintf(why, sizeof(why), "wdriftd at %.400s closed the connection (stopped, or restarting?)",
			 p->where);
		diagnosed(p, why, WD_HS_GUESS, PUB_GONE);
		return 1;
	}
	if (!(how = wd_hs_stuck(&p->hs, p->endpoint, &p->names, &p->keys, why, sizeof(why)))) {
		probe_unreachable(p);
		return 0;
	}
settled:
	/*
	 * Stopped once it has told: a refused peer is retried every ~150 ms
	 * for the whole ack timeout, and undrained events fill the monitor's
	 * queue, after which libzmq's I/O thread blocks on it and stopping
	 * the monitor at close waits for ever (libzmq issue 3575).
	 */
	wd_hs_monitor_close(p->mon_of, &p->mon);
	diagnosed(p, why, how, PUB_REACHED);
	/*
	 * A refused handshake is final for the socket (ZeroMQ does not try
	 * that peer again): given up on, so that a fresh one tries after the
	 * backoff, as for a daemon that is away. A trial's key, added by a
	 * reload, got through only at the ack timeout (31 s).
	 */
	return p->hs_refused;
}

void pub_peer_foreign(struct wd_publisher *p, const char *last, size_t len)
{
	char why[sizeof(p->diagnosis)];

	/* wdriftd's control socket answers {"v":1,"ok":false,"error":...} */
	if (memmem(last, len, "\"ok\":", 5) && memmem(last, len, "\"error\":", 8))
		snprintf(why, sizeof(why), "%.400s is wdriftd's control socket (listen.control), which "
			 "answers the CLI's requests: publishers connect to listen.ingest", p->endpoint);
	else
		snprintf(why, sizeof(why), "%.400s answers, but not in wdriftd's ingest protocol: is it "
			 "wdriftd's listen.ingest?", p->endpoint);
	diagnosed(p, why, WD_HS_SURE, PUB_REACHED);	/* it answered: what it said is no guess */
}

void pub_peer_echo(struct wd_publisher *p)
{
	char why[sizeof(p->diagnosis)];

	/*
	 * A guess, not the sure "answers, but not in wdriftd's protocol" a
	 * trial got 1 time in 9 for a mistyped port: a sure one makes close()
	 * give up at once, and the user look for a foreign service.
	 */
	snprintf(why, sizeof(why), "nothing listens at %.400s: the connection reached this publisher itself "
		 "(a TCP connection to an unused local port can meet its own source port); is wdriftd running, "
		 "and is the port its listen.ingest?", p->endpoint);
	diagnosed(p, why, WD_HS_GUESS, PUB_UNREACHABLE);
}

void pub_peer_answered(struct wd_publisher *p)
{
	pthread_mutex_lock(&p->lock);
	/*
	 * Said that nothing listened, and snapshots wait: the fix is said too,
	 * unless the stall warning was said, whose "acks" line follows.
	 */
	int was_unreachable = p->diagnosis[0] && p->unreachable != PUB_REACHED && !p->stalled;
	p->diagnosis[0] = 0;
	p->unreachable = PUB_REACHED;
	pthread_mutex_unlock(&p->lock);
	p->refused_since = 0;
	pthread_mutex_lock(&p->lock);
	int waiting = p->st.queued > 0;
	pthread_mutex_unlock(&p->lock);
	if (was_unreachable)
		wd_log(WD_LOG_WARNING, "publisher: run '%.200s': wdriftd at %.400s answers %s", p->run, p->where,
		       waiting ? "now; the snapshots that waited go" : "again");
}
