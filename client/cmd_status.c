/* cmd_status.c: `wdrift status`: the daemon's state, from its control socket. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "units.h"
#include "daemon_client.h"

static const char usage[] =
"usage: wdrift status " DC_USAGE_TARGET " [--json]\n"
"\n"
"The daemon's version, uptime, engine, runs, studies (how many, and by name\n"
"those with no results yet and those with a run that has sent nothing),\n"
"snapshots (durable: in the whole write-ahead log; since this start:\n"
"received, that is commits, one per rank of a sharded one, duplicates,\n"
"dropped, conflicts; pending now), alert rules firing or pending, and those\n"
"whose command failed since the start, errors by code, queue depths, memory,\n"
"and authentication: CURVE handshakes accepted and refused, by reason.\n"
"\n"
DC_HELP_TARGET
"      --json         print the reply as JSON (docs/protocol.md, \"status\")\n"
DC_HELP_HELP DC_HELP_EXIT;

static void print_status(json_t *o)
{
	json_t *sn = json_object_get(o, "snapshots"), *mem = json_object_get(o, "memory");
	json_t *q = json_object_get(o, "queues"), *errs = json_object_get(o, "errors");
	printf("wdriftd    %s, up %.0f s\n", json_string_value(json_object_get(o, "version")),
	       json_number_value(json_object_get(o, "uptime")));
	printf("engine     %s\n", json_string_value(json_object_get(o, "engine")));
	printf("config     %s\n", json_string_value(json_object_get(o, "config")));
	if (json_string_value(json_object_get(o, "config_pending")))	/* the file is not what runs */
		printf("           not running: %s\n", json_string_value(json_object_get(o, "config_pending")));
	if (json_string_value(json_object_get(o, "storage")))	/* a daemon before it: none */
		printf("storage    %s\n", json_string_value(json_object_get(o, "storage")));
	if (json_string_value(json_object_get(o, "storage_note")))	/* started in another directory */
		printf("           warning: %s\n", json_string_value(json_object_get(o, "storage_note")));
	if (json_string_value(json_object_get(o, "cli_config")))
		printf("cli config %s (where this command found the endpoint)\n",
		       json_string_value(json_object_get(o, "cli_config")));
	printf("runs       %lld\n", dc_int(o, "runs"));
	json_t *studies = json_object_get(o, "studies"), *none = json_object_get(studies, "no_results"), *x;
	if (studies) {	/* a daemon before it: none */
		json_t *silent = json_object_get(studies, "runs_silent");
		size_t i, n = json_array_size(none) + json_array_size(silent);
		printf("studies    %lld", dc_int(studies, "configured"));
		json_array_foreach(none, i, x)
			printf("%s%s", i ? ", " : "; with no results yet: ", json_string_value(x));
		json_array_foreach(silent, i, x)
			printf("%s%s", i ? ", " : "; with a run that has sent nothing: ", json_string_value(x));
		printf("%s\n", n ? " (wdrift studies says why)" : "");
	}
	json_t *al = json_object_get(o, "alerts");	/* a daemon before it: none */
	if (al) {
		const char *name;
		json_t *v;
		int k = 0;
		printf("alerts     %lld rule%s", dc_int(al, "rules"), dc_int(al, "rules") == 1 ? "" : "s");
		json_object_foreach(json_object_get(al, "firing"), name, v)
			printf("%s%s (%lld instance%s)", k++ ? ", " : "; firing: ", name,
			       (long long)json_integer_value(v), json_integer_value(v) == 1 ? "" : "s");
		k = 0;
		json_object_foreach(json_object_get(al, "pending"), name, v)
			printf("%s%s (%lld)", k++ ? ", " : "; pending: ", name, (long long)json_integer_value(v));
		k = 0;	/* a command that fails: its alerts reach no one (an ops trial's status said nothing) */
		json_object_foreach(json_object_get(al, "commands_failed"), name, v)
			printf("%s%s (%lld run%s)", k++ ? ", " : "; commands failed: ", name, (long long)json_integer_value(v),
			       json_integer_value(v) == 1 ? "" : "s");
		printf("%s\n", json_object_size(json_object_get(al, "firing")) ||
		       json_object_size(json_object_get(al, "pending")) ||
		       json_object_size(json_object_get(al, "commands_failed")) ? " (wdrift alerts says which)" : "");
	}
	/*
	 * Two scopes, said apart: "10 received, 102 durable" after a restart
	 * read as 92 made durable from nothing (a trial's).
	 */
	long long dups = dc_int(sn, "duplicates"), conflicts = dc_int(sn, "conflicts");
	printf("snapshots  %lld durable in all (the write-ahead log's); since this start: %lld received, "
	       "%lld duplicate%s, %lld dropped, %lld conflict%s; %lld pending now\n", dc_int(sn, "durable"),
	       dc_int(sn, "received"), dups, dups == 1 ? "" : "s", dc_int(sn, "dropped"), conflicts,
	       conflicts == 1 ? "" : "s", dc_int(sn, "pending"));
	json_t *ps = json_object_get(o, "pending_snapshots"), *p;	/* a daemon before it: none */
	size_t i;
	json_array_foreach(json_object_get(ps, "snapshots"), i, p) {
		/*
		 * Connections open now, and those closed since their commits apart:
		 * a lone rank's re-sends after its ack timeout, each on a new
		 * connection, read as ranks waiting (an ops trial's), and a dead
		 * rank's commit as one waiting (an earlier one's)
		 */
		long long closed = dc_int(p, "commits_closed"), commits = dc_int(p, "commits");
		char conns[200];
		const char *why = "(a rank that sent again on a new connection, or that died)";
		if (!closed)
			snprintf(conns, sizeof(conns), "%lld connection%s waiting", commits, commits == 1 ? "" : "s");
		else if (closed < commits)
			snprintf(conns, sizeof(conns), "%lld connection%s waiting, %lld more closed since %s %s",
				 commits - closed, commits - closed == 1 ? "" : "s", closed,
				 closed == 1 ? "its commit" : "their commits", why);
		else if (closed == 1)
			snprintf(conns, sizeof(conns), "no connection waiting: the one that committed has closed "
				 "since %s", why);
		else
			snprintf(conns, sizeof(conns), "no connection waiting: the %lld that committed have closed "
				 "since %s", closed, why);
		printf("pending    '%s' step %lld: %.0f s since its last message, %s%s%s; %s\n",
		       json_string_value(json_object_get(p, "run")), dc_int(p, "step"),
		       json_number_value(json_object_get(p, "idle")), conns, json_object_get(p, "ranks") ? ", " : "",
		       json_object_get(p, "ranks") ? json_string_value(json_object_get(p, "ranks")) : "",
		       json_string_value(json_object_get(p, "waiting")));
	}
	if (dc_int(ps, "more"))
		printf("pending    and %lld more\n", dc_int(ps, "more"));
	printf("queues     spool %lld, compute %lld\n", dc_int(q, "spool"), dc_int(q, "compute"));
	json_t *sp = json_object_get(o, "spool");	/* a daemon before it: none */
	if (sp) {
		printf("spool      %.1f MiB in %lld files", (double)dc_int(sp, "bytes") / 1048576,
		       dc_int(sp, "files"));
		char budget[32];	/* as the config spells it: "of 102400.0 MiB" hid a 100G (a trial) */
		if (dc_int(sp, "disk_budget"))
			printf(" of %s (spool.retention.disk_budget)",
			       wd_format_size(budget, sizeof(budget), (uint64_t)dc_int(sp, "disk_budget")));
		printf("; %lld dropped by retention since the start (still durable: a re-send is a "
		       "duplicate)\n", dc_int(sp, "dropped_by_retention"));
	}
	printf("memory     %.1f of %.1f MiB held, %.1f MiB of buffers kept for the next snapshots",
	       (double)dc_int(mem, "reserved") / 1048576, (double)dc_int(mem, "budget") / 1048576,
	       (double)dc_int(mem, "kept") / 1048576);
	if (json_object_get(mem, "engine_spares"))	/* a daemon before it: none */
		printf(", %.1f MiB of sort keys and counts kept by the engine",
		       (double)dc_int(mem, "engine_spares") / 1048576);
	printf("\n");
	const char *k;
	json_t *v;
	int any = 0;
	json_object_foreach(errs, k, v) {
		if (json_integer_value(v)) {
			printf("%s%s %lld", any ? ", " : "errors     ", k, (long long)json_integer_value(v));
			any = 1;
		}
	}
	/* replies, not snapshots: "4 conflicts" above may be "conflict 6" here */
	printf("%s", any ? " (error replies sent, by code: a refused snapshot can get several, one for each "
	       "differing tensor, commit or waiting rank)\n" : "errors     none\n");
	json_t *au = json_object_get(o, "auth"), *ref = json_object_get(au, "refused");
	if (au && !strcmp(json_string_value(json_object_get(au, "mechanism")) ?: "", "curve"))
		printf("auth       CURVE, %lld clients allowed; %lld accepted; refused: %lld unknown key, "
		       "%lld without CURVE, %lld wrong server key, %lld other\n", dc_int(au, "clients"),
		       dc_int(au, "accepted"), dc_int(ref, "unknown_key"), dc_int(ref, "no_curve"),
		       dc_int(ref, "bad_server_key"), dc_int(ref, "other"));
	else if (au)
		printf("auth       none (no auth.server_key)\n");
}

int cmd_status(int argc, char **argv)
{
	return dc_simple(argc, argv, usage, "status", print_status);
}
