/*
 * wdrift.c: the wdrift command-line client: finds the subcommand and runs
 * it. Each subcommand lives in its own cmd_*.c file.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "wdrift.h"

static const struct cli_command commands[] = {
	{ "compare", cmd_compare, "per-layer drift between checkpoint files, no daemon" },
	{ "status", cmd_status, "the daemon: engine, runs, snapshots, errors, memory" },
	{ "runs", cmd_runs, "the runs the daemon has heard from" },
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
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
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
	fprintf(stderr, "wdrift: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
