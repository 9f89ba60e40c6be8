/* cmd_studies.c: `wdrift studies`: the daemon's studies, as configured. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "daemon_client.h"
#include "table.h"

static const char usage[] = DC_USAGE_SIMPLE("studies",
	"Each study of the running daemon: its baseline, candidates and proxies\n"
	"(label=run), its synthetic proxy, and its latest step with results; a\n"
	"study with none is followed by why (what its runs have sent), and one\n"
	"with results by its runs that have sent nothing (a typo in a reload?);\n"
	"and a study with a step of its runs held up now (a rank that died?), as\n"
	"wdrift drift's stuck line (\"stuck\" in --json), or refused incomplete\n"
	"with no later step of the run durable, as its expired line (\"expired\");\n"
	"and one with results and a run none of whose steps aligns to a baseline\n"
	"step, as drift's unaligned line (\"unaligned\").\n");

static void print_studies(json_t *o)
{
	json_t *list = json_object_get(o, "studies"), *s, *x;
	struct table t;
	size_t i, k;
	static const char *const head[] = { "study", "baseline", "candidates", "proxies", "synthetic",
					    "latest" };
	table_init(&t, json_array_size(list) + 1, 6);
	table_set_row(&t, 0, head, 6);
	json_array_foreach(list, i, s) {
		char buf[1024] = "";
		size_t at = 0;
		table_set(&t, i + 1, 0, json_string_value(json_object_get(s, "name")));
		table_set(&t, i + 1, 1, json_string_value(json_object_get(s, "baseline")));
		json_array_foreach(json_object_get(s, "candidates"), k, x)
			at += (size_t)snprintf(buf + at, sizeof(buf) - at > 1 ? sizeof(buf) - at : 1, "%s%s",
					       k ? "," : "", json_string_value(x));
		table_set(&t, i + 1, 2, buf);
		const char *label;
		buf[0] = 0;
		at = 0;
		json_object_foreach(json_object_get(s, "proxies"), label, x)
			at += (size_t)snprintf(buf + at, sizeof(buf) - at > 1 ? sizeof(buf) - at : 1, "%s%s=%s",
					       at ? "," : "", label, json_string_value(x));
		table_set(&t, i + 1, 3, at ? buf : "-");
		const char *syn = json_string_value(json_object_get(s, "synthetic_proxy"));
		table_set(&t, i + 1, 4, syn ? syn : "-");
		json_t *latest = json_object_get(s, "latest"), *cmp = json_object_get(s, "latest_compared");
		if (json_is_integer(cmp))	/* later steps have the proxies' rows alone: drift shows this one */
			snprintf(buf, sizeof(buf), "%lld (a candidate's: %lld)", (long long)json_integer_value(latest),
				 (long long)json_integer_value(cmp));
		else
			snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(latest));
		table_set(&t, i + 1, 5, json_is_integer(latest) ? buf : "none");
	}
	table_show(&t, json_array_size(list) + 1, 6, "(no study configured)");
	json_array_foreach(list, i, s) {
		const char *why = json_string_value(json_object_get(s, "waiting"));
		const char *silent = json_string_value(json_object_get(s, "silent"));
		if (why)
			printf("waiting   study '%s': no results yet; %s\n",
			       json_string_value(json_object_get(s, "name")), why);
		else if (silent)	/* results, but not from each of its runs now */
			printf("silent    study '%s': %s\n", json_string_value(json_object_get(s, "name")),
			       silent);
		const char *stuck = json_string_value(json_object_get(s, "stuck"));
		if (stuck)	/* a step held up: a rank that died? */
			printf("stuck     study '%s': %s\n", json_string_value(json_object_get(s, "name")), stuck);
		const char *expired = json_string_value(json_object_get(s, "expired"));
		if (expired)	/* a step that will have no rows: the job's rank died? */
			printf("expired   study '%s': %s\n", json_string_value(json_object_get(s, "name")),
			       expired);
		const char *unaligned = json_string_value(json_object_get(s, "unaligned"));
		if (unaligned)	/* a run saved at other steps than the baseline's: compared at none */
			printf("unaligned study '%s': %s\n", json_string_value(json_object_get(s, "name")),
			       unaligned);
	}
	dc_storage_note(o);
}

int cmd_studies(int argc, char **argv)
{
	return dc_simple(argc, argv, usage, "studies", print_studies);
}
