/*
 * cmd_watch.c: `wdrift watch`: drift and alert events as the daemon
 * publishes them (docs/protocol.md, "Events").
 *
 * A SUB socket connects silently and waits for ever when nobody listens,
 * so the socket is watched through its monitor: the handshake with the
 * daemon's PUB socket must succeed within WATCH_CONNECT_MS, or watch says
 * that no daemon publishes there and exits 1. Later disconnections are
 * told on stderr while ZeroMQ reconnects.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <zmq.h>

#include "cli.h"
#include "daemon_client.h"
#include "zctx.h"

#define WATCH_CONNECT_MS 3000	/* the daemon's handshake; the whole answer stays under 5 s */
#define WATCH_LINE_MAX 199	/* bytes of a plain line, its newline apart */

static const char usage[] =
"usage: wdrift watch [--count N] [--topic PREFIX]\n"
"                    " DC_USAGE_TARGET " [--json]\n"
"\n"
"Prints drift results (drift.STUDY) and alert transitions (alert.NAME) as the\n"
"daemon publishes them, until interrupted or N events: one line each, under\n"
"200 characters (the longest runs and lists are cut, \"…+N\" saying how much\n"
"is left out); --json prints each event whole.\n"
"\n"
"      --count N      stop after N events\n"
"      --topic PREFIX only events whose topic starts with PREFIX (drift., alert.)\n"
"  -c, --config FILE  the daemon's config, for its events endpoint (listen.events)\n"
WD_CONFIG_SEARCH_HELP
"      --endpoint EP  the events endpoint, instead of the config's\n"
"      --server-key K, --key FILE\n"
"                     for a daemon with auth.server_key, as for the other commands\n"
"      --json         one JSON object per line: {\"topic\", \"event\"}\n"
DC_HELP_HELP
"\n"
"When no daemon accepts the connection within 3 s, says so and exits 1.\n"
"\n"
"exit status: 0 ok; 1 no events endpoint, or no daemon publishing there; 2 usage error.\n";

struct watch_opts {
	long count;
	const char *topic;
};

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static int on_opt(int c, const char *arg, void *ctx)
{
	struct watch_opts *o = ctx;
	if (c == 'n') {
		char *end;
		o->count = strtol(arg, &end, 10);
		if (!*arg || *end || o->count <= 0) {
			cli_usage_error("--count '%s': expected a positive number", arg);
			return 1;
		}
		return 0;
	}
	if (c == 't') {
		o->topic = arg;
		return 0;
	}
	return 1;
}

/* --- one plain line an event --- */

/*
 * A line of at most cap bytes; a piece that does not fit is not added.
 * Room for more than a line: line_print cuts what was written past it.
 */
struct line {
	char buf[1024];
	size_t len, cap;
};

/* How much of s to print in at most max bytes, not cutting a UTF-8 character. */
static size_t utf8_fit(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n <= max)
		return n;
	while (max && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	return max;
}

/* s, or its first bytes and "…" when longer than max bytes: a name in a line. */
static const char *clipped(char *buf, size_t size, const char *s, size_t max)
{
	size_t n;

	if (!s)
		return "?";
	n = utf8_fit(s, max);
	snprintf(buf, size, "%.*s%s", (int)n, s, s[n] ? "…" : "");
	return buf;
}

/* Appends a formatted piece when it fits: 0, or -1 (the line is unchanged). */
static int line_add(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int line_add(struct line *l, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, ap);
	va_end(ap);
	if (n < 0 || l->len + (size_t)n > l->cap) {
		l->buf[l->len] = 0;
		return -1;
	}
	l->len += (size_t)n;
	return 0;
}

/* Prints l, cut to WATCH_LINE_MAX bytes with "…" if a piece ran over. */
static void line_print(struct line *l)
{
	size_t n = strlen(l->buf);

	if (n > WATCH_LINE_MAX)
		n = utf8_fit(l->buf, WATCH_LINE_MAX - 3);
	printf("%.*s%s\n", (int)n, l->buf, l->buf[n] ? "…" : "");
}

/* Member key of o as a string, or "?". */
static const char *str(json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));
	return v ? v : "?";
}

static void fmt_num(char *b, size_t n, json_t *v)
{
	if (json_is_number(v))
		snprintf(b, n, "%.3g", json_number_value(v));
	else
		snprintf(b, n, "-");
}

/*
 * One run of a drift event: "RUN W1max X r[LABEL] Y ...", its ratios cut
 * at three with "…+N" (a study may have 64 proxies), then "NONFINITE N"
 * and "ABSENT N" when not 0.
 */
static void run_piece(char *p, size_t size, const char *run, json_t *r)
{
	char name[64], label[40], num[32];
	const char *key;
	json_t *v;
	size_t used, shown = 0, more = 0;

	fmt_num(num, sizeof(num), json_object_get(r, "w1_max"));
	/* 12 bytes a name: shorter names before fewer runs (9 runs of 60-byte names showed one) */
	used = (size_t)snprintf(p, size, " %s%s W1max %s", clipped(name, sizeof(name), run, 12),
				strcmp(str(r, "role"), "proxy") ? "" : " (proxy)",
				num);
	json_object_foreach(json_object_get(r, "ratio_max"), key, v) {
		if (!json_is_number(v))
			continue;
		if (shown == 3) {
			more++;
			continue;
		}
		fmt_num(num, sizeof(num), v);
		used += (size_t)snprintf(p + used, size - used, " r[%s] %s",
					 clipped(label, sizeof(label), key, 12), num);
		if (used >= size)	/* cannot happen with these clips; cut rather than overrun */
			return;
		shown++;
	}
	if (more)
		used += (size_t)snprintf(p + used, size - used, " …+%zu", more);
	/* said only when there are any: a NaN-ridden or partial step read as healthy (a trial) */
	json_int_t bad = json_integer_value(json_object_get(r, "nonfinite"));
	json_int_t absent = json_integer_value(json_object_get(r, "absent"));
	if (bad > 0 && used < size)
		used += (size_t)snprintf(p + used, size - used, " NONFINITE %lld", (long long)bad);
	if (absent > 0 && used < size)
		snprintf(p + used, size - used, " ABSENT %lld", (long long)absent);
}

/*
 * "drift  STUDY step N: RUN W1max X r[L] Y; ...", candidates first, "…+N runs" for the rest;
 * "step N (history):" for a past step computed now (a reload's backfill).
 */
static void print_drift(const char *topic, json_t *e)
{
	struct line l = { .cap = WATCH_LINE_MAX - 16 };	/* room for " …+N runs" */
	json_t *runs = json_object_get(e, "runs"), *r;
	size_t total = json_object_size(runs), shown = 0;
	char name[64], piece[256];
	const char *run;

	(void)topic;
	line_add(&l, "drift  %s step %lld%s:", clipped(name, sizeof(name), str(e, "study"), 24),
		 dc_int(e, "step"), json_is_true(json_object_get(e, "history")) ? " (history)" : "");
	for (int proxies = 0; proxies < 2; proxies++) {
		json_object_foreach(runs, run, r) {
			int is_proxy = !strcmp(str(r, "role"), "proxy");
			if (is_proxy != proxies)
				continue;
			run_piece(piece, sizeof(piece), run, r);
			if (line_add(&l, "%s%s", shown ? ";" : "", piece) < 0)
				goto full;
			shown++;
		}
	}
full:
	l.cap = WATCH_LINE_MAX;
	if (shown < total)
		line_add(&l, " …+%zu runs", total - shown);
	line_print(&l);
}

/*
 * An alert's value and threshold: counts whole (nonfinite 1024, not
 * 1.02e+03), and as many digits as tell them apart (a trial read "ratio 1
 * (threshold 1)" for 1.00054 above 1 as firing at equality).
 */
static void fmt_against(char *v, char *t, size_t n, json_t *jv, json_t *jt)
{
	double x = json_number_value(jv), y = json_number_value(jt);
	int p = 3;

	if (!json_is_number(jv) || !json_is_number(jt)) {
		fmt_num(v, n, jv);
		fmt_num(t, n, jt);
		return;
	}
	do {
		int whole = fabs(x) < 1e15 && x == (double)(long long)x;
		snprintf(v, n, "%.*g", whole ? 17 : p, x);
		whole = fabs(y) < 1e15 && y == (double)(long long)y;
		snprintf(t, n, "%.*g", whole ? 17 : p, y);
	} while (x != y && !strcmp(v, t) && ++p <= 17);
}

/* "alert  STATE NAME: study S run R [tensor T] step N: METRIC V (threshold T, SEVERITY)". */
static void print_alert(json_t *e)
{
	struct line l = { .cap = sizeof(l.buf) - 1 };	/* line_print cuts it */
	char a[64], s[64], r[64], t[80], v[32], th[32];
	const char *tensor = json_string_value(json_object_get(e, "tensor"));

	fmt_against(v, th, sizeof(v), json_object_get(e, "value"), json_object_get(e, "threshold"));
	snprintf(l.buf, sizeof(l.buf), "alert  %-8s %s: study %s run %s%s%s step %lld: %s %s (threshold %s, %s)",
		 str(e, "state"), clipped(a, sizeof(a), str(e, "alert"), 40),
		 clipped(s, sizeof(s), str(e, "study"), 32), clipped(r, sizeof(r), str(e, "run"), 32),
		 tensor ? " tensor " : "", tensor ? clipped(t, sizeof(t), tensor, 48) : "",
		 dc_int(e, "step"), str(e, "metric"), v, th, str(e, "severity"));
	line_print(&l);
}

/* Any other topic: the topic and the event's JSON, cut to the line. */
static void print_other(const char *topic, json_t *e)
{
	struct line l = { .cap = sizeof(l.buf) - 1 };
	char *text = json_dumps(e, JSON_COMPACT);

	snprintf(l.buf, sizeof(l.buf), "%s  %s", topic, text ? text : "");
	free(text);
	line_print(&l);
}

static void print_event(const char *topic, json_t *e)
{
	if (!strncmp(topic, "alert.", 6))
		print_alert(e);
	else if (!strncmp(topic, "drift.", 6))
		print_drift(topic, e);
	else
		print_other(topic, e);
}

/* --- the socket and its monitor --- */

/*
 * Waits for the handshake with the daemon: 0; or -1 with err naming the
 * endpoint and where it came from (the config, or --endpoint); -2 when a
 * peer answered and the handshake failed (keys: no other config's hint).
 */
static int await_daemon(void *m, const struct dc_target *t, const char *source, char *err, size_t errlen)
{
	double t0 = cli_now();
	struct wd_hs hs = { 0 };
	uint32_t value = 0;
	char why[1024];
	int code;

	for (;;) {
		int left = WATCH_CONNECT_MS - (int)((cli_now() - t0) * 1000);
		if (stop)
			return 0;
		if (left <= 0)
			break;
		if ((code = wd_hs_monitor_event(m, (hs.closed || hs.refused_since) && left > WD_HS_POLL_MS
						? WD_HS_POLL_MS : left, &value)) < 0) {
			if (wd_hs_stuck(&hs, t->events_ep, &dc_events_names, &t->keys, why, sizeof(why)) ||
			    wd_hs_stale_socket(&hs, t->events_ep, dc_events_names.socket, why, sizeof(why))) {
				snprintf(err, errlen, "%s (%s)", why, source);
				return hs.connected ? -2 : -1;
			}
			continue;
		}
		if (code == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
			return 0;
		/* a refused retry brings events every 100-199 ms: asked after them too */
		if (wd_hs_event(&hs, code, value, t->events_ep, &dc_events_names, &t->keys, why, sizeof(why)) ||
		    wd_hs_stale_socket(&hs, t->events_ep, dc_events_names.socket, why, sizeof(why))) {
			snprintf(err, errlen, "%s (%s)", why, source);
			return hs.connected ? -2 : -1;	/* a peer answered: its keys, not another config */
		}
	}
	snprintf(err, errlen, "no daemon is publishing events at %s (%s): nothing accepted the "
		 "connection in %.0f s; is wdriftd running?", t->events_ep, source, WATCH_CONNECT_MS / 1000.0);
	return -1;
}

/* Later disconnections and reconnections, told on stderr (not in the event stream). */
static void tell_connection(void *m, const char *ep)
{
	uint32_t value;
	int code;

	while ((code = wd_hs_monitor_event(m, 0, &value)) >= 0) {
		if (code == ZMQ_EVENT_DISCONNECTED)
			fprintf(stderr, "wdrift watch: the daemon at %s went away; waiting for it to come back\n", ep);
		else if (code == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
			fprintf(stderr, "wdrift watch: connected to %s again\n", ep);
	}
}

/* One event: topic, then body, each of any size. 0, or -1 (none, or a malformed one said). */
static int recv_event(void *s, char *topic, size_t topiclen, json_t **event)
{
	zmq_msg_t msg;
	int more = 0;
	size_t more_len = sizeof(more);
	json_error_t jerr;

	*event = NULL;
	int n = zmq_recv(s, topic, topiclen - 1, ZMQ_DONTWAIT);
	if (n < 0)
		return -1;
	topic[(size_t)n < topiclen - 1 ? (size_t)n : topiclen - 1] = 0;
	zmq_getsockopt(s, ZMQ_RCVMORE, &more, &more_len);
	if (!more) {
		fprintf(stderr, "wdrift watch: an event '%s' with no body, left out\n", topic);
		return -1;
	}
	zmq_msg_init(&msg);
	if (zmq_msg_recv(&msg, s, 0) < 0) {
		zmq_msg_close(&msg);
		return -1;
	}
	*event = json_loadb(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, &jerr);
	zmq_msg_close(&msg);
	for (more = 1; zmq_getsockopt(s, ZMQ_RCVMORE, &more, &more_len) == 0 && more;) {
		zmq_msg_init(&msg);	/* frames beyond the two: not this protocol's; drained */
		zmq_msg_recv(&msg, s, 0);
		zmq_msg_close(&msg);
	}
	if (!*event) {
		fprintf(stderr, "wdrift watch: an event '%s' that is not JSON, left out: %s\n", topic, jerr.text);
		return -1;
	}
	return 0;
}

int cmd_watch(int argc, char **argv)
{
	static const struct option extra[] = {
		{ "count", required_argument, NULL, 'n' },
		{ "topic", required_argument, NULL, 't' },
		{ 0 },
	};
	struct dc_args a = { 0 };
	struct watch_opts o = { 0 };
	char err[2048], source[600];
	int r = dc_args(argc, argv, &a, usage, extra, on_opt, &o), seen = 0, linger = 0;

	if (r < 0)
		return cli_opts_exit(r);
	if (r != argc)
		return cli_usage_error("unexpected argument '%s'", argv[r]);
	/* dc_args takes --endpoint as the control endpoint: here it names the events one */
	const char *given = a.t.control;
	if (dc_resolve(&a.t, err, sizeof(err)) < 0)
		return cli_error("%s", err);
	if (given)
		snprintf(a.t.events_ep, sizeof(a.t.events_ep), "%s", given);
	if (given)
		snprintf(source, sizeof(source), "--endpoint");
	else
		snprintf(source, sizeof(source), "listen.events of %s", dc_config_path(a.t.config));

	if (!a.t.events_ep[0])
		return cli_error("no events endpoint: %s has no listen.events; give --endpoint EP",
				 dc_config_path(a.t.config));

	if (dc_endpoint_check(a.t.events_ep, "events", given != NULL, err, sizeof(err)) < 0)
		return cli_error("%s (%s)%s", err, source, given ? "" : dc_config_near_miss(a.t.config));
	void *ctx = wd_zmq_ctx_new(), *s = ctx ? zmq_socket(ctx, ZMQ_SUB) : NULL, *m = NULL;
	const char *prefix = o.topic ? o.topic : "";
	int rc = EXIT_FAIL;
	if (!s) {
		cli_error("cannot make a ZeroMQ socket: %s", zmq_strerror(errno));
		goto out;
	}
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(s, ZMQ_SUBSCRIBE, prefix, strlen(prefix));
	wd_client_keys_apply(s, &a.t.keys);
	if (!(m = wd_hs_monitor(ctx, s))) {
		cli_error("cannot monitor the events socket: %s", zmq_strerror(errno));
		goto out;
	}
	if (zmq_connect(s, a.t.events_ep) < 0) {
		cli_error("cannot connect to '%s' (%s): %s", a.t.events_ep, source, zmq_strerror(errno));
		goto out;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	int waited = await_daemon(m, &a.t, source, err, sizeof(err));
	if (waited < 0) {
		/* no daemon answered: a ./wdrift.yaml not searched for, a wdriftd of another config */
		cli_error("%s%s", err, given || waited == -2 ? "" : dc_config_near_miss(a.t.config));
		goto out;
	}
	if (!a.json && !stop)
		fprintf(stderr, "watching %s (Ctrl-C to stop)\n", a.t.events_ep);
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (!stop && (!o.count || seen < o.count)) {
		zmq_pollitem_t it[2] = { { s, 0, ZMQ_POLLIN, 0 }, { m, 0, ZMQ_POLLIN, 0 } };
		char topic[256];
		json_t *e;
		if (zmq_poll(it, 2, 200) < 0 && errno != EINTR) {
			cli_error("waiting for events at %s: %s", a.t.events_ep, zmq_strerror(errno));
			goto out;
		}
		if (it[1].revents & ZMQ_POLLIN)
			tell_connection(m, a.t.events_ep);
		if (!(it[0].revents & ZMQ_POLLIN) || recv_event(s, topic, sizeof(topic), &e) < 0)
			continue;	/* a timeout: look at stop again */
		if (a.json) {
			json_t *line = json_pack("{s:s,s:O}", "topic", topic, "event", e);
			char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
			if (text)
				printf("%s\n", text);
			else
				fprintf(stderr, "wdrift watch: an event '%s' that cannot be printed as JSON\n", topic);
			free(text);
			json_decref(line);
		} else {
			print_event(topic, e);
		}
		json_decref(e);
		seen++;
	}
	rc = EXIT_OK;
out:
	wd_hs_monitor_close(s, &m);
	if (s)
		zmq_close(s);
	if (ctx)
		zmq_ctx_term(ctx);
	return rc;
}
