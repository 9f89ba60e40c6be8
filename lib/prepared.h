/*
 * prepared.h: what a prepared tensor holds. Internal to libwdrift; shared
 * by engine.c (which dispatches), the CPU backend (backend_cpu.h:
 * prepare_cpu.c builds prepared tensors, w1.c and stats.c read them) and
 * the CUDA one (backend_cuda.h).
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
	 * has no values[] on the host, and a counted one gets hist[] there only
	 * when the host needs it (engine.c: engine_fetch_hist).
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
	/*
	 * SORT on the device: every value, float (f32) or double (f64), in
	 * CUB's radix order, so NaN and -Inf first, +Inf and NaN last; the
	 * finite ones are dev_keys[dev_first .. dev_first + n_finite).
	 */
	void *dev_keys;
	uint64_t dev_first;
	/*
	 * The counts of a device sort (n_finite, nonfinite, dev_first) are
	 * written by the device after the sort, so that prepare need not wait
	 * for it: until settled (engine.c: prepared_settle) they are not set.
	 */
	int counts_pending;
	int dev_slot;		/* cuda_engine's pinned slot for them, or -1 */
	void *dev_ready;	/* cudaEvent_t: they are written */
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

#endif
