/*
 * cmd_reload.c: `wdrift reload`: the daemon reads its config file again
 * (as on SIGHUP) and says what changed, or why it refused and kept the
 * old one (docs/config.md, "Reload").
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "daemon_client.h"

static const char usage[] =
"usage: wdrift reload " DC_USAGE_TARGET " [--json]\n"
"\n"
"Asks the daemon to load its configuration file again, as SIGHUP does. The\n"
"new file is checked whole first: on an error (FILE:LINE:COL: KEY: REASON),\n"
"or a change to a key that needs a restart, the daemon keeps running its old\n"
"configuration, and this command prints the error and exits 1. Otherwise it\n"
"prints what changed: studies, alert rules and auth.clients added, removed\n"
"or changed (with the keys that differ), and the other keys, from and to;\n"
"then a warning for each run a study names anew that has no snapshot while\n"
"a run of a near name has some (a typo: the study would wait for ever), and\n"
"for each study added that can compare nothing the daemon holds, why, as\n"
"`wdrift studies` says it.\n"
"\n"
DC_HELP_TARGET
"      --json         print the reply as JSON: {\"config\", \"changes\": {\"studies\",\n"
"                     \"alerts\", \"clients\": {\"added\", \"removed\", \"changed\"},\n"
"                     \"keys\": [{\"key\", \"from\", \"to\"}], \"warnings\": [...],\n"
"                     \"waiting\": {STUDY: why}}}; \"warnings\" and \"waiting\"\n"
"                     only when there are any; on failure\n"
"                     {\"ok\": false, \"error\"} (and the error on stderr, exit 1)\n"
DC_HELP_HELP
"\nexit status: 0 reloaded; 1 refused (the old configuration stays), or the\n"
"daemon is down or not answering; 2 usage error.\n";

/* "a, b" of a JSON array of strings, into buf. */
static const char *join(json_t *list, char *buf, size_t size)
{
	size_t i, o = 0;
	json_t *v;

	buf[0] = 0;
	json_array_foreach(list, i, v)
		if (o < size)
			o += snprintf(buf + o, size - o, "%s%s", i ? ", " : "", json_string_value(v));
	return buf;
}

/* One line per kind of change in c ("studies", CHANGES); returns how many. */
static int print_changes(const char *what, json_t *c)
{
	json_t *added = json_object_get(c, "added"), *removed = json_object_get(c, "removed");
	json_t *changed = json_object_get(c, "changed"), *v;
	char buf[4096], keys[512];
	int n = 0;
	size_t i;

	if (json_array_size(added))
		n += printf("%-9s added: %s\n", what, join(added, buf, sizeof(buf))) > 0;
	if (json_array_size(removed))
		n += printf("%-9s removed: %s\n", what, join(removed, buf, sizeof(buf))) > 0;
	json_array_foreach(changed, i, v) {
		const char *name = json_string_value(json_object_get(v, "name"));
		join(json_object_get(v, "keys"), keys, sizeof(keys));
		n += printf("%-9s changed: %s%s%s%s\n", what, name, *keys ? " (" : "", keys, *keys ? ")" : "") > 0;
	}
	return n;
}

static void print_reload(json_t *o)
{
	json_t *ch = json_object_get(o, "changes"), *v;
	int n = 0;
	size_t i;

	printf("reloaded %s\n", json_string_value(json_object_get(o, "config")));
	n += print_changes("studies", json_object_get(ch, "studies"));
	n += print_changes("alerts", json_object_get(ch, "alerts"));
	n += print_changes("clients", json_object_get(ch, "clients"));
	json_array_foreach(json_object_get(ch, "keys"), i, v) {
		printf("key       %s: %s -> %s\n", json_string_value(json_object_get(v, "key")),
		       json_string_value(json_object_get(v, "from")), json_string_value(json_object_get(v, "to")));
		n++;
	}
	if (!n)
		printf("nothing changed\n");
	json_array_foreach(json_object_get(ch, "warnings"), i, v)	/* a run name with no snapshot */
		printf("warning   %s\n", json_string_value(v));
	const char *study;
	json_object_foreach(json_object_get(ch, "waiting"), study, v)	/* as `wdrift studies` says it */
		printf("waiting   study '%s': no results yet; %s\n", study, json_string_value(v));
}

int cmd_reload(int argc, char **argv)
{
	struct dc_args a = { 0 };
	char err[WD_CONFIG_ERR_MAX + 256];
	int r = dc_args(argc, argv, &a, usage, NULL, NULL, NULL);

	if (r < 0)
		return cli_opts_exit(r);
	if (r != argc)
		return cli_usage_error("unexpected argument '%s'", argv[r]);
	/*
	 * The file this command reads the endpoint from is most often the one
	 * the daemon would reload: when it does not load, that is the error
	 * to fix, and the daemon is not asked (it would refuse it the same way).
	 */
	if (!a.t.control && dc_resolve(&a.t, err, sizeof(err)) < 0)
		return cli_error("nothing was reloaded, the daemon keeps its running configuration (it "
				 "would refuse this file the same way: fix it, then reload; --endpoint asks a "
				 "daemon that runs another file): %s", err);
	return dc_show(&a, json_pack("{s:i,s:s}", "v", 1, "cmd", "reload"), print_reload);
}
