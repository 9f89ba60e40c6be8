/* cmd_runs.c: `wdrift runs`: the runs the daemon has heard from. */
#include <stdio.h>

#include <jansson.h>

#include "cli.h"
#include "daemon_client.h"
#include "table.h"

static const char usage[] =
"usage: wdrift runs [-c FILE] [--endpoint EP] [--json]\n"
"\n"
"Each run the daemon knows: durable snapshots, its last step, seconds since\n"
"it was last heard from, and bytes it has in flight.\n"
"\n"
DC_HELP_TARGET DC_HELP_JSON DC_HELP_HELP DC_HELP_EXIT;

int cmd_runs(int argc, char **argv)
{
	int rc;
	json_t *o = dc_simple(argc, argv, usage, "runs", &rc);
	if (!o)
		return rc;	/* an error, --help, or --json already printed */
	json_t *runs = json_object_get(o, "runs"), *v;
	struct table t;
	char b[64];
	size_t i;
	table_init(&t, json_array_size(runs) + 1, 5);
	const char *head[] = { "run", "durable", "last step", "idle s", "in flight MiB" };
	for (int c = 0; c < 5; c++)
		table_set(&t, 0, (size_t)c, head[c]);
	json_array_foreach(runs, i, v) {
		table_set(&t, i + 1, 0, json_string_value(json_object_get(v, "name")));
		snprintf(b, sizeof(b), "%lld", (long long)json_integer_value(json_object_get(v, "durable")));
		table_set(&t, i + 1, 1, b);
		json_t *ls = json_object_get(v, "last_step");
		snprintf(b, sizeof(b), json_is_integer(ls) ? "%lld" : "-", (long long)json_integer_value(ls));
		table_set(&t, i + 1, 2, b);
		snprintf(b, sizeof(b), "%.0f", json_number_value(json_object_get(v, "idle")));
		table_set(&t, i + 1, 3, b);
		snprintf(b, sizeof(b), "%.1f",
			 (double)json_integer_value(json_object_get(v, "bytes_pending")) / 1048576);
		table_set(&t, i + 1, 4, b);
	}
	table_print(&t, json_array_size(runs) + 1, 1);
	if (!json_array_size(runs))
		printf("(no run has published yet)\n");
	table_release(&t);
	json_decref(o);
	return EXIT_OK;
}
