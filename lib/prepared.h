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
	const void *host_raw;	/* WD_PREP_KEEP_RAW on the CPU: caller's data */

	/*
	 * Set when the tensor lives on the device (cuda/). A sorted tensor then
	 * has no values[] on the host; a counted one has hist[] on both sides.
	 */
	struct wd_engine *engine;	/* owner, for freeing device memory */
	/*
	 * The owner's list of live device tensors, so that it can free their
	 * device memory when it gives the device up or closes (engine.c).
	 */
	struct wd_prepared *live_prev, *live_next;
	/*
	 * Its device was given up, and its device memory freed: W1 and pair
	 * statistics on it return -EIO; it must be prepared again.
	 */
	int stale;
	void *dev_keys;		/* sorted radix keys: uint32 (f32), uint64 (f64) */
	void *dev_hist;		/* 65536 unsigned long long counts */
	void *dev_raw;		/* WD_PREP_KEEP_RAW: raw values */
	int dev_raw_borrowed;	/* dev_raw is the caller's device memory */
	int view_on_device;	/* the view given was device memory (cuda_prepare) */
	uint64_t dev_bytes;	/* device memory held, for the budget */
	int have_summary;	/* summary below is filled (device tensors) */
	struct wd_summary summary;
};

static inline int prepared_on_device(const struct wd_prepared *p)
{
	return p->dev_keys || p->dev_hist || p->dev_raw;
}

/*
 * Computes the summary of a sorted device tensor into p->summary (engine.c,
 * for wd_summarize); does nothing when the device is gone.
 */
void engine_summarize_device(struct wd_engine *e, struct wd_prepared *p);

/* W1 between two prepared tensors that both have finite values (w1.c). */
double w1_cpu(const struct wd_prepared *a, const struct wd_prepared *b);

#endif
