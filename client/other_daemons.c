/* other_daemons.c: the wdriftd processes running with another config (other_daemons.h). */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "other_daemons.h"

#define SHOWN_MAX 3	/* daemons named in one hint */

/* Reads /proc/PID/NAME into buf (NUL-terminated, NULs inside kept); its length, or -1. */
static ssize_t proc_read(const char *pid, const char *name, char *buf, size_t len)
{
	char path[sizeof("/proc//") + NAME_MAX + 16];
	ssize_t n, at = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%s/%s", pid, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	while ((size_t)at < len - 1 && (n = read(fd, buf + at, len - 1 - (size_t)at)) > 0)
		at += n;
	close(fd);
	buf[at] = 0;
	return at;
}

/*
 * The config a wdriftd was given, from its argv (NUL-separated, n bytes):
 * -c FILE, -cFILE, --config FILE, --config=FILE; NULL without one.
 */
static const char *config_arg(const char *argv, ssize_t n)
{
	const char *end = argv + n, *a = argv + strlen(argv) + 1;	/* past argv[0] */

	for (; a < end; a += strlen(a) + 1) {
		const char *next = a + strlen(a) + 1;
		if (!strcmp(a, "--"))
			return NULL;
		if (!strcmp(a, "-c") || !strcmp(a, "--config"))
			return next < end ? next : NULL;
		if (!strncmp(a, "--config=", 9))
			return a + 9;
		if (!strncmp(a, "-c", 2))
			return a + 2;
	}
	return NULL;
}

const char *dc_other_daemons(const char *config_path)
{
	static char out[1024];
	char mine[PATH_MAX] = "", argv[4096], comm[32], cwd[PATH_MAX], full[2 * PATH_MAX], real[PATH_MAX];
	size_t at = 0, shown = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;

	out[0] = 0;
	if (!d)
		return out;
	if (config_path && config_path[0] && !realpath(config_path, mine))
		snprintf(mine, sizeof(mine), "%s", config_path);
	while ((e = readdir(d)) && shown < SHOWN_MAX) {
		ssize_t n, c;
		const char *cfg;
		if (!isdigit((unsigned char)e->d_name[0]) || proc_read(e->d_name, "comm", comm, sizeof(comm)) < 0 ||
		    strcmp(comm, "wdriftd\n") || (n = proc_read(e->d_name, "cmdline", argv, sizeof(argv))) <= 0)
			continue;
		snprintf(full, sizeof(full), "/proc/%s/cwd", e->d_name);
		c = readlink(full, cwd, sizeof(cwd) - 1);	/* another user's: not readable */
		cwd[c > 0 ? c : 0] = 0;
		cfg = config_arg(argv, n);
		if (cfg && cfg[0] != '/' && cwd[0])
			snprintf(full, sizeof(full), "%s/%s", cwd, cfg);
		else
			snprintf(full, sizeof(full), "%s", cfg ? cfg : "");
		if (cfg && cwd[0] && realpath(full, real))
			snprintf(full, sizeof(full), "%s", real);
		if (cfg && !strcmp(full, mine))
			continue;	/* the daemon of this config: not another */
		if (at < sizeof(out)) {
			if (cfg)
				at += (size_t)snprintf(out + at, sizeof(out) - at, "%s pid %s with -c %s%s",
						       shown ? ";" : "", e->d_name, full,
						       full[0] == '/' ? "" : " (relative to its directory)");
			else
				at += (size_t)snprintf(out + at, sizeof(out) - at, "%s pid %s without -c%s%s",
						       shown ? ";" : "", e->d_name, cwd[0] ? ", started in " : "",
						       cwd);
		}
		shown++;
	}
	closedir(d);
	if (!shown)
		return out;
	/* the sentence around the list: a fresh buffer, as out holds the list */
	static char said[1200];
	snprintf(said, sizeof(said), " (wdriftd runs as%s: give its config with -c FILE or WDRIFT_CONFIG)",
		 out);
	return said;
}
