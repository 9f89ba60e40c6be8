/* near_name.c: "did you mean" for names and socket files (see near_name.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "near_name.h"

size_t wd_name_distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[3][65], *pp = d[0], *p = d[1], *c = d[2];

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		p[j] = j;
	for (size_t i = 1; i <= la; i++) {
		c[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t v = p[j - 1] + (a[i - 1] != b[j - 1]);
			if (p[j] + 1 < v) v = p[j] + 1;
			if (c[j - 1] + 1 < v) v = c[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			c[j] = v;
		}
		size_t *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[lb];
}

size_t wd_name_near(const char *typed, const char *cand, size_t len)
{
	size_t d = wd_name_distance(typed, strlen(typed), cand, len);
	size_t limit = len <= 4 ? 1 : len <= 10 ? 2 : 3;

	return d && d <= limit ? d : SIZE_MAX;
}

#define NEAR_SCAN_MAX 4096	/* directory entries read for a did-you-mean, at most */

/*
 * The entry of type fmt (S_IFSOCK, S_IFREG, S_IFDIR) in dir that name is a
 * typo of, into out: the nearest (wd_name_near), ties to the first in byte
 * order. With inside, a directory counts only when it holds a socket file
 * of that name. 0, or -1 when there is none (or no such directory). A
 * socket of a far name is never offered, even alone: beside a daemon whose
 * ingest is tcp://, the only .sock may be its control socket, which a
 * publisher must not be sent to.
 */
static int near_entry(const char *dir, const char *name, mode_t fmt, const char *inside, char *out,
		      size_t len)
{
	unsigned char dt = fmt == S_IFSOCK ? DT_SOCK : fmt == S_IFDIR ? DT_DIR : DT_REG;
	DIR *d = opendir(dir);
	struct dirent *e = NULL;
	size_t bestd = SIZE_MAX, seen = 0;

	if (!d)
		return -1;
	out[0] = 0;
	while (seen < NEAR_SCAN_MAX && (e = readdir(d))) {
		struct stat st;
		char in[NAME_MAX * 2 + 2];
		seen++;
		if (e->d_name[0] == '.' || !strcmp(e->d_name, name))
			continue;
		if (e->d_type != dt &&	/* a link, or a file system that does not say: stat */
		    (!(e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) ||
		     fstatat(dirfd(d), e->d_name, &st, 0) < 0 || (st.st_mode & S_IFMT) != fmt))
			continue;
		size_t dist = wd_name_near(name, e->d_name, strlen(e->d_name));
		if (dist == SIZE_MAX || dist > bestd || (dist == bestd && strcmp(e->d_name, out) >= 0))
			continue;
		if (inside && ((size_t)snprintf(in, sizeof(in), "%s/%s", e->d_name, inside) >= sizeof(in) ||
			       fstatat(dirfd(d), in, &st, 0) < 0 || !S_ISSOCK(st.st_mode)))
			continue;
		bestd = dist;
		snprintf(out, len, "%s", e->d_name);
	}
	closedir(d);
	return out[0] ? 0 : -1;
}

/*
 * The socket's directory is not there: "; did you mean" the same socket
 * name in a directory beside it that the missing one's name is a typo of
 * (ipc:///tmp/job/rn/ingest.sock for .../run/ingest.sock). One typo, in
 * the last directory's name; the endpoint's spelling kept around it.
 */
static void suggest_socket_dir(const char *endpoint, const char *dir, const char *name, char *out,
			       size_t len)
{
	char parent[PATH_MAX], near[NAME_MAX + 1];
	const char *slash = strrchr(dir, '/');
	const char *typed = strrchr(endpoint + 6, '/');	/* the endpoint's last slash: before name */
	const char *tdir = typed;

	if (!slash || !slash[1] || !typed)
		return;
	while (tdir > endpoint + 6 && tdir[-1] != '/')
		tdir--;	/* the typed directory's name starts here */
	size_t tl = (size_t)(typed - tdir);
	/* "." and "..": the directory is not the typo; a name spelled otherwise than dir's: not ours */
	if (!strcmp(slash + 1, ".") || !strcmp(slash + 1, "..") || tl != strlen(slash + 1) ||
	    strncmp(tdir, slash + 1, tl))
		return;
	snprintf(parent, sizeof(parent), "%.*s", slash == dir ? 1 : (int)(slash - dir), dir);
	if (near_entry(parent, slash + 1, S_IFDIR, name, near, sizeof(near)) < 0)
		return;
	if ((size_t)snprintf(out, len, "; did you mean '%.*s%s/%s'?", (int)(tdir - endpoint), endpoint, near,
			     name) >= len)
		out[0] = 0;
}

static int is_socket(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/*
 * The socket the typed name stops short of: NAME.sock beside it (".sock"
 * left out), or DIR/SUB/NAME, one directory below (run/ left out): a
 * trial's two near misses, far in letters from any name there. The one
 * subdirectory holding it, else none. 0 with out filled, or -1.
 */
static int suggest_socket_short(const char *endpoint, const char *dir, const char *name, char *out,
				size_t len)
{
	char path[PATH_MAX + NAME_MAX + 8], found[NAME_MAX + 1] = "";
	const char *typed = strrchr(endpoint + 6, '/');
	int keep = typed ? (int)(typed + 1 - endpoint) : 6, n = 0;
	size_t seen = 0;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s.sock", dir, name) < sizeof(path) && is_socket(path))
		return (size_t)snprintf(out, len, "; did you mean '%s.sock'?", endpoint) < len ? 0 : -1;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && seen++ < NEAR_SCAN_MAX && (e = readdir(d)))
		if (e->d_name[0] != '.' && (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) &&
		    (size_t)snprintf(path, sizeof(path), "%s/%s/%s", dir, e->d_name, name) < sizeof(path) &&
		    is_socket(path) && !n++)
			snprintf(found, sizeof(found), "%s", e->d_name);
	if (d)
		closedir(d);
	if (n != 1)	/* none, or several: which is not this process's to guess */
		return -1;
	return (size_t)snprintf(out, len, "; did you mean '%.*s%s/%s'?", keep, endpoint, found, name) < len ? 0 : -1;
}

void wd_suggest_socket(const char *endpoint, const char *full, char *out, size_t len)
{
	char dir[PATH_MAX], near[NAME_MAX + 1];
	const char *slash = strrchr(full, '/');
	const char *typed = strrchr(endpoint + 6, '/');	/* after "ipc://" */

	out[0] = 0;
	if (!slash || !slash[1] || (size_t)(slash - full) >= sizeof(dir))
		return;
	snprintf(dir, sizeof(dir), "%.*s", slash == full ? 1 : (int)(slash - full), full);
	if (near_entry(dir, slash + 1, S_IFSOCK, NULL, near, sizeof(near)) < 0) {
		struct stat st;
		if (stat(dir, &st) < 0 && errno == ENOENT)
			suggest_socket_dir(endpoint, dir, slash + 1, out, len);
		else if (suggest_socket_short(endpoint, dir, slash + 1, out, len) < 0)
			out[0] = 0;
		return;
	}
	int keep = typed ? (int)(typed + 1 - endpoint) : 6;
	if ((size_t)snprintf(out, len, "; did you mean '%.*s%s'?", keep, endpoint, near) >= len)
		out[0] = 0;	/* none rather than a name cut short */
}

/* The flag of a listening socket in /proc/net/unix's Flags column (__SO_ACCEPTCON). */
#define UNIX_LISTENING 0x10000UL

/* Bytes of the directories that a and b share from their start. */
static size_t common_dirs(const char *a, const char *b)
{
	size_t k = 0, at = 0;

	for (; a[k] && a[k] == b[k]; k++)
		if (a[k] == '/')
			at = k + 1;
	return at;
}

void wd_suggest_listening(const char *rel, const char *full, char *out, size_t len)
{
	char line[PATH_MAX + 128], found[2][PATH_MAX] = { "", "" };
	/* the best first: this user's socket file, then the most directories shared with full */
	size_t score[2] = { 0, 0 }, seen = 0, more = 0;
	FILE *f;

	out[0] = 0;
	/* ../run/x.sock never ends a bound path (the daemon binds it resolved): run/x.sock may */
	while (rel[0] == '.' && rel[1] == '.' && rel[2] == '/')
		for (rel += 3; *rel == '/'; rel++)
			;
	/*
	 * An absolute path: a socket of its name elsewhere, this user's and
	 * near it, asked, not told (its directory may be its daemon's, not
	 * started yet): a trial's typo'd directory, an existing one, got no
	 * pointer.
	 */
	int absolute = rel[0] == '/';
	if (absolute)
		rel = strrchr(rel, '/') + 1;
	size_t rl = strlen(rel);
	if (!rl || !(f = fopen("/proc/net/unix", "re")))
		return;
	/* Num RefCount Protocol Flags Type St Inode Path: a path only for bound sockets */
	while (seen++ < 65536 && fgets(line, sizeof(line), f)) {
		unsigned long flags;
		int at = 0;
		struct stat st;
		line[strcspn(line, "\n")] = 0;
		if (sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %n", &flags, &at) != 1 || !at ||
		    !(flags & UNIX_LISTENING) || line[at] != '/')
			continue;
		const char *path = line + at;
		size_t pl = strlen(path);
		/* ends with "/" rel, is not the path this process looked at, and is there for it */
		if (pl <= rl || path[pl - rl - 1] != '/' || strcmp(path + pl - rl, rel) || !strcmp(path, full) ||
		    !strcmp(found[0], path) || !strcmp(found[1], path))
			continue;
		/*
		 * Its file as this process sees it: the kernel lists a listener
		 * whose file was removed, and those of other mount namespaces.
		 * Where every job says ./run/ingest.sock, the one meant is this
		 * user's, and likely the nearest: another's daemon would take
		 * the snapshots (a trial was shown two test daemons, not its own).
		 */
		if (stat(path, &st) < 0 || !S_ISSOCK(st.st_mode))
			continue;
		/*
		 * Of a last name alone (every wdriftd's is ingest.sock): this
		 * user's, sharing a directory below / with full, or none (a
		 * review's: another user's daemon was as likely named).
		 */
		if (absolute && (st.st_uid != getuid() || common_dirs(path, full) <= 1))
			continue;
		size_t sc = (st.st_uid == getuid() ? (size_t)PATH_MAX : 0) + common_dirs(path, full) + 1;
		if (score[1])
			more++;	/* one of the three is left out */
		if (sc > score[0]) {
			memcpy(found[1], found[0], sizeof(found[0]));
			score[1] = score[0];
			snprintf(found[0], sizeof(found[0]), "%s", path);
			score[0] = sc;
		} else if (sc > score[1]) {
			snprintf(found[1], sizeof(found[1]), "%s", path);
			score[1] = sc;
		}
	}
	fclose(f);
	for (int n = score[1] ? 2 : score[0] ? 1 : 0; n; n--) {	/* both when they fit, else the first */
		char others[48] = "";
		size_t left = more + (n == 1 && score[1]);
		if (left)
			snprintf(others, sizeof(others), " (and %zu other%s)", left, left == 1 ? "" : "s");
		if ((size_t)snprintf(out, len, "; %s at 'ipc://%s'%s%s%s%s", absolute ? "its daemon not up yet, or "
				     "a wrong directory? a socket of that name listens" : "started in another directory? a "
				     "socket listens", found[0],
				     n > 1 ? ", another at 'ipc://" : "", n > 1 ? found[1] : "", n > 1 ? "'" : "",
				     others) < len)
			return;
	}
	out[0] = 0;	/* none rather than a path cut short */
}

void wd_suggest_file(const char *path, char *out, size_t len)
{
	char dir[PATH_MAX], near[NAME_MAX + 1];
	const char *slash = strrchr(path, '/');
	int keep = slash ? (int)(slash + 1 - path) : 0;

	out[0] = 0;
	if ((slash && !slash[1]) || (size_t)keep >= sizeof(dir))
		return;
	snprintf(dir, sizeof(dir), "%.*s", !slash ? 1 : slash == path ? 1 : (int)(slash - path),
		 !slash ? "." : path);
	if (near_entry(dir, path + keep, S_IFREG, NULL, near, sizeof(near)) < 0)
		return;
	if ((size_t)snprintf(out, len, "; did you mean '%.*s%s'?", keep, path, near) >= len)
		out[0] = 0;
}

void wd_suggest_in_dir(const char *endpoint, const char *dir, const char *want, char *out, size_t len)
{
	char names[3][NAME_MAX + 1], path[PATH_MAX + NAME_MAX + 2], wanted[NAME_MAX + 1] = "";
	size_t n = 0, seen = 0, more = 0, at;
	int el = (int)strlen(endpoint), has_want = 0;
	DIR *d = opendir(dir);
	struct dirent *e;

	out[0] = 0;
	while (el > 7 && endpoint[el - 1] == '/')	/* ipc:///srv/wd/run/: joined without a '//' */
		el--;
	while (d && seen++ < NEAR_SCAN_MAX && (e = readdir(d))) {
		if (e->d_name[0] == '.' || (e->d_type != DT_SOCK && e->d_type != DT_UNKNOWN && e->d_type != DT_LNK) ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path) || !is_socket(path))
			continue;
		if (want && !has_want && strlen(want) + 5 < sizeof(wanted)) {
			snprintf(wanted, sizeof(wanted), "%s.sock", want);
			has_want = !strcmp(e->d_name, wanted);
		}
		/* the first 3 by name, kept in order as they come (readdir's order is the filesystem's) */
		size_t k = n;
		while (k > 0 && strcmp(e->d_name, names[k - 1]) < 0)
			k--;
		if (k == 3) {
			more++;
			continue;
		}
		more += n == 3;
		memmove(names[k + 1], names[k], (n - k - (n == 3)) * sizeof(names[0]));
		snprintf(names[k], sizeof(names[0]), "%s", e->d_name);
		n += n < 3;
	}
	if (d)
		closedir(d);
	if (!n)
		return;
	if (has_want) {		/* the one the caller connects to */
		n = 1;
		more = 0;
		snprintf(names[0], sizeof(names[0]), "%s", wanted);
	}
	if (has_want)
		at = (size_t)snprintf(out, len, "; it holds a socket named for %s: did you mean", want);
	else
		at = (size_t)snprintf(out, len, "; it holds %s: did you mean", n + more == 1 ? "a socket" : "sockets");
	for (size_t i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(out + at, len - at, "%s'%.*s/%s'", !i ? " " : i + 1 < n ? ", " : " or ", el,
				       endpoint, names[i]);
	if (at < len && more)
		at += (size_t)snprintf(out + at, len - at, " (and %zu other%s)", more, more == 1 ? "" : "s");
	if (at < len)
		at += (size_t)snprintf(out + at, len - at, "?");
	if (at >= len)
		out[0] = 0;	/* none rather than a name cut short */
}

int wd_socket_dir_there(const char *full)
{
	char dir[PATH_MAX + 512];
	const char *slash = strrchr(full, '/');
	struct stat st;

	if (!slash || slash == full)
		return 0;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - full), full);
	return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}
