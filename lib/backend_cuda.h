/*
 * backend_cuda.h: what the CUDA backend (the .cu files in cuda/) gives engine.c, the
 * twin of backend_cpu.h. engine.c decides where work runs and falls back
 * to the CPU; these functions only run it on the device. A library built
 * without CUDA gets backend_cuda_none.c instead: no device. Internal.
 *
 * Errors: -ENODEV no usable device, -ENOMEM over the memory budget (the
 * caller prepares on the CPU instead), -EIO a device error (the caller
 * stops using the device), -EFAULT device memory given by the caller could
 * not be read (the engine's device is fine), -EINVAL a bad argument.
 *
 * Every function makes the engine's device current for its work and the
 * caller's current device current again before it returns.
 */
#ifndef WD_BACKEND_CUDA_H
#define WD_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "wdrift.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_engine;
struct wd_prepared;

/*
 * Opens device (0 to the device count less 1); desc gets "cuda: NAME
 * (device N, sm_XY, N GiB)", or on -ENODEV why not (a bad index names the
 * index and the count).
 */
int cuda_engine_open(struct cuda_engine **out, int device, char *desc, size_t desclen);
/*
 * Frees everything; safe after a device error. Release every prepared
 * tensor first (cuda_prepared_release).
 */
void cuda_engine_close(struct cuda_engine **c);
void cuda_engine_set_budget(struct cuda_engine *c, uint64_t bytes);

/*
 * Uploads and prepares v into p (method, device buffers; the counts come
 * later, see cuda_settle). v->data may be host memory, pageable or pinned,
 * or device memory. Device memory on the engine's device and aligned to
 * the element size is copied on the device, or, with WD_PREP_KEEP_RAW,
 * read in place and kept by reference; other device memory (another
 * device, an odd offset) is copied through the host. p->view_on_device
 * says v->data was device memory, which the CPU cannot read. Returns when
 * v->data may be reused (unless kept); the sort itself may still be
 * running.
 */
int cuda_prepare(struct cuda_engine *c, const struct wd_view *v, unsigned flags,
		 struct wd_prepared *p);
/* Fills p->summary of a sorted device tensor (one pass, then a sync). */
int cuda_summarize(struct cuda_engine *c, struct wd_prepared *p);
/*
 * Frees p's device buffers, in stream order, and clears its device
 * pointers. After a device error too: the frees then fail quietly (and
 * after a sticky error the memory stays mapped until the process exits).
 */
void cuda_prepared_release(struct cuda_engine *c, struct wd_prepared *p);
/*
 * Waits for a device sort's counts (p->counts_pending) and fills p's
 * n_finite, nonfinite and dev_first. A no-op once done.
 */
int cuda_settle(struct cuda_engine *c, struct wd_prepared *p);
/* Queues W1 of two device tensors; *out is written by cuda_sync(). */
int cuda_w1_async(struct cuda_engine *c, const struct wd_prepared *a,
		  const struct wd_prepared *b, double *out);
/* Waits for the device and writes queued results. */
int cuda_sync(struct cuda_engine *c);
/* Element-wise statistics from two tensors' device copies of raw values. */
int cuda_pair_stats(struct cuda_engine *c, const struct wd_prepared *a,
		    const struct wd_prepared *b, struct wd_pair_stats *out);
/*
 * Copies a device tensor to the host, as a CPU prepared tensor has it: a
 * sort's finite values (its values[]), or a count's 65536 counts (its
 * hist[]), in a new malloc'd buffer. For W1 against a tensor on the host,
 * and for a count's summary.
 */
int cuda_to_host(struct cuda_engine *c, const struct wd_prepared *p, void **values);
/*
 * Copies bytes of device memory, of this or another device, into a new
 * host buffer (*out, malloc'd).
 */
int cuda_copy_to_host(struct cuda_engine *c, const void *dev, size_t bytes, void **out);

#ifdef __cplusplus
}
#endif
#endif
