/* utf8.c: see utf8.h. */
#include <stddef.h>

#include "utf8.h"

/* The length of the valid UTF-8 character at s (RFC 3629: no overlong form, surrogate or > U+10FFFF); 0 if none. */
static size_t char_len(const unsigned char *s)
{
	unsigned char c = s[0];
	size_t n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 :
		   c >= 0xf0 && c <= 0xf4 ? 4 : 0;

	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)	/* the terminating NUL fails here too */
			return 0;
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) || (c == 0xf0 && s[1] < 0x90) ||
	    (c == 0xf4 && s[1] >= 0x90))
		return 0;
	return n;
}

char *wd_utf8_scrub(char *s)
{
	for (unsigned char *p = (unsigned char *)s; *p;) {
		size_t n = char_len(p);
		if (n) {
			p += n;
			continue;
		}
		*p++ = '?';
	}
	return s;
}
