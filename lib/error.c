/* error.c: wd_error, the one way an error message is written, and the words for a file's kind (error.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"

int wd_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

void wd_shape_text(const uint64_t *dims, int ndims, char *buf, size_t len)
{
	size_t at = 1;

	if (len < 8) {	/* not even "[...]": nothing rather than half */
		if (len)
			buf[0] = 0;
		return;
	}
	buf[0] = '[';
	for (int d = 0; d < ndims; d++) {
		char one[32];
		int w = snprintf(one, sizeof(one), "%s%llu", d ? ", " : "", (unsigned long long)dims[d]);
		if (at + (size_t)w + 6 > len) {	/* room for ", ...]" and the NUL */
			at += (size_t)snprintf(buf + at, len - at, "%s...", d ? ", " : "");
			break;
		}
		memcpy(buf + at, one, (size_t)w);
		at += (size_t)w;
	}
	snprintf(buf + at, len - at, "]");
}

const char *wd_file_kind(unsigned m)
{
	return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link"
	       : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device"
	       : S_ISBLK(m) ? "a block device" : "an unknown kind of file";
}
