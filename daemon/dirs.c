/*
 * dirs.c: `mkdir -p` (dirs.h).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

#include "dirs.h"

/* 1 made, 0 there already, or -errno */
static int make_one(const char *path)
{
	if (mkdir(path, 0750) == 0)
		return 1;
	return errno == EEXIST ? 0 : -errno;
}

int dirs_make(const char *path, int parents_only)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);
	int r, made = 0;

	if (len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if ((r = make_one(tmp)) < 0)
				return r;
			made += r;
			*p = '/';
		}
	if (!parents_only) {
		if ((r = make_one(tmp)) < 0)
			return r;
		made += r;
	}
	return made;
}
