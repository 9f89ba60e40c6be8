/*
 * zmtp_probe.h: the security mechanism a ZeroMQ peer speaks, read from
 * its greeting, to explain a handshake it closed without a reason
 * (zmtp_probe.c says why). Internal to wdrift: handshake.c uses it.
 */
#ifndef WD_ZMTP_PROBE_H
#define WD_ZMTP_PROBE_H

#include <stddef.h>

/*
 * Connects to endpoint (ipc://PATH, ipc://@NAME or tcp://HOST:PORT), reads
 * the peer's greeting within timeout_ms and closes: 0 with the mechanism's
 * name in mech ("NULL", "CURVE", "PLAIN"), or -1 when no ZMTP 3 greeting
 * came (no peer, another transport, an older or a non-ZeroMQ peer).
 */
int wd_zmtp_peer_mechanism(const char *endpoint, int timeout_ms, char *mech, size_t len);

/*
 * Whether an HTTP server answers at endpoint: connects, sends a HEAD
 * request, and reads "HTTP/" back within timeout_ms: 1, else 0. Only for a
 * peer that sent no ZMTP greeting (a ZeroMQ peer would read the request as
 * a broken greeting): a publisher given wdriftd's listen.metrics port.
 */
int wd_endpoint_http(const char *endpoint, int timeout_ms);

/*
 * One non-blocking connect to the unix socket file path, closed at once:
 * 0 when something listens there, else the errno (ECONNREFUSED: nothing
 * does; EACCES: not this user's to write; EAGAIN: its queue is full;
 * ENOENT: no file). Speaks nothing, so the peer sees a connection close.
 */
int wd_unix_connect_errno(const char *path);
/* The same, and, when it connected, *pid: the listener's (0: not known). */
int wd_unix_connect_peer(const char *path, long *pid);

/*
 * One connect to endpoint (ipc://PATH, ipc://@NAME or tcp://HOST:PORT)
 * within timeout_ms, closed at once: 0 when something accepted it, else
 * the errno: ECONNREFUSED (nothing listens), ENOENT (no socket file),
 * EACCES, ETIMEDOUT (no answer in time: a host that drops the connect),
 * EHOSTUNREACH, ENXIO (a host name that does not resolve; looked up
 * without the deadline), EAGAIN (busy, or a lookup that failed this
 * time), EINVAL (neither form). Speaks nothing.
 */
int wd_endpoint_connect_errno(const char *endpoint, int timeout_ms);

/*
 * What an ipc:// endpoint's file is, when one is there and it is not a
 * socket: "a regular file", "a directory", "a symbolic link" (only when
 * follow is 0: lstat) and so on; NULL when it is a socket, is not there,
 * or the endpoint is abstract (ipc://@NAME) or not ipc://. A connect to
 * such a path is refused as if a daemon had stopped, and ZeroMQ's bind
 * deletes a file or a link there and binds in its place: callers say
 * what it is instead.
 */
const char *wd_ipc_not_socket(const char *endpoint, int follow);

#endif
