/* handshake.c: why a handshake with a wdriftd socket fails (see handshake.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "clock.h"
#include "handshake.h"
#include "near_name.h"
#include "relpath.h"
#include "zmtp_probe.h"

void *wd_hs_monitor(void *ctx, void *s)
{
	static unsigned serial;	/* inproc names are per context; few monitors a process */
	char name[64];
	void *m;
	int linger = 0;

	snprintf(name, sizeof(name), "inproc://wd-hs-monitor-%u",
		 __atomic_fetch_add(&serial, 1, __ATOMIC_RELAXED));
	if (zmq_socket_monitor(s, name, ZMQ_EVENT_ALL) < 0 || !(m = zmq_socket(ctx, ZMQ_PAIR)))
		return NULL;
	zmq_setsockopt(m, ZMQ_LINGER, &linger, sizeof(linger));
	if (zmq_connect(m, name) < 0) {
		zmq_close(m);
		return NULL;
	}
	return m;
}

/* A monitor message is two frames: 16-bit event and 32-bit value, then the endpoint. */
int wd_hs_monitor_event(void *m, int ms, uint32_t *value)
{
	zmq_pollitem_t it = { m, 0, ZMQ_POLLIN, 0 };
	unsigned char ev[6];
	char ep[256];
	uint16_t code;

	if (zmq_poll(&it, 1, ms) <= 0 || !(it.revents & ZMQ_POLLIN))
		return -1;
	if (zmq_recv(m, ev, sizeof(ev), 0) != (int)sizeof(ev)) {
		zmq_recv(m, ep, sizeof(ep), ZMQ_DONTWAIT);
		return -1;
	}
	zmq_recv(m, ep, sizeof(ep), ZMQ_DONTWAIT);
	memcpy(&code, ev, sizeof(code));
	memcpy(value, ev + 2, sizeof(*value));
	return code;
}

void wd_hs_monitor_close(void *s, void **m)
{
	if (s)
		zmq_socket_monitor(s, NULL, 0);
	if (*m)
		zmq_close(*m);
	*m = NULL;
}

const char *wd_hs_keys_hint(const struct wd_client_keys *keys, const struct wd_hs_names *names,
			    char *buf, size_t len)
{
	if (keys && keys->on)
		snprintf(buf, len, " (or it refused this client's CURVE handshake: check %s, and that this "
			 "key is in the daemon's auth.clients)", names->server_arg);
	else
		snprintf(buf, len, " (a daemon with auth.server_key answers only CURVE clients: give %s "
			 "and %s)", names->server_arg, names->key_arg);
	return buf;
}

/*
 * The ZMTP errors that mean "not allowed in": one side speaks CURVE and
 * the other not, the CURVE exchange failed (a wrong server key), or the
 * ZAP handler (auth.clients) said no. A socket-type mismatch is invalid
 * metadata: the peer's READY named a type this socket cannot talk to.
 */
static int auth_error(uint32_t v)
{
	return v == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH || v == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC ||
	       v == ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE || (v & 0xF0000000u) == ZMQ_PROTOCOL_ERROR_ZAP_UNSPECIFIED;
}

/*
 * Settled, not a guess: so not wd_hs_keys_hint's "(or ...)", which follows
 * "is wdriftd running?".
 */
static void refused(const char *endpoint, const struct wd_hs_names *names, const struct wd_client_keys *keys,
		    char *err, size_t errlen)
{
	if (keys && keys->on)
		snprintf(err, errlen, "the daemon at %s refused the handshake: this client's CURVE key is "
			 "not in its auth.clients, or %s is not its public key", endpoint, names->server_arg);
	else
		snprintf(err, errlen, "the daemon at %s refused the handshake: it has auth.server_key and "
			 "answers only CURVE clients: give %s and %s", endpoint, names->server_arg,
			 names->key_arg);
}

static void type_mismatch(const char *endpoint, const struct wd_hs_names *names, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s is not wdriftd's %s socket (it answered as a different socket type): the "
		 "%s endpoint is listen.%s%s", endpoint, names->socket, names->socket, names->socket,
		 names->aside);
}

/*
 * The peer's security mechanism is not this client's: say which side to
 * change. mech: the peer's, when its greeting was read (else NULL).
 */
static void mechanism_mismatch(const char *endpoint, const char *mech, const struct wd_hs_names *names,
			       const struct wd_client_keys *keys, char *err, size_t errlen)
{
	if (mech && strcmp(mech, "NULL") && strcmp(mech, "CURVE"))
		snprintf(err, errlen, "%s speaks ZeroMQ's %s security, which wdriftd never does: is it a "
			 "wdriftd endpoint?", endpoint, mech);
	else if (keys && keys->on)
		snprintf(err, errlen, "the daemon at %s does not use CURVE (it has no auth.server_key): "
			 "give no %s and %s (nor WDRIFT_SERVER_KEY and WDRIFT_KEY)", endpoint,
			 names->server_arg, names->key_arg);
	else
		refused(endpoint, names, keys, err, errlen);
}

int wd_hs_http(const char *endpoint, const struct wd_hs_names *names, char *err, size_t errlen)
{
	if (!wd_endpoint_http(endpoint, 500))
		return 0;
	/* not "a daemon with auth.server_key": that one sends a ZMTP greeting (an ops trial's hint) */
	snprintf(err, errlen, "%s is an HTTP server, not a ZeroMQ socket (wdriftd's listen.metrics, for "
		 "Prometheus?): wdriftd's %s socket is its listen.%s", endpoint, names->socket, names->socket);
	return 1;
}

/*
 * The peer closed the handshake without a reason. Its greeting tells
 * whether it speaks CURVE (zmtp_probe.c): if that is not this client's
 * mechanism, that is the reason; else, without keys, it refused the
 * socket type, and with keys, the key or the type (a guess). With no
 * greeting, both (a guess: a daemon that went away mid-handshake too).
 */
static int closed_error(const char *endpoint, const struct wd_hs_names *names,
			 const struct wd_client_keys *keys, char *err, size_t errlen)
{
	char mech[24];
	int on = keys && keys->on, known = wd_zmtp_peer_mechanism(endpoint, 500, mech, sizeof(mech)) == 0;

	if (known && strcmp(mech, on ? "CURVE" : "NULL")) {
		mechanism_mismatch(endpoint, mech, names, keys, err, errlen);
		return WD_HS_SURE;
	}
	if (on) {
		snprintf(err, errlen, "%s closed the connection during the handshake: a wrong %s, or not "
			 "wdriftd's %s socket (listen.%s)", endpoint, names->server_arg, names->socket,
			 names->socket);
		return WD_HS_GUESS;
	}
	if (known) {
		type_mismatch(endpoint, names, err, errlen);
		return WD_HS_SURE;
	}
	if (wd_hs_http(endpoint, names, err, errlen))
		return WD_HS_SURE;
	snprintf(err, errlen, "%s closed the connection during the handshake: not wdriftd's %s socket "
		 "(listen.%s), or a daemon with auth.server_key, which answers only CURVE clients "
		 "(give %s and %s)", endpoint, names->socket, names->socket, names->server_arg,
		 names->key_arg);
	return WD_HS_GUESS;
}

int wd_hs_event(struct wd_hs *h, int code, uint32_t value, const char *endpoint,
		const struct wd_hs_names *names, const struct wd_client_keys *keys, char *err, size_t errlen)
{
	switch (code) {
	case ZMQ_EVENT_CONNECTED:
		h->connected = 1;
		h->connected_at = wd_now();
		h->attempt_failed = 0;
		h->refused_since = 0;
		return 0;
	case ZMQ_EVENT_CONNECT_RETRIED:	/* the connect itself failed: refused, no permission, busy... */
		if (!h->connected && !h->refused_since)
			h->refused_since = wd_now();
		return 0;
	case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
		h->handshook = 1;
		h->closed = 0;
		h->lost = 0;
		return 0;
	case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
		refused(endpoint, names, keys, err, errlen);
		return WD_HS_SURE;
	case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
		if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
			mechanism_mismatch(endpoint, NULL, names, keys, err, errlen);
			return WD_HS_SURE;
		}
		if (auth_error(value)) {
			refused(endpoint, names, keys, err, errlen);
			return WD_HS_SURE;
		}
		if (value == ZMQ_PROTOCOL_ERROR_ZMTP_INVALID_METADATA)
			type_mismatch(endpoint, names, err, errlen);
		else
			snprintf(err, errlen, "the handshake with %s failed (ZeroMQ protocol error 0x%x): is it "
				 "a wdriftd endpoint?", endpoint, (unsigned)value);
		return WD_HS_SURE;
	case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
	case ZMQ_EVENT_DISCONNECTED:
		/* after a success, a daemon going away: not a handshake failure */
		if (code == ZMQ_EVENT_DISCONNECTED && h->handshook) {
			h->lost = 1;
			return 0;
		}
		if (h->attempt_failed)
			return 0;
		h->attempt_failed = 1;
		h->closed_at = wd_now();
		if (++h->closed < WD_HS_CLOSED_MAX)
			return 0;
		return closed_error(endpoint, names, keys, err, errlen);
	}
	return 0;
}

#define REL_SAID ", a path relative to this process's working directory"

int wd_hs_unreachable(const char *endpoint, const char *socket, int e, double for_s, char *err, size_t errlen)
{
	const char *path = endpoint + 6, *host = endpoint + 6;
	int ipc = !strncmp(endpoint, "ipc://", 6);
	struct stat st;
	char said[PATH_MAX + 300];
	int rel = 0;
	/* a relative one said whole, as wd_publisher_open says it */
	const char *shown = ipc && (rel = wd_path_whole(path, said, sizeof(said))) ? said : path;

	switch (e) {
	case ECONNREFUSED:
		if (ipc && path[0] == '@')	/* Linux's abstract namespace: no file */
			snprintf(err, errlen, "nothing listens on the abstract socket %s (%s): connections have "
				 "been refused for %.0f s; is wdriftd running, with that name in the daemon's listen.%s?",
				 path, endpoint, for_s, socket ? socket : "*");
		else if (ipc && wd_hs_not_socket(endpoint, rel ? said : NULL, socket, err, errlen))
			;	/* a typo's file or directory: no daemon left it */
		else if (ipc)
			snprintf(err, errlen, "nothing listens on the socket file %s (%s%s): connections have been "
				 "refused for %.0f s: the file of a wdriftd that stopped without removing "
				 "it (SIGKILL, a crash), or of one still starting; if none runs, start "
				 "wdriftd",
				 shown, endpoint, rel ? REL_SAID : "", for_s);
		else
			snprintf(err, errlen, "nothing listens at %s: connections have been refused for %.0f s; "
				 "is wdriftd running on that host (or still starting), with that port in the "
				 "daemon's listen.%s?", endpoint, for_s, socket ? socket : "*");
		return 1;
	case EACCES:
	case EPERM: {
		char deny[PATH_MAX + 400];
		if (ipc && shown[0] == '/' && wd_hs_denied(shown, deny, sizeof(deny)))
			snprintf(err, errlen, "cannot connect to the socket file %s (%s%s): %s", shown, endpoint,
				 rel ? REL_SAID : "", deny);
		else if (ipc && stat(path, &st) == 0)
			snprintf(err, errlen, "cannot connect to the socket file %s (%s%s): permission denied "
				 "(owner uid %u, mode %03o): run as a user that may write it (the daemon's "
				 "umask sets its mode)", shown, endpoint, rel ? REL_SAID : "",
				 (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
		else if (ipc)
			snprintf(err, errlen, "cannot connect to the socket file %s (%s%s): %s", shown, endpoint,
				 rel ? REL_SAID : "", strerror(e));
		else
			snprintf(err, errlen, "cannot connect to %s: %s", endpoint, strerror(e));
		return 1;
	}
	case ENOENT:
		if (!ipc)
			return 0;
		snprintf(err, errlen, "no socket at %s (%s%s): is wdriftd running?",
			 shown, endpoint, rel ? REL_SAID : "");
		return 1;
	case ENXIO:	/* wd_endpoint_connect_errno: the name does not resolve */
		if (strchr(host, ';'))	/* ZeroMQ's tcp://SOURCE;HOST:PORT */
			host = strchr(host, ';') + 1;
		snprintf(err, errlen, "cannot connect to %s: the host name in it (%.*s) does not resolve",
			 endpoint, (int)(strrchr(host, ':') ? strrchr(host, ':') - host : 0), host);
		return 1;
	case EHOSTUNREACH:
	case ENETUNREACH:
		snprintf(err, errlen, "cannot connect to %s: %s", endpoint, strerror(e));
		return 1;
	default:	/* got through, busy or no answer yet: ZeroMQ's next try may do better */
		return 0;
	}
}

int wd_hs_denied(const char *path, char *err, size_t errlen)
{
	char at[PATH_MAX];
	struct stat st;
	size_t n = strlen(path);

	if (path[0] != '/' || n >= sizeof(at))
		return 0;
	/* each directory from the root: the first that says no (the socket's own mode: its caller's) */
	for (size_t i = 1; i < n; i++) {
		if (path[i] != '/')
			continue;
		memcpy(at, path, i);
		at[i] = 0;
		if (stat(at, &st) < 0)
			return 0;	/* not there (said elsewhere), or denied above: said there */
		if (access(at, X_OK) == 0 || errno != EACCES)
			continue;
		snprintf(err, errlen, "permission denied: %s (owner uid %u, group %u, mode %03o) does not let this "
			 "process (uid %u) search it: run as a user that may, or publish over tcp:// (a system "
			 "install's /run/wdrift is the service's own, mode 750: docs/daemon.md, \"Sandbox\")", at, (unsigned)st.st_uid,
			 (unsigned)st.st_gid, (unsigned)(st.st_mode & 0777), (unsigned)getuid());
		return 1;
	}
	return 0;
}

int wd_hs_not_socket(const char *endpoint, const char *shown, const char *want, char *err, size_t errlen)
{
	const char *kind = wd_ipc_not_socket(endpoint, 1), *path = shown ? shown : endpoint + 6;
	char held[WD_HS_NOT_SOCKET_MAX];
	struct stat st;

	if (!kind)
		return 0;
	/* the daemon's run/ directory, not a socket in it: the sockets there named (an ops trial's) */
	if (stat(endpoint + 6, &st) == 0 && S_ISDIR(st.st_mode)) {
		int head = snprintf(err, errlen, "%s is a directory, not a socket: the endpoint %s must name the "
				    "socket file itself", path, endpoint);
		/* within what callers keep (the publisher's diagnosis): none rather than a name cut short */
		size_t room = sizeof(held) > errlen ? errlen : sizeof(held);
		wd_suggest_in_dir(endpoint, endpoint + 6, want, held, head > 0 && (size_t)head < room ? room - (size_t)head : 1);
		snprintf(err, errlen, "%s is a directory, not a socket: the endpoint %s must name the socket "
			 "file itself%s", path, endpoint, held[0] ? held : " (a typo in the path?)");
		return 1;
	}
	snprintf(err, errlen, "%s is %s, not a socket: the endpoint %s names a file that wdriftd did "
		 "not make (a typo in the path?)", path, kind, endpoint);
	return 1;
}

const char *wd_hs_bind_only(const char *endpoint)
{
	const char *port = strrchr(endpoint, ':');

	if (strncmp(endpoint, "tcp://", 6) || !port || port < endpoint + 6)
		return NULL;
	if (!strcmp(port, ":*"))
		return "is a port for a daemon to bind, not one to connect to: give the daemon's port";
	if (!strncmp(endpoint, "tcp://*:", 8))
		return "names every interface of a host, which a daemon binds, not an address to connect "
		       "to: give the daemon's host (127.0.0.1 on its own machine)";
	return NULL;
}

int wd_hs_trailing_slash(const char *endpoint, char *out, size_t len)
{
	char path[PATH_MAX];
	size_t n = strlen(endpoint);
	int ipc = !strncmp(endpoint, "ipc://", 6);
	struct stat st;

	/* '@': an abstract socket's name, which may end so */
	if ((!ipc && strncmp(endpoint, "tcp://", 6)) || n <= 6 || endpoint[n - 1] != '/' || endpoint[6] == '@')
		return 0;
	while (n > 6 && endpoint[n - 1] == '/')
		n--;
	const char *colon = memrchr(endpoint + 6, ':', n - 6);
	/* tcp://HOST/, no port: not "did you mean 'tcp://HOST'", which has none either ("has no port") */
	if (!ipc && (!colon || colon + 1 == endpoint + n || !strchr("0123456789*", colon[1])))
		return 0;
	if (n == 6 || (ipc && (n - 6 >= sizeof(path) ||
			       (snprintf(path, sizeof(path), "%.*s", (int)(n - 6), endpoint + 6),
				stat(path, &st) == 0 && S_ISDIR(st.st_mode)))))
		return 0;
	if ((size_t)snprintf(out, len, "ends in '/', but %s: did you mean '%.*s'?", ipc ? "an ipc:// "
			     "path names the socket file itself, not a directory" : "a tcp:// endpoint "
			     "ends at its port", (int)n, endpoint) >= len)
		snprintf(out, len, "ends in '/': an endpoint never does");
	return 1;
}

int wd_hs_stale_socket(struct wd_hs *h, const char *endpoint, const char *socket, char *err, size_t errlen)
{
	int file = !strncmp(endpoint, "ipc://", 6) && endpoint[6] != '@';

	if (h->connected || !h->refused_since || wd_now() - h->refused_since < WD_HS_REFUSED_S)
		return 0;
	if (wd_hs_unreachable(endpoint, socket, file ? wd_unix_connect_errno(endpoint + 6) :
			      wd_endpoint_connect_errno(endpoint, WD_HS_PROBE_MS), WD_HS_REFUSED_S, err, errlen))
		return 1;
	h->refused_since = wd_now();
	return 0;
}

int wd_hs_stuck(struct wd_hs *h, const char *endpoint, const struct wd_hs_names *names,
		const struct wd_client_keys *keys, char *err, size_t errlen)
{
	/*
	 * Connected, and no greeting in 2 s, where wdriftd's comes at once: an
	 * HTTP server (listen.metrics) holds the connection open, waiting for a
	 * request line, and ZeroMQ's handshake gives up only after 30 s, with
	 * no reason (an ops trial's job waited so, then read a CURVE hint)
	 */
	if (h->connected && !h->handshook && !h->http_probed && wd_now() - h->connected_at > WD_HS_HTTP_AFTER) {
		h->http_probed = 1;
		if (wd_hs_http(endpoint, names, err, errlen))
			return WD_HS_SURE;
	}
	if (!h->closed || h->handshook || !h->attempt_failed || wd_now() - h->closed_at < WD_HS_CLOSED_GRACE)
		return 0;
	return closed_error(endpoint, names, keys, err, errlen);
}
