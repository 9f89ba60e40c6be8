/*
 * cmd_send.c: `wdrift send`: publishes a checkpoint file to the daemon as
 * one snapshot of a run, in protocol v1, and waits for its durable ack.
 * The file is the user's: it is read by a resource-limited child process
 * (ckpt_sandbox.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zmq.h>

#include "ckpt_sandbox.h"
#include "cli.h"
#include "daemon_client.h"
#include "wire.h"

static const char usage[] =
"usage: wdrift send --run RUN --step STEP FILE.h5 [--ingest EP] [-c FILE] [--json]\n"
"\n"
"Publishes every tensor of a checkpoint file (docs/checkpoints.md) as the\n"
"snapshot of RUN at STEP, commits it, and waits until the daemon says it is\n"
"durable. Sending the same snapshot again is harmless (it is acked as a\n"
"duplicate), so on a timeout it is sent again, three times in all. Another\n"
"file for a (RUN, STEP) already durable is refused as a conflict (exit 1):\n"
"`wdrift runs rm RUN` frees the name.\n"
"\n"
"      --run RUN      the run's name, as the daemon's studies name it\n"
"      --step STEP    the training step\n"
"      --ingest EP    the ingest endpoint, instead of the config's\n"
"  -c, --config FILE  the daemon's config, for its endpoints\n"
"      --json         print the ack as JSON\n"
DC_HELP_HELP
"\n"
"The file is read by a child process with limits: WDRIFT_CKPT_TIMEOUT\n"
"seconds per step (default 60; a tensor gets 1 s more per 32 MiB) and\n"
"WDRIFT_CKPT_MEMORY bytes (default half the machine's memory).\n"
"\n"
"exit status: 0 acked; 1 a bad file, a refused snapshot, or no daemon; 2 usage error.\n";

struct send_opts {
	const char *run;
	long long step;
	int have_step;
	struct dc_args *a;
};

static int on_opt(int c, const char *arg, void *ctx)
{
	struct send_opts *o = ctx;
	char *end;
	switch (c) {
	case 'r': o->run = arg; return 0;
	case 'i': o->a->t.ingest = arg; return 0;
	case 's':
		o->step = strtoll(arg, &end, 10);
		if (!*arg || *end || o->step < 0) {
			cli_usage_error("--step '%s': expected a step number", arg);
			return 1;
		}
		o->have_step = 1;
		return 0;
	}
	return 1;
}

static int send_frame(void *s, const void *p, size_t n, int more)
{
	return zmq_send(s, p, n, more ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
}

/*
 * Sends the whole snapshot; returns 0, -EAGAIN when a frame could not be
 * queued within the socket's send timeout (no connection: ZeroMQ gives up
 * on a peer that refused the handshake, and a send would wait forever), or
 * -1 with err.
 */
static int send_snapshot(void *s, struct wd_ckpt_box *box, const char *run, long long step,
			 char *err, size_t errlen)
{
	const struct wd_ckpt *ck = wd_ckpt_box_listing(box);
	struct wire_header *h = calloc(1, sizeof(*h));
	char cerr[WD_CKPT_ERR_MAX];
	int r = -1;

	if (!h)
		return snprintf(err, errlen, "out of memory"), -1;
	for (size_t i = 0; i < wd_ckpt_count(ck); i++) {
		const struct wd_ckpt_entry *e = wd_ckpt_entry(ck, i);
		struct wd_tensor_map m;
		if (wd_ckpt_box_read(box, i, &m, cerr) < 0) {
			snprintf(err, errlen, "%s", cerr);
			goto out;
		}
		const char *data = m.data;
		size_t bytes = m.bytes;
		memset(h, 0, sizeof(*h));
		h->type = WIRE_TENSOR;
		snprintf(h->run, sizeof(h->run), "%s", run);
		snprintf(h->name, sizeof(h->name), "%s", e->name);
		h->step = step;
		h->dtype = e->dtype;
		h->ndims = e->rank < WIRE_MAX_DIMS ? e->rank : WIRE_MAX_DIMS;
		for (int d = 0; d < h->ndims; d++)
			h->shape[d] = e->dims[d];
		h->count = h->total = e->numel;
		h->crc32 = wire_crc32(0, data, bytes);
		char *hdr = wire_build(h);
		int bad = !hdr || send_frame(s, hdr, strlen(hdr), 1) < 0;
		free(hdr);
		for (size_t off = 0; !bad && off < bytes; off += WIRE_MAX_FRAME) {
			size_t len = bytes - off < WIRE_MAX_FRAME ? bytes - off : WIRE_MAX_FRAME;
			bad = send_frame(s, data + off, len, off + len < bytes) < 0;
		}
		wd_tensor_map_release(&m);
		if (bad) {
			r = errno == EAGAIN ? -EAGAIN : -1;
			snprintf(err, errlen, "sending '%s': %s", e->name, zmq_strerror(errno));
			goto out;
		}
	}
	memset(h, 0, sizeof(*h));
	h->type = WIRE_COMMIT;
	snprintf(h->run, sizeof(h->run), "%s", run);
	h->step = step;
	h->tensors = wd_ckpt_count(ck);
	char *c = wire_build(h);
	r = c && send_frame(s, c, strlen(c), 0) == 0 ? 0 : errno == EAGAIN ? -EAGAIN : -1;
	free(c);
	if (r)
		snprintf(err, errlen, "sending the commit: %s", zmq_strerror(errno));
out:
	free(h);
	return r;
}

int cmd_send(int argc, char **argv)
{
	static const struct option extra[] = {
		{ "run", required_argument, NULL, 'r' },
		{ "step", required_argument, NULL, 's' },
		{ "ingest", required_argument, NULL, 'i' },
		{ 0 },
	};
	struct dc_args a = { 0 };
	struct send_opts o = { .a = &a };
	struct wire_limits lim = { WIRE_NAME_MAX, WIRE_MAX_DIMS, UINT64_MAX };
	char err[1024];
	int r = dc_args(argc, argv, &a, usage, extra, on_opt, &o);

	if (r == DC_HELPED)
		return EXIT_OK;
	if (r < 0)
		return -r;
	if (!o.run || !o.have_step)
		return cli_usage_error("--run and --step are required");
	if (argc - r != 1)
		return cli_usage_error("expected one FILE.h5, got %d", argc - r);
	struct wd_sandbox_limits read_lim;
	struct wd_ckpt_box *ck;
	char cerr[WD_CKPT_ERR_MAX];
	if (wd_sandbox_limits_env(&read_lim, cerr, sizeof(cerr)) < 0)
		return cli_usage_error("%s", cerr);
	/* the reader child starts before ZeroMQ's threads do */
	if (wd_ckpt_box_open(argv[r], &read_lim, &ck, cerr) < 0)
		return cli_error("%s", cerr);
	if (!wd_ckpt_count(wd_ckpt_box_listing(ck))) {
		wd_ckpt_box_close(&ck);
		return cli_error("'%s': no datasets to send", argv[r]);
	}
	int resolved = dc_resolve(&a.t, err, sizeof(err));
	if (resolved < 0 || !a.t.ingest_ep[0]) {
		wd_ckpt_box_close(&ck);
		/* a key error says what is wrong with the key, not that the endpoint is missing */
		return cli_error("%s", resolved < 0 ? err : "no ingest endpoint: give -c FILE or --ingest");
	}
	const char *env = getenv("WDRIFT_TIMEOUT_MS");
	int timeout = env && atoi(env) > 0 ? atoi(env) * 4 : 10000, linger = 0, rc = EXIT_FAIL;
	void *ctx = zmq_ctx_new();
	struct wire_header *h = calloc(1, sizeof(*h));
	struct wire_error werr;
	for (int attempt = 0; attempt < 3 && rc == EXIT_FAIL && h; attempt++) {
		void *s = zmq_socket(ctx, ZMQ_DEALER);	/* fresh each try */
		zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
		zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
		zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout, sizeof(timeout));
		wd_client_keys_apply(s, &a.t.keys);
		if (zmq_connect(s, a.t.ingest_ep) < 0) {
			zmq_close(s);
			snprintf(err, sizeof(err), "bad endpoint '%s': %s", a.t.ingest_ep, zmq_strerror(errno));
			break;
		}
		int sent = send_snapshot(s, ck, o.run, o.step, err, sizeof(err));
		if (sent == -EAGAIN) {	/* no connection: as no ack, try again */
			snprintf(err, sizeof(err), "no connection to %s (%d tries): is wdriftd running?%s",
				 a.t.ingest_ep, attempt + 1, dc_keys_hint(&a.t.keys));
			zmq_close(s);
			continue;
		}
		if (sent < 0) {
			zmq_close(s);
			break;
		}
		char buf[8192];
		for (;;) {
			int n = zmq_recv(s, buf, sizeof(buf) - 1, 0);
			if (n < 0) {
				snprintf(err, sizeof(err), "no ack from %s (%d tries): is wdriftd running?%s",
					 a.t.ingest_ep, attempt + 1, dc_keys_hint(&a.t.keys));
				break;
			}
			if (wire_parse(buf, (size_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1), &lim, h, &werr) < 0)
				continue;
			if (h->type == WIRE_ACK) {
				if (a.json)
					printf("{\"run\": \"%s\", \"step\": %lld, \"tensors\": %llu, \"bytes\": %llu, "
					       "\"duplicate\": %s}\n", o.run, o.step, (unsigned long long)h->tensors,
					       (unsigned long long)h->bytes, h->duplicate ? "true" : "false");
				else
					printf("acked: run '%s' step %lld, %llu tensors, %llu bytes%s\n", o.run, o.step,
					       (unsigned long long)h->tensors, (unsigned long long)h->bytes,
					       h->duplicate ? " (already durable: a duplicate)" : ", durable");
				rc = EXIT_OK;
				break;
			}
			if (h->type == WIRE_ERROR) {
				snprintf(err, sizeof(err), "the daemon refused %s%.200s%s: %s: %.300s",
					 h->name[0] ? "'" : "", h->name[0] ? h->name : "the snapshot",
					 h->name[0] ? "'" : "", wire_code_name(h->error.code), h->error.reason);
				attempt = 3;	/* a refusal is an answer: do not retry */
				break;
			}
		}
		zmq_close(s);
	}
	free(h);
	zmq_ctx_term(ctx);
	wd_ckpt_box_close(&ck);
	return rc == EXIT_OK ? EXIT_OK : cli_error("%s", err);
}
