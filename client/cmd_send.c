/*
 * cmd_send.c: `wdrift send`: publishes a checkpoint file to the daemon as
 * one snapshot of a run and waits for its durable ack. A thin CLI over
 * libwdrift's publisher (wdrift.h), which owns the protocol, its timeouts
 * and its retries; here a snapshot is given up after SEND_TRIES sends.
 * The file is the user's: it is read by a resource-limited child process
 * (ckpt_sandbox.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ckpt_sandbox.h"
#include "cli.h"
#include "daemon_client.h"
#include "error.h"
#include "handshake.h"
#include "wdrift.h"
#include "zmtp_probe.h"

#define SEND_TRIES 3	/* sends of the snapshot before `wdrift send` gives up */

static const char usage[] =
"usage: wdrift send --run RUN --step STEP FILE.h5 [--skip-other] [--ingest EP]\n"
"                   [-c FILE] [--server-key K] [--key FILE] [--json]\n"
"\n"
"Publishes every tensor of a checkpoint file (docs/checkpoints.md) as the\n"
"snapshot of RUN at STEP, commits it, and waits until the daemon says it is\n"
"durable. Sending the same snapshot again is harmless (it is acked as a\n"
"duplicate), so on a timeout it is sent again, three times in all. Another\n"
"file for a (RUN, STEP) already durable is refused as a conflict (exit 1):\n"
"`wdrift runs rm RUN` frees the name. A RUN that belongs to no study of the\n"
"daemon is stored but never compared: a warning says so, with the nearest\n"
"run name of a study.\n"
"\n"
"      --run RUN      the run's name, as the daemon's studies name it\n"
"      --step STEP    the training step\n"
"      --skip-other   leave out datasets whose element type is not a float (an\n"
"                     integer counter such as num_batches_tracked), and empty\n"
"                     ones, as wdrift compare does; a note on stderr names them\n"
"                     (\"skipped\" in --json). Without it such a dataset is an\n"
"                     error, before anything is sent\n"
"      --ingest EP    the ingest endpoint, instead of the config's\n"
"  -c, --config FILE  the daemon's config, for its endpoints\n"
WD_CONFIG_SEARCH_HELP
"      --server-key K the daemon's CURVE public key, or a file that holds it\n"
"                     (default: $WDRIFT_SERVER_KEY); with --key, when the\n"
"                     daemon has auth.server_key (docs/security.md)\n"
"      --key FILE     this client's key pair, from wdrift keygen (default:\n"
"                     $WDRIFT_KEY)\n"
"      --json         print the ack as JSON\n"
DC_HELP_HELP
"\n"
"The file is read by a child process with limits: WDRIFT_CKPT_TIMEOUT\n"
"seconds per step (default 60; a tensor gets 1 s more per 32 MiB) and\n"
"WDRIFT_CKPT_MEMORY bytes (default half the machine's memory).\n"
"\n"
"An ipc:// endpoint with no socket file is said at once; one where nothing\n"
"listens (a socket file left behind, a tcp:// port with no daemon) or whose\n"
"host does not resolve, after 5 s. Otherwise each send waits 10 s for\n"
"its ack (4 x WDRIFT_TIMEOUT_MS when that is set): with a daemon that\n"
"accepts the connection but never answers, the command gives up after\n"
"about 35 s. A peer that answers but is not the ingest socket (the\n"
"daemon's control or events socket), or a refused CURVE handshake, is\n"
"said at once.\n"
"\n"
"exit status: 0 acked; 1 a bad file, a refused snapshot, or no daemon; 2 usage error.\n";

struct send_opts {
	const char *run;
	long long step;
	int have_step;
	int skip_other;		/* --skip-other */
	struct dc_args *a;
};

static int on_opt(int c, const char *arg, void *ctx)
{
	struct send_opts *o = ctx;
	switch (c) {
	case 'r': o->run = arg; return 0;
	case 'S': o->skip_other = 1; return 0;
	case 'i': o->a->t.ingest = arg; return dc_endpoint_option("--ingest", arg);
	case 's':
		if (cli_step_arg("--step", arg, &o->step))
			return 1;
		o->have_step = 1;
		return 0;
	}
	return 1;
}

/* A dataset --skip-other leaves out: not a float, or empty (checkpoint.h's skippable). */
static int left_out(const struct wd_ckpt_entry *e, int skip_other)
{
	return skip_other && e->problem[0] && e->skippable;
}

/*
 * Before anything is sent: a dataset that is not a float is an error naming
 * --skip-other (a trial's int64 counter had no way past it), or, with it,
 * is listed in *skipped (a JSON array of names). The count of datasets to
 * send, or -1 said.
 */
static long check_datasets(const struct wd_ckpt *ck, const char *path, int skip_other, json_t *skipped)
{
	long kept = 0;
	const struct wd_ckpt_entry *first = NULL;

	for (size_t i = 0; i < wd_ckpt_count(ck); i++) {
		const struct wd_ckpt_entry *e = wd_ckpt_entry(ck, i);
		if (!left_out(e, skip_other)) {
			if (e->problem[0] && e->skippable)
				return cli_error("'%s': dataset '%s': %s (--skip-other leaves out datasets that are "
						 "not floats, and empty ones)", path, e->name, e->problem), -1;
			if (e->problem[0])	/* the file's own mistake: said before a byte is read */
				return cli_error("'%s': dataset '%s': %s", path, e->name, e->problem), -1;
			kept++;
			continue;
		}
		first = first ? first : e;
		json_array_append_new(skipped, json_string(e->name));
	}
	if (!kept && first)
		return cli_error("'%s': nothing to send: --skip-other left out every dataset (%zu, such as '%s': %s)",
				 path, json_array_size(skipped), first->name, first->problem), -1;
	return kept;
}

/*
 * Reads every tensor of the file through the sandbox into a snapshot of
 * the publisher, and commits it; those --skip-other leaves out are not
 * read. 0, or -1 with err.
 */
static int publish_file(struct wd_publisher *p, struct wd_ckpt_box *box, long long step, int skip_other,
			char *err, size_t errlen)
{
	const struct wd_ckpt *ck = wd_ckpt_box_listing(box);
	char cerr[WD_CKPT_ERR_MAX];

	if (wd_publisher_begin(p, step) < 0)
		return wd_error(err, errlen, "%s", wd_last_error());
	for (size_t i = 0; i < wd_ckpt_count(ck); i++) {
		const struct wd_ckpt_entry *e = wd_ckpt_entry(ck, i);
		struct wd_tensor_map m;
		if (left_out(e, skip_other))
			continue;
		if (wd_ckpt_box_read(box, i, &m, cerr) < 0)
			return wd_error(err, errlen, "%s", cerr);
		int r = wd_publisher_tensor(p, e->name, e->dtype, m.data, e->dims, e->rank, 0, e->numel,
					    e->numel);
		/* the publisher holds its own copy: of the file's bytes, or of zeros where it was cut */
		int cut = wd_tensor_map_intact(&m, cerr);
		wd_tensor_map_release(&m);
		if (cut < 0)
			return wd_error(err, errlen, "%s", cerr);
		if (r < 0)
			return wd_error(err, errlen, "%s", wd_last_error()[0] ? wd_last_error() : wd_strerror(r));
	}
	if (wd_publisher_commit(p) < 0)
		return wd_error(err, errlen, "%s", wd_last_error());
	return 0;
}

/*
 * Waits for what became of the snapshot: 0 with *out, or -1 with err, and
 * *refused set when the daemon answered with a refusal (otherwise no
 * answer came, and the endpoint is the first thing to check); -2 when a
 * peer there refused the handshake, or is no ingest socket (err says it).
 * Each of the SEND_TRIES sends waits ack_timeout_ms for its ack, and a
 * second more for a fresh connection's welcome; the flush is bounded by
 * twice that, so that nothing here waits forever. While the daemon has
 * not answered, a connect of our own every PROBE_S says what ZeroMQ's
 * silent retries do not: when it has failed for WD_HS_UNREACHABLE_S in a row,
 * nothing listens at the endpoint (a stopped daemon, a typo in the port),
 * or its host does not resolve, and the command ends saying so. A daemon
 * that restarts meanwhile (systemctl restart) is back within that.
 * A peer that is there but is not an ingest socket that takes us (the
 * control or events socket, a CURVE handshake refused) is found by the
 * publisher (wd_publisher_diagnosis): the command ends at once with its
 * reason, instead of waiting out every try and then guessing. A peer that
 * only closed mid-handshake may be a daemon stopping or killed (a restart):
 * that reason is a guess, waited out like no answer, and given at the end
 * if nothing else is known by then.
 */
#define PROBE_S 1.0
static int wait_outcome(struct wd_publisher *p, const struct dc_target *t, int ack_timeout_ms,
			struct wd_publisher_outcome *out, int *refused, char *err, size_t errlen)
{
	double start = cli_now(), end = start + 2.0 * SEND_TRIES * (ack_timeout_ms + 6000) / 1000.0;
	double next_probe = start + PROBE_S, failing_since = 0;
	int flushed = -1, reach = -1;	/* reach: the last probe's errno, -1 before one */

	while (flushed < 0 && cli_now() < end) {
		struct wd_publisher_stats st;
		flushed = wd_publisher_flush(p, 200);
		if (flushed < 0 && wd_publisher_diagnosis(p, err, errlen) == WD_DIAGNOSIS_SURE)
			return -2;	/* err says why: what to change; a peer answered (no other config's hint) */
		wd_publisher_get_stats(p, &st);
		if (st.connected) {	/* it answered: what the probes found is old */
			failing_since = 0;
			reach = -1;
		}
		if (flushed == 0 || st.connected || cli_now() < next_probe)
			continue;
		double now = cli_now();
		reach = wd_endpoint_connect_errno(t->ingest_ep, 1000);
		if (!wd_hs_unreachable(t->ingest_ep, "ingest", reach, now - start, err, errlen))
			failing_since = 0;	/* got through, or no answer yet */
		else if (!failing_since)
			failing_since = now;
		else if (now - failing_since >= WD_HS_UNREACHABLE_S - PROBE_S - 0.01)
			return -1;	/* err says why */
		next_probe = cli_now() + PROBE_S;
	}
	char guess[700] = " ";	/* the publisher's, better than ours */
	int guessed = wd_publisher_diagnosis(p, guess + 1, sizeof(guess) - 1) == WD_DIAGNOSIS_GUESS;
	const char *why = guessed ? guess
			: reach == ETIMEDOUT ? " nothing there answers a connection: is the host right, "
					       "and does a firewall let the port through?"
					     : " is wdriftd running?";
	const char *hint = reach == ETIMEDOUT || guessed ? "" : dc_keys_hint(&t->keys);
	if (flushed < 0 || wd_publisher_last_outcome(p, out) < 0)
		return wd_error(err, errlen, "no ack from %s:%s%s", t->ingest_ep, why, hint);
	if (out->kind == WD_OUTCOME_ACKED)
		return 0;
	if (!out->code[0])	/* given up, the daemon silent */
		return wd_error(err, errlen, "no ack from %s (%d tries):%s%s", t->ingest_ep, out->tries, why,
				hint);
	/* refused, or given up with what the daemon said last */
	char tries[32] = "";
	if (out->kind == WD_OUTCOME_GIVEN_UP)
		snprintf(tries, sizeof(tries), " (%d tries)", out->tries);
	*refused = 1;
	return wd_error(err, errlen, "the daemon refused %s%.200s%s: %s: %.300s%s", out->tensor[0] ? "'" : "",
			out->tensor[0] ? out->tensor : "the snapshot", out->tensor[0] ? "'" : "", out->code,
			out->reason, tries);
}

/*
 * Says err, and which file named the ingest endpoint when one did (not
 * --ingest): with a wrong endpoint, the first thing to check, as the
 * control commands say listen.control's.
 */
static int send_error(const struct dc_target *t, const char *err)
{
	if (!t->ingest && t->config_path[0])
		return cli_error("%s (listen.ingest of %s)%s", err, t->config_path, dc_config_near_miss(t->config));
	return cli_error("%s", err);
}

int cmd_send(int argc, char **argv)
{
	static const struct option extra[] = {
		{ "run", required_argument, NULL, 'r' },
		{ "step", required_argument, NULL, 's' },
		{ "ingest", required_argument, NULL, 'i' },
		{ "skip-other", no_argument, NULL, 'S' },
		{ 0 },
	};
	struct dc_args a = { .no_endpoint = 1, .t.ingest_only = 1 };	/* --endpoint refused below */
	struct send_opts o = { .a = &a };
	char err[1024];
	int r = dc_args(argc, argv, &a, usage, extra, on_opt, &o);

	if (r == DC_HELPED)
		return EXIT_OK;
	if (r < 0)
		return -r;
	if (a.t.control)	/* taken and ignored before, a hint's word followed */
		return cli_usage_error("--endpoint names the control socket; send publishes to the ingest "
				       "socket: give --ingest EP");
	if (!o.run || !o.have_step)
		return cli_usage_error("--run and --step are required");
	if (argc - r != 1)
		return cli_usage_error("expected one FILE.h5, got %d", argc - r);
	struct wd_sandbox_limits read_lim;
	struct wd_ckpt_box *ck;
	char cerr[WD_CKPT_ERR_MAX];
	if (wd_sandbox_limits_env(&read_lim, cerr, sizeof(cerr)) < 0)
		return cli_usage_error("%s", cerr);
	/* the reader child starts before the publisher's threads do */
	if (wd_ckpt_box_open(argv[r], &read_lim, &ck, cerr) < 0)
		return cli_error("%s", cerr);
	if (!wd_ckpt_count(wd_ckpt_box_listing(ck))) {
		wd_ckpt_box_close(&ck);
		return cli_error("'%s': no datasets to send", argv[r]);
	}
	json_t *skipped = json_array();
	if (!skipped || check_datasets(wd_ckpt_box_listing(ck), argv[r], o.skip_other, skipped) < 0) {
		json_decref(skipped);
		wd_ckpt_box_close(&ck);
		return skipped ? EXIT_FAIL : cli_error("out of memory");
	}
	int resolved = dc_resolve(&a.t, err, sizeof(err));
	if (resolved < 0 || !a.t.ingest_ep[0]) {
		json_decref(skipped);
		wd_ckpt_box_close(&ck);
		/* a key error says what is wrong with the key, not that the endpoint is missing */
		return cli_error("%s", resolved < 0 ? err : "no ingest endpoint: give -c FILE or --ingest");
	}
	/* as the other commands do: a stopped daemon or a typo in the path, said at once, not after 35 s */
	if (dc_endpoint_check(a.t.ingest_ep, "ingest", a.t.ingest != NULL, err, sizeof(err)) < 0) {
		json_decref(skipped);
		wd_ckpt_box_close(&ck);
		return send_error(&a.t, err);
	}
	const char *env = getenv("WDRIFT_TIMEOUT_MS");
	/* the daemon fsyncs before it acks: four times a control request's wait */
	struct wd_publisher_opts po = {
		.ack_timeout_ms = env && atoi(env) > 0 ? atoi(env) * 4 : 10000,
		.stall_warn_ms = -1,	/* the outcome is said below, once */
		.server_key = a.t.server_key,
		.key = a.t.key,
		.server_key_arg = "--server-key",
		.key_arg = "--key",
	};
	struct wd_publisher *p = NULL;
	struct wd_publisher_outcome out;
	int refused = 0, unanswered = 0;	/* no answer from the endpoint: say which file named it */
	wd_log_set(WD_LOG_ERR, NULL);	/* the publisher's warnings: this command says the outcome */
	if (wd_publisher_open(a.t.ingest_ep, o.run, &po, &p) < 0)
		r = wd_error(err, sizeof(err), "%s", wd_last_error());
	else if (wd_publisher_set_tries(p, SEND_TRIES) < 0)
		r = wd_error(err, sizeof(err), "%s", wd_last_error());
	else if ((r = publish_file(p, ck, o.step, o.skip_other, err, sizeof(err))) == 0)
		unanswered = (r = wait_outcome(p, &a.t, po.ack_timeout_ms, &out, &refused, err,
					       sizeof(err))) == -1 && !refused;
	char notice[1100] = "";
	if (p)
		wd_publisher_notice(p, notice, sizeof(notice));
	wd_publisher_close(&p, 0);
	if (notice[0])	/* said whatever the outcome: a typo in --run */
		fprintf(stderr, "wdrift send: warning: %s\n", notice);
	wd_ckpt_box_close(&ck);
	if (r < 0) {
		json_decref(skipped);
		return unanswered ? send_error(&a.t, err) : cli_error("%s", err);
	}
	size_t n_skipped = json_array_size(skipped);
	if (n_skipped) {	/* said, not only counted: the daemon compares what came */
		size_t k;
		json_t *v;
		fprintf(stderr, "wdrift send: note: --skip-other left out %zu dataset%s that %s not a float, or "
			"empty:", n_skipped, n_skipped == 1 ? "" : "s", n_skipped == 1 ? "is" : "are");
		json_array_foreach(skipped, k, v)
			if (k < 8)
				fprintf(stderr, "%s '%s'", k ? "," : "", json_string_value(v));
		fprintf(stderr, n_skipped > 8 ? " and %zu more\n" : "\n", n_skipped - 8);
	}
	if (a.json) {
		json_t *o_ = json_pack("{s:s,s:I,s:I,s:I,s:b}", "run", o.run, "step", (json_int_t)o.step,
				       "tensors", (json_int_t)out.tensors, "bytes", (json_int_t)out.bytes,
				       "duplicate", out.duplicate);
		if (o_ && n_skipped)
			json_object_set(o_, "skipped", skipped);
		char *text = o_ ? json_dumps(o_, 0) : NULL;	/* "k": v, as before */
		json_decref(o_);
		if (!text) {	/* acked all the same: said, not an empty object */
			json_decref(skipped);
			return cli_error("run '%s' step %lld acked, but its JSON could not be made (out of memory, "
					 "or a run name that is not UTF-8)", o.run, o.step);
		}
		printf("%s\n", text);
		free(text);
	} else if (out.duplicate)	/* the ack counts bytes stored anew: none ("0 bytes" read as nothing sent) */
		printf("acked: run '%s' step %lld, %llu tensor%s, already durable with the same content (a "
		       "duplicate: nothing stored anew)\n", o.run, o.step, (unsigned long long)out.tensors,
		       out.tensors == 1 ? "" : "s");
	else
		printf("acked: run '%s' step %lld, %llu tensor%s, %llu bytes, durable\n", o.run, o.step,
		       (unsigned long long)out.tensors, out.tensors == 1 ? "" : "s", (unsigned long long)out.bytes);
	json_decref(skipped);
	return EXIT_OK;
}
