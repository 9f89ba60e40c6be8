/*
 * cmd_watch.c: `wdrift watch`: drift and alert events as the daemon
 * publishes them (docs/protocol.md, "Events").
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zmq.h>

#include "cli.h"
#include "daemon_client.h"

static const char usage[] =
"usage: wdrift watch [--count N] [--topic PREFIX] [-c FILE] [--json]\n"
"\n"
"Prints drift results (drift.STUDY) and alert transitions (alert.NAME) as the\n"
"daemon publishes them, until interrupted or N events.\n"
"\n"
"      --count N       stop after N events\n"
"      --topic PREFIX  only events whose topic starts with PREFIX (drift., alert.)\n"
"  -c, --config FILE   the daemon's config, for its events endpoint\n"
"      --json          one JSON object per line: {\"topic\", \"event\"}\n"
"  -h, --help          this help\n"
"\n"
"exit status: 0 ok; 1 no events endpoint; 2 usage error.\n";

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
		o->count = atol(arg);
		if (o->count <= 0) {
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

static void print_event(const char *topic, json_t *e)
{
	if (!strncmp(topic, "alert.", 6)) {
		printf("alert  %-9s %s  study %s run %s%s%s step %lld: %s = %g (threshold %g)\n",
		       json_string_value(json_object_get(e, "state")), json_string_value(json_object_get(e, "alert")),
		       json_string_value(json_object_get(e, "study")), json_string_value(json_object_get(e, "run")),
		       json_object_get(e, "tensor") ? " tensor " : "",
		       json_object_get(e, "tensor") ? json_string_value(json_object_get(e, "tensor")) : "",
		       dc_int(e, "step"),
		       json_string_value(json_object_get(e, "metric")), json_number_value(json_object_get(e, "value")),
		       json_number_value(json_object_get(e, "threshold")));
		return;
	}
	const char *run;
	json_t *r;
	printf("drift  %s step %lld:", json_string_value(json_object_get(e, "study")),
	       dc_int(e, "step"));
	json_object_foreach(json_object_get(e, "runs"), run, r) {
		printf("  %s (%s) W1 max %.4g", run, json_string_value(json_object_get(r, "role")),
		       json_number_value(json_object_get(r, "w1_max")));
		const char *label;
		json_t *v;
		json_object_foreach(json_object_get(r, "ratio_max"), label, v)
			if (json_is_number(v))
				printf(", ratio[%s] max %.3g", label, json_number_value(v));
	}
	putchar('\n');
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
	char err[1024];
	int r = dc_args(argc, argv, &a, usage, extra, on_opt, &o), seen = 0, timeout = 200;

	if (r < 0)
		return cli_opts_exit(r);
	if (r != argc)
		return cli_usage_error("unexpected argument '%s'", argv[r]);
	if (dc_resolve(&a.t, err, sizeof(err)) < 0 || !a.t.events_ep[0])
		return cli_error("%s", a.t.events_ep[0] ? err : "no events endpoint: give -c FILE");
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_SUB);
	const char *prefix = o.topic ? o.topic : "";
	zmq_setsockopt(s, ZMQ_SUBSCRIBE, prefix, strlen(prefix));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	wd_client_keys_apply(s, &a.t.keys);
	if (zmq_connect(s, a.t.events_ep) < 0) {
		zmq_close(s);
		zmq_ctx_term(ctx);
		return cli_error("cannot connect to '%s': %s", a.t.events_ep, zmq_strerror(errno));
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (!a.json)
		fprintf(stderr, "watching %s (Ctrl-C to stop)\n", a.t.events_ep);
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (!stop && (!o.count || seen < o.count)) {
		char topic[256], body[65536];
		int n = zmq_recv(s, topic, sizeof(topic) - 1, 0);
		if (n < 0)
			continue;	/* timeout: look at stop again */
		topic[n < (int)sizeof(topic) ? n : (int)sizeof(topic) - 1] = 0;
		int m = zmq_recv(s, body, sizeof(body) - 1, 0);
		if (m < 0)
			continue;
		body[m < (int)sizeof(body) ? m : (int)sizeof(body) - 1] = 0;
		json_t *e = json_loads(body, 0, NULL);
		if (!e)
			continue;
		if (a.json) {
			json_t *line = json_pack("{s:s,s:O}", "topic", topic, "event", e);
			char *s2 = json_dumps(line, JSON_COMPACT);
			printf("%s\n", s2);
			free(s2);
			json_decref(line);
		} else {
			print_event(topic, e);
		}
		json_decref(e);
		seen++;
	}
	zmq_close(s);
	zmq_ctx_term(ctx);
	return EXIT_OK;
}
