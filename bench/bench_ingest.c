/*
 * bench_ingest.c: the parts `make bench-ingest` times (bench/bench_ingest.sh).
 *
 *   wdrift-bench-ingest sink ENDPOINT
 *       raw libzmq: a ROUTER that receives and drops everything until a
 *       one-frame "done", which it answers; the peer of "raw".
 *   wdrift-bench-ingest raw ENDPOINT TENSORS NUMEL
 *       sends TENSORS messages of a small header frame plus NUMEL floats in
 *       frames of at most 64 MiB, the shape of our tensor messages; prints
 *       bytes/s from the first send to the sink's answer.
 *   wdrift-bench-ingest publish ENDPOINT RUN STEPS TENSORS NUMEL
 *       protocol v1 to a real wdriftd: STEPS snapshots of TENSORS tensors,
 *       each committed and acked (durable), with up to two snapshots in
 *       flight; prints bytes/s from the first send to the last ack.
 *
 * CURVE: with BENCH_SERVER_KEY (a key pair file), the sink is a CURVE
 * server; with WDRIFT_SERVER_KEY and WDRIFT_KEY, raw and publish are
 * CURVE clients, as a real publisher would be (docs/security.md).
 *
 * Output: one JSON line. Depends on libzmq, lib/wire.c and lib/keys.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#include "crc32.h"
#include "keys.h"
#include "wire.h"
#include "bench_time.h"

#define FRAME (64u << 20)

static struct wd_client_keys keys;	/* from the environment */

static int sink(void *ctx, const char *ep)
{
	void *s = zmq_socket(ctx, ZMQ_ROUTER);
	unsigned long long bytes = 0;
	const char *server = getenv("BENCH_SERVER_KEY");
	if (server) {
		char pub[WD_KEY_Z85 + 1], sec[WD_KEY_Z85 + 1], err[600];
		int one = 1;
		if (wd_keyfile_read(server, pub, sec, err, sizeof(err)) < 0)
			return fprintf(stderr, "sink: %s\n", err), 1;
		zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof(one));
		zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, WD_KEY_Z85);
	}
	if (zmq_bind(s, ep) < 0)
		return fprintf(stderr, "bind %s: %s\n", ep, zmq_strerror(errno)), 1;
	for (;;) {
		zmq_msg_t id, m;
		int more, n = 0, done = 0;
		zmq_msg_init(&id);
		if (zmq_msg_recv(&id, s, 0) < 0)
			return 1;
		do {
			zmq_msg_init(&m);
			zmq_msg_recv(&m, s, 0);
			bytes += zmq_msg_size(&m);
			done = n == 0 && zmq_msg_size(&m) == 4 && !memcmp(zmq_msg_data(&m), "done", 4);
			more = zmq_msg_more(&m);
			zmq_msg_close(&m);
			n++;
		} while (more);
		if (done) {
			zmq_send(s, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
			zmq_send(s, "ok", 2, 0);
			zmq_msg_close(&id);
			break;
		}
		zmq_msg_close(&id);
	}
	printf("{\"received\": %llu}\n", bytes);
	zmq_close(s);
	return 0;
}

/* Sends the payload in frames of at most FRAME bytes after header. */
static void send_tensor(void *s, const char *header, const char *payload, size_t bytes)
{
	zmq_send(s, header, strlen(header), ZMQ_SNDMORE);
	for (size_t off = 0; off < bytes; off += FRAME) {
		size_t len = bytes - off < FRAME ? bytes - off : FRAME;
		zmq_send(s, payload + off, len, off + len < bytes ? ZMQ_SNDMORE : 0);
	}
}

static int raw(void *ctx, const char *ep, long tensors, size_t numel)
{
	void *s = zmq_socket(ctx, ZMQ_DEALER);
	size_t bytes = numel * 4;
	char *payload = malloc(bytes), buf[16];
	const char *header = "{\"v\":1,\"type\":\"tensor\",\"padding\":\"about the size of ours......\"}";

	memset(payload, 1, bytes);
	wd_client_keys_apply(s, &keys);
	zmq_connect(s, ep);
	double t0 = bench_now();
	for (long t = 0; t < tensors; t++)
		send_tensor(s, header, payload, bytes);
	zmq_send(s, "done", 4, 0);
	zmq_recv(s, buf, sizeof(buf), 0);
	double dt = bench_now() - t0;
	printf("{\"bytes\": %zu, \"seconds\": %.6f, \"gbps\": %.4f}\n", bytes * (size_t)tensors, dt,
	       (double)bytes * (double)tensors / dt / 1e9);
	free(payload);
	zmq_close(s);
	return 0;
}

static int wait_ack(void *s, struct wire_limits *lim)
{
	char buf[4096];
	struct wire_header *h = malloc(sizeof(*h));
	struct wire_error err;
	int r = -1;
	for (;;) {
		int n = zmq_recv(s, buf, sizeof(buf) - 1, 0);
		if (n < 0)
			break;
		if (wire_parse(buf, (size_t)(n < (int)sizeof(buf) ? n : (int)sizeof(buf) - 1), lim, h, &err) < 0)
			continue;
		if (h->type == WIRE_ACK) {
			r = 0;
			break;
		}
		if (h->type == WIRE_ERROR) {
			fprintf(stderr, "publish: error %s/%s: %s\n", wire_code_name(h->error.code),
				h->error.field, h->error.reason);
			if (h->error.code != WIRE_OVER_WINDOW)
				break;
		}
	}
	free(h);
	return r;
}

static int publish(void *ctx, const char *ep, const char *run, long steps, long tensors, size_t numel)
{
	void *s = zmq_socket(ctx, ZMQ_DEALER);
	struct wire_limits lim = { 4096, 64, 1ull << 40 };
	struct wire_header *h = calloc(1, sizeof(*h));
	size_t bytes = numel * 4;
	float *payload = malloc(bytes);
	char buf[4096];
	int timeout = 120000;

	for (size_t i = 0; i < numel; i++)
		payload[i] = (float)((i * 2654435761u) % 1000003) * 1e-6f - 0.5f;
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	wd_client_keys_apply(s, &keys);
	zmq_connect(s, ep);
	h->type = WIRE_HELLO;
	h->step = -1;
	snprintf(h->run, sizeof(h->run), "%s", run);
	char *hello = wire_build(h);
	zmq_send(s, hello, strlen(hello), 0);
	free(hello);
	if (zmq_recv(s, buf, sizeof(buf), 0) < 0)
		return fprintf(stderr, "publish: no welcome\n"), 1;
	uint32_t crc = wd_crc32(0, payload, bytes);
	long acked = 0;
	double t0 = bench_now();
	for (long st = 0; st < steps; st++) {
		for (long t = 0; t < tensors; t++) {
			memset(h, 0, sizeof(*h));
			h->type = WIRE_TENSOR;
			snprintf(h->run, sizeof(h->run), "%s", run);
			snprintf(h->name, sizeof(h->name), "layers.%ld.w", t);
			h->step = st;
			h->dtype = WD_F32;
			h->ndims = 1;
			h->shape[0] = h->count = h->total = numel;
			h->crc32 = crc;
			char *hdr = wire_build(h);
			send_tensor(s, hdr, (const char *)payload, bytes);
			free(hdr);
		}
		memset(h, 0, sizeof(*h));
		h->type = WIRE_COMMIT;
		snprintf(h->run, sizeof(h->run), "%s", run);
		h->step = st;
		h->tensors = (uint64_t)tensors;
		char *c = wire_build(h);
		zmq_send(s, c, strlen(c), 0);
		free(c);
		if (st - acked >= 1) {	/* at most two snapshots in flight */
			if (wait_ack(s, &lim) < 0)
				return fprintf(stderr, "publish: no ack\n"), 1;
			acked++;
		}
	}
	while (acked < steps) {
		if (wait_ack(s, &lim) < 0)
			return fprintf(stderr, "publish: no ack\n"), 1;
		acked++;
	}
	double dt = bench_now() - t0;
	double total = (double)bytes * (double)tensors * (double)steps;
	printf("{\"run\": \"%s\", \"bytes\": %.0f, \"seconds\": %.6f, \"gbps\": %.4f}\n", run, total, dt,
	       total / dt / 1e9);
	free(payload);
	free(h);
	zmq_close(s);
	return 0;
}

int main(int argc, char **argv)
{
	void *ctx = zmq_ctx_new();
	char err[1200];
	int r = 2;

	if (wd_client_keys_load(NULL, NULL, &keys, err, sizeof(err)) < 0)
		return fprintf(stderr, "wdrift-bench-ingest: %s\n", err), 2;

	if (argc == 3 && !strcmp(argv[1], "sink"))
		r = sink(ctx, argv[2]);
	else if (argc == 5 && !strcmp(argv[1], "raw"))
		r = raw(ctx, argv[2], atol(argv[3]), (size_t)atoll(argv[4]));
	else if (argc == 7 && !strcmp(argv[1], "publish"))
		r = publish(ctx, argv[2], argv[3], atol(argv[4]), atol(argv[5]), (size_t)atoll(argv[6]));
	else
		fprintf(stderr, "usage: wdrift-bench-ingest sink EP | raw EP TENSORS NUMEL | "
				"publish EP RUN STEPS TENSORS NUMEL\n");
	zmq_ctx_term(ctx);
	return r;
}
