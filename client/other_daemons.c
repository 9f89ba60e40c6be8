/* other_daemons.c: the wdriftd processes running with another config (other_daemons.h). */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "other_daemons.h"

#define SHOWN_MAX 4	/* daemons named in one hint */

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

/*
 * One wdriftd's part of the list, into out at *at: "pid 123 with -c FILE",
 * FILE absolute where its working directory is readable. 0, or 1 when it
 * runs with config_path (mine, resolved): not another.
 */
static int describe(const char *pid, const char *mine, char *out, size_t len, size_t *at, int first)
{
	char argv[4096], cwd[PATH_MAX], full[2 * PATH_MAX], real[PATH_MAX];
	ssize_t n = proc_read(pid, "cmdline", argv, sizeof(argv)), c;
	const char *cfg;

	if (n <= 0)
		return 1;	/* gone since */
	snprintf(full, sizeof(full), "/proc/%s/cwd", pid);
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
		return 1;	/* the daemon of this config: not another */
	if (*at >= len)
		return 0;
	if (cfg)
		*at += (size_t)snprintf(out + *at, len - *at, "%s pid %s with -c %s%s", first ? "" : ";", pid,
					full, full[0] == '/' ? "" : " (relative to its directory)");
	else
		*at += (size_t)snprintf(out + *at, len - *at, "%s pid %s without -c%s%s", first ? "" : ";", pid,
					cwd[0] ? ", started in " : "", cwd);
	return 0;
}

const char *dc_other_daemons(const char *config_path)
{
	static char said[1400];
	char mine[PATH_MAX] = "", comm[32], list[1024] = "";
	size_t at = 0, shown = 0, more = 0;
	struct stat st;
	struct dirent *e;

	said[0] = 0;
	if (config_path && config_path[0] && !realpath(config_path, mine))
		snprintf(mine, sizeof(mine), "%s", config_path);
	/* this user's daemons first: on a shared machine, the one sought is most likely among them */
	for (int own = 1; own >= 0; own--) {
		DIR *d = opendir("/proc");
		if (!d)
			return said;
		while ((e = readdir(d))) {
			char path[sizeof("/proc/") + NAME_MAX];
			if (!isdigit((unsigned char)e->d_name[0]) ||
			    proc_read(e->d_name, "comm", comm, sizeof(comm)) < 0 || strcmp(comm, "wdriftd\n"))
				continue;
			snprintf(path, sizeof(path), "/proc/%s", e->d_name);
			if (stat(path, &st) < 0 || (st.st_uid == getuid()) != own)
				continue;
			if (shown >= SHOWN_MAX)
				more++;
			else if (!describe(e->d_name, mine, list, sizeof(list), &at, !shown))
				shown++;
		}
		closedir(d);
	}
	if (shown)	/* "more" may count the daemon of this config: "at most" */
		snprintf(said, sizeof(said), " (wdriftd runs as%s%s: give its config with -c FILE or "
			 "WDRIFT_CONFIG)", list, more ? "; and others (ps -C wdriftd -o pid,args)" : "");
	return said;
}
