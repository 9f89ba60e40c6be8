/* cli.c: message helpers shared by the subcommands. */
#include <stdarg.h>
#include <stdio.h>

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
