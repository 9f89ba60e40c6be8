/* cli.c: message helpers shared by the subcommands. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
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

FILE *cli_out_open(const char *path, char *tmp, size_t tmplen)
{
	if (!path || !strcmp(path, "-")) {
		tmp[0] = 0;
		return stdout;
	}
	snprintf(tmp, tmplen, "%s.tmp-%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f)
		cli_error("%s: cannot create: %s", tmp, strerror(errno));
	return f;
}

int cli_out_commit(FILE *f, const char *path, const char *tmp)
{
	int bad = ferror(f);
	if (f == stdout)
		return fflush(f) || bad ? cli_error("cannot write the output: %s", strerror(errno)) : EXIT_OK;
	bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return cli_error("%s: cannot write: %s", path, strerror(e));
	}
	return EXIT_OK;
}

void cli_out_abort(FILE *f, const char *tmp)
{
	if (f && f != stdout) {
		fclose(f);
		unlink(tmp);
	}
}
