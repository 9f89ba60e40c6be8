/*
 * dtype.h: element types inside libwdrift: decoding 16-bit codes, the value
 * order of the 65536 codes, and classifying values. Internal; depends on
 * libc only.
 */
#ifndef WD_DTYPE_H
#define WD_DTYPE_H

#include <stdint.h>
#include "wdrift.h"

#define HALF_CODES 65536u

/*
 * Everything the 16-bit paths need about one format (bf16 or fp16), built
 * once per process and read-only afterwards.
 */
struct half_table {
	double value[HALF_CODES];	/* value of each code, NaN for NaN codes */
	uint16_t order[HALF_CODES];	/* finite codes by ascending value */
	double gap[HALF_CODES];		/* value[order[j+1]] - value[order[j]] */
	uint32_t n_order;		/* how many codes are finite */
};

/* The table for WD_BF16 or WD_F16, or NULL for other dtypes. Thread safe. */
const struct half_table *half_table_get(enum wd_dtype t);

/* Non-finite classes of a 16-bit code: 0 finite, 1 NaN, 2 +Inf, 3 -Inf. */
int half_class(enum wd_dtype t, uint16_t code);

/* Adds the count of each non-finite class of a 65536-bin histogram. */
void half_count_nonfinite(enum wd_dtype t, const uint64_t *hist,
			  struct wd_nonfinite *nf);

#endif
