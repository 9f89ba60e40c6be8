/* daemon_client.c: endpoints and Lazy Pirate requests (see daemon_client.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <getopt.h>

#include <jansson.h>
#include <zmq.h>

#include "cli.h"
#include "config.h"
#include "daemon_client.h"

enum { DC_OPT_SERVER_KEY = 1000, DC_OPT_KEY };

const char *dc_config_path(const char *given)
{
	if (given)
		return given;
	return access("config/wdrift.yaml", R_OK) == 0 ? "config/wdrift.yaml" : "/etc/wdrift/wdrift.yaml";
}

int dc_resolve(struct dc_target *t, char *err, size_t errlen)
{
	struct wd_config cfg;
	const char *path = dc_config_path(t->config);
	char cerr[WD_CONFIG_ERR_MAX];

	if (wd_client_keys_load(t->server_key, t->key, &t->keys, err, errlen) < 0)
		return -1;
	wd_config_defaults(&cfg);
	if (wd_config_load(path, &cfg, cerr, sizeof(cerr)) < 0) {
		if (t->control) {	/* --endpoint needs no config */
			snprintf(t->control_ep, sizeof(t->control_ep), "%s", t->control);
			snprintf(t->ingest_ep, sizeof(t->ingest_ep), "%s", t->ingest ? t->ingest : "");
			t->events_ep[0] = 0;
			return 0;
		}
		if (!t->config && access(path, F_OK) != 0)
			snprintf(err, errlen, "no configuration: neither ./config/wdrift.yaml nor "
				 "/etc/wdrift/wdrift.yaml; give -c FILE or --endpoint");
		else
			snprintf(err, errlen, "%s", cerr);
		return -1;
	}
	snprintf(t->control_ep, sizeof(t->control_ep), "%s", t->control ? t->control : cfg.listen.control);
	snprintf(t->ingest_ep, sizeof(t->ingest_ep), "%s", t->ingest ? t->ingest : cfg.listen.ingest);
	snprintf(t->events_ep, sizeof(t->events_ep), "%s", cfg.listen.events);
	wd_config_release(&cfg);
	return 0;
}

const char *dc_keys_hint(const struct wd_client_keys *keys)
{
	return keys && keys->on ? " (or it refused this client's CURVE handshake: check --server-key, "
				  "and that this key is in the daemon's auth.clients)"
				: " (a daemon with auth.server_key answers only CURVE clients: "
				  "give --server-key and --key)";
}

int dc_request(const char *endpoint, const struct wd_client_keys *keys, const char *request,
	       char **reply, char *err, size_t errlen)
{
	const char *env = getenv("WDRIFT_TIMEOUT_MS");
	int timeout = env && atoi(env) > 0 ? atoi(env) : 1500, tries = 3, linger = 0;
	void *ctx = zmq_ctx_new();

	*reply = NULL;
	for (int k = 0; k < tries && !*reply; k++) {
		/* a fresh socket each try: a REQ that lost its reply is stuck */
		void *s = zmq_socket(ctx, ZMQ_REQ);
		zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
		zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
		wd_client_keys_apply(s, keys);
		if (zmq_connect(s, endpoint) < 0) {
			snprintf(err, errlen, "bad endpoint '%s': %s", endpoint, zmq_strerror(errno));
			zmq_close(s);
			zmq_ctx_term(ctx);
			return -1;
		}
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_send(s, request, strlen(request), 0) >= 0 && zmq_msg_recv(&m, s, 0) >= 0) {
			size_t n = zmq_msg_size(&m);
			*reply = malloc(n + 1);
			if (*reply) {
				memcpy(*reply, zmq_msg_data(&m), n);
				(*reply)[n] = 0;
			}
		}
		zmq_msg_close(&m);
		zmq_close(s);
	}
	zmq_ctx_term(ctx);
	if (!*reply) {
		snprintf(err, errlen, "the daemon is not answering at %s (%d tries, %.1f s each): "
			 "is wdriftd running?%s", endpoint, tries, timeout / 1000.0, dc_keys_hint(keys));
		return -1;
	}
	return 0;
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
	int n = 6, c;
	const char *shorts = ":c:h";

	for (size_t i = 0; extra && extra[i].name && n < 23; i++) {
		opts[n++] = extra[i];
		if (extra[i].val == 'o')	/* --output is also -o */
			shorts = ":c:ho:";
	}
	opts[n] = (struct option){ 0 };
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
		switch (c) {
		case 'c': a->t.config = optarg; break;
		case 'E': a->t.control = optarg; break;
		case 'J': a->json = 1; break;
		case DC_OPT_SERVER_KEY: a->t.server_key = optarg; break;
		case DC_OPT_KEY: a->t.key = optarg; break;
		case 'h': fputs(usage, stdout); return DC_HELPED;
		case ':': return -cli_usage_error("option '%s' needs a value", argv[optind - 1]);
		case '?': return -cli_usage_error("unknown option '%s'", argv[optind - 1]);
		default:
			if (!on_extra || on_extra(c, optarg, ctx))
				return -EXIT_USAGE;
		}
	}
	return optind;
}

json_t *dc_call(struct dc_args *a, json_t *request)
{
	char err[1024], *reply = NULL;
	char *req = json_dumps(request, JSON_COMPACT);
	json_t *o = NULL;

	json_decref(request);
	if (dc_resolve(&a->t, err, sizeof(err)) < 0 ||
	    dc_request(a->t.control_ep, &a->t.keys, req, &reply, err, sizeof(err)) < 0) {
		cli_error("%s", err);
		free(req);
		return NULL;
	}
	free(req);
	o = json_loads(reply, 0, NULL);
	free(reply);
	if (!json_is_object(o)) {
		cli_error("the daemon's reply is not JSON");
		json_decref(o);
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
	return o;
}

void dc_print_json(json_t *o)
{
	json_dumpf(o, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
	putchar('\n');
}

json_t *dc_simple(int argc, char **argv, const char *usage, const char *cmd, int *rc)
{
	struct dc_args a = { 0 };
	int r = dc_args(argc, argv, &a, usage, NULL, NULL, NULL);

	*rc = EXIT_OK;
	if (r == DC_HELPED)
		return NULL;
	if (r < 0) {
		*rc = -r;
		return NULL;
	}
	if (r != argc) {
		*rc = cli_usage_error("unexpected argument '%s'", argv[r]);
		return NULL;
	}
	json_t *o = dc_call(&a, json_pack("{s:i,s:s}", "v", 1, "cmd", cmd));
	if (!o) {
		*rc = EXIT_FAIL;
		return NULL;
	}
	if (a.json) {
		dc_print_json(o);
		json_decref(o);
		return NULL;
	}
	return o;
}
