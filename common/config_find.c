/* config_find.c: which config file, and relative ipc:// paths (see config_find.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "arena.h"
#include "config_find.h"
#include "error.h"
#include "near_name.h"
#include "relpath.h"
#include "yaml_doc.h"

#define SYSTEM_CONFIG "/etc/wdrift/wdrift.yaml"
#define TREE_CONFIG "config/wdrift.yaml"
#define NEAR_MISS "wdrift.yaml"	/* in the working directory: named when nothing is found */
/* zmq refuses an ipc path longer than a unix socket address holds */
#define IPC_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* PREFIX/etc/wdrift/wdrift.yaml for the running program, or "" when unknown. */
static void prefix_config(char *buf, size_t size)
{
	char exe[WD_CONFIG_PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	buf[0] = 0;
	if (n <= 0 || (size_t)n >= sizeof(exe) - 1)
		return;
	exe[n] = 0;
	/* /usr/local/bin/wdrift: cut "/wdrift", then "/bin" */
	for (int i = 0; i < 2; i++) {
		if (!(slash = strrchr(exe, '/')))
			return;
		*slash = 0;
	}
	if ((size_t)snprintf(buf, size, "%s/etc/wdrift/wdrift.yaml", exe) >= size)
		buf[0] = 0;
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static int take(struct wd_config_found *f, const char *path, const char *origin)
{
	snprintf(f->path, sizeof(f->path), "%s", path);
	f->origin = origin;
	return 0;
}

int wd_config_find(const char *given, struct wd_config_found *f, char *err, size_t errlen)
{
	const char *env = getenv("WDRIFT_CONFIG");
	char prefix[WD_CONFIG_PATH_MAX];

	if (given)
		return take(f, given, "-c");
	if (env && *env) {
		if (!exists(env)) {
			int e = errno;
			char near[WD_CONFIG_PATH_MAX + 32] = "";
			if (e == ENOENT)	/* a typo of the file beside it */
				wd_suggest_file(env, near, sizeof(near));
			return wd_error(err, errlen, "WDRIFT_CONFIG names '%s', which does not exist: %s%s",
					env, strerror(e), near);
		}
		return take(f, env, "WDRIFT_CONFIG");
	}
	if (exists(TREE_CONFIG))
		return take(f, TREE_CONFIG, "./config");
	prefix_config(prefix, sizeof(prefix));
	if (*prefix && strcmp(prefix, SYSTEM_CONFIG) && exists(prefix))
		return take(f, prefix, "the install prefix");
	if (exists(SYSTEM_CONFIG))
		return take(f, SYSTEM_CONFIG, "/etc");
	wd_error(err, errlen, "no configuration: none of ./" TREE_CONFIG ", %s%s" SYSTEM_CONFIG
		 " exists%s; give -c FILE or set WDRIFT_CONFIG", prefix, *prefix ? ", " : "",
		 wd_config_near_miss(NULL));
	return 1;
}

const char *wd_config_near_miss(const char *origin)
{
	/* -c and WDRIFT_CONFIG name their file: the user chose it */
	if (origin && (!strcmp(origin, "-c") || !strcmp(origin, "WDRIFT_CONFIG")))
		return "";
	/* a config beside the user, as the README's first steps make one, is not searched for */
	return exists(NEAR_MISS) ? " (./" NEAR_MISS " is here, but is not searched for: -c " NEAR_MISS
				   " reads it)" : "";
}

/*
 * The directory of path, absolute and without symlinks, into dir ("" for
 * the root): 1; 0 for a config that is not a regular file (a pipe: its
 * directory means nothing); -1 with err.
 */
static int config_dir(const char *path, char *dir, size_t size, char *err, size_t errlen)
{
	char copy[WD_CONFIG_PATH_MAX], real[PATH_MAX];
	struct stat st;
	char *slash;

	dir[0] = 0;
	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	snprintf(copy, sizeof(copy), "%s", path);
	slash = strrchr(copy, '/');
	if (slash == copy)
		copy[1] = 0;	/* /wdrift.yaml: the root */
	else if (slash)
		*slash = 0;
	else
		snprintf(copy, sizeof(copy), ".");
	if (!realpath(copy, real))
		return wd_error(err, errlen, "%s: cannot resolve its directory: %s", path, strerror(errno));
	snprintf(dir, size, "%s", strcmp(real, "/") ? real : "");
	return 1;
}

/*
 * ep as a process in any directory must read it: a relative ipc:// path
 * against dir (the config's), ./ prefixes dropped; any other endpoint as
 * it is. Into out; 0, or -1 when it would not fit a unix socket address.
 */
static int absolute_ipc(const char *dir, const char *ep, char *out, size_t size)
{
	const char *rest = ep + 6;

	if (strncmp(ep, "ipc://", 6) || ep[6] == '/') {
		snprintf(out, size, "%s", ep);
		return 0;
	}
	rest = wd_path_rest(rest);	/* ./run/x.sock: run/x.sock */
	snprintf(out, size, "ipc://%s/%s", dir, rest);
	return strlen(out) - 6 > IPC_MAX ? -1 : 0;
}

int wd_config_load_file(const char *path, struct wd_config *out, char *err, size_t errlen)
{
	static const char *const names[3] = { "listen.ingest", "listen.control", "listen.events" };
	struct wd_config c;
	char dir[PATH_MAX], abs[2 * PATH_MAX];
	int regular;

	if (wd_config_load(path, &c, err, errlen) < 0)
		return -1;
	if ((regular = config_dir(path, dir, sizeof(dir), err, errlen)) < 0)
		goto fail;
	const char **eps[3] = { &c.listen.ingest, &c.listen.control, &c.listen.events };
	for (int i = 0; i < 3 && regular; i++) {
		const char *ep = *eps[i];

		if (absolute_ipc(dir, ep, abs, sizeof(abs)) < 0) {
			wd_error(err, errlen, "%s: %s: '%s' is '%s' against the config's directory: %zu "
				 "bytes, more than the %zu a unix socket address holds; write a shorter "
				 "or absolute path", path, names[i], ep, abs, strlen(abs) - 6, IPC_MAX);
			goto fail;
		}
		if (strcmp(abs, ep) && !(*eps[i] = wd_arena_strndup(&c.arena, abs, strlen(abs)))) {
			wd_error(err, errlen, "%s: out of memory", path);
			goto fail;
		}
	}
	/*
	 * A relative auth.server_key is the config's neighbour, as an ipc://
	 * path is: a trial's '../srv.key' worked from one directory and not
	 * from another (under systemd, the working directory is not the
	 * config's).
	 */
	const char *key = c.auth.server_key;
	if (regular && key && key[0] != '/') {
		key = wd_path_rest(key);
		snprintf(abs, sizeof(abs), "%s/%s", dir, key);
		if (!(c.auth.server_key = wd_arena_strndup(&c.arena, abs, strlen(abs)))) {
			wd_error(err, errlen, "%s: out of memory", path);
			goto fail;
		}
	}
	*out = c;
	return 0;
fail:
	wd_config_release(&c);
	return -1;
}

/* The scalar at key under map, or NULL. */
static const struct ynode *map_get(const struct ynode *map, const char *key)
{
	if (!map || map->kind != Y_MAP)
		return NULL;
	for (const struct ynode *k = map->child; k && k->next; k = k->next->next)
		if (k->kind == Y_SCALAR && !strcmp(k->text, key))
			return k->next;
	return NULL;
}

/*
 * listen.control read off the lines of a file that is not YAML (a syntax
 * error elsewhere: a trial's `systemctl reload` of such a file left the
 * CLI with no endpoint to ask): the value of the first "control:" line
 * indented under a "listen:" line at the left margin, quotes and a
 * trailing comment taken off, into out. 1 when found, 0 when there is
 * none (the default then), -1 when its value is empty or too long.
 */
static int scan_control(const char *text, char *out, size_t size)
{
	int in_listen = 0;

	for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		size_t n = strcspn(line, "\n");
		if (n && line[0] != ' ' && line[0] != '\t' && line[0] != '#') {	/* a top-level key */
			in_listen = !strncmp(line, "listen:", 7);
			continue;
		}
		const char *k = line + strspn(line, " \t");
		if (!in_listen || (size_t)(k - line) >= n || strncmp(k, "control:", 8))
			continue;
		const char *v = k + 8, *end = line + n;
		v += strspn(v, " \t");
		const char *hash = memchr(v, '#', (size_t)(end - v));
		if (hash)
			end = hash;
		while (end > v && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
			end--;
		if (end - v >= 2 && (*v == '"' || *v == '\'') && end[-1] == *v) {
			v++;
			end--;
		}
		if (end == v || (size_t)(end - v) >= size)
			return -1;
		memcpy(out, v, (size_t)(end - v));
		out[end - v] = 0;
		return 1;
	}
	return 0;
}

int wd_config_peek_control(const char *path, char *ep, size_t size)
{
	struct wd_arena *nodes = NULL;
	struct ynode *root = NULL;
	struct wd_config d;
	char dir[PATH_MAX], err[256], *text = NULL;
	size_t len = 0;
	FILE *f;
	int r = -1;

	/* a regular file only: fopen of a FIFO with no writer would wait for ever */
	if (config_dir(path, dir, sizeof(dir), err, sizeof(err)) <= 0 || !(f = fopen(path, "rb")))
		return -1;
	text = malloc(1 << 20);
	if (text)
		len = fread(text, 1, (1 << 20) - 1, f);
	fclose(f);
	if (text && ydoc_parse(path, text, len, &nodes, &root, err, sizeof(err)) == 0) {
		const struct ynode *v = map_get(map_get(root, "listen"), "control");
		wd_config_defaults(&d);
		r = absolute_ipc(dir, v && v->kind == Y_SCALAR ? v->text : d.listen.control, ep, size);
	} else if (text) {
		char control[1024];
		text[len] = 0;
		int found = scan_control(text, control, sizeof(control));
		wd_config_defaults(&d);
		if (found >= 0)
			r = absolute_ipc(dir, found ? control : d.listen.control, ep, size);
	}
	if (nodes)
		wd_arena_free(nodes);
	free(text);
	return r;
}
