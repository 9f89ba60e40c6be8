/*
 * units.h: sizes in bytes as people write them, "4G", "1536M", "100": the
 * one parser and printer of WDRIFT_CKPT_MEMORY and of the size keys of the
 * configuration (memory.budget, limits.max_message, ...). Internal; libc only.
 */
#ifndef WD_UNITS_H
#define WD_UNITS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Reads the decimal digits at *s, advancing it past them: 0 with *out set,
 * -EINVAL when there is no digit, -ERANGE past UINT64_MAX. The one digit
 * loop of the size parser below and of the config's integers.
 */
int wd_parse_digits(const char **s, uint64_t *out);

/*
 * Digits with an optional suffix K, M, G or T, either case, in powers of
 * 1024: nothing else, no sign, no space. Returns 0 with *out set, -EINVAL
 * for text of another shape, or -ERANGE for a size past UINT64_MAX; *out
 * is left alone on failure.
 */
int wd_parse_size(const char *s, uint64_t *out);

/* The inverse: v with the largest suffix that is exact ("4G", "1536M", "100"); buf returned. */
const char *wd_format_size(char *buf, size_t size, uint64_t v);

#endif
