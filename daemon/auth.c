/*
 * auth.c: the ZAP handler and the handshake monitors (auth.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "auth.h"
#include "error.h"
#include "keys.h"
#include "log_limit.h"
#include "logging.h"
#include "monitor.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"	/* fixed by RFC 27 */
#define MAX_WATCHED 3				/* ingest, control, events */

enum refusal { R_UNKNOWN_KEY, R_NO_CURVE, R_BAD_SERVER_KEY, R_OTHER, N_REFUSALS };

static const char *const refusal_what[N_REFUSALS] = {
	"refusals of unknown client keys", "refusals of clients without CURVE",
	"refusals of clients with a wrong server key", "refusals of other failed handshakes",
};

struct watched {
	void *pair;			/* our end of the socket's monitor */
	char what[16];
	char endpoint[256];
};

struct auth {
	void *zctx, *zap;
	char pub[WD_KEY_Z85 + 1], sec[WD_KEY_Z85 + 1];
	const struct wd_config *cfg;	/* for auth.clients */
	struct auth_counters *count;
	struct watched w[MAX_WATCHED];
	int n_watched;
	struct log_limit lim[N_REFUSALS];	/* a few lines of each kind per minute */
};

/* True when a line of kind k may be logged now. */
static int may_log(struct auth *a, enum refusal k)
{
	return log_limit_may(&a->lim[k], now_mono());
}

/*
 * auth.clients takes keys, not files; but 40 characters of the Z85
 * alphabet can also be a path ('/', '.', '-' are Z85). A key that names an
 * existing file was most likely meant as one: say so, where the operator
 * looks, instead of refusing that client later as an unknown key.
 */
static void warn_file_keys(const struct wd_config *cfg)
{
	struct stat st;

	for (size_t i = 0; i < cfg->auth.clients.n; i++)
		if (stat(cfg->auth.clients.v[i].key, &st) == 0)
			log_warning("auth: auth.clients.%s: '%s' is the name of an existing file, and is "
				    "taken as the key itself (auth.clients takes keys, not files: put the "
				    "40 characters of its public-key line there)",
				    cfg->auth.clients.v[i].name, cfg->auth.clients.v[i].key);
}

int auth_check_key(const struct wd_config *cfg, char *err, size_t errlen)
{
	char pub[WD_KEY_Z85 + 1], sec[WD_KEY_Z85 + 1], why[600];
	int r;

	if (!cfg->auth.server_key)
		return 0;
	r = wd_keyfile_read(cfg->auth.server_key, pub, sec, why, sizeof(why));
	memset(sec, 0, sizeof(sec));
	if (r < 0)
		return wd_error(err, errlen, "%s: auth.server_key: %s", cfg->source, why);
	return 0;
}

int auth_reload_check(const struct auth *a, const struct wd_config *next, char *err, size_t errlen)
{
	char pub[WD_KEY_Z85 + 1], sec[WD_KEY_Z85 + 1], why[600];
	int r;

	if (!a || !next->auth.server_key)
		return 0;	/* none either side: wd_config_reload_check says a path that changes */
	r = wd_keyfile_read(next->auth.server_key, pub, sec, why, sizeof(why));
	memset(sec, 0, sizeof(sec));
	if (r < 0)
		return wd_error(err, errlen, "%s: auth.server_key: %s (the daemon runs on with the key it "
				"started with; a restart now would fail)", next->source, why);
	if (strcmp(pub, a->pub))
		return wd_error(err, errlen, "%s: auth.server_key: '%s' holds another key pair than the one the "
				"daemon started with (public key %.8s..., now %.8s...): restart wdriftd to apply it",
				next->source, next->auth.server_key, a->pub, pub);
	return 0;
}

int auth_start(void *zctx, const struct wd_config *cfg, struct auth_counters *count,
	       struct auth **out, char *err, size_t errlen)
{
	struct auth *a;
	char why[600];
	int linger = 0;

	*out = NULL;
	if (!cfg->auth.server_key)
		return 0;
	if (!zmq_has("curve"))
		return wd_error(err, errlen, "auth.server_key: this libzmq was built without "
				"CURVE (zmq_has(\"curve\") is false)");
	if (!(a = calloc(1, sizeof(*a))))
		return wd_error(err, errlen, "out of memory");
	if (wd_keyfile_read(cfg->auth.server_key, a->pub, a->sec, why, sizeof(why)) < 0) {
		free(a);
		return wd_error(err, errlen, "%s: auth.server_key: %s", cfg->source, why);
	}
	a->zctx = zctx;
	a->cfg = cfg;
	a->count = count;
	for (int k = 0; k < N_REFUSALS; k++)
		a->lim[k] = (struct log_limit){ .who = "auth", .what = refusal_what[k],
						.note = " (status counts them all)" };
	a->zap = zmq_socket(zctx, ZMQ_REP);
	if (!a->zap || zmq_setsockopt(a->zap, ZMQ_LINGER, &linger, sizeof(linger)) < 0 ||
	    zmq_bind(a->zap, ZAP_ENDPOINT) < 0) {
		wd_error(err, errlen, "auth: cannot bind the ZAP handler: %s", zmq_strerror(errno));
		auth_stop(&a);	/* after: closing the socket may change errno */
		return -1;
	}
	log_notice("auth: CURVE on every socket, server public key %s, %zu clients allowed",
		   a->pub, cfg->auth.clients.n);
	warn_file_keys(cfg);
	if (!cfg->auth.clients.n)
		log_warning("auth: auth.clients is empty: no client can connect until a reload adds one");
	*out = a;
	return 0;
}

int auth_server(struct auth *a, void *sock, const char *what, int watch)
{
	int one = 1, hwm = 100000;
	struct watched *w;
	char ep[64];

	if (a->n_watched == MAX_WATCHED)
		return errno = ENOSPC, -1;
	w = &a->w[a->n_watched];
	snprintf(w->what, sizeof(w->what), "%s", what);
	snprintf(ep, sizeof(ep), "inproc://wdrift.monitor.%s", what);
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, a->sec, WD_KEY_Z85) < 0 ||
	    zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, what, strlen(what)) < 0)
		return -1;
	if (!watch)
		return 0;	/* the socket's one monitor is someone else's: auth_event */
	if (zmq_socket_monitor(sock, ep, ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
			       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) < 0)
		return -1;
	/* The monitor drops events when its queue is full: make room for floods. */
	if (!(w->pair = zmq_socket(a->zctx, ZMQ_PAIR)))
		return -1;
	zmq_setsockopt(w->pair, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	if (zmq_connect(w->pair, ep) < 0) {
		zmq_close(w->pair);
		w->pair = NULL;
		return -1;
	}
	a->n_watched++;
	return 0;
}

void auth_set_config(struct auth *a, const struct wd_config *cfg)
{
	if (!a)
		return;
	a->cfg = cfg;
	log_notice("auth: %zu clients allowed", cfg->auth.clients.n);
	warn_file_keys(cfg);
}

int auth_pollitems(struct auth *a, zmq_pollitem_t *items, int max)
{
	int n = 0;

	if (!a || max < 1 + a->n_watched)
		return 0;
	items[n++] = (zmq_pollitem_t){ a->zap, 0, ZMQ_POLLIN, 0 };
	for (int i = 0; i < a->n_watched; i++)
		items[n++] = (zmq_pollitem_t){ a->w[i].pair, 0, ZMQ_POLLIN, 0 };
	return n;
}

/* Frame i of a ZAP request as a string (printable, clipped) in buf. */
static const char *frame_text(zmq_msg_t *f, size_t n, size_t i, char *buf, size_t size)
{
	size_t len = i < n ? zmq_msg_size(&f[i]) : 0, o = 0;
	const unsigned char *p = i < n ? zmq_msg_data(&f[i]) : NULL;

	for (size_t k = 0; k < len && o + 1 < size; k++)
		buf[o++] = p[k] >= 0x20 && p[k] < 0x7f ? (char)p[k] : '?';
	buf[o] = 0;
	return buf;
}

static const struct wd_config_client *client_of(const struct wd_config *cfg, const char *key)
{
	for (size_t i = 0; i < cfg->auth.clients.n; i++)
		if (!strcmp(cfg->auth.clients.v[i].key, key))
			return &cfg->auth.clients.v[i];
	return NULL;
}

/*
 * One ZAP request: [version, request id, domain, address, routing id,
 * mechanism, credentials...]; for CURVE the one credential is the
 * client's 32-byte public key. The reply is [version, request id, status
 * code, status text, user id, metadata].
 */
static void zap_answer(struct auth *a, zmq_msg_t *f, size_t n)
{
	char domain[32], address[64], mech[16], key[WD_KEY_Z85 + 1] = "";
	const struct wd_config_client *c = NULL;
	const char *code = "400", *text = "unknown client key", *user = "";

	frame_text(f, n, 2, domain, sizeof(domain));
	frame_text(f, n, 3, address, sizeof(address));
	frame_text(f, n, 5, mech, sizeof(mech));
	if (n == 7 && !strcmp(mech, "CURVE") && zmq_msg_size(&f[6]) == 32 &&
	    zmq_z85_encode(key, zmq_msg_data(&f[6]), 32))
		c = client_of(a->cfg, key);
	if (c) {
		code = "200";
		text = "OK";
		user = c->name;
		a->count->accepted++;
		log_info("auth: %s: client '%s' connected from %s", domain, c->name, address);
	} else if (*key) {
		a->count->unknown_key++;
		if (may_log(a, R_UNKNOWN_KEY))
			log_warning("auth: %s: refused a connection from %s: public key %s is not "
				    "in auth.clients", domain, address, key);
	} else {
		text = "malformed ZAP request";
		a->count->other++;
		if (may_log(a, R_OTHER))
			log_warning("auth: %s: refused a connection from %s: a %zu-frame ZAP "
				    "request, mechanism '%s'", domain, address, n, mech);
	}
	/* REP: the reply goes back whatever the request was. */
	zmq_send(a->zap, "1.0", 3, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(a->zap, n > 1 ? zmq_msg_data(&f[1]) : "", n > 1 ? zmq_msg_size(&f[1]) : 0,
		 ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(a->zap, code, 3, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(a->zap, text, strlen(text), ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(a->zap, user, strlen(user), ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(a->zap, "", 0, ZMQ_DONTWAIT);
}

#define ZAP_MAX_FRAMES 8

static void zap_drain(struct auth *a)
{
	for (;;) {
		zmq_msg_t f[ZAP_MAX_FRAMES];
		size_t n = 0;
		int more = 1;

		while (more) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, a->zap, n ? 0 : ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&m);
				break;
			}
			more = zmq_msg_more(&m);
			if (n < ZAP_MAX_FRAMES)
				f[n++] = m;
			else
				zmq_msg_close(&m);
		}
		if (!n)
			return;
		zap_answer(a, f, n);
		for (size_t i = 0; i < n; i++)
			zmq_msg_close(&f[i]);
	}
}

void auth_event(struct auth *a, const char *what, const char *endpoint, uint16_t event,
		uint32_t value)
{
	enum refusal k;
	const char *why;
	char detail[128];

	if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
	    value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
		k = R_NO_CURVE;
		a->count->no_curve++;
		why = "the client does not speak CURVE (it has no server key?)";
	} else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
		   value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
		k = R_BAD_SERVER_KEY;
		a->count->bad_server_key++;
		why = "the client's hello does not open with this server's key (a wrong server key?)";
	} else {
		k = R_OTHER;
		a->count->other++;
		if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
			snprintf(detail, sizeof(detail), "protocol error 0x%08x", (unsigned)value);
		else
			snprintf(detail, sizeof(detail), "the peer closed it before the handshake "
				 "ended (a client without CURVE does when it sees ours)");
		why = detail;
	}
	if (may_log(a, k))
		log_warning("auth: %s (%s): refused a connection: %s", what, endpoint, why);
}

static void monitor_drain(struct auth *a, struct watched *w)
{
	uint16_t event;
	uint32_t value;

	while (monitor_recv(w->pair, &event, &value, w->endpoint, sizeof(w->endpoint)))
		auth_event(a, w->what, w->endpoint, event, value);
}

void auth_handle(struct auth *a)
{
	if (!a)
		return;
	zap_drain(a);
	for (int i = 0; i < a->n_watched; i++)
		monitor_drain(a, &a->w[i]);
}

void auth_tick(struct auth *a)
{
	if (!a)
		return;
	for (int k = 0; k < N_REFUSALS; k++)
		if (a->lim[k].suppressed)
			log_limit_roll(&a->lim[k], now_mono());
}

void auth_stop(struct auth **ap)
{
	struct auth *a = *ap;

	if (!a)
		return;
	for (int i = 0; i < a->n_watched; i++)
		if (a->w[i].pair)
			zmq_close(a->w[i].pair);
	if (a->zap)
		zmq_close(a->zap);
	memset(a->sec, 0, sizeof(a->sec));
	free(a);
	*ap = NULL;
}
