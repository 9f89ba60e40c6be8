/*
 * cli.h: what every wdrift subcommand shares: the command table and the
 * message helpers. Messages are lower-case, quote their subject, and go to
 * stderr as "wdrift CMD: ...".
 */
#ifndef WD_CLI_H
#define WD_CLI_H

#include <stdio.h>

/* Exit codes. */
#define EXIT_OK 0
#define EXIT_FAIL 1	/* bad input, or the work failed */
#define EXIT_USAGE 2	/* bad command line */

struct cli_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

/* Set by main to the running subcommand, for message prefixes. */
extern const char *cli_cmd;

/*
 * Set when a daemon command is given --json (dc_args), whose output must
 * stay JSON on failure: cli_error then also prints {"ok": false, "error":
 * MSG} on stdout. Usage errors (exit 2) are said on stderr only.
 */
extern int cli_json_errors;

/* CLOCK_MONOTONIC in seconds: every deadline and timing of the CLI. */
double cli_now(void);

/* Prints "wdrift CMD: error: MSG" and returns EXIT_FAIL. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "wdrift CMD: warning: MSG": the command goes on, but the user should know. */
void cli_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "wdrift CMD: MSG" on stderr: what a command did, when its output went elsewhere. */
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "wdrift CMD: MSG", a hint to --help, and returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

struct option;

/*
 * The option loop every subcommand shares: getopt_long over opts (with
 * shorts, which should start with ':' and hold 'h'), where -h/--help prints
 * usage, and a missing value or an unknown option is a usage error. Every
 * other option goes to on_opt, which returns nonzero to refuse it (after
 * printing why). Returns the index of the first positional argument, or a
 * negative return for cli_opts_exit: CLI_HELPED after --help, else
 * -EXIT_USAGE.
 */
int cli_opts(int argc, char **argv, const char *shorts, const struct option *opts, const char *usage,
	     int (*on_opt)(int c, const char *arg, void *ctx), void *ctx);
#define CLI_HELPED (-1000)
/* The exit code for a negative return of cli_opts (or dc_args). */
static inline int cli_opts_exit(int r)
{
	return r == CLI_HELPED ? EXIT_OK : -r;
}

/*
 * A step number given to option opt ("--step"): 0 with *step, or nonzero
 * after printing the usage error.
 */
int cli_step_arg(const char *opt, const char *arg, long long *step);

/*
 * Output to a file that appears whole or not at all: cli_out_open writes
 * to PATH.tmp-PID (stdout for NULL or "-"), cli_out_commit flushes, fsyncs
 * and renames it over PATH. A symlink PATH: the same beside the file it
 * resolves to (a dangling one is refused); a device or FIFO: written
 * through, never replaced; a directory or socket: refused. Both print their
 * error, which names PATH (never the temporary name); commit returns an
 * exit code. tmp needs PATH_MAX + 32 bytes.
 */
FILE *cli_out_open(const char *path, char *tmp, size_t tmplen);
int cli_out_commit(FILE *f, const char *path, const char *tmp);
/* Gives up: closes and removes the temporary file. */
void cli_out_abort(FILE *f, const char *tmp);

int cmd_compare(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_runs(int argc, char **argv);
int cmd_studies(int argc, char **argv);
int cmd_drift(int argc, char **argv);
int cmd_alerts(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_send(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_reload(int argc, char **argv);

#endif
