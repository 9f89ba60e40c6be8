/* cmd_alerts.c: `wdrift alerts`: the alert rules and where each stands. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "daemon_client.h"
#include "table.h"

static const char usage[] = DC_USAGE_SIMPLE("alerts",
	"Each alert rule of the daemon, what it measures (its metric and threshold,\n"
	"its scope: max, median, mean weighted by element count, or the tensors of a\n"
	"glob; its proxy for a ratio), and each of its instances (one per candidate,\n"
	"and per tensor for scope: tensors): inactive, pending or firing, with the\n"
	"last value and step (docs/config.md, \"Alerts\"). The states survive a\n"
	"restart of the daemon. Under the table, a rule whose glob matches no\n"
	"tensor (\"unmatched\"), and one whose command has failed since the\n"
	"daemon started, with the latest failure, one whose command still runs or\n"
	"whose changes are held (\"command\": {\"runs\", \"failed\", \"last_failure\",\n"
	"\"timeout\", \"running_for\", \"held\"} in --json).\n");

/* A rule's scope as the table shows it: "max", "median", "mean (weighted)", "tensors GLOB", "-". */
static void scope_text(json_t *al, char *b, size_t len)
{
	const char *scope = json_string_value(json_object_get(al, "scope"));
	const char *glob = json_string_value(json_object_get(al, "tensors"));

	if (!scope)
		snprintf(b, len, "-");	/* stalled: a clock, no tensors */
	else if (!strcmp(scope, "tensors"))
		snprintf(b, len, "tensors %s", glob ? glob : "?");
	else if (!strcmp(scope, "mean"))
		snprintf(b, len, "mean (weighted)");
	else
		snprintf(b, len, "%s", scope);
}

static void print_alerts(json_t *o)
{
	json_t *list = json_object_get(o, "alerts"), *al, *in;
	size_t rows = 1, i, k;
	json_array_foreach(list, i, al)
		rows += json_array_size(json_object_get(al, "instances")) ? json_array_size(json_object_get(al, "instances")) : 1;
	struct table t;
	char b[320];
	size_t row = 0;
	static const char *const head[] = { "alert", "study", "metric", "scope", "proxy", "run", "tensor",
					    "state", "value", "step" };
	table_init(&t, rows, 10);
	table_set_row(&t, 0, head, 10);
	json_array_foreach(list, i, al) {
		json_t *insts = json_object_get(al, "instances");
		size_t n = json_array_size(insts);
		for (k = 0; k < (n ? n : 1); k++) {
			row++;
			in = n ? json_array_get(insts, k) : NULL;
			table_set(&t, row, 0, json_string_value(json_object_get(al, "name")));
			table_set(&t, row, 1, json_string_value(json_object_get(al, "study")));
			snprintf(b, sizeof(b), "%s > %g", json_string_value(json_object_get(al, "metric")),
				 json_number_value(json_object_get(al, "threshold")));
			table_set(&t, row, 2, b);
			scope_text(al, b, sizeof(b));
			table_set(&t, row, 3, b);
			const char *proxy = json_string_value(json_object_get(al, "proxy"));
			table_set(&t, row, 4, proxy ? proxy : "-");
			const char *run = in ? json_string_value(json_object_get(in, "run")) : NULL;
			const char *tensor = in ? json_string_value(json_object_get(in, "tensor")) : NULL;
			table_set(&t, row, 5, run ? run : "-");
			table_set(&t, row, 6, tensor ? tensor : "-");
			table_set(&t, row, 7, in ? json_string_value(json_object_get(in, "state")) : "inactive");
			json_t *v = in ? json_object_get(in, "value") : NULL;
			snprintf(b, sizeof(b), json_is_number(v) ? "%.4g" : "-", json_number_value(v));
			table_set(&t, row, 8, b);
			/* step null: never evaluated (a ratio whose proxy has not come) */
			snprintf(b, sizeof(b), json_is_integer(in ? json_object_get(in, "step") : NULL) ? "%lld" : "-",
				 dc_int(in, "step"));
			table_set(&t, row, 9, b);
		}
	}
	table_show(&t, row + 1, 8, "(no alert rule configured)");
	json_array_foreach(list, i, al) {	/* a glob that matches no tensor: the rule can never fire */
		const char *why = json_string_value(json_object_get(al, "unmatched"));
		if (why)
			printf("unmatched  alert '%s': %s\n", json_string_value(json_object_get(al, "name")), why);
		/* a command that fails (a pager down, a typo in it): its alerts reach no one */
		json_t *cmd = json_object_get(al, "command");
		long long failed = (long long)json_integer_value(json_object_get(cmd, "failed"));
		if (failed)
			printf("command    alert '%s': %lld of its %lld command runs since the daemon started "
			       "failed, the latest: %s (the daemon's log says each)\n",
			       json_string_value(json_object_get(al, "name")), failed,
			       (long long)json_integer_value(json_object_get(cmd, "runs")),
			       json_string_value(json_object_get(cmd, "last_failure")));
		/* a run still running holds the rule's later changes: a hung pager is seen here */
		json_t *rf = json_object_get(cmd, "running_for");
		if (json_is_number(rf))
			printf("command    alert '%s': its command has run for %.0f s (command_timeout %lld s)%s\n",
			       json_string_value(json_object_get(al, "name")), json_number_value(rf),
			       (long long)json_integer_value(json_object_get(cmd, "timeout")),
			       json_is_true(json_object_get(cmd, "held")) ? "; the changes since are held until it ends" :
			       "");
		else if (json_is_true(json_object_get(cmd, "held")))
			printf("command    alert '%s': changes are held for its command: command_min_interval is not "
			       "over, or it could not start (the daemon's log says which)\n",
			       json_string_value(json_object_get(al, "name")));
	}
}

int cmd_alerts(int argc, char **argv)
{
	return dc_simple(argc, argv, usage, "alerts", print_alerts);
}
