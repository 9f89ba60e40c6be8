/* daemon_client.c: endpoints and Lazy Pirate requests (see daemon_client.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <getopt.h>

#include <jansson.h>
#include <zmq.h>

#include "cli.h"
#include "config.h"
#include "config_find.h"
#include "daemon_client.h"
#include "near_name.h"
#include "handshake.h"
#include "other_daemons.h"
#include "relpath.h"
#include "error.h"
#include "zctx.h"

enum { DC_OPT_SERVER_KEY = 1000, DC_OPT_KEY };

const char *dc_config_path(const char *given)
{
	static struct wd_config_found f;
	static char real[PATH_MAX];
	char err[WD_CONFIG_ERR_MAX];

	if (wd_config_find(given, &f, err, sizeof(err)) != 0)
		return "(none found)";
	/* absolute, as status's "cli config" says it: the file wherever the user is */
	return realpath(f.path, real) ? real : f.path;
}

int dc_shell_arg(char *out, size_t len, size_t *at, const char *opt, const char *s)
{
	size_t o = *at;
	int plain = s[0] && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
				      "_./:@=+-,") == strlen(s);

	if (o + strlen(opt) + 3 >= len)
		return -1;
	o += (size_t)snprintf(out + o, len - o, opt[0] ? " %s " : " ", opt);
	if (!plain)
		out[o++] = '\'';
	for (; *s; s++) {
		if (o + 6 >= len)
			return -1;
		if (*s == '\'' && !plain) {	/* ' ends the quote, \' is one, ' opens it again */
			memcpy(out + o, "'\\''", 4);
			o += 4;
		} else {
			out[o++] = *s;
		}
	}
	if (!plain)
		out[o++] = '\'';
	out[o] = 0;
	*at = o;
	return 0;
}

const char *dc_again(const struct dc_target *t)
{
	static char buf[2 * WD_CONFIG_PATH_MAX];
	size_t at = 0;

	buf[0] = 0;
	/* every option that chose the daemon or its keys, as given: --endpoint overrides -c's */
	if ((t->config && dc_shell_arg(buf, sizeof(buf), &at, "-c", t->config) < 0) ||
	    (t->control && dc_shell_arg(buf, sizeof(buf), &at, "--endpoint", t->control) < 0) ||
	    (t->server_key && dc_shell_arg(buf, sizeof(buf), &at, "--server-key", t->server_key) < 0) ||
	    (t->key && dc_shell_arg(buf, sizeof(buf), &at, "--key", t->key) < 0))
		buf[0] = 0;	/* none rather than a path cut short */
	return buf;
}

const char *dc_config_near_miss(const char *given)
{
	static char both[2048];
	struct wd_config_found f;
	char err[WD_CONFIG_ERR_MAX];

	if (wd_config_find(given, &f, err, sizeof(err)) != 0)
		return dc_other_daemons(NULL, 0);
	int chosen = !strcmp(f.origin, "-c") || !strcmp(f.origin, "WDRIFT_CONFIG");
	snprintf(both, sizeof(both), "%s%s", wd_config_near_miss(f.origin), dc_other_daemons(f.path, chosen));
	return both;
}

int dc_config_load(const char *given, struct wd_config *cfg, const char *instead, char *err, size_t errlen)
{
	struct wd_config_found f;
	char cerr[WD_CONFIG_ERR_MAX];
	int r;

	wd_config_defaults(cfg);
	/* no file: the daemons that run are named, with their configs */
	if ((r = wd_config_find(given, &f, cerr, sizeof(cerr))) != 0)
		return wd_error(err, errlen, "%s%s%s%s", cerr, r > 0 ? ", or " : "", r > 0 ? instead : "",
				dc_other_daemons(NULL, 0));
	if (wd_config_load_file(f.path, cfg, cerr, sizeof(cerr)) < 0) {
		if (!strcmp(f.origin, "-c"))	/* a -c typo from another directory: which config runs */
			return wd_error(err, errlen, "%s%s", cerr,
					access(f.path, F_OK) < 0 ? dc_other_daemons(NULL, 0) : "");
		return wd_error(err, errlen, "%s (the config found through %s)", cerr, f.origin);
	}
	return 0;
}

/*
 * An endpoint the CLI can connect to: a typo (icp://) is said as the
 * config would say it, not as ZeroMQ's "Protocol not supported"; and what
 * a daemon binds but a client cannot reach is named.
 */
/* What a daemon may bind but no client reach: the words, or NULL. */
static const char *bind_only(const char *ep)
{
	if (!strncmp(ep, "inproc://", 9))
		return "never reaches wdriftd, which runs in another process: give its ipc:// or "
		       "tcp:// endpoint";
	return wd_hs_bind_only(ep);
}

static int cli_endpoint(const char *opt, const char *ep, char *err, size_t errlen)
{
	char why[WD_CONFIG_ERR_MAX];

	if (wd_hs_trailing_slash(ep, why, sizeof(why)))	/* before the config's "the port must be" */
		return wd_error(err, errlen, "%s: '%s' %s", opt, ep, why);
	if (wd_config_check_endpoint_as(ep, 1, why, sizeof(why)) < 0)
		return wd_error(err, errlen, "%s: %s", opt, why);
	if (bind_only(ep))
		return wd_error(err, errlen, "%s: '%s' %s", opt, ep, bind_only(ep));
	return 0;
}

/*
 * A config's endpoints are what the daemon binds: a tcp:// host of "*" or
 * 0.0.0.0 (every interface) is no address to connect to, and ZeroMQ said
 * only "Invalid argument". From the daemon's own host, which reads the
 * same config, it answers at 127.0.0.1 on that port: the CLI connects
 * there, and its errors name the config's entry as before.
 */
static void dc_connect_form(char *ep, size_t size)
{
	static const char lo[] = "127.0.0.1";
	size_t host = !strncmp(ep, "tcp://*:", 8) ? 1 : !strncmp(ep, "tcp://0.0.0.0:", 14) ? 7 : 0;
	size_t tail = strlen(ep + 6 + host) + 1;	/* ":PORT" and its NUL */

	if (!host || 6 + strlen(lo) + tail > size)
		return;
	memmove(ep + 6 + strlen(lo), ep + 6 + host, tail);
	memcpy(ep + 6, lo, strlen(lo));
}

int dc_resolve(struct dc_target *t, char *err, size_t errlen)
{
	struct wd_config cfg;
	char cerr[WD_CONFIG_ERR_MAX];

	if (wd_client_keys_load(t->server_key, t->key, &t->keys, err, errlen) < 0)
		return -1;
	if (t->control && cli_endpoint("--endpoint", t->control, err, errlen) < 0)
		return -1;
	if (t->ingest && cli_endpoint("--ingest", t->ingest, err, errlen) < 0)
		return -1;
	t->config_path[0] = 0;
	if (dc_config_load(t->config, &cfg, t->ingest_only ? "give --ingest EP" : "give --endpoint", cerr,
			   sizeof(cerr)) < 0) {
		struct wd_config_found found;
		char ep[2 * PATH_MAX], ferr[256];
		/* a file that does not load may be an edit the daemon has not taken: name its socket */
		if (!t->control && !t->ingest && !t->ingest_only && wd_config_find(t->config, &found, ferr, sizeof(ferr)) == 0 &&
		    wd_config_peek_control(found.path, ep, sizeof(ep)) == 0 &&
		    (dc_connect_form(ep, sizeof(ep)), cli_endpoint("--endpoint", ep, ferr, sizeof(ferr)) == 0)) {
			if (!t->lenient_config || strlen(ep) >= sizeof(t->control_ep))
				return wd_error(err, errlen, "%s\n(a wdriftd started before this edit may still run "
						"its previous config: it answers at --endpoint %s)", cerr, ep);
			static int warned;	/* a command that asks twice says it once */
			if (!warned++)
				fprintf(stderr, "wdrift: warning: %s\n(asked all the same at its listen.control, %s: a "
					"wdriftd runs the config it read before this edit; a reload would refuse this "
					"file until the error is fixed)\n", cerr, ep);
			char real[PATH_MAX];	/* absolute, as below: status's cli config line */
			snprintf(t->config_path, sizeof(t->config_path), "%s",
				 realpath(found.path, real) ? real : found.path);
			memcpy(t->control_ep, ep, strlen(ep) + 1);	/* fits: checked above */
			t->ingest_ep[0] = t->events_ep[0] = 0;
			return 0;
		}
		if (!t->control && !t->ingest)
			return wd_error(err, errlen, "%s", cerr);
		/* --endpoint, and send's --ingest, need no config */
		snprintf(t->control_ep, sizeof(t->control_ep), "%s", t->control ? t->control : "");
		snprintf(t->ingest_ep, sizeof(t->ingest_ep), "%s", t->ingest ? t->ingest : "");
		t->events_ep[0] = 0;
		return 0;
	}
	/* absolute, so that `status` says which file whatever the working directory */
	char real[PATH_MAX];
	snprintf(t->config_path, sizeof(t->config_path), "%s", realpath(cfg.source, real) ? real : cfg.source);
	snprintf(t->control_ep, sizeof(t->control_ep), "%s", t->control ? t->control : cfg.listen.control);
	snprintf(t->ingest_ep, sizeof(t->ingest_ep), "%s", t->ingest ? t->ingest : cfg.listen.ingest);
	snprintf(t->events_ep, sizeof(t->events_ep), "%s", cfg.listen.events);
	if (!t->control)
		dc_connect_form(t->control_ep, sizeof(t->control_ep));
	if (!t->ingest)
		dc_connect_form(t->ingest_ep, sizeof(t->ingest_ep));
	dc_connect_form(t->events_ep, sizeof(t->events_ep));
	wd_config_release(&cfg);
	return 0;
}

const struct wd_hs_names dc_control_names = {
	"control", " (listen.events is for wdrift watch)", "--server-key", "--key"
};
const struct wd_hs_names dc_events_names = { "events", "", "--server-key", "--key" };

const char *dc_keys_hint(const struct wd_client_keys *keys)
{
	static char hint[256];

	return wd_hs_keys_hint(keys, &dc_control_names, hint, sizeof(hint));
}

int dc_endpoint_check(const char *endpoint, const char *want, int typed, char *err, size_t errlen)
{
	const char *path = endpoint + 6;
	struct stat st;

	if (bind_only(endpoint))	/* a config's: the options were checked when read */
		return wd_error(err, errlen, "'%s' %s", endpoint, bind_only(endpoint));
	if (strncmp(endpoint, "ipc://", 6) || path[0] == '@')	/* '@': Linux's abstract namespace, no file */
		return 0;
	if (stat(path, &st) < 0) {
		char near[PATH_MAX + 64];
		/* a typo, or a listen.* edit the running daemon has not taken: the socket beside it */
		if (errno == ENOENT) {
			char full[PATH_MAX + 512];
			/* a relative one said whole, as the publisher says it (a trial's read "run/control.sock") */
			int rel = wd_path_whole(path, full, sizeof(full));
			wd_suggest_socket(endpoint, path, near, sizeof(near));
			int beside = near[0] != 0;
			if (!beside && !typed && wd_socket_dir_there(full))
				/*
				 * The config's own socket directory, there without its
				 * socket: its daemon ran and stopped. A trial's hint named
				 * other projects' daemons' sockets of the same name; the
				 * daemons running with other configs are named after this
				 * (dc_other_daemons), by config.
				 */
				snprintf(near, sizeof(near), "; its directory is there, as this config's wdriftd "
					 "leaves it when it stops");
			else if (!beside)	/* started in another directory, or its daemon not up yet: one listening */
				wd_suggest_listening(wd_path_rest(path), full, near, sizeof(near));
			/*
			 * A config's endpoint edited in listen.* waits for a restart: a
			 * reload cannot move a socket (a trial's reload did not say). A
			 * typed one is a typo: the hint would mislead (a later trial).
			 */
			return wd_error(err, errlen, "no socket at %s (%s%s%s): is wdriftd running?%s", full, endpoint,
					rel ? ", a path relative to this process's working directory" : "", near,
					beside && !typed ? " (a listen.* key edited in the config takes a "
					"restart of wdriftd, not a reload: until then it answers where it bound, "
					"--endpoint that)" : "");
		}
		char whole[PATH_MAX + 512], deny[PATH_MAX + 400];
		wd_path_whole(path, whole, sizeof(whole));
		if (errno == EACCES && wd_hs_denied(whole, deny, sizeof(deny)))	/* not "Permission denied" alone */
			return wd_error(err, errlen, "cannot reach the socket file %s (%s): %s", whole, endpoint, deny);
		return wd_error(err, errlen, "%s: %s", path, strerror(errno));
	}
	char whole[PATH_MAX + 512];
	/* a relative one said whole, as the publisher says it */
	if (wd_hs_not_socket(endpoint, wd_path_whole(path, whole, sizeof(whole)) ? whole : NULL, want, err,
			     errlen))
		return -1;
	return 0;
}

static int env_ms(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && atoi(v) > 0 ? atoi(v) : dflt;
}

/* A REQ socket connected to endpoint, or NULL with err; *mon, when given, its monitor. */
static void *open_req(void *ctx, const char *endpoint, const struct wd_client_keys *keys, void **mon,
		      char *err, size_t errlen)
{
	void *s = zmq_socket(ctx, ZMQ_REQ);
	int linger = 0;

	if (!s) {
		snprintf(err, errlen, "cannot make a socket: %s", zmq_strerror(errno));
		return NULL;
	}
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	wd_client_keys_apply(s, keys);
	if (mon && !(*mon = wd_hs_monitor(ctx, s))) {
		snprintf(err, errlen, "cannot monitor a socket: %s", zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	if (zmq_connect(s, endpoint) < 0) {
		snprintf(err, errlen, "bad endpoint '%s': %s", endpoint, zmq_strerror(errno));
		if (mon)
			wd_hs_monitor_close(s, mon);
		zmq_close(s);
		return NULL;
	}
	return s;
}

/*
 * The request again on a fresh REQ socket, s and its monitor (*mon) closed:
 * a REQ that lost its reply cannot send another. The new socket, or NULL
 * with err.
 */
static void *send_again(void *ctx, void *s, void **mon, const char *endpoint,
			const struct wd_client_keys *keys, const char *request, char *err, size_t errlen)
{
	wd_hs_monitor_close(s, mon);
	zmq_close(s);
	if (!(s = open_req(ctx, endpoint, keys, NULL, err, errlen)))
		return NULL;
	zmq_send(s, request, strlen(request), 0);
	return s;
}

/* The reply waiting on s (malloc'd, NUL-terminated), or NULL. */
static char *recv_reply(void *s)
{
	zmq_msg_t m;
	char *r = NULL;

	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) >= 0 && (r = malloc(zmq_msg_size(&m) + 1))) {
		memcpy(r, zmq_msg_data(&m), zmq_msg_size(&m));
		r[zmq_msg_size(&m)] = 0;
	}
	zmq_msg_close(&m);
	return r;
}

/* The uptime in a status reply, or -1. */
static double reply_uptime(const char *body)
{
	json_t *o = json_loads(body, 0, NULL);
	json_t *u = json_object_get(o, "uptime");
	double up = json_is_number(u) ? json_number_value(u) : -1;
	json_decref(o);
	return up;
}

static const char status_req[] = "{\"v\":1,\"cmd\":\"status\"}";

static int is_status(const char *request)
{
	json_t *o = json_loads(request, 0, NULL);
	const char *cmd = json_string_value(json_object_get(o, "cmd"));
	int r = cmd && !strcmp(cmd, "status");
	json_decref(o);
	return r;
}

/*
 * Lazy Pirate, without sending a request twice to a daemon that is working
 * on it: a `drift` on a large study can take longer than the timeout, and
 * each re-send would cost the daemon the whole query again. So when no
 * reply comes within the timeout, a `status` on a fresh socket asks whether
 * the daemon is alive (the main loop answers it at once, whatever queries
 * run). Alive: keep waiting for the reply, up to WDRIFT_QUERY_TIMEOUT_MS in
 * all; send again only when the daemon restarted since the request went out
 * (its uptime is shorter: the request died with the old one). No answer to
 * `tries` rounds in a row: the daemon is down or hung, as before. A status
 * request itself is cheap and is simply re-sent.
 */
int dc_request(const struct dc_target *t, const char *request, char **reply, char *err, size_t errlen)
{
	const char *endpoint = t->control_ep;
	const struct wd_client_keys *keys = &t->keys;
	int timeout = env_ms("WDRIFT_TIMEOUT_MS", 1500), tries = 3, misses = 0, resent = 0;
	double patience = env_ms("WDRIFT_QUERY_TIMEOUT_MS", 120000) / 1000.0;
	int status = is_status(request);
	void *ctx = wd_zmq_ctx_new(), *s = NULL, *probe = NULL, *mon = NULL;
	struct wd_hs hs = { 0 };
	double round_end;
	double t0 = cli_now(), sent = t0;
	int rc = -1;

	*reply = NULL;
	if (!ctx) {
		snprintf(err, errlen, "cannot make a ZeroMQ context: %s", zmq_strerror(errno));
		return -1;
	}
	if (dc_endpoint_check(endpoint, "control", t->control != NULL, err, errlen) < 0)
		goto out;
	/* the first socket's monitor tells a refused handshake at once, and why */
	if (!(s = open_req(ctx, endpoint, keys, &mon, err, errlen)))
		goto out;
	zmq_send(s, request, strlen(request), 0);
	round_end = cli_now() + timeout / 1000.0;
	for (;;) {
		/* s, then the monitor (while the first socket lives), then the probe */
		zmq_pollitem_t it[3] = { { s, 0, ZMQ_POLLIN, 0 } };
		int n = 1, im = -1, ip = -1, left = (int)((round_end - cli_now()) * 1000.0);
		if (mon)
			it[im = n++] = (zmq_pollitem_t){ mon, 0, ZMQ_POLLIN, 0 };
		if (probe)
			it[ip = n++] = (zmq_pollitem_t){ probe, 0, ZMQ_POLLIN, 0 };
		if (left > WD_HS_POLL_MS && (hs.closed || (hs.refused_since && !hs.connected)))
			left = WD_HS_POLL_MS;	/* to ask wd_hs_stuck and wd_hs_stale_socket */
		if (zmq_poll(it, n, left > 0 ? left : 0) < 0) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "waiting for the daemon at %s: %s", endpoint, zmq_strerror(errno));
			goto out;
		}
		int got_s = it[0].revents & ZMQ_POLLIN, got_probe = ip >= 0 && (it[ip].revents & ZMQ_POLLIN);
		if (im >= 0 && (it[im].revents & ZMQ_POLLIN)) {
			uint32_t value;
			int code;
			while ((code = wd_hs_monitor_event(mon, 0, &value)) >= 0)
				if (wd_hs_event(&hs, code, value, endpoint, &dc_control_names, keys, err, errlen)) {
					rc = hs.connected ? -2 : -1;	/* a peer answered, or none */
					goto out;
				}
		}
		if (mon && wd_hs_stuck(&hs, endpoint, &dc_control_names, keys, err, errlen)) {
			rc = hs.connected ? -2 : -1;
			goto out;
		}
		/* what the first socket's monitor saw holds after it is replaced (send_again) */
		if (!got_s && !got_probe && wd_hs_stale_socket(&hs, endpoint, dc_control_names.socket, err, errlen))
			goto out;
		if (!got_s && !got_probe && cli_now() < round_end)
			continue;	/* monitor news only (a reconnect every 100 ms): the same wait goes on */
		if (got_s && (*reply = recv_reply(s))) {
			rc = 0;
			goto out;
		}
		round_end = cli_now() + timeout / 1000.0;	/* whatever follows starts a new wait */
		if (got_probe) {
			char *st = recv_reply(probe);
			double up = st ? reply_uptime(st) : -1;
			free(st);
			zmq_close(probe);	/* a fresh one for the next round */
			probe = NULL;
			misses = 0;
			if (up >= 0 && up < cli_now() - sent && resent < tries) {
				/* restarted since: the request is lost, not being worked on */
				if (!(s = send_again(ctx, s, &mon, endpoint, keys, request, err, errlen)))
					goto out;
				sent = cli_now();
				resent++;
			}
			if (cli_now() - t0 > patience) {
				snprintf(err, errlen, "the daemon at %s is up but has not answered in %.0f s "
					 "(WDRIFT_QUERY_TIMEOUT_MS)", endpoint, patience);
				goto out;
			}
			continue;
		}
		/*
		 * A round connected with no handshake, where wdriftd's greeting
		 * comes at once: asked now whether HTTP answers, before status
		 * replaces the socket (and its monitor's clock): said after the
		 * first round, not the third (a trial's 4.5 s)
		 */
		if (hs.connected && !hs.handshook && !hs.http_probed) {
			hs.http_probed = 1;
			if (wd_hs_http(endpoint, &dc_control_names, err, errlen)) {
				rc = -2;
				goto out;
			}
		}
		if (++misses >= tries) {
			/*
			 * An ipc socket file that no connection got through: a live
			 * daemon accepts at once, so the file is most likely left by
			 * one that was killed (SIGKILL, a crash), which removes nothing.
			 */
			if (!hs.connected && !strncmp(endpoint, "ipc://", 6) && endpoint[6] != '@') {
				snprintf(err, errlen, "the daemon is not answering at %s (%d tries, %.1f s each): "
					 "no connection got through to its socket file %s: most likely left by "
					 "a wdriftd that stopped without removing it (SIGKILL, a crash); "
					 "start wdriftd",
					 endpoint, tries, timeout / 1000.0, endpoint + 6);
				goto out;
			}
			/* connected, no handshake: an HTTP server (listen.metrics) says so, not the key hint */
			if (hs.connected && !hs.handshook && wd_hs_http(endpoint, &dc_control_names, err, errlen))
				goto out;
			/* a key hint only where keys can be the cause: connected, never through the handshake */
			snprintf(err, errlen, "the daemon is not answering at %s (%d tries, %.1f s each): "
				 "is wdriftd running?%s", endpoint, tries, timeout / 1000.0,
				 hs.connected && !hs.handshook ? dc_keys_hint(keys) : "");
			goto out;
		}
		if (status) {	/* a REQ that lost its reply is stuck: a fresh socket */
			if (!(s = send_again(ctx, s, &mon, endpoint, keys, request, err, errlen)))
				goto out;
			sent = cli_now();
			continue;
		}
		if (probe)
			zmq_close(probe);
		if (!(probe = open_req(ctx, endpoint, keys, NULL, err, errlen)))
			goto out;
		zmq_send(probe, status_req, strlen(status_req), 0);
	}
out:
	wd_hs_monitor_close(mon ? s : NULL, &mon);
	if (probe)
		zmq_close(probe);
	if (s)
		zmq_close(s);
	zmq_ctx_term(ctx);
	return rc;
}

/* dc_args' options first, then the subcommand's own (dc_args' on_extra). */
struct dc_opt_ctx {
	struct dc_args *a;
	int (*on_extra)(int c, const char *arg, void *ctx);
	void *ctx;
};

int dc_endpoint_option(const char *opt, const char *arg)
{
	char err[WD_CONFIG_ERR_MAX + 256];

	return cli_endpoint(opt, arg, err, sizeof(err)) < 0 ? cli_usage_error("%s", err) : 0;
}

static int dc_on_opt(int c, const char *arg, void *ctx)
{
	struct dc_opt_ctx *x = ctx;

	switch (c) {
	case 'c': x->a->t.config = arg; return 0;
	case 'E':
		x->a->t.control = arg;
		return x->a->no_endpoint ? 0 : dc_endpoint_option("--endpoint", arg);
	case 'J': x->a->json = 1; return 0;
	case DC_OPT_SERVER_KEY: x->a->t.server_key = arg; return 0;
	case DC_OPT_KEY: x->a->t.key = arg; return 0;
	}
	return !x->on_extra || x->on_extra(c, arg, x->ctx);
}

int dc_args(int argc, char **argv, struct dc_args *a, const char *usage,
	    const struct option *extra, int (*on_extra)(int c, const char *arg, void *ctx), void *ctx)
{
	struct option opts[24] = {
		{ "config", required_argument, NULL, 'c' },
		{ "endpoint", required_argument, NULL, 'E' },
		{ "json", no_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ "server-key", required_argument, NULL, DC_OPT_SERVER_KEY },
		{ "key", required_argument, NULL, DC_OPT_KEY },
	};
	struct dc_opt_ctx x = { a, on_extra, ctx };
	int n = 6;
	const char *shorts = ":c:h";

	for (size_t i = 0; extra && extra[i].name && n < 23; i++) {
		opts[n++] = extra[i];
		if (extra[i].val == 'o')	/* --output is also -o */
			shorts = ":c:ho:";
	}
	opts[n] = (struct option){ 0 };
	int r = cli_opts(argc, argv, shorts, opts, usage, dc_on_opt, &x);
	if (r >= 0 && a->json)	/* a script reading --json gets JSON on failure too */
		cli_json_errors = 1;
	return r;
}

json_t *dc_call(struct dc_args *a, json_t *request)
{
	return dc_call_refusable(a, request, NULL);
}

json_t *dc_call_refusable(struct dc_args *a, json_t *request, json_t **refused)
{
	char err[1024], *reply = NULL;
	char *req = json_dumps(request, JSON_COMPACT);
	json_t *o = NULL;

	if (refused)
		*refused = NULL;
	json_decref(request);
	a->t.lenient_config = 1;	/* a request that reads: the daemon's state stands, whatever the file's edit */
	if (dc_resolve(&a->t, err, sizeof(err)) < 0) {
		cli_error("%s", err);
		free(req);
		return NULL;
	}
	int r = dc_request(&a->t, req, &reply, err, sizeof(err));
	if (r < 0) {
		/*
		 * Which file named the endpoint: the first thing to check; and,
		 * when nothing answered, the daemons of other configs. Not when
		 * one answered and refused the keys (a trial was sent to other
		 * users' daemons for a key of its own).
		 */
		if (r == -2 && !a->t.control && a->t.config_path[0])
			cli_error("%s (listen.control of %s)", err, a->t.config_path);
		else if (!a->t.control && a->t.config_path[0])
			cli_error("%s (listen.control of %s)%s", err, a->t.config_path,
				  dc_config_near_miss(a->t.config));
		else
			cli_error("%s", err);
		free(req);
		return NULL;
	}
	int is_status_req = is_status(req);
	free(req);
	o = json_loads(reply, 0, NULL);
	free(reply);
	if (!json_is_object(o)) {
		cli_error("the daemon's reply is not JSON");
		json_decref(o);
		return NULL;
	}
	if (!json_is_true(json_object_get(o, "ok")) && refused) {
		*refused = o;
		return NULL;
	}
	if (!json_is_true(json_object_get(o, "ok"))) {
		const char *e = json_string_value(json_object_get(o, "error"));
		cli_error("%s", e ? e : "the daemon refused the request");
		json_decref(o);
		return NULL;
	}
	json_object_del(o, "v");
	json_object_del(o, "ok");
	if (is_status_req)	/* what this CLI read, beside what the daemon reads */
		json_object_set_new(o, "cli_config", a->t.control ? json_null()
				    : json_string(a->t.config_path));
	return o;
}

void dc_print_json(json_t *o)
{
	json_dumpf(o, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
	putchar('\n');
}

int dc_simple(int argc, char **argv, const char *usage, const char *cmd, void (*print)(json_t *reply))
{
	struct dc_args a = { 0 };
	int r = dc_args(argc, argv, &a, usage, NULL, NULL, NULL);

	if (r < 0)
		return cli_opts_exit(r);
	if (r != argc)	/* `wdrift studies fa`: a trial expected one study */
		return cli_usage_error("unexpected argument '%s': `wdrift %s` takes options only%s", argv[r], cmd,
				       !strcmp(cmd, "studies") ? "; `wdrift drift STUDY` shows one study" : "");
	return dc_show(&a, json_pack("{s:i,s:s}", "v", 1, "cmd", cmd), print);
}

int dc_show(struct dc_args *a, json_t *request, void (*print)(json_t *reply))
{
	json_t *o = dc_call(a, request);

	if (!o)
		return EXIT_FAIL;
	if (a->json)
		dc_print_json(o);
	else
		print(o);
	json_decref(o);
	return EXIT_OK;
}

void dc_said(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	if (s)
		printf("%-10s %s\n", key, s);
}

void dc_storage_note(json_t *reply)
{
	const char *s = json_string_value(json_object_get(reply, "storage_note"));

	if (s)
		printf("%-10s warning: %s\n", "storage", s);
}

void dc_lagging(json_t *drift, const char *run, char *out, size_t len)
{
	json_t *mc = json_object_get(drift, "missing_candidates"), *c;
	long long step = dc_int(json_object_get(drift, "missing_latest"), run);
	int is_cand = 0;
	size_t i;

	json_array_foreach(mc, i, c)
		is_cand |= !strcmp(json_string_value(c), run);
	snprintf(out, len, "%.200s%s: compared last at step %lld", run,
		 !mc ? "" : is_cand ? " (candidate)" : " (proxy)", step);
}

long long dc_int(json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}
