/*
 * wdrift.c: the wdrift command-line client: finds the subcommand and runs
 * it. Each subcommand lives in its own cmd_*.c file.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "daemon_client.h"
#include "near_name.h"
#include "wdrift.h"

static const struct cli_command commands[] = {
	{ "compare", cmd_compare, "per-layer drift between checkpoint files, no daemon" },
	{ "status", cmd_status, "the daemon: engine, runs, snapshots, errors, memory" },
	{ "runs", cmd_runs, "the runs the daemon has heard from; runs rm RUN forgets one" },
	{ "studies", cmd_studies, "the daemon's studies: baseline, candidates, proxies" },
	{ "drift", cmd_drift, "a study's drift at a step, per tensor" },
	{ "alerts", cmd_alerts, "alert rules and their state" },
	{ "reload", cmd_reload, "the daemon reads its config again, and says what changed" },
	{ "watch", cmd_watch, "drift and alert events as they happen" },
	{ "send", cmd_send, "publish a checkpoint file as a run's snapshot" },
	{ "report", cmd_report, "a study's drift as a self-contained HTML page" },
	{ "export", cmd_export, "a study's drift log as CSV or JSON" },
	{ "keygen", cmd_keygen, "a CURVE key pair for the daemon or a client" },
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: wdrift [--version] [--help] COMMAND [ARGS]\n\n"
		   "Exact per-layer weight drift between training runs.\n\ncommands:\n");
	for (size_t i = 0; i < N_COMMANDS; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n'wdrift COMMAND --help' documents each command.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "help") && argc > 2 && (argv[2][0] == '-' || !strcmp(argv[2], "help"))) {
		/* wdrift help --json, wdrift help help */
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "help") && argc > 2) {
		/* wdrift help runs rm: as runs rm --help (one word out, one in: argc stays) */
		static char flag[] = "--help";
		memmove(argv + 1, argv + 2, (size_t)(argc - 2) * sizeof(*argv));
		argv[argc - 1] = flag;
	} else if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("wdrift %s\n", WDRIFT_VERSION);
		return EXIT_OK;
	}
	for (size_t i = 0; i < N_COMMANDS; i++)
		if (!strcmp(argv[1], commands[i].name)) {
			cli_cmd = commands[i].name;
			return commands[i].run(argc - 1, argv + 1);
		}
	/*
	 * An option before the command (`wdrift -c FILE runs`, as git takes
	 * -C): the line reordered, quoted to paste. A word right after an
	 * option that takes a value is that value, not the command.
	 */
	static const char *const valued[] = { "-c", "--config", "--endpoint", "--server-key", "--key" };
	for (int k = 2; argv[1][0] == '-' && k < argc; k++) {
		int value = 0;
		for (size_t v = 0; v < sizeof(valued) / sizeof(valued[0]); v++)
			value |= !strcmp(argv[k - 1], valued[v]);
		for (size_t i = 0; !value && i < N_COMMANDS; i++) {
			char line[4096];
			size_t at = 0;
			if (strcmp(argv[k], commands[i].name))
				continue;
			dc_shell_arg(line, sizeof(line), &at, "", argv[k]);
			for (int j = 1; j < argc; j++)
				if (j != k && dc_shell_arg(line, sizeof(line), &at, "", argv[j]) < 0)
					break;
			fprintf(stderr, "wdrift: options go after the command: wdrift%s\n", line);
			return EXIT_USAGE;
		}
	}
	/* a typo: the nearest command, as the daemon's names are suggested (near_name.h) */
	const char *best = NULL;
	size_t bestd = SIZE_MAX;
	for (size_t i = 0; i < N_COMMANDS; i++) {
		size_t d = wd_name_near(argv[1], commands[i].name, strlen(commands[i].name));
		if (d < bestd) {
			bestd = d;
			best = commands[i].name;
		}
	}
	/* not commands, but what a user may type for them (wdrift version) */
	static const char *const flags[] = { "--version", "--help" };
	for (size_t i = 0; i < 2; i++) {
		const char *typed = argv[1] + strspn(argv[1], "-");
		size_t d = wd_name_near(typed, flags[i] + 2, strlen(flags[i] + 2));
		if (d < bestd || !strcmp(typed, flags[i] + 2)) {
			bestd = !strcmp(typed, flags[i] + 2) ? 0 : d;
			best = flags[i];
		}
	}
	fprintf(stderr, "wdrift: unknown command '%s'%s%s%s\n", argv[1], best ? "; did you mean '" : "",
		best ? best : "", best ? "'?" : "");
	usage(stderr);
	return EXIT_USAGE;
}
