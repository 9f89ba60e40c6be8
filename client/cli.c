/* cli.c: message helpers and the option loop shared by the subcommands. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char *cli_cmd = "";

static void vsay(const char *kind, const char *fmt, va_list ap)
{
	fprintf(stderr, "wdrift%s%s: %s", cli_cmd[0] ? " " : "", cli_cmd, kind);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int cli_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay("error: ", fmt, ap);
	va_end(ap);
	return EXIT_FAIL;
}

int cli_usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay("", fmt, ap);
	va_end(ap);
	fprintf(stderr, "try 'wdrift %s --help'\n", cli_cmd);
	return EXIT_USAGE;
}

int cli_opts(int argc, char **argv, const char *shorts, const struct option *opts, const char *usage,
	     int (*on_opt)(int c, const char *arg, void *ctx), void *ctx)
{
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
		switch (c) {
		case 'h': fputs(usage, stdout); return CLI_HELPED;
		case ':': return -cli_usage_error("option '%s' needs a value", argv[optind - 1]);
		case '?': return -cli_usage_error("unknown option '%s'", argv[optind - 1]);
		default:
			if (!on_opt || on_opt(c, optarg, ctx))
				return -EXIT_USAGE;
		}
	}
	return optind;
}

int cli_step_arg(const char *opt, const char *arg, long long *step)
{
	char *end;

	*step = strtoll(arg, &end, 10);
	if (!*arg || *end || *step < 0) {
		cli_usage_error("%s '%s': expected a step number", opt, arg);
		return 1;
	}
	return 0;
}

/*
 * While a temporary file is open, SIGINT, SIGTERM and SIGHUP remove it
 * before the signal takes its default course: an interrupted command
 * leaves neither the file nor its temporary. A signal that was ignored
 * (nohup) stays ignored.
 */
static const int out_signals[] = { SIGHUP, SIGINT, SIGTERM };
static struct sigaction out_saved[3];
static char out_tmp[4200];
static volatile sig_atomic_t out_armed;

static void out_on_signal(int sig)
{
	if (out_armed)
		unlink(out_tmp);
	raise(sig);	/* SA_RESETHAND: the default action, once this returns */
}

static void out_arm(const char *tmp)
{
	struct sigaction sa = { .sa_handler = out_on_signal, .sa_flags = SA_RESETHAND };

	snprintf(out_tmp, sizeof(out_tmp), "%s", tmp);
	out_armed = 1;
	sigfillset(&sa.sa_mask);
	for (int i = 0; i < 3; i++) {
		sigaction(out_signals[i], NULL, &out_saved[i]);
		if (out_saved[i].sa_handler != SIG_IGN)
			sigaction(out_signals[i], &sa, NULL);
	}
}

static void out_disarm(void)
{
	for (int i = 0; i < 3; i++)
		sigaction(out_signals[i], &out_saved[i], NULL);
	out_armed = 0;
}

FILE *cli_out_open(const char *path, char *tmp, size_t tmplen)
{
	if (!path || !strcmp(path, "-")) {
		tmp[0] = 0;
		return stdout;
	}
	snprintf(tmp, tmplen, "%s.tmp-%ld", path, (long)getpid());
	out_arm(tmp);
	FILE *f = fopen(tmp, "w");
	if (!f) {
		int e = errno;
		out_disarm();
		/* PATH, not the temporary name: the user named PATH, and its directory is what failed */
		cli_error("%s: cannot create: %s", path, strerror(e));
	}
	return f;
}

/*
 * Every failure names PATH, the file the user asked for: the temporary
 * name is ours, and is gone by the time the message is read. The first
 * failure's errno is the one reported (a failed write sets the stream's
 * error and errno; the flush, fsync and close after it add nothing).
 */
int cli_out_commit(FILE *f, const char *path, const char *tmp)
{
	int e = ferror(f) ? (errno ? errno : EIO) : 0;

	if (f == stdout) {
		if (fflush(f) != 0 && !e)
			e = errno;
		return e ? cli_error("cannot write the output: %s", strerror(e)) : EXIT_OK;
	}
	if (fflush(f) != 0 && !e)
		e = errno;
	if (!e && fsync(fileno(f)) != 0)
		e = errno;
	if (fclose(f) != 0 && !e)
		e = errno;
	if (!e && rename(tmp, path) != 0)
		e = errno;
	if (e) {
		unlink(tmp);
		out_disarm();
		return cli_error("%s: cannot write: %s", path, strerror(e));
	}
	out_disarm();
	return EXIT_OK;
}

void cli_out_abort(FILE *f, const char *tmp)
{
	if (f && f != stdout) {
		fclose(f);
		unlink(tmp);
		out_disarm();
	}
}
