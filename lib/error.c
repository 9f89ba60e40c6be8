/* error.c: wd_error, the one way an error message is written, and the words for a file's kind (error.h). */
#include <stdarg.h>
#include <stdio.h>
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

const char *wd_file_kind(unsigned m)
{
	return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link"
	       : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device"
	       : S_ISBLK(m) ? "a block device" : "an unknown kind of file";
}
