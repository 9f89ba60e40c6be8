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

#include "daemon_client.h"
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
 * -c FILE, -cFILE, --config FILE, --config=FILE, and getopt's unambiguous
 * abbreviations of --config (--con, --conf, ...); NULL without one.
 */
static const char *config_arg(const char *argv, ssize_t n)
{
	const char *end = argv + n, *a = argv + strlen(argv) + 1;	/* past argv[0] */

	for (; a < end; a += strlen(a) + 1) {
		const char *next = a + strlen(a) + 1, *eq = strchr(a, '=');
		size_t name = eq ? (size_t)(eq - a) : strlen(a);
		if (!strcmp(a, "--"))
			return NULL;
		if (name >= 5 && name <= 8 && !strncmp(a, "--config", name))	/* "--c" is ambiguous */
			return eq ? eq + 1 : next < end ? next : NULL;
		if (!strcmp(a, "-c"))
			return next < end ? next : NULL;
		if (!strncmp(a, "-c", 2))
			return a + 2;
	}
	return NULL;
}

/*
 * The file a wdriftd given no -c reads, by the search it ran
 * (config_find.h) in its environment and directory, as far as /proc shows
 * them (another user's are not readable): into out, or "" when unknown.
 */
static void searched_config(const char *pid, const char *cwd, char *out, size_t len)
{
	char env[16384], exe[PATH_MAX], path[PATH_MAX + 64];
	ssize_t n = proc_read(pid, "environ", env, sizeof(env)), k;

	out[0] = 0;
	for (const char *v = env; n > 0 && v < env + n; v += strlen(v) + 1)
		if (!strncmp(v, "WDRIFT_CONFIG=", 14) && v[14]) {
			if (v[14] == '/' || !cwd[0])
				snprintf(out, len, "%s", v + 14);
			else
				snprintf(out, len, "%s/%s", cwd, v + 14);
			return;
		}
	snprintf(path, sizeof(path), "%s/config/wdrift.yaml", cwd);
	if (cwd[0] && access(path, F_OK) == 0) {
		snprintf(out, len, "%s", path);
		return;
	}
	snprintf(path, sizeof(path), "/proc/%s/exe", pid);	/* PREFIX/bin/wdriftd */
	if ((k = readlink(path, exe, sizeof(exe) - 1)) > 0) {
		exe[k] = 0;
		for (int cut = 0; cut < 2; cut++) {
			char *slash = strrchr(exe, '/');
			if (slash)
				*slash = 0;
		}
		snprintf(path, sizeof(path), "%s/etc/wdrift/wdrift.yaml", exe);
		if (access(path, F_OK) == 0) {
			snprintf(out, len, "%s", path);
			return;
		}
	}
	if (access("/etc/wdrift/wdrift.yaml", F_OK) == 0)
		snprintf(out, len, "/etc/wdrift/wdrift.yaml");
}

/*
 * The control endpoint a wdriftd on the built-in config, started in cwd,
 * answers at: config/wdrift.yaml's listen.control, a relative path made
 * whole from cwd (the daemon binds it so, and its warning says the same).
 */
static void builtin_control(const char *cwd, char *out, size_t len)
{
	struct wd_config c;
	char err[512];

	out[0] = 0;
	if (wd_config_load_string("(built-in)", wd_config_default_yaml, &c, err, sizeof(err)) < 0)
		return;
	const char *ep = c.listen.control;
	if (!strncmp(ep, "ipc://", 6) && ep[6] != '/' && ep[6] != '@')
		snprintf(out, len, "ipc://%s/%s", cwd, ep[6] == '.' && ep[7] == '/' ? ep + 8 : ep + 6);
	else
		snprintf(out, len, "%s", ep);
	wd_config_release(&c);
}

/*
 * One wdriftd's part of the list, into out at *at: "pid 123 with -c FILE",
 * FILE absolute where its working directory is readable. 0; 1 when it is
 * gone; 2 when there was no room for it, or name_it is 0; 3 when it runs
 * with config_path (mine, resolved): not another, but the daemon that did
 * not answer (a review's: told to start it, the user would have started a
 * second one).
 */
static int describe(const char *pid, const char *mine, char *out, size_t len, size_t *at, size_t *builtin,
		    int first, int name_it)
{
	char argv[4096], cwd[PATH_MAX], full[2 * PATH_MAX], real[PATH_MAX], one[3 * PATH_MAX];
	ssize_t n = proc_read(pid, "cmdline", argv, sizeof(argv)), c;
	const char *cfg;
	int is_builtin = 0;

	if (n <= 0)
		return 1;	/* gone since */
	snprintf(full, sizeof(full), "/proc/%s/cwd", pid);
	c = readlink(full, cwd, sizeof(cwd) - 1);	/* another user's: not readable */
	cwd[c > 0 ? c : 0] = 0;
	cfg = config_arg(argv, n);
	if (cfg && cfg[0] != '/' && cwd[0])
		snprintf(full, sizeof(full), "%s/%s", cwd, cfg);
	else if (cfg)
		snprintf(full, sizeof(full), "%s", cfg);
	else
		searched_config(pid, cwd, full, sizeof(full));
	if (full[0] && realpath(full, real))
		snprintf(full, sizeof(full), "%s", real);
	if (full[0] && !strcmp(full, mine))
		return 3;	/* the daemon of this config: not another */
	if (!name_it)
		return 2;
	if (cfg)
		snprintf(one, sizeof(one), "%s pid %s with -c %s%s", first ? "" : ";", pid, full,
			 full[0] == '/' ? "" : " (relative to its directory)");
	else if (full[0])
		snprintf(one, sizeof(one), "%s pid %s with %s (found by its search)", first ? "" : ";", pid,
			 full);
	else if (cwd[0]) {
		/* no file: what reaches it is its endpoint, not a config (a trial was told to give one) */
		char ep[PATH_MAX + 64];
		builtin_control(cwd, ep, sizeof(ep));
		snprintf(one, sizeof(one), "%s pid %s on the built-in config (no file found), started in %s: "
			 "--endpoint %s reaches it", first ? "" : ";", pid, cwd, ep);
		is_builtin = 1;
	} else
		snprintf(one, sizeof(one), "%s pid %s without -c", first ? "" : ";", pid);
	if (*at + strlen(one) >= len)
		return 2;	/* whole entries only */
	*at += (size_t)snprintf(out + *at, len - *at, "%s", one);
	*builtin += (size_t)is_builtin;
	return 0;
}

const char *dc_other_daemons(const char *config_path, int chosen)
{
	static char said[2 * PATH_MAX + 1400];
	char mine[PATH_MAX] = "", comm[32], list[1024] = "", mine_pid[NAME_MAX + 1] = "", start[PATH_MAX + 64] = "";
	size_t at = 0, shown = 0, more = 0, builtin = 0;
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
			/* all are looked at: the daemon of this config may come after the ones named */
			int r = describe(e->d_name, mine, list, sizeof(list), &at, &builtin, !shown,
					 shown < SHOWN_MAX);
			shown += r == 0;
			more += r == 2;
			if (r == 3 && !mine_pid[0])
				snprintf(mine_pid, sizeof(mine_pid), "%s", e->d_name);
		}
		closedir(d);
	}
	const char *others = more ? "; and others (ps -C wdriftd -o pid,args)" : "";
	size_t sat = 0;
	if (mine_pid[0])	/* it runs: busy, stopping, or its socket removed; a second one would not start */
		snprintf(said, sizeof(said), " (this config's wdriftd runs, as pid %s, but did not answer)",
			 mine_pid);
	else if (shown && chosen && mine[0] && dc_shell_arg(start, sizeof(start), &sat, "-c", mine) == 0) {
		/* both ways: this config's own daemon, or the one running, which an ops trial meant */
		int many = shown + more > 1;
		char ask[96] = "";	/* an entry on the built-in config says its own --endpoint */
		if (builtin < shown)
			snprintf(ask, sizeof(ask), ": give %s config with -c%s to ask %s", many ? "the" : "its",
				 builtin ? ", or the --endpoint named," : "", many ? "the one meant" : "that one");
		snprintf(said, sizeof(said), " (wdriftd%s starts this config's daemon; %s wdriftd %s as%s%s%s)",
			 start, many ? "other" : "another", many ? "run" : "runs", list, others, ask);
	} else if (shown)	/* one on the built-in config has no file to give: its entry says its endpoint */
		snprintf(said, sizeof(said), " (wdriftd runs as%s%s%s)", list, others,
			 !builtin ? ": give its config with -c FILE or WDRIFT_CONFIG"
			 : builtin < shown ? ": give its config with -c FILE or WDRIFT_CONFIG, or the --endpoint named" : "");
	return said;
}
