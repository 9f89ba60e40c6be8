/*
 * test_publisher.c: the publisher API (lib/publisher*.c) against a scripted
 * daemon on a real ipc:// socket: how a block of a sharded tensor is cut
 * into shards contiguous in the whole, what the commit counts, the
 * `ranks` it carries, and the errors of every call, in words.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "harness.h"
#include "wdrift.h"
#include "wire.h"

struct got {
	char name[WIRE_NAME_MAX + 1];
	uint64_t offset, count, total;
	float first;
};

static int64_t last_rank = -2;	/* the last commit's rank (-1: not said) */
static uint64_t last_session;	/* and its session */
/* the refusal receive_snapshot gives, when asked to refuse */
static const char *refuse_code = "conflict", *refuse_field = "crc32";

/*
 * Receives one snapshot's messages on the ROUTER r: its tensor shards into
 * g (at most max) and the commit's tensors and ranks; acks it. Returns the
 * number of shards, or -1 on a timeout.
 */
static int receive_snapshot(void *r, struct got *g, int max, uint64_t *tensors, uint64_t *ranks,
			    const char *refuse)
{
	struct wire_limits lim = { WIRE_NAME_MAX, WIRE_MAX_DIMS, UINT64_MAX };
	struct wire_header *h = calloc(1, sizeof(*h));
	struct wire_error err;
	int n = 0;

	for (;;) {
		zmq_msg_t id, f[3];
		int nf = 0, more = 1;
		zmq_msg_init(&id);
		if (zmq_msg_recv(&id, r, 0) < 0) {
			zmq_msg_close(&id);
			free(h);
			return -1;
		}
		while (more && nf < 3) {
			zmq_msg_init(&f[nf]);
			zmq_msg_recv(&f[nf], r, 0);
			more = zmq_msg_more(&f[nf]);
			nf++;
		}
		if (wire_parse(zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), &lim, h, &err) == 0) {
			if (h->type == WIRE_TENSOR && n < max) {
				snprintf(g[n].name, sizeof(g[n].name), "%s", h->name);
				g[n].offset = h->offset;
				g[n].count = h->count;
				g[n].total = h->total;
				g[n].first = -1;	/* a frame's bytes need not be aligned */
				if (nf > 1 && zmq_msg_size(&f[1]) >= 4)
					memcpy(&g[n].first, zmq_msg_data(&f[1]), sizeof(float));
				n++;
			} else if (h->type == WIRE_COMMIT) {
				*tensors = h->tensors;
				*ranks = h->ranks;
				last_rank = h->rank;
				last_session = h->session;
				char ack[WIRE_NAME_MAX + 256];
				if (refuse)
					snprintf(ack, sizeof(ack), "{\"v\":1,\"type\":\"error\",\"code\":\"%s\","
						 "\"field\":\"%s\",\"run\":\"%s\",\"step\":%lld,\"reason\":\"%s\"}",
						 refuse_code, refuse_field, h->run, (long long)h->step, refuse);
				else
					snprintf(ack, sizeof(ack), "{\"v\":1,\"type\":\"ack\",\"run\":\"%s\",\"step\":%lld,"
						 "\"tensors\":%llu,\"bytes\":0}", h->run, (long long)h->step,
						 (unsigned long long)h->tensors);
				zmq_send(r, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
				zmq_send(r, ack, strlen(ack), 0);
				for (int i = 0; i < nf; i++)
					zmq_msg_close(&f[i]);
				zmq_msg_close(&id);
				break;
			}
		}
		for (int i = 0; i < nf; i++)
			zmq_msg_close(&f[i]);
		zmq_msg_close(&id);
	}
	free(h);
	return n;
}

/* Every line logged, for the stall test (stall_after_dead_rank). */
static char all_lines[8192];
static void log_all(int level, const char *msg)
{
	size_t at = strlen(all_lines);
	(void)level;
	snprintf(all_lines + at, sizeof(all_lines) - at, "%s\n", msg);
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *at = hay; (at = strstr(at, needle)); at++)
		n++;
	return n;
}

/*
 * A dead rank's later step waits without its own stall warning, the
 * refusal's short line saying it (t91); but when no refusal comes this
 * time (the daemon hangs), the wait is said after all, once it has lasted
 * twice the one that ended in the refusal and a second more (a review:
 * the job went silent for good).
 */
static void stall_after_dead_rank(void *ctx, const char *dir)
{
	void *r = zmq_socket(ctx, ZMQ_ROUTER);
	int timeout = 10000, linger = 0;
	char ep[160];
	struct wd_publisher *p = NULL;
	struct wd_publisher_opts o = { .ranks = 2, .stall_warn_ms = 200, .ack_timeout_ms = 60000 };
	float v[2] = { 1, 2 };
	struct got g[8];
	uint64_t tensors = 0, ranks = 0;

	snprintf(ep, sizeof(ep), "ipc://%s/dead.sock", dir);
	zmq_setsockopt(r, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	zmq_setsockopt(r, ZMQ_LINGER, &linger, sizeof(linger));
	CHECK(zmq_bind(r, ep) == 0, "a scripted daemon of its own binds %s", ep);
	all_lines[0] = 0;
	wd_log_set(WD_LOG_WARNING, log_all);
	CHECK(wd_publisher_open(ep, "dead", &o, &p) == 0, "a rank of two, stall warning at 0.2 s");
	struct wd_publisher_stats st = { 0 };
	wd_publisher_begin(p, 0);	/* step 0, acked: the connection is up, as a job's is */
	wd_publisher_tensor(p, "w", WD_F32, v, NULL, 0, 0, 2, 4);
	wd_publisher_commit(p);
	receive_snapshot(r, g, 8, &tensors, &ranks, NULL);
	wd_publisher_flush(p, 10000);
	wd_publisher_get_stats(p, &st);
	CHECK(st.acked == 1 && st.connected, "step 0 acked, connected");
	all_lines[0] = 0;	/* what step 0's wait said is not this test's */
	for (int64_t step = 1; step <= 2; step++) {
		wd_publisher_begin(p, step);
		wd_publisher_tensor(p, "w", WD_F32, v, NULL, 0, 0, 2, 4);
		wd_publisher_commit(p);
	}
	usleep(400 * 1000);	/* step 1 waits 0.4 s, then expires */
	refuse_code = "incomplete";
	refuse_field = "ranks";	/* final: the daemon's expiry (error_is_final) */
	receive_snapshot(r, g, 8, &tensors, &ranks, "expired after 0 s waiting for the other ranks");
	usleep(1000 * 1000);	/* step 2 waits 1 s, under twice step 1's (0.4 s and more) + 1: not said */
	int stalls = count_of(all_lines, "no ack from");
	CHECK(stalls == 1 && count_of(all_lines, "for the other ranks' parts ended after") == 1,
	      "step 1's stall said, and its end; step 2's wait, alike, not yet (%d stall lines):\n%s", stalls,
	      all_lines);
	usleep(3000 * 1000);	/* 4 s: past it (step 1's wait, counted from step 0's ack, is about 1 s) */
	stalls = count_of(all_lines, "no ack from");
	CHECK(stalls == 2,
	      "... past twice the last wait with no refusal: said after all (%d stall lines):\n%s", stalls,
	      all_lines);
	refuse_code = "conflict";
	refuse_field = "crc32";
	wd_publisher_close(&p, 0);
	wd_log_set(WD_LOG_ERR, NULL);
	zmq_close(r);
	unlink(ep + 6);
}

/*
 * A rank's snapshot sent whole, its ack not come (the other ranks' parts
 * missing), is not "left unsent" at close: a trial's survivors of a killed
 * rank read that of a step the daemon held. A scripted daemon of its own
 * takes the first snapshot and never answers; the second stays queued.
 */
static void close_says_sent(void *ctx, const char *dir)
{
	void *r = zmq_socket(ctx, ZMQ_ROUTER);
	int timeout = 10000, linger = 0, commits = 0;
	char ep[160];
	struct wd_publisher *p = NULL;
	struct wd_publisher_opts o = { .ranks = 2, .stall_warn_ms = -1, .ack_timeout_ms = 60000 };
	float v[2] = { 1, 2 };

	snprintf(ep, sizeof(ep), "ipc://%s/sent.sock", dir);
	zmq_setsockopt(r, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	zmq_setsockopt(r, ZMQ_LINGER, &linger, sizeof(linger));
	CHECK(zmq_bind(r, ep) == 0, "a scripted daemon of its own binds %s", ep);
	CHECK(wd_publisher_open(ep, "sent", &o, &p) == 0, "a rank of two");
	for (int64_t step = 0; step < 2; step++) {
		wd_publisher_begin(p, step);
		wd_publisher_tensor(p, "w", WD_F32, v, NULL, 0, 0, 2, 4);
		wd_publisher_commit(p);
	}
	struct wire_limits lim = { WIRE_NAME_MAX, WIRE_MAX_DIMS, UINT64_MAX };
	struct wire_header *h = calloc(1, sizeof(*h));
	struct wire_error err;
	while (h && !commits) {	/* a welcome to its hello; the first snapshot, to its commit: no reply */
		zmq_msg_t id, f;
		zmq_msg_init(&id);
		zmq_msg_init(&f);
		if (zmq_msg_recv(&id, r, 0) < 0 || zmq_msg_recv(&f, r, 0) < 0) {
			zmq_msg_close(&id);
			zmq_msg_close(&f);
			break;
		}
		if (wire_parse(zmq_msg_data(&f), zmq_msg_size(&f), &lim, h, &err) == 0) {
			static const char welcome[] = "{\"v\":1,\"type\":\"welcome\",\"run\":\"sent\",\"window\":1}";
			if (h->type == WIRE_HELLO) {
				zmq_send(r, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
				zmq_send(r, welcome, strlen(welcome), 0);
			}
			commits += h->type == WIRE_COMMIT;
		}
		while (zmq_msg_more(&f)) {	/* a tensor's data frames */
			zmq_msg_close(&f);
			zmq_msg_init(&f);
			zmq_msg_recv(&f, r, 0);
		}
		zmq_msg_close(&id);
		zmq_msg_close(&f);
	}
	free(h);
	CHECK(commits == 1, "the first snapshot's commit came");
	all_lines[0] = 0;
	wd_log_set(WD_LOG_WARNING, log_all);
	uint64_t lost = wd_publisher_close(&p, 0);
	wd_log_set(WD_LOG_ERR, NULL);
	CHECK(lost == 2 && strstr(all_lines, "2 left at close: 1 sent, waiting for its ack and the other ranks' "
				  "parts, 1 never sent") && !strstr(all_lines, "left unsent"),
	      "close: 1 sent and waiting for the other ranks' parts, 1 never sent (%llu):\n%s",
	      (unsigned long long)lost, all_lines);
	zmq_close(r);
	unlink(ep + 6);
}

/* A log handler that asks the publisher for its stats, as a program's may. */
static struct wd_publisher *logged_pub;
static int logged;
static char logged_msg[1024];	/* the last line */
static void log_with_stats(int level, const char *msg)
{
	struct wd_publisher_stats st;
	(void)level;
	if (logged_pub)
		wd_publisher_get_stats(logged_pub, &st);
	snprintf(logged_msg, sizeof(logged_msg), "%s", msg);
	logged++;
}

/*
 * A peer that sends the publisher's own messages back, as a TCP connection
 * to an unused local port does when it meets its own source port (a
 * trial's mistyped port, 1 time in 9): a guess that nothing listens, not
 * the sure "answers, but not in wdriftd's protocol", which made close()
 * give up at once and sent the user after a foreign service.
 */
static void echo_peer(void *ctx, const char *dir)
{
	void *r = zmq_socket(ctx, ZMQ_ROUTER);
	int timeout = 100, linger = 0;
	char ep[160], why[1100];
	struct wd_publisher *p = NULL;
	struct wd_publisher_opts o = { .stall_warn_ms = -1, .ack_timeout_ms = 1500 };
	float v[2] = { 1, 2 };

	snprintf(ep, sizeof(ep), "ipc://%s/echo.sock", dir);
	zmq_setsockopt(r, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	zmq_setsockopt(r, ZMQ_LINGER, &linger, sizeof(linger));
	CHECK(zmq_bind(r, ep) == 0 && wd_publisher_open(ep, "echo", &o, &p) == 0, "a publisher to an echo");
	if (p && wd_publisher_begin(p, 1) == 0 && wd_publisher_tensor(p, "w", WD_F32, v, NULL, 0, 0, 2, 2) == 0)
		wd_publisher_commit(p);
	int how = WD_DIAGNOSIS_NONE;
	for (int i = 0; p && i < 40 && how == WD_DIAGNOSIS_NONE; i++) {
		zmq_msg_t f;
		int more = 1;
		zmq_msg_init(&f);
		while (more && zmq_msg_recv(&f, r, 0) >= 0) {	/* every frame back, the routing id first */
			more = zmq_msg_more(&f);
			zmq_msg_send(&f, r, more ? ZMQ_SNDMORE : 0);
			zmq_msg_init(&f);
		}
		zmq_msg_close(&f);
		how = wd_publisher_diagnosis(p, why, sizeof(why));
	}
	CHECK(how == WD_DIAGNOSIS_GUESS && strstr(why, "the connection reached this publisher itself"),
	      "its own messages back: a guess that nothing listens (%d: %s)", how, why);
	wd_publisher_close(&p, 0);
	zmq_close(r);
}

/*
 * What a C caller gets wrong, said at the call that is wrong (a new user's
 * trial): NULL handles and arguments, options out of range, a shape that
 * does not hold `total`, a tensor named twice with other metadata, a piece
 * given twice (which the daemon answered `incomplete` to, the publisher
 * re-sending it for ever), an empty snapshot, and wd_last_error after a
 * failing flush. None of these commits reaches the scripted daemon.
 */
static void caller_mistakes(const char *ep)
{
	struct wd_publisher *q = NULL;
	struct wd_publisher_stats st;
	struct wd_publisher_outcome out;
	float w[16] = { 0 };

	CHECK(wd_publisher_open(ep, "m", NULL, NULL) == -EINVAL && strstr(wd_last_error(), "out"),
	      "open with no place for the handle: -EINVAL, said (%s)", wd_last_error());
	struct wd_publisher_opts bad = { .policy = 7 };
	CHECK(wd_publisher_open(ep, "m", &bad, &q) == -EINVAL && !q && strstr(wd_last_error(), "policy 7"),
	      "open refuses policy 7 (%s)", wd_last_error());
	bad = (struct wd_publisher_opts){ .ack_timeout_ms = -5 };
	CHECK(wd_publisher_open(ep, "m", &bad, &q) == -EINVAL && !q && strstr(wd_last_error(), "ack_timeout_ms -5"),
	      "open refuses ack_timeout_ms -5 (%s)", wd_last_error());

	/* every call on a NULL handle (what close leaves) is -EINVAL or nothing, never a crash */
	CHECK(wd_publisher_begin(NULL, 1) == -EINVAL && strstr(wd_last_error(), "NULL"),
	      "begin(NULL): -EINVAL (%s)", wd_last_error());
	CHECK(wd_publisher_tensor(NULL, "w", WD_F32, w, NULL, 0, 0, 16, 16) == -EINVAL &&
	      wd_publisher_block(NULL, "w", WD_F32, w, NULL, NULL, NULL, 0) == -EINVAL &&
	      wd_publisher_commit(NULL) == -EINVAL && wd_publisher_flush(NULL, 0) == -EINVAL &&
	      wd_publisher_settle(NULL, 0) == -EINVAL && wd_publisher_set_tries(NULL, 1) == -EINVAL &&
	      wd_publisher_set_rank(NULL, 0) == -EINVAL && wd_publisher_last_outcome(NULL, &out) == -EINVAL &&
	      wd_publisher_refusals(NULL, 0, NULL, 0) == 0 && wd_publisher_notice(NULL, NULL, 0) == 0 &&
	      wd_publisher_last_notice(NULL, NULL, 0) == 0 && wd_publisher_diagnosis(NULL, NULL, 0) == WD_DIAGNOSIS_NONE && wd_publisher_close(NULL, 0) == 0,
	      "tensor, block, commit, flush, settle, set_tries, set_rank, last_outcome: -EINVAL on NULL; "
	      "refusals, notice, last_notice, diagnosis, close: nothing");
	memset(&st, 0xff, sizeof(st));
	wd_publisher_get_stats(NULL, &st);
	wd_publisher_cancel(NULL);
	CHECK(st.committed == 0 && st.acked == 0, "get_stats(NULL): zeros");

	struct wd_publisher_opts quiet = { .stall_warn_ms = -1 };
	CHECK(wd_publisher_open(ep, "m", &quiet, &q) == 0, "a publisher of ranks 1");
	if (!q)
		return;
	wd_publisher_get_stats(q, NULL);
	CHECK(wd_publisher_last_outcome(q, NULL) == -EINVAL, "last_outcome with no out: -EINVAL");
	CHECK(wd_publisher_begin(q, 1) == 0, "begin");
	CHECK(wd_publisher_tensor(q, "w", WD_F32, w, NULL, 1, 0, 16, 16) == 0,
	      "shape NULL with ndims 1: 1-D of total, as the header says (%s)", wd_last_error());
	CHECK(wd_publisher_tensor(q, "v", WD_F32, w, NULL, 2, 0, 16, 16) == -EINVAL &&
	      strstr(wd_last_error(), "shape is NULL with 2 dimensions"), "shape NULL with ndims 2 (%s)",
	      wd_last_error());
	CHECK(wd_publisher_tensor(q, "v", WD_F32, NULL, NULL, 0, 0, 16, 16) == -EINVAL &&
	      strstr(wd_last_error(), "no data"), "data NULL with 16 elements: 'no data' (%s)", wd_last_error());
	CHECK(wd_publisher_tensor(q, "v", WD_F32, w, (uint64_t[]){ 10, 10 }, 2, 0, 16, 16) == -EINVAL &&
	      strstr(wd_last_error(), "shape [10, 10] holds 100 elements, and total is 16"),
	      "a shape that does not hold total (%s)", wd_last_error());
	CHECK(wd_publisher_tensor(q, "w", WD_BF16, w, NULL, 0, 0, 16, 16) == -EINVAL &&
	      strstr(wd_last_error(), "tensor 'w' is in this snapshot already as f32") &&
	      strstr(wd_last_error(), "this piece says bf16"), "the same name again as bf16 (%s)", wd_last_error());
	CHECK(wd_publisher_tensor(q, "w", WD_F32, w, NULL, 0, 0, 8, 32) == -EINVAL &&
	      strstr(wd_last_error(), "of 16 elements") && strstr(wd_last_error(), "of 32"),
	      "the same name again with another total (%s)", wd_last_error());
	CHECK(wd_publisher_begin(q, 2) == 0 && wd_publisher_tensor(q, "a", WD_F32, w, NULL, 0, 0, 8, 16) == 0 &&
	      wd_publisher_tensor(q, "a", WD_F32, w, NULL, 0, 0, 8, 16) == 0 &&
	      wd_publisher_commit(q) == -EINVAL && strstr(wd_last_error(), "tensor 'a': elements [0, 8) are in "
							  "two pieces of this snapshot"),
	      "a piece given twice: refused at commit, said (%s)", wd_last_error());
	CHECK(wd_publisher_begin(q, 3) == 0 && wd_publisher_tensor(q, "a", WD_F32, w, NULL, 0, 0, 10, 16) == 0 &&
	      wd_publisher_tensor(q, "a", WD_F32, w, NULL, 0, 6, 10, 16) == 0 &&
	      wd_publisher_commit(q) == -EINVAL && strstr(wd_last_error(), "elements [6, 10) are in two pieces"),
	      "two pieces that overlap: refused at commit (%s)", wd_last_error());
	CHECK(wd_publisher_begin(q, 4) == 0 && wd_publisher_commit(q) == -EINVAL &&
	      strstr(wd_last_error(), "no tensor"), "an empty snapshot: refused at commit (%s)", wd_last_error());
	CHECK(wd_publisher_flush(q, 0) == 0 && wd_publisher_set_tries(q, -1) == -EINVAL &&
	      strstr(wd_last_error(), "tries -1"), "a failing call after one that succeeded: its own words (%s)",
	      wd_last_error());
	/*
	 * A piece refused while the snapshot is built spoils it: a trial's C
	 * job went on past a refused tensor, and the snapshot was stored
	 * without it, its commit and close returning 0.
	 */
	CHECK(wd_publisher_begin(q, 5) == 0 && wd_publisher_tensor(q, "keep", WD_F32, w, NULL, 0, 0, 16, 16) == 0 &&
	      wd_publisher_tensor(q, "bad\tname", WD_F32, w, NULL, 0, 0, 16, 16) == -EINVAL &&
	      wd_publisher_block(q, "x", WD_F32, w, (uint64_t[]){ 4 }, (uint64_t[]){ 2 }, (uint64_t[]){ 4 }, 1) ==
		      -EINVAL && wd_publisher_tensor(q, "y", WD_F32, w, NULL, 0, 0, 16, 16) == 0,
	      "two pieces refused (a name, a block outside its tensor) between two added (%s)", wd_last_error());
	CHECK(wd_publisher_commit(q) == -EINVAL &&
	      strstr(wd_last_error(), "snapshot of step 5: 2 tensor pieces refused while it was built (the first: "
				      "tensor name 'bad") &&
	      strstr(wd_last_error(), "control character at byte 3); sent, it would be stored without them: begin "
				      "it again"), "... and its commit is refused, naming the first (%s)", wd_last_error());
	CHECK(wd_publisher_commit(q) == -EINVAL && strstr(wd_last_error(), "2 tensor pieces refused"),
	      "... and again: it stays spoilt until a begin (%s)", wd_last_error());
	wd_publisher_get_stats(q, &st);
	CHECK(st.committed == 0, "none of them was committed (%llu)", (unsigned long long)st.committed);
	/*
	 * Steps 2, 3 and 4, refused, were discarded by the next begin, step 5
	 * by close: never queued, in no stats. A C program that ignores
	 * commit's return lost them with no word (a trial); close says them,
	 * once.
	 */
	all_lines[0] = 0;
	wd_log_set(WD_LOG_WARNING, log_all);
	uint64_t lost = wd_publisher_close(&q, 0);
	CHECK(lost == 4 && count_of(all_lines, "closed with 4 snapshots never queued: their commit was refused "
				   "(publish() in Python, wd_publisher_commit in C) and the program went on (the "
				   "last, step 5: snapshot of step 5: 2 tensor "
				   "pieces refused") == 1 && count_of(all_lines, "\n") == 1,
	      "close counts the 4 refused snapshots discarded, in one line (%llu):\n%s", (unsigned long long)lost,
	      all_lines);
	CHECK(!q && wd_publisher_commit(q) == -EINVAL, "a call after close: -EINVAL, no crash");

	/* A refused commit mended and committed is queued as any other: not counted as never queued. */
	char none[160];
	snprintf(none, sizeof(none), "%s.none", ep);	/* no socket file: close gives it up at once */
	CHECK(wd_publisher_open(none, "m", &quiet, &q) == 0, "a publisher of ranks 1 at %s", none);
	if (q) {
		CHECK(wd_publisher_begin(q, 1) == 0 && wd_publisher_tensor(q, "a", WD_F32, w, NULL, 0, 0, 8, 16) == 0 &&
		      wd_publisher_commit(q) == -EINVAL && strstr(wd_last_error(), "holds 8 of its 16"),
		      "half a tensor with ranks 1: refused at commit (%s)", wd_last_error());
		CHECK(wd_publisher_tensor(q, "a", WD_F32, w, NULL, 0, 8, 8, 16) == 0 && wd_publisher_commit(q) == 0,
		      "the other half added: committed (%s)", wd_last_error());
		all_lines[0] = 0;
		lost = wd_publisher_close(&q, 0);
		CHECK(lost == 1 && count_of(all_lines, "closed with 1 of 1 snapshots never made durable") == 1 &&
		      !strstr(all_lines, "never queued"), "the mended one counted once, as left unsent (%llu):\n%s",
		      (unsigned long long)lost, all_lines);
	}
	wd_log_set(WD_LOG_ERR, NULL);
}

int main(void)
{
	char dir[] = "/tmp/wdrift-test-publisher-XXXXXX", ep[128];
	void *ctx = zmq_ctx_new(), *r = zmq_socket(ctx, ZMQ_ROUTER);
	int timeout = 10000, linger = 0;
	struct wd_publisher *p = NULL, *p2 = NULL;
	struct wd_publisher_opts opts = { .ranks = 4, .stall_warn_ms = -1 };
	struct got g[64];
	uint64_t tensors = 0, ranks = 0;

	wd_log_set(WD_LOG_ERR, NULL);	/* the warnings are t68's to check */
	if (!mkdtemp(dir))
		return 1;
	snprintf(ep, sizeof(ep), "ipc://%s/ingest.sock", dir);
	zmq_setsockopt(r, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	zmq_setsockopt(r, ZMQ_LINGER, &linger, sizeof(linger));
	CHECK(zmq_bind(r, ep) == 0, "a scripted daemon binds %s", ep);

	/* errors, in words */
	CHECK(wd_publisher_open("http://localhost:1", "r", NULL, &p) == -EINVAL && !p &&
	      strstr(wd_last_error(), "'http://localhost:1' is not a ZeroMQ endpoint"),
	      "open refuses another scheme, naming it: %s", wd_last_error());
	CHECK(wd_publisher_open("tcp://localhost", "r", NULL, &p) == -EINVAL &&
	      strstr(wd_last_error(), "has no port"), "open refuses tcp:// without a port: %s",
	      wd_last_error());
	CHECK(wd_publisher_open("tcp://127.0.0.1:notaport", "r", NULL, &p) == -EINVAL &&
	      strstr(wd_last_error(), "the port must be 1 to 65535"), "open refuses a port that is no number: %s",
	      wd_last_error());
	/* ZeroMQ would connect to port 17100 (82636 - 65536): a trial's snapshots went to another daemon */
	CHECK(wd_publisher_open("tcp://127.0.0.1:82636", "r", NULL, &p) == -EINVAL &&
	      strstr(wd_last_error(), "the port must be 1 to 65535"), "open refuses a port past 65535: %s",
	      wd_last_error());
	/* pasted with a '/': refused, with the endpoint without it (it waited on "no socket yet") */
	CHECK(wd_publisher_open("tcp://127.0.0.1:5555/", "r", NULL, &p) == -EINVAL && !p &&
	      strstr(wd_last_error(), "did you mean 'tcp://127.0.0.1:5555'?"),
	      "open refuses a tcp:// endpoint ending in '/': %s", wd_last_error());
	CHECK(wd_publisher_open("ipc:///tmp/no-such-wdrift-dir/ingest.sock//", "r", NULL, &p) == -EINVAL && !p &&
	      strstr(wd_last_error(), "did you mean 'ipc:///tmp/no-such-wdrift-dir/ingest.sock'?"),
	      "open refuses an ipc:// endpoint ending in '/': %s", wd_last_error());
	/* ... not an abstract socket's name, which may end so; nor tcp://HOST/ as 'tcp://HOST' (no port either) */
	CHECK(wd_publisher_open("ipc://@wdrift-test-none/", "r", NULL, &p) == 0 && p,
	      "ipc://@NAME/ is an abstract socket's name like any: opened (%s)", wd_last_error());
	if (p)
		wd_publisher_close(&p, 0);
	CHECK(wd_publisher_open("tcp://localhost/", "r", NULL, &p) == -EINVAL &&
	      strstr(wd_last_error(), "has no port") && !strstr(wd_last_error(), "did you mean"),
	      "tcp://HOST/: no port, not 'did you mean tcp://HOST': %s", wd_last_error());
	char longpath[300] = "ipc:///tmp/";
	memset(longpath + strlen(longpath), 'x', 200);
	CHECK(wd_publisher_open(longpath, "r", NULL, &p) == -EINVAL && strstr(wd_last_error(), "ZeroMQ refuses it"),
	      "open refuses what ZeroMQ refuses (an ipc path past a socket address's 107 bytes): %.80s",
	      wd_last_error());
	CHECK(wd_publisher_open(ep, "a/b", NULL, &p) == -EINVAL && strstr(wd_last_error(), "run name 'a/b'") &&
	      strstr(wd_last_error(), "'/' at byte 1") && strstr(wd_last_error(), "A-Z"),
	      "open refuses a bad run name, saying where and the rule: %s", wd_last_error());
	struct wd_publisher_opts bad = { .ranks = -2 };
	CHECK(wd_publisher_open(ep, "r", &bad, &p) == -EINVAL && strstr(wd_last_error(), "ranks -2"),
	      "open refuses ranks -2: %s", wd_last_error());
	/* -ENOENT is wd_publisher_last_outcome's "none yet" too: not "no such file" alone (left alone twice) */
	CHECK(strstr(wd_strerror(-ENOENT), "none yet") && strstr(wd_strerror(-ENOENT), "no such file"),
	      "wd_strerror(-ENOENT) names both of its meanings: %s", wd_strerror(-ENOENT));
	CHECK(!strcmp(wd_strerror(-ETIMEDOUT), "timed out") && !strcmp(wd_strerror(-ENOMEM), "out of memory") &&
	      strlen(wd_strerror(-EPIPE)) > 0 && strlen(wd_strerror(5)) > 0,
	      "wd_strerror has words for every code, and for a non-code");

	caller_mistakes(ep);

	CHECK(wd_publisher_open(ep, "r", &opts, &p) == 0 && p, "open with ranks = 4");
	if (!p)
		return tap_done();
	struct wd_publisher_outcome out;
	CHECK(wd_publisher_last_outcome(p, &out) == -ENOENT && strstr(wd_last_error(), "no snapshot has left the queue"),
	      "no outcome before a snapshot left the queue, said (%s)", wd_last_error());
	CHECK(wd_publisher_open(ep, "a\nb", NULL, &p2) == -EINVAL && strstr(wd_last_error(), "byte 0x0a (a newline) at byte 1"),
	      "a run name with a newline names the byte (%s)", wd_last_error());
	CHECK(wd_publisher_set_tries(p, -1) == -EINVAL && strstr(wd_last_error(), "tries -1"),
	      "set_tries refuses a negative count: %s", wd_last_error());
	CHECK(wd_publisher_set_rank(p, 4) == -EINVAL && strstr(wd_last_error(), "rank 4: from 0 to ranks - 1 (3)"),
	      "set_rank refuses rank 4 of 4: %s", wd_last_error());
	CHECK(wd_publisher_set_rank(p, -1) == -EINVAL, "set_rank refuses rank -1");
	CHECK(wd_publisher_set_rank(p, 2) == 0, "set_rank 2 of 4");
	float m[6 * 5 * 4];	/* the whole tensor: element i holds i */
	for (int i = 0; i < 6 * 5 * 4; i++)
		m[i] = (float)i;
	uint64_t shape[3] = { 6, 5, 4 };
	CHECK(wd_publisher_block(p, "w", WD_F32, m, shape, (uint64_t[3]){ 0 }, shape, 3) == -EINVAL &&
	      strstr(wd_last_error(), "no snapshot begun"), "a block before begin: %s", wd_last_error());
	CHECK(wd_publisher_begin(p, -1) == -EINVAL && strstr(wd_last_error(), "step -1"),
	      "begin refuses step -1: %s", wd_last_error());
	/* pieces refused: they spoil the snapshot, which a begin then discards unsent */
	CHECK(wd_publisher_begin(p, 7) == 0, "begin step 7");
	CHECK(wd_publisher_block(p, "out", WD_F32, m, shape, (uint64_t[3]){ 5, 0, 0 },
				 (uint64_t[3]){ 2, 5, 4 }, 3) == -EINVAL &&
	      strstr(wd_last_error(), "dimension 0: block [5, +2) is not inside [0, 6)"),
	      "a block outside its tensor: %s", wd_last_error());
	CHECK(wd_publisher_block(p, "huge", WD_F32, m, (uint64_t[2]){ 70000, 2 }, (uint64_t[2]){ 0, 1 },
				 (uint64_t[2]){ 70000, 1 }, 2) == -E2BIG && strstr(wd_last_error(), "70000 pieces"),
	      "a block of more than 65,536 pieces: %s", wd_last_error());
	CHECK(wd_publisher_tensor(p, "t", WD_F32, m, NULL, 0, 100, 30, 120) == -EINVAL &&
	      strstr(wd_last_error(), "not inside"), "a shard past its tensor: %s", wd_last_error());
	CHECK(wd_publisher_tensor(p, "t", (enum wd_dtype)9, m, NULL, 0, 0, 1, 1) == -EINVAL &&
	      strstr(wd_last_error(), "dtype 9"), "an unknown dtype: %s", wd_last_error());
	CHECK(wd_publisher_begin(p, 7) == 0, "begin step 7 again, its refused pieces' snapshot discarded");

	/* rows 2..3 of dimension 0, whole otherwise: one shard of 2 * 20 */
	float rows[2 * 5 * 4];
	memcpy(rows, m + 2 * 20, sizeof(rows));
	CHECK(wd_publisher_block(p, "rows", WD_F32, rows, shape, (uint64_t[3]){ 2, 0, 0 },
				 (uint64_t[3]){ 2, 5, 4 }, 3) == 0, "a block of whole rows");
	/* [1..3) x [1..4) x [0..4): dimension 2 whole, so runs of 3 * 4 per index of dimension 0 */
	float mid[2 * 3 * 4];
	for (int a = 0; a < 2; a++)
		for (int b = 0; b < 3; b++)
			for (int c = 0; c < 4; c++)
				mid[(a * 3 + b) * 4 + c] = m[((1 + a) * 5 + 1 + b) * 4 + c];
	CHECK(wd_publisher_block(p, "mid", WD_F32, mid, shape, (uint64_t[3]){ 1, 1, 0 },
				 (uint64_t[3]){ 2, 3, 4 }, 3) == 0, "a block partial in two dimensions");
	/* a column block of the last dimension: one shard per (i, j) */
	float col[6 * 5];
	for (int i = 0; i < 30; i++)
		col[i] = m[i * 4 + 3];
	CHECK(wd_publisher_block(p, "col", WD_F32, col, shape, (uint64_t[3]){ 0, 0, 3 },
				 (uint64_t[3]){ 6, 5, 1 }, 3) == 0, "a column block");
	CHECK(wd_publisher_block(p, "none", WD_F32, NULL, shape, (uint64_t[3]){ 0, 0, 0 },
				 (uint64_t[3]){ 0, 5, 4 }, 3) == 0, "an empty block still names its tensor");
	float one = 42;
	CHECK(wd_publisher_block(p, "scalar", WD_F32, &one, NULL, NULL, NULL, 0) == 0, "a scalar");
	CHECK(wd_publisher_tensor(p, "rows", WD_F32, m, shape, 3, 0, 40, 120) == 0,
	      "another piece of 'rows' by wd_publisher_tensor");
	CHECK(wd_publisher_commit(p) == 0, "commit");

	int n = receive_snapshot(r, g, 64, &tensors, &ranks, NULL);
	int rows_ok = 0, mid_ok = 0, col_ok = 0, none_ok = 0, scalar_ok = 0;
	for (int i = 0; i < n; i++) {
		if (!strcmp(g[i].name, "rows"))
			rows_ok += (g[i].offset == 40 && g[i].count == 40 && g[i].first == 40) ||
				   (g[i].offset == 0 && g[i].count == 40 && g[i].first == 0);
		if (!strcmp(g[i].name, "mid")) {
			uint64_t a = (g[i].offset - 24) / 20;
			mid_ok += g[i].offset == 24 + 20 * a && g[i].count == 12 && g[i].first == (float)g[i].offset;
		}
		if (!strcmp(g[i].name, "col"))
			col_ok += g[i].count == 1 && g[i].offset % 4 == 3 && g[i].first == (float)g[i].offset;
		if (!strcmp(g[i].name, "none"))
			none_ok += g[i].count == 0 && g[i].total == 120;
		if (!strcmp(g[i].name, "scalar"))
			scalar_ok += g[i].offset == 0 && g[i].count == 1 && g[i].total == 1 && g[i].first == 42;
	}
	CHECK(n == 2 + 2 + 30 + 1, "the snapshot went as %d shards (35 expected)", n);
	CHECK(rows_ok == 2, "whole rows: one shard at offset 40, and the flat piece at 0");
	CHECK(mid_ok == 2, "partial in two dimensions: one run of 12 per index of dimension 0 (offsets 24, 44)");
	CHECK(col_ok == 30, "a column block: 30 shards of 1, at 4k + 3, each with its value");
	CHECK(none_ok == 0 && scalar_ok == 1, "an empty block sends nothing (its name counts); a scalar goes as 1");
	CHECK(last_rank == 2, "the commit gives this publisher's rank, 2 (%lld)", (long long)last_rank);
	uint64_t first_session = last_session;
	CHECK(last_session != 0 && last_session <= INT64_MAX, "the commit gives a session, a JSON integer (%llu)",
	      (unsigned long long)last_session);
	CHECK(tensors == 5 && ranks == 4, "the commit counts 5 distinct tensors and says ranks 4 (%llu, %llu)",
	      (unsigned long long)tensors, (unsigned long long)ranks);
	CHECK(wd_publisher_flush(p, 10000) == 0, "the ack empties the queue");
	struct wd_publisher_stats st;
	wd_publisher_get_stats(p, &st);
	CHECK(st.acked == 1 && st.dropped == 0 && st.conflicts == 0, "stats: 1 acked");
	CHECK(wd_publisher_last_outcome(p, &out) == 0 && out.kind == WD_OUTCOME_ACKED && out.step == 7 &&
	      out.tries == 1 && out.tensors == 5 && !out.duplicate && !out.code[0],
	      "its outcome: acked, step 7, 1 try, the ack's 5 tensors");

	/* a refusal is said through a log handler that calls back into the publisher */
	wd_log_set(WD_LOG_WARNING, log_with_stats);
	logged_pub = p;
	wd_publisher_begin(p, 8);
	wd_publisher_tensor(p, "w", WD_F32, m, NULL, 0, 0, 4, 4);
	CHECK(wd_publisher_commit(p) == 0, "commit step 8");
	n = receive_snapshot(r, g, 64, &tensors, &ranks, "other content (a re-run?)");
	CHECK(last_session == first_session, "every commit of one publisher gives its one session");
	CHECK(n == 1 && wd_publisher_flush(p, 10000) == 0, "the refused snapshot leaves the queue (no deadlock)");
	char msg[512];
	CHECK(wd_publisher_refusals(p, 1, msg, sizeof(msg)) == 1 &&
	      strstr(msg, "run 'r' step 8 refused: conflict: other content"),
	      "the conflict's message is kept: %s", msg);
	CHECK(logged >= 1, "the refusal went to the log handler (%d lines)", logged);
	CHECK(wd_publisher_last_outcome(p, &out) == 0 && out.kind == WD_OUTCOME_REFUSED && out.step == 8 &&
	      !strcmp(out.code, "conflict") && !strcmp(out.reason, "other content (a re-run?)"),
	      "its outcome: refused, with the daemon's code and reason (%s: %s)", out.code, out.reason);
	CHECK(strstr(logged_msg, "run 'r' step 8 refused: conflict: other content"),
	      "the first conflict is logged whole: %s", logged_msg);
	/* a re-run: every step refused alike; the daemon's reason (and its hint) is logged once, not per step */
	wd_publisher_begin(p, 9);
	wd_publisher_tensor(p, "w", WD_F32, m, NULL, 0, 0, 4, 4);
	CHECK(wd_publisher_commit(p) == 0, "commit step 9");
	int before = logged;
	n = receive_snapshot(r, g, 64, &tensors, &ranks, "other content (a re-run?)");
	CHECK(n == 1 && wd_publisher_flush(p, 10000) == 0, "step 9 refused too");
	CHECK(logged == before + 1 && strstr(logged_msg, "run 'r' step 9 refused: conflict, as step 8 was "
					     "(2 conflicts so far)") && !strstr(logged_msg, "other content"),
	      "a second conflict: one short line, its reason not repeated: %s", logged_msg);
	CHECK(wd_publisher_refusals(p, 1, msg, sizeof(msg)) == 2 &&
	      strstr(msg, "run 'r' step 9 refused: conflict: other content"),
	      "... while the message kept for the caller is whole: %s", msg);
	/* a reason with no hint (an older daemon's) is no reason to think it said: whole again */
	wd_publisher_begin(p, 10);
	wd_publisher_tensor(p, "w", WD_F32, m, NULL, 0, 0, 4, 4);
	CHECK(wd_publisher_commit(p) == 0, "commit step 10");
	n = receive_snapshot(r, g, 64, &tensors, &ranks, "no hint here");
	CHECK(n == 1 && wd_publisher_flush(p, 10000) == 0, "step 10 refused");
	CHECK(strstr(logged_msg, "run 'r' step 10 refused: conflict: no hint here"),
	      "a conflict whose reason has no hint: logged whole (a review): %s", logged_msg);
	/*
	 * A dead rank: every later step expires alike, and each surviving rank
	 * logged each refusal whole (a session's leftover). The same code and
	 * reason as the refusal last logged whole: one short line.
	 */
	refuse_code = "incomplete";
	refuse_field = "ranks";
	const char *expired = "expired after 20 s waiting for the other ranks: rank 1 of 3 never committed";
	for (int64_t step = 11; step <= 13; step++) {
		wd_publisher_begin(p, step);
		wd_publisher_tensor(p, "w", WD_F32, m, NULL, 0, 0, 4, 4);
		CHECK(wd_publisher_commit(p) == 0, "commit step %lld", (long long)step);
		before = logged;
		n = receive_snapshot(r, g, 64, &tensors, &ranks, step < 13 ? expired : "another reason");
		CHECK(n == 1 && wd_publisher_flush(p, 10000) == 0 && logged == before + 1,
		      "step %lld refused as incomplete, in one line", (long long)step);
		if (step == 11)
			CHECK(strstr(logged_msg, "run 'r' step 11 refused: incomplete: expired after 20 s"),
			      "the first expiry after conflicts: logged whole: %s", logged_msg);
		if (step == 12)
			CHECK(strstr(logged_msg, "run 'r' step 12 refused: incomplete, as step 11 was "
					     "(2 refused so far)") && !strstr(logged_msg, "never committed"),
			      "a second expiry alike: one short line: %s", logged_msg);
		if (step == 13)
			CHECK(strstr(logged_msg, "run 'r' step 13 refused: incomplete: another reason"),
			      "an expiry for another reason: logged whole: %s", logged_msg);
	}
	CHECK(wd_publisher_refusals(p, 0, msg, sizeof(msg)) == 6 && strstr(msg, "step 13 refused: incomplete"),
	      "the messages kept for the caller are whole: %s", msg);
	refuse_code = "conflict";
	refuse_field = "crc32";
	logged_pub = NULL;
	wd_log_set(WD_LOG_ERR, NULL);

	/* ranks = 1: every tensor must be whole at commit */
	struct wd_publisher *solo = NULL;
	struct wd_publisher_opts o1 = { .stall_warn_ms = -1 };
	CHECK(wd_publisher_open(ep, "one", &o1, &solo) == 0, "a publisher with ranks = 1");
	wd_publisher_begin(solo, 1);
	wd_publisher_tensor(solo, "half", WD_F32, m, NULL, 0, 0, 2, 4);
	CHECK(wd_publisher_commit(solo) == -EINVAL && strstr(wd_last_error(), "'half': the snapshot holds 2 of its 4"),
	      "with ranks = 1 a tensor that is not whole fails the commit: %s", wd_last_error());
	wd_publisher_tensor(solo, "half", WD_F32, m + 2, NULL, 0, 2, 2, 4);
	CHECK(wd_publisher_commit(solo) == 0, "its other half added, the commit goes");
	wd_publisher_close(&solo, 0);

	CHECK(wd_publisher_close(&p, 1000) == 6 && !p, "close: the refused snapshots count as dropped");

	/* nobody listening, 2 tries: the snapshot is given up, and the queue empties */
	char nobody[160];
	struct wd_publisher_opts quick = { .ack_timeout_ms = 200, .stall_warn_ms = -1 };
	snprintf(nobody, sizeof(nobody), "ipc://%s/nobody.sock", dir);
	CHECK(wd_publisher_open(nobody, "gone", &quick, &p) == 0 && wd_publisher_set_tries(p, 2) == 0,
	      "a publisher to an endpoint nobody listens on, 2 tries");
	wd_publisher_begin(p, 3);
	wd_publisher_tensor(p, "w", WD_F32, m, NULL, 0, 0, 4, 4);
	CHECK(wd_publisher_commit(p) == 0 && wd_publisher_flush(p, 10000) == 0,
	      "after 2 unanswered sends the snapshot leaves the queue");
	wd_publisher_get_stats(p, &st);
	CHECK(wd_publisher_last_outcome(p, &out) == 0 && out.kind == WD_OUTCOME_GIVEN_UP && out.step == 3 &&
	      out.tries == 2 && !out.code[0] && st.dropped == 1 && st.resent == 1 && st.acked == 0,
	      "its outcome: given up after 2 tries, nothing said (%d tries, %llu dropped, %llu resent)",
	      out.tries, (unsigned long long)st.dropped, (unsigned long long)st.resent);
	logged_pub = NULL;
	logged_msg[0] = 0;
	wd_log_set(WD_LOG_WARNING, log_with_stats);
	CHECK(wd_publisher_close(&p, 0) == 1, "close counts it among the never durable");
	wd_log_set(WD_LOG_ERR, NULL);
	CHECK(strstr(logged_msg, "1 given up after their tries") && strstr(logged_msg, "0 dropped by the queue's policy"),
	      "close's line says it was given up, not dropped by the queue's policy (%s)", logged_msg);

	/*
	 * A sure diagnosis (inproc:// reaches no daemon ever): settle and close
	 * end at once, where a job's exit had waited out close's timeout.
	 */
	CHECK(wd_publisher_open("inproc://wdrift-test-nowhere", "lost", &quick, &p) == 0 &&
	      wd_publisher_diagnosis(p, NULL, 0) == WD_DIAGNOSIS_SURE,
	      "a publisher to inproc://: a sure diagnosis from open");
	wd_publisher_begin(p, 4);
	wd_publisher_tensor(p, "w", WD_F32, m, NULL, 0, 0, 4, 4);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	char flush_said[1024], settle_said[1024];
	int fr = wd_publisher_commit(p) == 0 ? wd_publisher_flush(p, 300) : 1;
	snprintf(flush_said, sizeof(flush_said), "%s", wd_last_error());
	int sr = wd_publisher_settle(p, 20000);
	snprintf(settle_said, sizeof(settle_said), "%s", wd_last_error());
	uint64_t left = wd_publisher_close(&p, 20000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK(fr == -ETIMEDOUT && sr == -EHOSTUNREACH && left == 1 && took < 10.0 &&
	      strstr(wd_strerror(sr), "diagnosis") && strstr(settle_said, "reaches only sockets of") &&
	      strstr(flush_said, "1 snapshot still queued after 300 ms"),
	      "flush waits its 0.3 s out; settle(20 s) is -EHOSTUNREACH and close(20 s) gives the "
	      "snapshot up, both at once, each failure in words (%d, %d, %llu left, %.1f s; %s; %s)", fr, sr,
	      (unsigned long long)left, took, flush_said, settle_said);

	stall_after_dead_rank(ctx, dir);
	close_says_sent(ctx, dir);
	echo_peer(ctx, dir);

	zmq_close(r);
	zmq_ctx_term(ctx);
	char sock[160];
	for (const char *const *f = (const char *const[]){ "ingest.sock", "dead.sock", "echo.sock", NULL }; *f; f++) {
		snprintf(sock, sizeof(sock), "%s/%s", dir, *f);
		unlink(sock);	/* ZeroMQ leaves some behind */
	}
	rmdir(dir);
	return tap_done();
}
