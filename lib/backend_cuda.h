/*
 * backend_cuda.h: what the CUDA backend (cuda/engine_cuda.cu) gives
 * engine.c. engine.c decides where work runs and falls back to the CPU;
 * these functions only run it on the device. Compiled in when the library
 * is built with WD_HAVE_CUDA. Internal.
 *
 * Errors: -ENODEV no usable device, -ENOMEM over the memory budget (the
 * caller prepares on the CPU instead), -EIO a device error (the caller
 * stops using the device), -EINVAL a bad argument.
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

/* Opens device 0; desc gets "cuda: NAME (sm_XY, N GiB)". */
int cuda_engine_open(struct cuda_engine **out, char *desc, size_t desclen);
/* Frees everything; safe after a device error. */
void cuda_engine_close(struct cuda_engine **c);
void cuda_engine_set_budget(struct cuda_engine *c, uint64_t bytes);

/*
 * Uploads and prepares v into p (method, counts, device buffers, and for
 * HIST16 the host copy of the counts). v->data may be host memory, pageable
 * or pinned, or device memory, which is read in place (and, with
 * WD_PREP_KEEP_RAW, kept by reference). Returns when v->data may be reused;
 * the sort itself may still be running.
 */
int cuda_prepare(struct cuda_engine *c, const struct wd_view *v, unsigned flags,
		 struct wd_prepared *p);
/* Fills p->summary of a sorted device tensor (one pass, then a sync). */
int cuda_summarize(struct cuda_engine *c, struct wd_prepared *p);
/* Frees p's device buffers, in stream order. */
void cuda_prepared_release(struct cuda_engine *c, struct wd_prepared *p);
/* Queues W1 of two device tensors; *out is written by cuda_sync(). */
int cuda_w1_async(struct cuda_engine *c, const struct wd_prepared *a,
		  const struct wd_prepared *b, double *out);
/* Waits for the device and writes queued results. */
int cuda_sync(struct cuda_engine *c);
/* Element-wise statistics from two tensors' device copies of raw values. */
int cuda_pair_stats(struct cuda_engine *c, const struct wd_prepared *a,
		    const struct wd_prepared *b, struct wd_pair_stats *out);
/*
 * Copies a sorted device tensor's values to the host, as a CPU prepared
 * tensor (values and store set), for W1 against a tensor on the host.
 */
int cuda_to_host(struct cuda_engine *c, const struct wd_prepared *p, void **values);
/* Copies bytes of device memory into a new host buffer (*out, malloc'd). */
int cuda_copy_to_host(struct cuda_engine *c, const void *dev, size_t bytes, void **out);

#ifdef __cplusplus
}
#endif
#endif
