/* units.c: sizes in bytes as text, parsed and printed (units.h). */
#include <errno.h>
#include <stdio.h>

#include "units.h"

static int is_digit(int c)
{
	return c >= '0' && c <= '9';
}

int wd_parse_digits(const char **s, uint64_t *out)
{
	const char *p = *s;
	uint64_t v = 0;

	if (!is_digit(*p))
		return -EINVAL;
	for (; is_digit(*p); p++) {
		unsigned d = *p - '0';
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*s = p;
	*out = v;
	return 0;
}

int wd_parse_size(const char *s, uint64_t *out)
{
	uint64_t v;
	int shift = 0, r = wd_parse_digits(&s, &v);

	if (r)
		return r;
	switch (*s) {
	case 'K': case 'k': shift = 10; break;
	case 'M': case 'm': shift = 20; break;
	case 'G': case 'g': shift = 30; break;
	case 'T': case 't': shift = 40; break;
	case 0: break;
	default: return -EINVAL;
	}
	if (shift && *++s)
		return -EINVAL;
	if (v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

const char *wd_format_size(char *buf, size_t size, uint64_t v)
{
	static const char suffix[] = "TGMK";

	for (int i = 0, shift = 40; shift > 0; i++, shift -= 10)
		if (v && !(v & ((UINT64_C(1) << shift) - 1))) {
			snprintf(buf, size, "%llu%c", (unsigned long long)(v >> shift), suffix[i]);
			return buf;
		}
	snprintf(buf, size, "%llu", (unsigned long long)v);
	return buf;
}
