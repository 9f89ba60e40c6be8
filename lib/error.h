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
#include <stdint.h>

int wd_error(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * What a file of mode m is, for a message: "a regular file", "a
 * directory", "a symbolic link", "a FIFO", "a socket", "a character
 * device", "a block device", or "an unknown kind of file".
 */
const char *wd_file_kind(unsigned m);

/*
 * A tensor's shape for a message, into buf: "[6, 5, 4]", "[]" for a
 * scalar; "[1, 2, ...]" when the dimensions do not fit, never cut without
 * its closing bracket. One wording for the publisher, the daemon's
 * refusals and the compute thread's warnings.
 */
void wd_shape_text(const uint64_t *dims, int ndims, char *buf, size_t len);

#endif
