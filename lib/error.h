/*
 * error.h: the tree's one error convention. A call that can fail for a
 * reason the user must read takes (char *err, size_t errlen), returns -1 on
 * failure and fills err with one line that names the file, key, run or
 * field; it returns 0 (or a count) on success and leaves err alone.
 *
 *	if (!f)
 *		return wd_error(err, errlen, "%s: %s", path, strerror(errno));
 *
 * err may be NULL (errlen is then ignored), so that a caller with nowhere to
 * put the message still gets -1. Internal; libc only.
 */
#ifndef WD_ERROR_H
#define WD_ERROR_H

#include <stddef.h>

int wd_error(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * What a file of mode m is, for a message: "a regular file", "a
 * directory", "a symbolic link", "a FIFO", "a socket", "a character
 * device", "a block device", or "an unknown kind of file".
 */
const char *wd_file_kind(unsigned m);

#endif
