/*
 * auth.h: CURVE authentication of the daemon's sockets (docs/security.md).
 *
 * With auth.server_key set, every socket the daemon binds is a CURVE
 * server with the daemon's key pair, and a ZAP handler (RFC 27) in the
 * main loop admits the public keys of auth.clients and no others. Peers
 * that fail earlier, in the handshake itself (a client without CURVE, a
 * client that has the wrong server key), never reach ZAP: a socket
 * monitor on each socket reports them. Every refusal is counted
 * (state.h, struct counters .auth) and logged, at most 10 lines a minute
 * per kind, so that a scanner cannot flood the journal.
 *
 * Single-threaded: everything runs in the main loop. Depends on libzmq,
 * config.h and state.h.
 */
#ifndef WD_DAEMON_AUTH_H
#define WD_DAEMON_AUTH_H

#include <stddef.h>
#include <zmq.h>

#include "config.h"
#include "state.h"

struct auth;

/*
 * Reads the key pair of cfg->auth.server_key and binds the ZAP handler in
 * zctx. Returns 0 with *out NULL when auth.server_key is unset (nothing to
 * do), 0 with *out set, or -1 with err (naming the key and the file).
 */
int auth_start(void *zctx, const struct wd_config *cfg, struct auth_counters *count,
	       struct auth **out, char *err, size_t errlen);

/*
 * Checks that the key pair file of cfg->auth.server_key can be used, for
 * --check-config: 0, or -1 with err. 0 when it is unset.
 */
int auth_check_key(const struct wd_config *cfg, char *err, size_t errlen);
/*
 * A reload's check: next's auth.server_key file holds the key pair the
 * daemon runs with (a may be NULL: no CURVE). 0, or -1 with err: a new key
 * pair written over the file (wdrift keygen --force) takes a restart, as
 * a new path does; a reload that said "nothing changed" left a trial's
 * clients refused with the new public key.
 */
int auth_reload_check(const struct auth *a, const struct wd_config *next, char *err, size_t errlen);

/*
 * Makes sock a CURVE server under the ZAP domain what ("ingest",
 * "control", "events") and, with watch, watches its handshakes through a
 * monitor of its own. Without, the socket's monitor is another's, which
 * hands handshake failures to auth_event. Before its bind. Returns 0 or
 * -1 with errno.
 */
int auth_server(struct auth *a, void *sock, const char *what, int watch);

/* A handshake failure a socket monitor reported on the socket what (endpoint): counted, logged. */
void auth_event(struct auth *a, const char *what, const char *endpoint, uint16_t event,
		uint32_t value);

/* A reload: the allow-list of the new config applies to new connections. */
void auth_set_config(struct auth *a, const struct wd_config *cfg);

/* The sockets for the loop's zmq_poll: fills up to max items, returns how many. */
int auth_pollitems(struct auth *a, zmq_pollitem_t *items, int max);

/* Answers the pending ZAP requests and reads the monitors' events. */
void auth_handle(struct auth *a);

/* Once a second: logs how many refusals went unlogged in a window that ended. */
void auth_tick(struct auth *a);

void auth_stop(struct auth **a);

#endif
