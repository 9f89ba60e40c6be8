/* cli.c: message helpers and the option loop shared by the subcommands. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "near_name.h"

double cli_now(void)
{
	return wd_now();	/* the library's clock: one formula */
}

const char *cli_cmd = "";

static void vsay(const char *kind, const char *fmt, va_list ap)
{
	fprintf(stderr, "wdrift%s%s: %s", cli_cmd[0] ? " " : "", cli_cmd, kind);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int cli_json_errors;

/* msg as a JSON string: quotes, backslashes and control characters escaped (UTF-8 kept). */
static void json_string_out(FILE *f, const char *msg)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')	/* a message of several lines: as jansson writes it */
			fputs("\\n", f);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

int cli_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (cli_json_errors) {
		char msg[8192];
		va_list aq;
		va_copy(aq, ap);
		vsnprintf(msg, sizeof(msg), fmt, aq);
		va_end(aq);
		fputs("{\"ok\": false, \"error\": ", stdout);
		json_string_out(stdout, msg);
		fputs("}\n", stdout);
		fflush(stdout);
	}
	vsay("error: ", fmt, ap);
	va_end(ap);
	return EXIT_FAIL;
}

void cli_warning(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay("warning: ", fmt, ap);
	va_end(ap);
}

void cli_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay("", fmt, ap);
	va_end(ap);
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

/* The long option nearest a typo of it (wd_name_near), or NULL. */
static const char *nearest_option(const char *typed, const struct option *opts)
{
	const char *best = NULL;
	size_t best_d = SIZE_MAX;

	for (const struct option *o = opts; o && o->name; o++) {
		size_t d = !strcmp(typed, o->name) ? 0 : wd_name_near(typed, o->name, strlen(o->name));
		if (d < best_d) {
			best_d = d;
			best = o->name;
		}
	}
	return best;
}

/*
 * The usage error of an option getopt_long did not take: a value given to
 * one that takes none (or to a prefix of one), a prefix of several, or
 * "did you mean" the long option a typo is nearest (--layr for --layer,
 * --stpe for --step, -json for --json, as commands, runs and config keys
 * are suggested). c: getopt's optopt, the short option for one in a
 * cluster (-json is -j -s -o -n).
 */
static int unknown_option(const char *arg, int c, const struct option *opts)
{
	if (arg[0] == '-' && arg[1] && arg[1] != '-') {	/* a short option, in the cluster arg */
		const char *best = strlen(arg + 1) > 1 ? nearest_option(arg + 1, opts) : NULL;
		if (c > ' ' && c < 0x7f && arg[2])
			return cli_usage_error("unknown option '-%c' (in '%s')%s%s%s", c, arg,
					       best ? "; did you mean '--" : "", best ? best : "", best ? "'?" : "");
		return cli_usage_error("unknown option '%s'", arg);
	}
	const char *name = arg + 2, *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	if (strncmp(arg, "--", 2) || !len)	/* "--=x": no name to go by */
		return cli_usage_error("unknown option '%s'", arg);
	char typed[128];
	snprintf(typed, sizeof(typed), "%.*s", (int)(len < sizeof(typed) ? len : sizeof(typed) - 1), name);
	const struct option *exact = NULL, *prefix = NULL;
	char prefixed[512] = "";
	int n_prefixed = 0;
	for (const struct option *o = opts; o && o->name; o++) {
		if (!strcmp(o->name, typed))
			exact = o;
		if (strncmp(o->name, typed, strlen(typed)))
			continue;
		prefix = o;
		if (strlen(prefixed) + strlen(o->name) + 8 < sizeof(prefixed))
			snprintf(prefixed + strlen(prefixed), sizeof(prefixed) - strlen(prefixed), "%s'--%s'",
				 n_prefixed ? ", " : "", o->name);
		n_prefixed++;
	}
	const struct option *meant = exact ? exact : n_prefixed == 1 ? prefix : NULL;
	if (meant && eq && meant->has_arg == no_argument)	/* --json=1, --js=1 */
		return cli_usage_error("option '--%s' takes no value", meant->name);
	if (!exact && n_prefixed > 1)
		return cli_usage_error("option '--%s' is ambiguous: %s", typed, prefixed);
	const char *best = nearest_option(typed, opts);
	if (best && strcmp(best, typed))
		return cli_usage_error("unknown option '--%s'; did you mean '--%s'?", typed, best);
	return cli_usage_error("unknown option '%s'", arg);
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
		case '?': {
			const char *arg = argv[optind - 1];
			/* in a cluster getopt is still on (-json: -j unknown), optind has not moved on */
			if (strncmp(arg, "--", 2) && optopt && optind < argc && argv[optind][0] == '-' &&
			    argv[optind][1] && argv[optind][1] != '-' && strchr(argv[optind] + 1, optopt))
				arg = argv[optind];
			return -unknown_option(arg, optopt, opts);
		}
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

/*
 * What is at PATH decides how it is written (docs/cli.md, "Output files"):
 * nothing, or a regular file: a temporary beside it, renamed over it at
 * commit; a symlink to a regular file: the same beside the file it
 * resolves to, so the link stays and shows the new content (a dangling one
 * is refused: which file to make is the user's call); a device, a FIFO, or
 * any path under /dev or /proc (/dev/stderr, /proc/self/fd/N): written
 * through, never created, truncated or replaced; a directory or a socket:
 * refused. /dev/stdout is stdout itself. tmp is "" for stdout and for
 * written-through files; otherwise the temporary, TARGET.tmp-PID, TARGET
 * being what commit renames onto.
 */
FILE *cli_out_open(const char *path, char *tmp, size_t tmplen)
{
	char real[PATH_MAX];
	const char *target = path;
	struct stat st, lst;
	FILE *f;
	int e;

	tmp[0] = 0;
	if (!path || !strcmp(path, "-") || !strcmp(path, "/dev/stdout"))
		return stdout;
	if (lstat(path, &lst) < 0) {
		lst.st_mode = st.st_mode = S_IFREG;	/* nothing there yet: fopen says what is wrong */
	} else if (stat(path, &st) < 0) {
		e = errno;
		if (e == ENOENT)
			cli_error("%s: a symbolic link to a file that does not exist: create that file, "
				  "or give its path", path);
		else
			cli_error("%s: cannot follow the symbolic link: %s", path, strerror(e));
		return NULL;
	}
	if (S_ISDIR(st.st_mode)) {
		cli_error("%s: is a directory: give a file name", path);
		return NULL;
	}
	if (S_ISSOCK(st.st_mode)) {
		cli_error("%s: is a socket, not a file: give a file name", path);
		return NULL;
	}
	if (!S_ISREG(st.st_mode) || !strncmp(path, "/dev/", 5) || !strncmp(path, "/proc/", 6)) {
		/* not ours to replace: write into it, never create or truncate */
		int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
		if (fd < 0 || !(f = fdopen(fd, "w"))) {
			e = errno;
			if (fd >= 0)
				close(fd);
			cli_error("%s: cannot open: %s", path, strerror(e));
			return NULL;
		}
		return f;
	}
	if (S_ISLNK(lst.st_mode)) {
		if (!realpath(path, real)) {
			cli_error("%s: cannot resolve the symbolic link: %s", path, strerror(errno));
			return NULL;
		}
		target = real;
	}
	if ((size_t)snprintf(tmp, tmplen, "%s.tmp-%ld", target, (long)getpid()) >= tmplen) {
		tmp[0] = 0;
		cli_error("%s: path too long", path);
		return NULL;
	}
	out_arm(tmp);
	f = fopen(tmp, "w");
	if (!f) {
		e = errno;
		out_disarm();
		tmp[0] = 0;
		/* PATH, not the temporary name: the user named PATH, and its directory is what failed */
		cli_error("%s: cannot create: %s", path, strerror(e));
	}
	return f;
}

/* What a temporary from cli_out_open is renamed onto: tmp without ".tmp-PID". */
static int out_target(const char *tmp, char *target, size_t size)
{
	const char *dot = strrchr(tmp, '.');

	if (!dot || strncmp(dot, ".tmp-", 5) || (size_t)(dot - tmp) >= size)
		return -1;
	memcpy(target, tmp, (size_t)(dot - tmp));
	target[dot - tmp] = 0;
	return 0;
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

	char target[PATH_MAX + 32];

	if (f == stdout) {
		if (fflush(f) != 0 && !e)
			e = errno;
		return e ? cli_error("cannot write the output: %s", strerror(e)) : EXIT_OK;
	}
	if (!tmp[0]) {	/* written through (a device, a FIFO): nothing to sync or rename */
		if (fflush(f) != 0 && !e)
			e = errno;
		if (fclose(f) != 0 && !e)
			e = errno;
		return e ? cli_error("%s: cannot write: %s", path, strerror(e)) : EXIT_OK;
	}
	if (fflush(f) != 0 && !e)
		e = errno;
	if (!e && fsync(fileno(f)) != 0)
		e = errno;
	if (fclose(f) != 0 && !e)
		e = errno;
	if (!e && out_target(tmp, target, sizeof(target)) < 0)
		e = ENAMETOOLONG;
	if (!e && rename(tmp, target) != 0)
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
		if (tmp[0]) {
			unlink(tmp);
			out_disarm();
		}
	}
}
