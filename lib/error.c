/* error.c: wd_error, the one way an error message is written (error.h). */
#include <stdarg.h>
#include <stdio.h>

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
