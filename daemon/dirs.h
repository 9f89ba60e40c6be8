/*
 * dirs.h: creating directories, as `mkdir -p` does (mode 0750). One copy
 * for the daemon: the spool's run directories and the parents of ipc://
 * socket paths. Depends on libc.
 */
#ifndef WD_DIRS_H
#define WD_DIRS_H

/*
 * Creates every directory of path, the last one too unless parents_only:
 * how many it created (0: all were there), or -errno of the first mkdir(2)
 * that failed for another reason than EEXIST (-ENAMETOOLONG for a path of
 * PATH_MAX bytes or more).
 */
int dirs_make(const char *path, int parents_only);

#endif
