/*
 * handshake.h: why a ZeroMQ handshake with one of wdriftd's sockets
 * fails, in words the user can act on. A socket monitor's events tell
 * most causes (a CURVE mismatch, refused keys, a wrong socket type); a
 * peer that just closes mid-handshake is asked for its greeting
 * (zmtp_probe.c). One owner for the CLI (control and events sockets) and
 * the publisher (ingest). Internal to wdrift; libzmq.
 */
#ifndef WD_HANDSHAKE_H
#define WD_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "keys.h"

/* Who asks, as its user knows things. */
struct wd_hs_names {
	const char *socket;	/* "control", "events" or "ingest": the listen.* key that names it */
	const char *aside;	/* said after "the SOCKET endpoint is listen.SOCKET": "" or " (...)" */
	const char *server_arg, *key_arg;	/* how its user gives CURVE keys: "--server-key", "--key" */
};

/*
 * A monitor of socket s (before its connect), in context ctx, for all of
 * its events, or NULL (errno set). wd_hs_monitor_event waits up to ms for
 * the next one: the event code with *value (an errno, or a
 * ZMQ_PROTOCOL_ERROR_* for a failed handshake), or -1 when none came.
 * wd_hs_monitor_close stops it and closes *m.
 */
void *wd_hs_monitor(void *ctx, void *s);
int wd_hs_monitor_event(void *m, int ms, uint32_t *value);
void wd_hs_monitor_close(void *s, void **m);

/*
 * What a socket's monitor has told of its handshakes so far. A peer of
 * the wrong socket type (or a wrong server key) just closes the
 * connection mid-handshake, with no reason given to this side, and a NULL
 * client meeting a CURVE server may see one such close before the
 * mechanism mismatch; so WD_HS_CLOSED_MAX closes in a row with no reason
 * settle it.
 */
struct wd_hs {
	int connected, handshook, closed, attempt_failed;
	int lost;		/* the peer closed a handshook connection, not handshook since */
	double closed_at;	/* CLOCK_MONOTONIC seconds of the last close */
	double refused_since;	/* of the first connect that failed, never connected since; 0: none */
	double connected_at;	/* of the last connect that got through */
	int http_probed;	/* connected, no handshake after WD_HS_HTTP_AFTER: wd_hs_http asked (once) */
};
#define WD_HS_HTTP_AFTER 2.0	/* s connected with no handshake before asking whether HTTP answers */
#define WD_HS_CLOSED_MAX 3
#define WD_HS_CLOSED_GRACE 0.5	/* s after a close with no reconnect: settled */
#define WD_HS_POLL_MS 100	/* how often a waiting caller asks wd_hs_stuck */

/*
 * What wd_hs_event and wd_hs_stuck return with err: WD_HS_SURE when the
 * peer said why (its greeting, a refusal, its socket type), WD_HS_GUESS
 * when it only closed mid-handshake and its greeting could not be read,
 * which a daemon stopping or killed mid-handshake looks like too: a caller
 * that would give up on it (wdrift send) waits for the daemon instead.
 */
enum { WD_HS_SURE = 1, WD_HS_GUESS = 2 };

/*
 * Feeds one monitor event (code, value) to h: nonzero (WD_HS_SURE or
 * WD_HS_GUESS) when it settles that the handshake with endpoint fails,
 * with err in words the user can act on: a
 * CURVE hint only for an authentication failure (mechanism mismatch, CURVE
 * or ZAP errors); for a socket-type mismatch, that endpoint is not
 * wdriftd's names->socket socket. Else 0. May read the peer's greeting
 * (up to 0.5 s).
 */
int wd_hs_event(struct wd_hs *h, int code, uint32_t value, const char *endpoint,
		const struct wd_hs_names *names, const struct wd_client_keys *keys, char *err, size_t errlen);
/*
 * Nonzero with err (as above) when the peer closed a handshake
 * WD_HS_CLOSED_GRACE ago and ZeroMQ has not got through since: libzmq
 * does not always reconnect after a close mid-handshake, so no further
 * event may come.
 */
int wd_hs_stuck(struct wd_hs *h, const char *endpoint, const struct wd_hs_names *names,
		const struct wd_client_keys *keys, char *err, size_t errlen);

/*
 * For the CLI's endpoints (an ipc:// socket file is checked to be there
 * first): when ZeroMQ's connects have failed for WD_HS_REFUSED_S and none
 * got through, one connect of its own says why (wd_unix_connect_errno for
 * a socket file, wd_endpoint_connect_errno within WD_HS_PROBE_MS for
 * tcp:// and an abstract name), since ZeroMQ's event does not. 1 with err
 * when that settles it: refused (nothing listens: a daemon killed with
 * SIGKILL, or one still starting, left or found the file; a port or name
 * nothing is bound to), no permission to write the file, the file gone, a
 * host name that does not resolve. 0 otherwise; a connect that gets
 * through, a full queue or no answer in time starts the wait again. Not
 * for publishers, which wait for a daemon that may start later. socket:
 * the listen.* key the endpoint should match ("control", "events"; NULL:
 * listen.*), for the words.
 */
#define WD_HS_REFUSED_S 1.0
#define WD_HS_PROBE_MS 300

/*
 * How long connects to a publisher's ingest endpoint are refused in a row
 * before that is said (nothing listens there): `wdrift send` ends then,
 * and a publisher says it once and keeps trying. A daemon that restarts
 * (systemctl restart) is back within it.
 */
#define WD_HS_UNREACHABLE_S 5.0
int wd_hs_stale_socket(struct wd_hs *h, const char *endpoint, const char *socket, char *err, size_t errlen);

/*
 * Why endpoint cannot be reached, from the errno of a connect of this
 * side's own (wd_unix_connect_errno, wd_endpoint_connect_errno) after
 * ZeroMQ's have failed for for_s seconds: 1 with err when e settles it
 * (refused, no socket file, no permission, a host name that does not
 * resolve, no route), naming listen.SOCKET (NULL: listen.*); 0 for a
 * connect that got through, a busy socket or no answer yet.
 */
int wd_hs_unreachable(const char *endpoint, const char *socket, int e, double for_s, char *err, size_t errlen);

/*
 * When an HTTP server answers at endpoint (wd_endpoint_http, 0.5 s): 1
 * with err saying so, and which listen.* key the socket named by names is;
 * 0 otherwise. For a peer that sent no ZMTP greeting: a publisher or the
 * CLI given the listen.metrics port.
 */
int wd_hs_http(const char *endpoint, const struct wd_hs_names *names, char *err, size_t errlen);

/*
 * When a directory on the way to the socket file at path (absolute) may
 * not be searched by this process: 1 with err saying which, "permission
 * denied: /run/wdrift (owner uid 998, group 998, mode 750) does not let
 * this process (uid 1000) search it: run as a user that may, or publish
 * over tcp:// ...", the way out; 0 when none
 * denies it (the socket's own mode is its caller's to say). A trial's job, of another user than
 * a system install's daemon, read "no socket at ... yet" beside the socket.
 * One wording for the CLI and the publisher.
 */
int wd_hs_denied(const char *path, char *err, size_t errlen);

/*
 * When endpoint's ipc:// file is there and is no socket (wd_ipc_not_socket:
 * a connect to it is refused, as if a daemon had stopped): 1 with err
 * saying what it is, the path spelled as shown (NULL: as in endpoint).
 * 0 when it is a socket, is not there, or endpoint is not an ipc file.
 * One wording for the CLI and the publisher. A directory is said with the
 * sockets it holds (wd_suggest_in_dir; want's alone when it holds that:
 * "ingest" for a publisher), within WD_HS_NOT_SOCKET_MAX bytes
 * of err in all, which the publisher's diagnosis keeps whole.
 */
#define WD_HS_NOT_SOCKET_MAX 700
int wd_hs_not_socket(const char *endpoint, const char *shown, const char *want, char *err, size_t errlen);

/*
 * Why a tcp:// endpoint cannot be connected to though a daemon may bind
 * it: a host of * (every interface) or a port of * (one the system picks),
 * as a phrase after the endpoint; NULL otherwise. ZeroMQ's connect said
 * only "Invalid argument". One wording for the CLI and the publisher.
 */
const char *wd_hs_bind_only(const char *endpoint);

/*
 * An ipc:// or tcp:// endpoint that ends in '/': no socket has such a
 * name (a socket is a file, and a tcp:// endpoint ends at its port). A
 * publisher said "no socket at ... yet" of a socket that was there (a
 * trial's). 1 with out = "ends in '/' ...: did you mean 'ENDPOINT'?", the
 * slashes gone; 0 otherwise: for an abstract ipc://@NAME (any name), a
 * tcp:// one with no port before the '/' (its "has no port" is the
 * error), and an ipc:// path that is a directory without them (the
 * publisher's wd_hs_not_socket says it; the config's check, first in
 * the CLI, refuses any ipc:// path ending in '/').
 */
int wd_hs_trailing_slash(const char *endpoint, char *out, size_t len);

/* What to add to "refused" or "not answering": a hint about keys, in buf. */
const char *wd_hs_keys_hint(const struct wd_client_keys *keys, const struct wd_hs_names *names,
			    char *buf, size_t len);

#endif
