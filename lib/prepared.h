/*
 * prepared.h: what a prepared tensor holds, and the CPU kernels that read it.
 * Internal to libwdrift; shared by engine.c (which builds prepared tensors),
 * w1.c (distances) and stats.c (summaries).
 */
#ifndef WD_PREPARED_H
#define WD_PREPARED_H

#include <stdint.h>
#include "wdrift.h"

struct wd_prepared {
	enum wd_method method;
	enum wd_dtype dtype;	/* of the source tensor */
	/* SORT: WD_F32 or WD_F64, the type of values[]. HIST16: WD_BF16 or WD_F16. */
	enum wd_dtype store;
	uint64_t numel, n_finite;
	struct wd_nonfinite nonfinite;
	void *values;		/* SORT: n_finite finite values, ascending */
	uint64_t *hist;		/* HIST16: 65536 counts indexed by code */
};

/* W1 between two prepared tensors that both have finite values (w1.c). */
double w1_cpu(const struct wd_prepared *a, const struct wd_prepared *b);

#endif
