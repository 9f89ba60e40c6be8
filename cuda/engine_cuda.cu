/*
 * engine_cuda.cu: the CUDA backend of the engine (lib/backend_cuda.h), for
 * sm_90 (H100/H200): the engine itself (open and close, the memory budget,
 * the stream-ordered allocations, the results arena and sync). Preparing
 * is prepare_cuda.cu's, W1 and the statistics w1_stats_cuda.cu's; what the
 * three share is in engine_cuda.cuh. engine.c decides where work runs;
 * this backend runs it on the device and never exits: every CUDA call is
 * checked, and an error returns -EIO (or -ENOMEM for an allocation over
 * the budget) so that the engine can fall back to the CPU.
 *
 * The flow of one tensor (docs/gpu.md, "Data flow of one tensor"):
 *   host --(pinned staging, copy stream)--> raw on the device
 *     fp32/fp64: CUB radix sort of the floats, in place -> finite range at the ends
 *     bf16/fp16 and upcast-bf16 fp32: 65536-bin count, kept on the device
 * wd_prepare returns once the upload is done, without a sync: the counts
 * reach the host when first needed (settle). W1 kernels write per-block
 * partials into a results arena; wd_engine_sync copies the arena back once
 * and adds the partials on the host in a fixed order.
 *
 * The engine runs on one device, chosen at open. Every entry point makes it
 * current for its work and gives the caller's current device back before it
 * returns (struct on_device), so that a framework on another device (or the
 * same one) sees no change.
 *
 * Depends on CUDA and the engine's internal headers; not on HDF5, ZeroMQ
 * or YAML.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_cuda.cuh"
#include "kernel_bodies.h"	/* grid_for_items, partials_sum: host code, no kernels */

int cuda_fail(cudaError_t err, const char *what, const char *file, int line)
{
	wd_log(WD_LOG_ERR, "%s:%d: %s: %s", file, line, what, cudaGetErrorString(err));
	return err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* --- device memory within the budget, in stream order --- */

/*
 * Allocates in stream order on s. Memory is usable on s only: a buffer
 * another stream writes first must be allocated on that stream, since the
 * pool may hand out memory whose cudaFreeAsync on s is still pending.
 */
int dev_alloc_on(struct cuda_engine *c, void **p, size_t bytes, cudaStream_t s)
{
	*p = NULL;
	if (c->used + bytes > c->budget)
		return -ENOMEM;
	cudaError_t err = cudaMallocFromPoolAsync(p, bytes ? bytes : 1, c->pool, s);
	if (err == cudaErrorMemoryAllocation) {
		cudaGetLastError();	/* not sticky: clear it */
		/*
		 * Under the budget, yet the device is full: other processes, or
		 * memory our streams have freed but not yet passed. Say so once:
		 * tensors go to the CPU from here as the budget would not say.
		 */
		if (!c->said_full) {
			c->said_full = 1;
			wd_log(WD_LOG_WARNING, "engine: device %d has no %zu bytes free although "
			       "the engine holds %llu of its %llu-byte budget: such tensors are "
			       "prepared on the cpu", c->device, bytes,
			       (unsigned long long)c->used, (unsigned long long)c->budget);
		}
		return -ENOMEM;
	}
	if (err != cudaSuccess)
		return cuda_fail(err, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
	c->used += bytes;
	if (c->peak < c->used)
		c->peak = c->used;
	return 0;
}

int dev_alloc(struct cuda_engine *c, void **p, size_t bytes)
{
	return dev_alloc_on(c, p, bytes, c->compute);
}

void dev_free(struct cuda_engine *c, void **p, size_t bytes)
{
	if (!*p)
		return;
	cudaFreeAsync(*p, c->compute);
	c->used -= bytes < c->used ? bytes : c->used;
	*p = NULL;
}

/* Blocks for n items of a grid-stride kernel: up to 8 per SM (kernel_bodies.h). */
unsigned grid_for(const struct cuda_engine *c, size_t n, unsigned threads)
{
	return grid_for_items(n, threads, c->sms, RED_BLOCKS_PER_SM, MAX_PARTIALS);
}


/* --- open and close --- */

extern "C" int wd_have_cuda(void)
{
	return 1;
}

extern "C" int cuda_engine_open(struct cuda_engine **out, int device, char *desc,
				size_t desclen)
{
	struct cuda_engine *c;
	cudaDeviceProp prop;
	int n = 0;

	*out = NULL;
	memset(&prop, 0, sizeof(prop));	/* printed below even when the query fails */
	cudaError_t err = cudaGetDeviceCount(&n);
	if (err != cudaSuccess || n == 0) {
		snprintf(desc, desclen, "%s", err != cudaSuccess ? cudaGetErrorString(err)
							    : "no CUDA device");
		/*
		 * The runtime says "driver version is insufficient" also when
		 * there is no driver at all, which reads as "upgrade it": the
		 * runtime has tried to load libcuda, so it is loaded unless
		 * there is none.
		 */
		if (err == cudaErrorInsufficientDriver) {
			void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
			if (drv)
				dlclose(drv);
			else
				snprintf(desc, desclen, "no CUDA driver (libcuda.so.1 is not installed)");
		}
		cudaGetLastError();
		return -ENODEV;
	}
	if (device < 0 || device >= n) {
		snprintf(desc, desclen, "no device %d (this machine has %d: 0 to %d)", device, n,
			 n - 1);
		return -ENODEV;
	}
	on_device on(device);	/* the caller's device again on every return below */
	if (!on.ok) {
		snprintf(desc, desclen, "device %d cannot be made current", device);
		cudaGetLastError();
		return -ENODEV;
	}
	if (cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
	    w1_kernels_probe() != cudaSuccess) {
		snprintf(desc, desclen, "device %d (sm_%d%d) cannot run this build (sm_90 and newer)",
			 device, prop.major, prop.minor);
		cudaGetLastError();
		return -ENODEV;
	}
	c = (struct cuda_engine *)calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->device = device;
	c->sms = prop.multiProcessorCount;
	int r = -EIO;
#define OPEN_CU(call) do { if ((call) != cudaSuccess) { \
	r = cuda_fail(cudaGetLastError(), #call, __FILE__, __LINE__); goto fail; } } while (0)
	{
		cudaMemPoolProps props;
		memset(&props, 0, sizeof(props));
		props.allocType = cudaMemAllocationTypePinned;
		props.location.type = cudaMemLocationTypeDevice;
		props.location.id = device;
		OPEN_CU(cudaMemPoolCreate(&c->pool, &props));
		uint64_t keep = UINT64_MAX;	/* see struct cuda_engine */
		OPEN_CU(cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep));
		/*
		 * Memory freed on the compute stream (a sort's buffers) must not
		 * be handed to the copy stream (the next upload) by making the
		 * copy stream wait for the compute stream: that would serialise
		 * upload k+1 behind sort k. Without internal dependencies the
		 * pool maps new memory instead, within the budget.
		 */
		int no = 0;
		OPEN_CU(cudaMemPoolSetAttribute(c->pool, cudaMemPoolReuseAllowInternalDependencies, &no));
	}
	OPEN_CU(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
	OPEN_CU(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
	for (int k = 0; k < 2; k++) {
		OPEN_CU(cudaEventCreateWithFlags(&c->staged[k], cudaEventDisableTiming));
		OPEN_CU(cudaMallocHost(&c->stage[k], STAGE_BYTES));
	}
	OPEN_CU(cudaEventCreateWithFlags(&c->uploaded, cudaEventDisableTiming));
	OPEN_CU(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
	OPEN_CU(cudaEventCreateWithFlags(&c->caller, cudaEventDisableTiming));
	OPEN_CU(cudaMalloc(&c->d_counts, 4 * sizeof(unsigned long long)));
	OPEN_CU(cudaMallocHost(&c->h_counts, 4 * sizeof(unsigned long long)));
	OPEN_CU(cudaMalloc(&c->d_arena, (size_t)ARENA_SLOTS * MAX_PARTIALS * sizeof(double)));
	OPEN_CU(cudaMallocHost(&c->h_arena, (size_t)ARENA_SLOTS * MAX_PARTIALS * sizeof(double)));
	c->queue = (struct queued *)calloc(ARENA_SLOTS, sizeof(*c->queue));
	if (!c->queue)
		goto fail;
	for (int f = 0; f < 2; f++) {
		const struct half_table *t = half_table_get(f == 0 ? WD_BF16 : WD_F16);
		c->n_order[f] = t->n_order;
		OPEN_CU(cudaMalloc(&c->d_order[f], sizeof(t->order)));
		OPEN_CU(cudaMalloc(&c->d_gap[f], sizeof(t->gap)));
		OPEN_CU(cudaMemcpy(c->d_order[f], t->order, sizeof(t->order), cudaMemcpyHostToDevice));
		OPEN_CU(cudaMemcpy(c->d_gap[f], t->gap, sizeof(t->gap), cudaMemcpyHostToDevice));
	}
	OPEN_CU(cudaMallocHost(&c->h_hist, 65536 * sizeof(unsigned long long)));
	OPEN_CU(cudaMallocHost(&c->h_slots, (SLOTS + 1) * SLOT_WORDS * sizeof(unsigned long long)));
	OPEN_CU(cudaMalloc(&c->d_slots, (SLOTS + 1) * SLOT_WORDS * sizeof(unsigned long long)));
	for (int k = 0; k < SLOTS; k++)
		c->free_slots[c->n_free_slots++] = SLOTS - 1 - k;
	OPEN_CU(count16_kernels_setup());
	cuda_engine_set_budget(c, 0);
	snprintf(desc, desclen, "cuda: %s (device %d, sm_%d%d, %.0f GiB)", prop.name, device,
		 prop.major, prop.minor, (double)prop.totalGlobalMem / (1u << 30));
	*out = c;
	return 0;
fail:
	snprintf(desc, desclen, "cuda set-up failed on device %d", device);
	cuda_engine_close(&c);
	return r == -ENOMEM ? -ENODEV : r == -EIO ? -ENODEV : r;
#undef OPEN_CU
}

/*
 * Frees what the engine holds. Prepared tensors must have been released
 * first (engine.c does so, also when it gives the device up): the pool
 * would otherwise only be destroyed once they are, that is never. Errors
 * are ignored: after a sticky device fault every call here fails, and the
 * memory stays mapped until the process exits, since the context is the
 * caller's (the device's primary one) and resetting it would kill the
 * caller's own work.
 */
extern "C" void cuda_engine_close(struct cuda_engine **pc)
{
	struct cuda_engine *c = *pc;
	if (!c)
		return;
	on_device on(c->device);
	if (c->compute)
		cudaStreamSynchronize(c->compute);
	if (c->copy)	/* a pageable upload's last copies may still read the staging */
		cudaStreamSynchronize(c->copy);
	/* what open got, in any order; a NULL is what open did not get to */
	void *dev[] = { c->d_order[0], c->d_order[1], c->d_gap[0], c->d_gap[1],
			c->d_counts, c->d_slots, c->d_arena };
	void *pinned[] = { c->stage[0], c->stage[1], c->h_counts, c->h_hist, c->h_slots,
			   c->h_arena };
	cudaEvent_t events[] = { c->staged[0], c->staged[1], c->uploaded, c->done, c->caller };
	for (size_t k = 0; k < sizeof(dev) / sizeof(dev[0]); k++)
		if (dev[k])
			cudaFree(dev[k]);
	for (size_t k = 0; k < sizeof(pinned) / sizeof(pinned[0]); k++)
		if (pinned[k])
			cudaFreeHost(pinned[k]);
	for (size_t k = 0; k < sizeof(events) / sizeof(events[0]); k++)
		if (events[k])
			cudaEventDestroy(events[k]);
	if (c->copy) cudaStreamDestroy(c->copy);
	if (c->compute) cudaStreamDestroy(c->compute);
	if (c->pool) cudaMemPoolDestroy(c->pool);	/* everything in it was freed and synced */
	cudaGetLastError();
	free(c->queue);
	free(c);
	*pc = NULL;
}

extern "C" void cuda_engine_set_budget(struct cuda_engine *c, uint64_t bytes)
{
	size_t free_b = 0, total = 0;
	on_device on(c->device);

	if (bytes == 0) {
		if (!on.ok || cudaMemGetInfo(&free_b, &total) != cudaSuccess)
			cudaGetLastError();	/* a budget of what is held: new tensors go to the cpu */
		/*
		 * Leave room for CUB's temporaries and other processes. What the
		 * engine holds already is not free, but is within the budget.
		 */
		bytes = c->used + (free_b > (2ull << 30) ? free_b - (1ull << 30) : free_b / 2);
	}
	c->budget = bytes;
}

/*
 * Gives memory the pool holds but nothing uses back to the driver, once
 * the compute stream is idle (cuda_sync), so that the engine does not sit
 * on a budget's worth of device memory between batches while a framework
 * on the same device may need it. It keeps what the last batch needed at
 * its peak: a loop of similar tensors, one wd_w1 (and sync) each, then maps
 * no new memory, and memory above that goes back at the next sync.
 */
static void trim_pool(struct cuda_engine *c)
{
	if (cudaMemPoolTrimTo(c->pool, (size_t)c->peak) != cudaSuccess)
		cudaGetLastError();	/* only a missed saving */
	c->peak = c->used;
}


/* --- results --- */

/* Queues a result made of partials [first, first + count) times scale. */
int queue_result(struct cuda_engine *c, double *out, size_t first, size_t count,
			int stride, double scale)
{
	c->queue[c->n_queued++] = (struct queued){ out, first, count, stride, scale };
	c->arena_used = first + count * stride;
	return 0;
}

static int sync_results(struct cuda_engine *c);

/* Reserves room for count partials of stride doubles; syncs when full. */
int arena_take(struct cuda_engine *c, size_t count, int stride, size_t *first)
{
	if (c->n_queued == ARENA_SLOTS ||
	    c->arena_used + count * stride > (size_t)ARENA_SLOTS * MAX_PARTIALS) {
		int r = sync_results(c);
		if (r)
			return r;
	}
	*first = c->arena_used;
	return 0;
}

/*
 * After -EIO engine.c gives the device up, and with it the queue: the
 * results it owes are NaN (wdrift.h, wd_engine_sync).
 */
int lost(struct cuda_engine *c, int r)
{
	if (r == -EIO) {
		for (size_t i = 0; i < c->n_queued; i++)
			*c->queue[i].out = NAN;
		c->n_queued = 0;
		c->arena_used = 0;
	}
	return r;
}


/* Adds partials in a fixed order and writes every queued result. */
static int sync_results(struct cuda_engine *c)
{
	if (c->arena_used)
		CU(cudaMemcpyAsync(c->h_arena, c->d_arena, c->arena_used * sizeof(double),
				   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	for (size_t i = 0; i < c->n_queued; i++) {
		const struct queued *q = &c->queue[i];
		*q->out = partials_sum(c->h_arena + q->first, q->count) * q->scale;
	}
	c->n_queued = 0;
	c->arena_used = 0;
	return 0;
}

extern "C" int cuda_sync(struct cuda_engine *c)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	int r = sync_results(c);	/* the compute stream is idle after it */
	if (r == 0)
		trim_pool(c);
	return lost(c, r);
}
