/*
 * relpath.h: a relative path as said after a directory. "./run/x.sock"
 * and "././var" are written DIR/run/x.sock and DIR/var, never DIR/./var
 * (a trial's), in the daemon's log, the publisher's warnings, the CLI's
 * hints and the paths a config resolves. Internal; libc only.
 */
#ifndef WD_RELPATH_H
#define WD_RELPATH_H

#include <limits.h>
#include <stdio.h>
#include <unistd.h>

/* path without its leading "./" pieces (".//./" too); "" for "./" alone. */
static inline const char *wd_path_rest(const char *path)
{
	while (path[0] == '.' && path[1] == '/')
		for (path += 2; *path == '/'; path++)
			;
	return path;
}

/*
 * path as a whole path into buf: a relative one after this process's
 * working directory ("./run/x.sock": /cwd/run/x.sock), as the publisher's
 * warnings say it. Returns 1 when path was relative and made whole, 0 when
 * it is copied as it is (absolute, abstract '@', or no working directory).
 */
static inline int wd_path_whole(const char *path, char *buf, size_t len)
{
	char cwd[PATH_MAX];

	path = wd_path_rest(path);
	if (path[0] == '/' || path[0] == '@' || !getcwd(cwd, sizeof(cwd))) {
		snprintf(buf, len, "%s", path);
		return 0;
	}
	snprintf(buf, len, "%s/%s", cwd, path);
	return 1;
}

#endif
