/* cmd_runs.c: `wdrift runs`: the runs the daemon has heard from; `wdrift runs rm RUN`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "daemon_client.h"
#include "table.h"

static const char usage[] =
"usage: wdrift runs " DC_USAGE_TARGET " [--json]\n"
"       wdrift runs rm RUN [--force] [--wait SECONDS]\n"
"                      " DC_USAGE_TARGET " [--json]\n"
"\n"
"Each run the daemon knows: its role (baseline, candidate, proxy LABEL, or\n"
"none; one role in every study said once) and studies, durable snapshots,\n"
"its last step, seconds since it was last heard from (\"-\", and null in\n"
"--json, for a run known from the daemon's write-ahead log that has not\n"
"published since the daemon started), bytes it has in flight, and its\n"
"publishers connected now (a live job's; runs rm is refused while there are\n"
"any). Under the table: a \"no_study\" line for a run in no study (stored,\n"
"never compared; a typo? the nearest name), a \"refused\" line for a run whose\n"
"snapshots were refused as conflicts (a re-run under its name), a \"mixed\"\n"
"line for a run two jobs publish at once, each as its only rank, or did,\n"
"and an \"expired\" line for a run whose steps were refused incomplete, never\n"
"durable (a rank that died); the daemon's write-ahead log keeps these three,\n"
"so they are said after a restart too, until runs rm (\"no_study\",\n"
"\"refused\", \"conflicts\", \"jobs\", \"mixed\", \"mixed_at\", \"expired\",\n"
"\"expired_steps\", \"expired_step\" and \"expired_at\" in --json).\n"
"\n"
"rm RUN forgets a run, so that its name is free again (wdrift runs rm --help).\n"
"\n"
DC_HELP_TARGET DC_HELP_JSON DC_HELP_HELP
"\nexit status: 0 ok; 1 the daemon is down; 2 usage error.\n";

static const char rm_usage[] =
"usage: wdrift runs rm RUN [--force] [--wait SECONDS]\n"
"                      " DC_USAGE_TARGET " [--json]\n"
"\n"
"Forgets the run: its durable snapshots (spool files removed), its\n"
"results in the drift logs of its studies and its alert instances (all of\n"
"a study's, for its baseline; a firing one is resolved first, saying the run\n"
"was removed), durably, so that the name is\n"
"free again: a training run restarted under it is stored and compared\n"
"afresh, not refused as a conflict. It prints what was removed. Refused\n"
"while a snapshot of the run is being stored, and, without --force, while\n"
"one is being received or a publisher of it is still connected (a live\n"
"job, whose snapshots it would delete, or a re-run whose snapshots were\n"
"refused as conflicts and are not sent again: the error names each; stop\n"
"them first, then start the re-run again, or re-run under another name).\n"
"A job that has just exited is still connected for a moment: rm waits for\n"
"its publishers to disconnect (and for a snapshot being stored), up to\n"
"--wait, and removes the run as soon as it is free. Interrupted while it\n"
"waits, it removes nothing.\n"
"\n"
"  --force        remove the run even with publishers connected; their\n"
"                 next snapshots are stored under the name afresh (with\n"
"                 two jobs still sending, the run then holds steps of both;\n"
"                 stderr names the publishers still connected); and a step\n"
"                 being received (a rank that died holds it up until\n"
"                 limits.pending_timeout) is dropped, its ranks told, once\n"
"                 the daemon has said the rank's death or nothing new of\n"
"                 it came for 10 s (it waits for that, up to --wait)\n"
"  --wait SECONDS how long to wait for the run's publishers to disconnect\n"
"                 before refusing, 0 to 60 (default 2; 0: ask once)\n"
DC_HELP_TARGET DC_HELP_JSON DC_HELP_HELP
"\nexit status: 0 removed; 1 the daemon is down, or refused (an unknown run,\n"
"a publisher connected, a snapshot in flight); 2 usage error.\n";

/* --wait's default: a job that has just exited is disconnected by then, on a loaded machine too */
#define RM_WAIT_DEFAULT_S 2.0

struct rm_opts {
	int force;
	double wait;	/* seconds */
};

static int on_rm_opt(int c, const char *arg, void *ctx)
{
	struct rm_opts *o = ctx;
	char *end;

	if (c == 'f') {
		o->force = 1;
		return 0;
	}
	if (c != 'w')
		return 1;
	o->wait = strtod(arg, &end);
	/* the daemon's bounds (rm_wait.h): the CLI waits 120 s for a reply, and no more; decimal only */
	if (!*arg || *end || arg[strspn(arg, "0123456789.")] || !(o->wait >= 0 && o->wait <= 60)) {
		cli_usage_error("--wait '%s': expected seconds from 0 to 60", arg);
		return 1;
	}
	return 0;
}

static int runs_rm(int argc, char **argv)
{
	static const struct option extra[] = { { "force", no_argument, NULL, 'f' },
					       { "wait", required_argument, NULL, 'w' }, { 0 } };
	struct dc_args a = { 0 };
	struct rm_opts o = { 0, RM_WAIT_DEFAULT_S };
	int r = dc_args(argc, argv, &a, rm_usage, extra, on_rm_opt, &o);

	if (r < 0)
		return cli_opts_exit(r);
	if (r == argc)
		return cli_usage_error("which run? (wdrift runs lists them)");
	if (r + 1 != argc)
		return cli_usage_error("unexpected argument '%s'", argv[r + 1]);
	/*
	 * A wait that ends with the run free is answered "again": this request
	 * removes it, so that nothing is removed for a client that gave up
	 * (rm_wait.h). It asks with what is left of the wait: a job that
	 * connects meanwhile is waited for again, within the same time.
	 */
	double end = cli_now() + o.wait, left = o.wait;
	json_t *reply, *refused;
	for (;;) {
		reply = dc_call_refusable(&a, json_pack("{s:i,s:s,s:s,s:b,s:f}", "v", 1, "cmd", "runs_rm",
							"run", argv[r], "force", o.force, "wait", left),
					  &refused);
		if (!refused || !json_is_true(json_object_get(refused, "again")))
			break;
		json_decref(refused);
		left = end - cli_now();
		left = left > 0 ? left : 0;
	}
	if (refused) {
		const char *e = json_string_value(json_object_get(refused, "error"));
		cli_error("%s", e ? e : "the daemon refused the request");
		json_decref(refused);
		return EXIT_FAIL;
	}
	if (!reply)
		return EXIT_FAIL;
	if (a.json)
		dc_print_json(reply);
	else
	{
		long long st = dc_int(reply, "steps");
		long long rs = dc_int(reply, "results");
		long long al = dc_int(reply, "alerts"), fi = dc_int(reply, "alerts_firing");
		/* records, not steps: a step compared again (a proxy that came later) has two */
		printf("removed run '%s': %lld durable snapshot%s, %lld result record%s, "
		       "%lld alert instance%s (%lld firing)\n", argv[r], st, st == 1 ? "" : "s", rs,
		       rs == 1 ? "" : "s", al, al == 1 ? "" : "s", fi);
		long long got = dc_int(reply, "received_dropped");
		if (got > 0)	/* --force: a step a dead rank held up */
			printf("dropped %lld step%s being received (the ranks still waiting for it are told)\n", got,
			       got == 1 ? "" : "s");
		long long pub = dc_int(reply, "publishers");
		const char *who = json_string_value(json_object_get(reply, "publishers_who"));
		if (pub > 0)	/* --force: the run starts again from what they send next */
			fprintf(stderr, "wdrift runs rm: note: %lld publisher%s still connected (%s): the "
				"run now holds only what %s send%s next\n", pub, pub == 1 ? "" : "s",
				who ? who : "?", pub == 1 ? "it" : "they", pub == 1 ? "s" : "");
	}
	json_decref(reply);
	return EXIT_OK;
}

/*
 * The roles and the studies, each list joined with ", "; "none" and "-" when
 * none. One role in every study is said once ("baseline", beside "a, b"),
 * not once per study (a trial read "baseline, baseline").
 */
static void role_text(json_t *studies, char *role, size_t rlen, char *study, size_t slen)
{
	size_t i, rat = 0, sat = 0;
	json_t *v;
	int same = 1;

	json_array_foreach(studies, i, v)
		same &= json_equal(json_object_get(v, "role"),
				   json_object_get(json_array_get(studies, 0), "role"));
	snprintf(role, rlen, "none");
	snprintf(study, slen, "-");
	json_array_foreach(studies, i, v) {
		const char *r = json_string_value(json_object_get(v, "role"));
		const char *s = json_string_value(json_object_get(v, "study"));
		if (rat < rlen && (!i || !same))
			rat += (size_t)snprintf(role + rat, rlen - rat, "%s%s", i ? ", " : "", r ? r : "?");
		if (sat < slen)
			sat += (size_t)snprintf(study + sat, slen - sat, "%s%s", i ? ", " : "", s ? s : "?");
	}
}

/*
 * The "(studies: ...)" that the daemon's no_study line of a run carries
 * (ingest_no_study): its start and length in *len, or NULL.
 */
static const char *studies_part(const char *said, size_t *len)
{
	const char *at = said ? strstr(said, " (studies: ") : NULL;
	const char *end = at ? strchr(at, ')') : NULL;	/* names hold no ')' */

	if (!end)
		return NULL;
	*len = (size_t)(end + 1 - at);
	return at;
}

/*
 * Each run in no study, as the daemon says it. Several with the same
 * list of the studies' runs have it said once, under them: a trial's
 * five stray runs printed it five times.
 */
static void no_study_said(json_t *runs)
{
	const char *first = NULL, *part;
	size_t n = 0, flen = 0, len = 0, i;
	int same = 1;
	json_t *v;

	json_array_foreach(runs, i, v) {
		const char *said = json_string_value(json_object_get(v, "no_study"));
		if (!said)
			continue;
		part = studies_part(said, &len);
		if (!n++) {
			first = part;
			flen = len;
		}
		same &= part && first && len == flen && !memcmp(part, first, len);
	}
	json_array_foreach(runs, i, v) {
		const char *said = json_string_value(json_object_get(v, "no_study"));
		if (!said)
			continue;
		if (n < 2 || !same || !(part = studies_part(said, &len))) {
			printf("%-10s %s\n", "no_study", said);
			continue;
		}
		printf("%-10s %.*s%s\n", "no_study", (int)(part - said), said, part + len);
	}
	if (n >= 2 && same)
		printf("%-10s studies of all %zu above: %.*s\n", "", n, (int)(flen - 12), first + 11);
}

static void print_runs(json_t *o)
{
	json_t *runs = json_object_get(o, "runs"), *v;
	struct table t;
	char b[512], s[512];
	size_t i;
	int unknown = 0;
	static const char *const head[] = { "run", "role", "study", "durable", "last step", "idle s",
					    "in flight MiB", "publishers" };
	table_init(&t, json_array_size(runs) + 1, 8);
	table_set_row(&t, 0, head, 8);
	json_array_foreach(runs, i, v) {
		table_set(&t, i + 1, 0, json_string_value(json_object_get(v, "name")));
		role_text(json_object_get(v, "studies"), b, sizeof(b), s, sizeof(s));
		table_set(&t, i + 1, 1, b);
		table_set(&t, i + 1, 2, s);
		snprintf(b, sizeof(b), "%lld", dc_int(v, "durable"));
		table_set(&t, i + 1, 3, b);
		json_t *ls = json_object_get(v, "last_step");
		snprintf(b, sizeof(b), json_is_integer(ls) ? "%lld" : "-", (long long)json_integer_value(ls));
		table_set(&t, i + 1, 4, b);
		json_t *idle = json_object_get(v, "idle");	/* null: not heard from since the start */
		snprintf(b, sizeof(b), json_is_number(idle) ? "%.0f" : "-", json_number_value(idle));
		table_set(&t, i + 1, 5, b);
		snprintf(b, sizeof(b), "%.1f", (double)dc_int(v, "bytes_pending") / 1048576);
		table_set(&t, i + 1, 6, b);
		json_t *pubs = json_object_get(v, "publishers");	/* absent: an older daemon */
		snprintf(b, sizeof(b), json_is_integer(pubs) ? "%lld" : "?", (long long)json_integer_value(pubs));
		unknown |= !json_is_integer(pubs);
		table_set(&t, i + 1, 7, b);
	}
	table_show(&t, json_array_size(runs) + 1, 3, "(no run: none has published, or runs rm forgot each)");	/* run, role, study: text */
	if (unknown)	/* "?", not "-" or 0: none is not what the daemon said */
		printf("publishers ?: this wdriftd does not report them (an older version: restart it "
		       "on this one)\n");
	/*
	 * Under the table: a run in no study (a typo? as its job's welcome
	 * said); as `drift` says them, a re-run under the same name, refused;
	 * two jobs under one name at once; steps refused incomplete (a rank
	 * that died). Each kind together.
	 */
	static const char *const kinds[] = { "no_study", "refused", "mixed", "expired" };
	no_study_said(runs);
	for (size_t k = 1; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		json_array_foreach(runs, i, v)
			dc_said(v, kinds[k]);
	dc_storage_note(o);
}

int cmd_runs(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "rm")) {	/* wdrift runs rm RUN [options] */
		cli_cmd = "runs rm";	/* its messages' prefix: "wdrift runs rm: error: ..." */
		return runs_rm(argc - 1, argv + 1);
	}
	if (argc > 1 && argv[1][0] != '-')	/* `runs remove fa`: the one subcommand named */
		return cli_usage_error("unknown subcommand '%s' (runs lists the runs; 'wdrift runs rm RUN' "
				       "removes one)", argv[1]);
	return dc_simple(argc, argv, usage, "runs", print_runs);
}
