/*
 * dirs.c: `mkdir -p` (dirs.h).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

#include "dirs.h"

static int make_one(const char *path)
{
	return mkdir(path, 0750) < 0 && errno != EEXIST ? -errno : 0;
}

int dirs_make(const char *path, int parents_only)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);
	int r;

	if (len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if ((r = make_one(tmp)) < 0)
				return r;
			*p = '/';
		}
	return parents_only ? 0 : make_one(tmp);
}
