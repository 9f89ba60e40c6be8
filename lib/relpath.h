/*
 * relpath.h: a relative path as said after a directory. "./run/x.sock"
 * and "././var" are written DIR/run/x.sock and DIR/var, never DIR/./var
 * (a trial's), in the daemon's log, the publisher's warnings, the CLI's
 * hints and the paths a config resolves. Internal; libc only.
 */
#ifndef WD_RELPATH_H
#define WD_RELPATH_H

/* path without its leading "./" pieces (".//./" too); "" for "./" alone. */
static inline const char *wd_path_rest(const char *path)
{
	while (path[0] == '.' && path[1] == '/')
		for (path += 2; *path == '/'; path++)
			;
	return path;
}

#endif
