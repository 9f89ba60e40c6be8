/*
 * engine_cuda.cu: the CUDA backend of the engine (lib/backend_cuda.h), for
 * sm_90 (H100/H200). engine.c decides where work runs; this file runs it on
 * the device and never exits: every CUDA call is checked, and an error
 * returns -EIO (or -ENOMEM for an allocation over the budget) so that the
 * engine can fall back to the CPU.
 *
 * The flow of one tensor (docs/gpu.md, "Data flow of one tensor"):
 *   host --(pinned staging, copy stream)--> raw on the device
 *     fp32/fp64: CUB radix sort of the floats, in place -> finite range at the ends
 *     bf16/fp16 and upcast-bf16 fp32: 65536-bin count, kept on the device
 * wd_prepare returns once the upload is done, without a sync: the counts
 * reach the host when first needed (settle). A device view on the engine's
 * device is copied on the device (or, kept with WD_PREP_KEEP_RAW, read in
 * place; a bf16/fp16 one is counted in place, and wd_prepare waits for the
 * count); one on another device, or misaligned, comes through the host.
 * W1 kernels write per-block partials into a results arena; wd_engine_sync
 * copies the arena back once and adds the partials on the host in a fixed
 * order.
 *
 * The engine runs on one device, chosen at open. Every entry point makes it
 * current for its work and gives the caller's current device back before it
 * returns (struct on_device), so that a framework on another device (or the
 * same one) sees no change.
 *
 * Depends on CUDA, CUB and the engine's internal headers; not on HDF5,
 * ZeroMQ or YAML.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels.cuh"

extern "C" {
#include "backend_cuda.h"
#include "dtype.h"
#include "log.h"
#include "prepared.h"
}

#define STAGE_BYTES (32u << 20)	/* each of the two pinned staging buffers */
#define ARENA_SLOTS 2048	/* queued W1 results before an implicit sync */
#define MAX_PARTIALS 1024	/* per reduction */
#define SLOTS 4096		/* tensors whose counts are not yet on the host */
#define SPARE_SLOT SLOTS	/* one more, never handed out: for settling at once */
#define SLOT_WORDS 8		/* per slot: first, n_finite, NaN, +Inf, -Inf */

/* Logs a failed call with its place, and returns the errno for it. */
static int cuda_fail(cudaError_t err, const char *what, const char *file, int line)
{
	wd_log(WD_LOG_ERR, "%s:%d: %s: %s", file, line, what, cudaGetErrorString(err));
	return err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

#define CU(call) do {							\
	cudaError_t err_ = (call);					\
	if (err_ != cudaSuccess)					\
		return cuda_fail(err_, #call, __FILE__, __LINE__);	\
} while (0)

/* Checks a kernel launch (the launch itself; faults show at the next sync). */
#define CU_LAUNCH() CU(cudaGetLastError())

/*
 * Makes device dev current for the life of the object, and the caller's
 * device current again when it goes out of scope, on every return path.
 * The caller's device is what cudaGetDevice says: a thread that never
 * chose one reads as device 0, so with an engine on device N > 0 such a
 * thread gets device 0 current back, and since CUDA 12 cudaSetDevice(0)
 * then creates device 0's primary context if nothing had (unverified on a
 * machine with two GPUs). Saving the driver's current context instead
 * would avoid that, at the cost of reaching into the driver API; not done.
 * ok is false when dev could not be made current: the entry point must not
 * touch the device then.
 */
struct on_device {
	int saved;
	bool ok;

	explicit on_device(int dev) : saved(-1), ok(true)
	{
		if (cudaGetDevice(&saved) != cudaSuccess) {
			cudaGetLastError();
			saved = -1;
		}
		if (saved != dev) {
			cudaError_t err = cudaSetDevice(dev);
			if (err != cudaSuccess) {
				cuda_fail(err, "cudaSetDevice", __FILE__, __LINE__);
				ok = false;
			}
		} else {
			saved = -1;	/* nothing to give back */
		}
	}
	~on_device()
	{
		if (saved >= 0 && cudaSetDevice(saved) != cudaSuccess)
			cudaGetLastError();
	}
	on_device(const on_device &) = delete;
	on_device &operator=(const on_device &) = delete;
};

/* One queued result: partials [first, first + count) of the arena. */
struct queued {
	double *out;
	size_t first, count;
	int stride;	/* doubles per block */
	double scale;
};

struct cuda_engine {
	/*
	 * Our own stream-ordered pool, which leaves the process's default
	 * pool, which a framework may use, alone. Its release threshold is
	 * unbounded, so that the syncs inside one prepare or summary do not
	 * return freed memory to the driver (the default threshold, 0, would
	 * unmap it at each of them, and the next allocation would map it
	 * again); the budget bounds what is allocated anyway. cuda_sync trims
	 * it instead (trim_pool).
	 */
	cudaMemPool_t pool;
	int device, sms;
	cudaStream_t compute, copy;
	cudaEvent_t staged[2], uploaded, done;
	cudaEvent_t caller;		/* the caller's default streams, before a read */
	void *stage[2];			/* pinned */
	unsigned long long *d_counts, *h_counts;	/* 4 counters, pinned mirror */
	unsigned long long *h_hist;	/* pinned: a count on its way to the host */
	/*
	 * (SLOTS + 1) x SLOT_WORDS, pinned: with UVA (every 64-bit platform
	 * CUDA 13 runs on) a cudaMallocHost pointer is also a device pointer,
	 * so a kernel may store to it. d_slots: the same on the device, for a
	 * count's counters, which are atomics and stay in device memory.
	 */
	unsigned long long *h_slots;
	unsigned long long *d_slots;
	int free_slots[SLOTS], n_free_slots;
	uint64_t budget, used;
	uint64_t peak;			/* most used since the last trim */
	int said_full;			/* the device ran out under the budget (logged) */
	/* 16-bit tables: finite codes in value order, and the gap to the next */
	uint16_t *d_order[2];
	double *d_gap[2];
	unsigned n_order[2];
	/* results arena */
	double *d_arena, *h_arena;
	size_t arena_used;
	struct queued *queue;
	size_t n_queued;
};

static int fmt_index(enum wd_dtype t) { return t == WD_BF16 ? 0 : 1; }

/* --- device memory within the budget, in stream order --- */

/*
 * Allocates in stream order on s. Memory is usable on s only: a buffer
 * another stream writes first must be allocated on that stream, since the
 * pool may hand out memory whose cudaFreeAsync on s is still pending.
 */
static int dev_alloc_on(struct cuda_engine *c, void **p, size_t bytes, cudaStream_t s)
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

static int dev_alloc(struct cuda_engine *c, void **p, size_t bytes)
{
	return dev_alloc_on(c, p, bytes, c->compute);
}

static void dev_free(struct cuda_engine *c, void **p, size_t bytes)
{
	if (!*p)
		return;
	cudaFreeAsync(*p, c->compute);
	c->used -= bytes < c->used ? bytes : c->used;
	*p = NULL;
}

/* Blocks for n items of a grid-stride kernel: up to 8 per SM (kernel_bodies.h). */
static unsigned grid_for(const struct cuda_engine *c, size_t n, unsigned threads)
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
	cudaFuncAttributes fa;
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
	    cudaFuncGetAttributes(&fa, w1_hist_scan_kernel) != cudaSuccess) {
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
#define HIST_SMEM(F, W, V) OPEN_CU(cudaFuncSetAttribute(hist16_kernel<F, W, V>, \
	cudaFuncAttributeMaxDynamicSharedMemorySize, HIST_HALF * 4))
	HIST_SMEM(fmt_bf16, uint16_t, 8);
	HIST_SMEM(fmt_bf16, uint16_t, 1);
	HIST_SMEM(fmt_f16, uint16_t, 8);
	HIST_SMEM(fmt_f16, uint16_t, 1);
	HIST_SMEM(fmt_bf16, uint32_t, 4);
	HIST_SMEM(fmt_bf16, uint32_t, 1);
	HIST_SMEM(fmt_f16, uint32_t, 4);	/* instantiated by count16, never launched */
	HIST_SMEM(fmt_f16, uint32_t, 1);
#undef HIST_SMEM
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
	for (int k = 0; k < 2; k++) {
		if (c->stage[k]) cudaFreeHost(c->stage[k]);
		if (c->staged[k]) cudaEventDestroy(c->staged[k]);
		if (c->d_order[k]) cudaFree(c->d_order[k]);
		if (c->d_gap[k]) cudaFree(c->d_gap[k]);
	}
	if (c->uploaded) cudaEventDestroy(c->uploaded);
	if (c->done) cudaEventDestroy(c->done);
	if (c->caller) cudaEventDestroy(c->caller);
	if (c->d_counts) cudaFree(c->d_counts);
	if (c->h_counts) cudaFreeHost(c->h_counts);
	if (c->h_hist) cudaFreeHost(c->h_hist);
	if (c->h_slots) cudaFreeHost(c->h_slots);
	if (c->d_slots) cudaFree(c->d_slots);
	if (c->d_arena) cudaFree(c->d_arena);
	if (c->h_arena) cudaFreeHost(c->h_arena);
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

/* --- upload --- */

/*
 * Where a view's data lives. MEM_DEVICE is device memory the kernels may
 * read in place: on the engine's device and aligned to its element size.
 * MEM_OTHER is device memory they must not read: on another device (a
 * kernel here would fault on it, without peer access), or at an offset
 * that is not a multiple of the element size (a misaligned load faults).
 * Either fault is sticky and would ruin the context, which is the device's
 * primary one and so the caller's (PyTorch's) too. MEM_OTHER is copied to
 * the host first.
 */
enum mem_kind { MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE, MEM_OTHER };

static enum mem_kind mem_kind_of(const struct cuda_engine *c, const void *p, size_t esize,
				 int *owner)
{
	cudaPointerAttributes attr;
	enum mem_kind k = MEM_PAGEABLE;

	*owner = -1;
	/*
	 * Under UVA this answers for a pointer of any device without making
	 * that device current, and pageable memory is cudaMemoryTypeUnregistered
	 * (CUDA 11 and later), not an error.
	 */
	if (cudaPointerGetAttributes(&attr, p) == cudaSuccess) {
		if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
			*owner = attr.device;
			k = attr.device == c->device && (uintptr_t)p % esize == 0 ? MEM_DEVICE
										   : MEM_OTHER;
		} else if (attr.type == cudaMemoryTypeHost) {
			k = MEM_PINNED;
		}
	}
	cudaGetLastError();	/* pageable memory may report an error: not one */
	return k;
}

/*
 * Copies bytes of device memory at src, of any device, to the host at dst
 * with a synchronous cudaMemcpy on the owner's legacy default stream. That
 * stream waits for work the caller queued on the owner's blocking streams
 * (the per-thread default stream included), the same promise as a view
 * read in place (after_caller). Returns 0, -EFAULT when src could not be
 * read but the engine's device is fine (a bad pointer: an invalid-value
 * error, which is not sticky), or -EIO when the engine's device is broken.
 * The owner's own context may be left with a sticky error by a copy that
 * faults: that is the caller's memory and context, unchanged by us.
 * Unverified: the owner switch and the health probe have not run on a
 * machine with two GPUs.
 */
static int read_device(struct cuda_engine *c, void *dst, const void *src, size_t bytes,
		       int owner)
{
	cudaError_t err = cudaSuccess;

	if (owner >= 0 && owner != c->device)
		err = cudaSetDevice(owner);
	if (err == cudaSuccess)
		err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
	if (owner >= 0 && owner != c->device && cudaSetDevice(c->device) != cudaSuccess)
		return cuda_fail(cudaGetLastError(), "cudaSetDevice (back)", __FILE__, __LINE__);
	if (err == cudaSuccess)
		return 0;
	cuda_fail(err, "copy of a device view to the host", __FILE__, __LINE__);
	cudaGetLastError();
	/* our context reports a sticky error to any call: probe it cheaply */
	cudaError_t health = cudaStreamQuery(c->compute);
	if (health == cudaSuccess || health == cudaErrorNotReady) {
		cudaGetLastError();
		return -EFAULT;
	}
	return cuda_fail(health, "engine device after a failed copy", __FILE__, __LINE__);
}

/*
 * Orders stream s after the work the caller queued on its default stream,
 * legacy or per-thread, before this call: it may still be writing the device
 * or pinned memory that s is about to read, and our streams are
 * non-blocking, so nothing else orders them.
 */
static int after_caller(struct cuda_engine *c, cudaStream_t s)
{
	CU(cudaEventRecord(c->caller, cudaStreamLegacy));
	CU(cudaStreamWaitEvent(s, c->caller, 0));
	CU(cudaEventRecord(c->caller, cudaStreamPerThread));
	CU(cudaStreamWaitEvent(s, c->caller, 0));
	return 0;
}

/*
 * Copies bytes from host memory to dst, which was allocated on the copy
 * stream. Pinned memory goes straight over; pageable memory through two
 * pinned staging buffers, so that the CPU fills one while the DMA engine
 * drains the other. Returns when src may be reused; the compute stream is
 * ordered after the copy.
 */
static int upload(struct cuda_engine *c, void *dst, const void *src, size_t bytes, int pinned)
{
	if (pinned) {
		CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->copy));
	} else {
		for (size_t off = 0, k = 0; off < bytes; off += STAGE_BYTES, k ^= 1) {
			size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
			/* its last copy is done (an event never recorded is complete) */
			CU(cudaEventSynchronize(c->staged[k]));
			memcpy(c->stage[k], (const char *)src + off, len);
			CU(cudaMemcpyAsync((char *)dst + off, c->stage[k], len,
					   cudaMemcpyHostToDevice, c->copy));
			CU(cudaEventRecord(c->staged[k], c->copy));
		}
	}
	CU(cudaEventRecord(c->uploaded, c->copy));
	CU(cudaStreamWaitEvent(c->compute, c->uploaded, 0));
	if (pinned)	/* the caller may reuse src on return */
		CU(cudaEventSynchronize(c->uploaded));
	return 0;
}

/* --- results --- */

/* Queues a result made of partials [first, first + count) times scale. */
static int queue_result(struct cuda_engine *c, double *out, size_t first, size_t count,
			int stride, double scale)
{
	c->queue[c->n_queued++] = (struct queued){ out, first, count, stride, scale };
	c->arena_used = first + count * stride;
	return 0;
}

static int sync_results(struct cuda_engine *c);

/* Reserves room for count partials of stride doubles; syncs when full. */
static int arena_take(struct cuda_engine *c, size_t count, int stride, size_t *first)
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
static int lost(struct cuda_engine *c, int r)
{
	if (r == -EIO) {
		for (size_t i = 0; i < c->n_queued; i++)
			*c->queue[i].out = NAN;
		c->n_queued = 0;
		c->arena_used = 0;
	}
	return r;
}

/* --- counts that reach the host later --- */

/*
 * A tensor's non-finite counts, and a sorted one's finite range, are known
 * only once its kernels have run. They go to a pinned slot (a sort's
 * nonfinite_ends_kernel writes it directly: with UVA a cudaMallocHost
 * pointer is a device pointer too; a count's counters are copied there
 * from d_slots) and an event marks them written, so that prepare returns
 * without a sync, and the next tensor's upload overlaps this one's work.
 * The first host use settles them (cuda_settle).
 */
static int slot_take(struct cuda_engine *c)
{
	return c->n_free_slots ? c->free_slots[--c->n_free_slots] : -1;
}

static void slot_give(struct cuda_engine *c, int s)
{
	if (s >= 0 && s < SLOTS)
		c->free_slots[c->n_free_slots++] = s;
}

/* Copies p's counts from its slot, written (its event is done), and frees the slot. */
static void settle_read(struct cuda_engine *c, struct wd_prepared *p)
{
	const unsigned long long *s = c->h_slots + (size_t)p->dev_slot * SLOT_WORDS;
	p->nonfinite.nan = s[2];
	p->nonfinite.posinf = s[3];
	p->nonfinite.neginf = s[4];
	if (p->method == WD_METHOD_HIST16) {
		p->n_finite = p->numel - s[2] - s[3] - s[4];
	} else {
		p->dev_first = s[0];
		p->n_finite = s[1];
	}
	slot_give(c, p->dev_slot);
}

static int settle(struct cuda_engine *c, struct wd_prepared *p)
{
	if (!p->counts_pending)
		return 0;
	CU(cudaEventSynchronize((cudaEvent_t)p->dev_ready));
	settle_read(c, p);
	cudaEventDestroy((cudaEvent_t)p->dev_ready);
	p->dev_ready = NULL;
	p->dev_slot = -1;
	p->counts_pending = 0;
	return 0;
}

/*
 * Settles a tensor that is being released (freed, or its device given
 * up): its counts are kept when they were written, since a stale tensor
 * keeps what it knew on the host; else the slot is lost with the device.
 */
static void settle_drop(struct cuda_engine *c, struct wd_prepared *p)
{
	if (!p->counts_pending)
		return;
	if (cudaEventSynchronize((cudaEvent_t)p->dev_ready) == cudaSuccess)
		settle_read(c, p);
	cudaEventDestroy((cudaEvent_t)p->dev_ready);
	cudaGetLastError();
	p->dev_ready = NULL;
	p->dev_slot = -1;
	p->counts_pending = 0;
}

/*
 * The work that writes p's counts into h_slots[slot] (or the spare slot,
 * when slot < 0: every slot in use) is queued on the compute stream: marks
 * them pending, to be settled on first use, or, in the spare, waits for
 * them and reads them now.
 */
static int counts_queued(struct cuda_engine *c, struct wd_prepared *p, int slot)
{
	cudaEvent_t ready = NULL;
	cudaError_t err;

	if (slot < 0) {
		CU(cudaStreamSynchronize(c->compute));
		p->dev_slot = SPARE_SLOT;
		settle_read(c, p);	/* gives nothing back: the spare is never handed out */
		p->dev_slot = -1;
		return 0;
	}
	if ((err = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming)) != cudaSuccess ||
	    (err = cudaEventRecord(ready, c->compute)) != cudaSuccess) {
		slot_give(c, slot);
		if (ready)
			cudaEventDestroy(ready);
		return cuda_fail(err, "counts to the host", __FILE__, __LINE__);
	}
	p->dev_slot = slot;
	p->dev_ready = ready;
	p->counts_pending = 1;
	return 0;
}

/* --- prepare --- */

/* 16-byte loads need 16-byte aligned data; a device view may be less. */
static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/*
 * Counts raw's 16-bit codes (uint16, or the upper halves of fp32 words)
 * into p->dev_hist, and their NaN and Inf into the slot's counters, which
 * reach the host later (settle), so that a snapshot's many small tensors
 * (norms, biases) cost launches, not a sync each. The counts themselves
 * stay on the device; the host gets a copy only if it needs one
 * (cuda_to_host: W1 against a tensor on the host, a summary).
 */
template <class F>
static int count16(struct cuda_engine *c, const void *raw, int upper, struct wd_prepared *p)
{
	size_t bytes = 65536 * sizeof(unsigned long long), n = p->numel;
	unsigned blocks = (unsigned)(2 * ((n + HIST_CHUNK - 1) / HIST_CHUNK));
	unsigned long long *hist = (unsigned long long *)p->dev_hist;
	int slot = slot_take(c);
	unsigned long long *cnt = c->d_slots + (size_t)(slot >= 0 ? slot : SPARE_SLOT) * SLOT_WORDS + 2;
	cudaError_t err;

	if ((err = cudaMemsetAsync(hist, 0, bytes, c->compute)) != cudaSuccess ||
	    (err = cudaMemsetAsync(cnt, 0, 3 * sizeof(*cnt), c->compute)) != cudaSuccess) {
		slot_give(c, slot);
		return cuda_fail(err, "cudaMemsetAsync", __FILE__, __LINE__);
	}
	if (upper && aligned16(raw))
		hist16_kernel<F, uint32_t, 4><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint32_t *)raw, n, hist, cnt);
	else if (upper)
		hist16_kernel<F, uint32_t, 1><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint32_t *)raw, n, hist, cnt);
	else if (aligned16(raw))
		hist16_kernel<F, uint16_t, 8><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint16_t *)raw, n, hist, cnt);
	else
		hist16_kernel<F, uint16_t, 1><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint16_t *)raw, n, hist, cnt);
	if ((err = cudaGetLastError()) != cudaSuccess) {
		slot_give(c, slot);
		return cuda_fail(err, "hist16_kernel", __FILE__, __LINE__);
	}
	p->method = WD_METHOD_HIST16;	/* settle reads the counters as a count's */
	unsigned long long *h = c->h_slots + (size_t)(slot >= 0 ? slot : SPARE_SLOT) * SLOT_WORDS + 2;
	if ((err = cudaMemcpyAsync(h, cnt, 3 * sizeof(*cnt), cudaMemcpyDeviceToHost,
				   c->compute)) != cudaSuccess) {
		slot_give(c, slot);
		return cuda_fail(err, "count to the host", __FILE__, __LINE__);
	}
	return counts_queued(c, p, slot);
}

/* Counts 16-bit codes of raw, of format fmt (uint16, or upper halves of uint32). */
static int prepare_hist(struct cuda_engine *c, const void *raw, int upper,
			enum wd_dtype fmt, struct wd_prepared *p)
{
	size_t bytes = 65536 * sizeof(unsigned long long);
	int r = dev_alloc(c, &p->dev_hist, bytes);
	if (r)
		return r;
	p->dev_bytes += bytes;
	p->store = fmt;
	return fmt == WD_BF16 ? count16<fmt_bf16>(c, raw, upper, p) : count16<fmt_f16>(c, raw, upper, p);
}

/*
 * Whether the first (up to) 64 fp32 words of a view have zero low halves:
 * real fp32 data fails here, as on the CPU engine. Read on the host when
 * the view is there; else the 256 bytes come over on the copy stream (or
 * through the host from another device), which does not wait for our
 * sorts on the compute stream.
 */
static int prefix_upcast(struct cuda_engine *c, const void *data, enum mem_kind kind, int owner,
			 size_t n, int *yes)
{
	size_t head = n < 64 ? n : 64;
	const uint32_t *w = (const uint32_t *)data;
	int r;

	*yes = 0;
	if (kind == MEM_DEVICE) {
		if ((r = after_caller(c, c->copy)))
			return r;
		CU(cudaMemcpyAsync(c->h_hist, data, head * 4, cudaMemcpyDeviceToHost, c->copy));
		CU(cudaStreamSynchronize(c->copy));
		w = (const uint32_t *)c->h_hist;
	} else if (kind == MEM_OTHER) {
		if ((r = read_device(c, c->h_hist, data, head * 4, owner)))
			return r;
		w = (const uint32_t *)c->h_hist;
	}
	for (size_t i = 0; i < head; i++)
		if (w[i] & 0xffffu)
			return 0;
	*yes = 1;
	return 0;
}

/* The rest of the upcast check, on the device: every low half is zero. */
static int low_halves_zero(struct cuda_engine *c, const void *raw, size_t n, int *yes)
{
	*yes = 1;
	if (n <= 64)
		return 0;
	CU(cudaMemsetAsync(c->d_counts, 0, sizeof(unsigned long long), c->compute));
	low_halves_kernel<<<grid_for(c, n, 256), 256, 0, c->compute>>>((const uint32_t *)raw, n,
								       c->d_counts);
	CU_LAUNCH();
	CU(cudaMemcpyAsync(c->h_counts, c->d_counts, sizeof(unsigned long long),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	*yes = c->h_counts[0] == 0;
	return 0;
}

/*
 * Copies a device view on the engine's device into raw (allocated on the
 * copy stream), after the caller's default-stream work, and returns once
 * the copy is done: the caller may then reuse or free its memory, as
 * wd_prepare promises, while the sort of our copy runs on.
 */
static int copy_view(struct cuda_engine *c, void *raw, const void *src, size_t bytes)
{
	int r = after_caller(c, c->copy);
	if (r)
		return r;
	CU(cudaMemcpyAsync(raw, src, bytes, cudaMemcpyDeviceToDevice, c->copy));
	CU(cudaEventRecord(c->uploaded, c->copy));
	CU(cudaStreamWaitEvent(c->compute, c->uploaded, 0));
	CU(cudaEventSynchronize(c->uploaded));
	return 0;
}

/*
 * Sorts n values of T at src with CUB's radix sort, whose key map is the
 * CPU engine's, into p->dev_keys; then queues the search for the finite
 * range (settle). When p owns src (own), src is one of the sort's two
 * buffers and is freed or kept as the result; else (the caller's memory,
 * or raw kept for pair statistics) src is only read. On failure every
 * buffer allocated here, and src when owned, is freed.
 */
template <typename T>
static int sort_values(struct cuda_engine *c, T *src, int own, size_t n, struct wd_prepared *p)
{
	void *alt = NULL, *tmp = NULL, *mine = own ? src : NULL;
	size_t bytes = n * sizeof(T), tmp_bytes = 0;
	cudaError_t err;
	unsigned long long *s;
	int slot, r;

	if ((r = dev_alloc(c, &alt, bytes)))
		goto fail;
	if (own) {
		cub::DoubleBuffer<T> db(src, (T *)alt);
		err = cub::DeviceRadixSort::SortKeys(NULL, tmp_bytes, db, (int64_t)n, 0,
						     (int)(8 * sizeof(T)), c->compute);
		if (err == cudaSuccess && !(r = dev_alloc(c, &tmp, tmp_bytes)))
			err = cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, db, (int64_t)n, 0,
							     (int)(8 * sizeof(T)), c->compute);
		if (r)
			goto fail;
		p->dev_keys = db.Current();
	} else {
		err = cub::DeviceRadixSort::SortKeys(NULL, tmp_bytes, (const T *)src, (T *)alt,
						     (int64_t)n, 0, (int)(8 * sizeof(T)), c->compute);
		if (err == cudaSuccess && !(r = dev_alloc(c, &tmp, tmp_bytes)))
			err = cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, (const T *)src, (T *)alt,
							     (int64_t)n, 0, (int)(8 * sizeof(T)),
							     c->compute);
		if (r)
			goto fail;
		p->dev_keys = alt;
	}
	if (err != cudaSuccess) {
		r = cuda_fail(err, "DeviceRadixSort::SortKeys", __FILE__, __LINE__);
		p->dev_keys = NULL;
		goto fail;
	}
	p->dev_bytes += bytes;
	dev_free(c, &tmp, tmp_bytes);	/* in stream order: after the sort */
	if (own) {
		if (p->dev_keys == mine)
			dev_free(c, &alt, bytes);
		else
			dev_free(c, &mine, bytes);
	}
	/* the finite range and the counts, to a pinned slot; settled later */
	slot = slot_take(c);
	s = c->h_slots + (size_t)(slot >= 0 ? slot : SPARE_SLOT) * SLOT_WORDS;
	nonfinite_ends_kernel<T><<<1, 1, 0, c->compute>>>((const T *)p->dev_keys, n, s, s + 2);
	if ((err = cudaGetLastError()) != cudaSuccess) {
		slot_give(c, slot);
		return cuda_fail(err, "nonfinite_ends_kernel", __FILE__, __LINE__);
	}
	return counts_queued(c, p, slot);
fail:
	dev_free(c, &tmp, tmp_bytes);
	dev_free(c, &alt, bytes);
	if (own)
		dev_free(c, &mine, bytes);
	return r;
}

/* Lets go of p's raw values: frees our copy, or forgets the caller's. */
static void drop_raw(struct cuda_engine *c, struct wd_prepared *p, size_t bytes)
{
	if (p->dev_raw_borrowed) {
		p->dev_raw = NULL;
		p->dev_raw_borrowed = 0;
	} else if (p->dev_raw) {
		dev_free(c, &p->dev_raw, bytes);
		p->dev_bytes -= bytes;
	}
}

/*
 * Puts a device view that kernels here must not read (MEM_OTHER) into raw,
 * through a host copy that is then uploaded as pageable memory. raw was
 * allocated first, so that a tensor over the budget costs no host copy.
 */
static int upload_other(struct cuda_engine *c, void *raw, const void *src, size_t bytes,
			int owner)
{
	void *h = malloc(bytes);
	int r;

	if (!h)
		return -ENOMEM;
	r = read_device(c, h, src, bytes, owner);
	if (!r)
		r = upload(c, raw, h, bytes, 0);	/* returns when h may be freed */
	free(h);
	return r;
}

/* 16-bit codes sorted as floats (WD_PREP_FORCE_SORT). */
static int prepare_sorted16(struct cuda_engine *c, const void *raw, enum wd_dtype t, size_t n,
			    int keep_raw, struct wd_prepared *p)
{
	void *wide = NULL;
	int r;

	if ((r = dev_alloc(c, &wide, n * 4)))
		return r;
	if (t == WD_BF16)
		widen16_kernel<fmt_bf16><<<grid_for(c, n, 256), 256, 0, c->compute>>>(
			(const uint16_t *)raw, n, (float *)wide);
	else
		widen16_kernel<fmt_f16><<<grid_for(c, n, 256), 256, 0, c->compute>>>(
			(const uint16_t *)raw, n, (float *)wide);
	cudaError_t err = cudaGetLastError();
	if (err != cudaSuccess) {
		dev_free(c, &wide, n * 4);
		return cuda_fail(err, "widen16_kernel", __FILE__, __LINE__);
	}
	if (!keep_raw)	/* read by the widening only: give it back before the sort */
		drop_raw(c, p, n * 2);
	p->store = WD_F32;
	return sort_values<float>(c, (float *)wide, 1, n, p);	/* owns wide */
}

static int prepare(struct cuda_engine *c, const struct wd_view *v, unsigned flags,
		   struct wd_prepared *p)
{
	size_t esize = wd_dtype_size(v->dtype), n = v->numel, bytes = n * esize;
	int is16 = v->dtype == WD_BF16 || v->dtype == WD_F16;
	int keep_raw = flags & WD_PREP_KEEP_RAW, force_sort = flags & WD_PREP_FORCE_SORT;
	int upcast = 0, owner, r;
	void *raw = NULL;

	p->dev_slot = -1;
	if (n == 0)
		return -ENOMEM;	/* nothing to gain: the CPU path handles empty tensors */
	enum mem_kind kind = mem_kind_of(c, v->data, esize, &owner);
	p->view_on_device = kind == MEM_DEVICE || kind == MEM_OTHER;
	if (v->dtype == WD_F32 && !force_sort &&
	    (r = prefix_upcast(c, v->data, kind, owner, n, &upcast)))
		return r;
	/*
	 * A 16-bit device view that is only counted is counted in place, and
	 * wd_prepare returns once the count is done (below): that costs less
	 * than the copy it replaces, which it would wait for too.
	 */
	int count_in_place = kind == MEM_DEVICE && is16 && !force_sort && !keep_raw;
	if ((kind == MEM_DEVICE && keep_raw) || count_in_place) {
		/* kept by reference (WD_PREP_KEEP_RAW), or counted: read in place */
		raw = (void *)v->data;
		p->dev_raw = raw;
		p->dev_raw_borrowed = 1;
		if ((r = after_caller(c, c->compute)))
			return r;
	} else {
		/* on the copy stream, which writes it first */
		if ((r = dev_alloc_on(c, &raw, bytes, c->copy)))
			return r;
		if (kind == MEM_DEVICE)
			r = copy_view(c, raw, v->data, bytes);
		else if (kind == MEM_OTHER)
			r = upload_other(c, raw, v->data, bytes, owner);
		else if (kind == MEM_PINNED && !(r = after_caller(c, c->copy)))
			r = upload(c, raw, v->data, bytes, 1);
		else if (kind == MEM_PAGEABLE)
			r = upload(c, raw, v->data, bytes, 0);
		if (r) {
			/*
			 * The compute stream may not be ordered after the copy
			 * stream yet: free it where it was allocated.
			 */
			cudaFreeAsync(raw, c->copy);
			c->used -= bytes < c->used ? bytes : c->used;
			return r;
		}
		p->dev_raw = raw;	/* owned by p from here, so release() frees it */
		p->dev_bytes = bytes;
	}
	if (upcast && (r = low_halves_zero(c, raw, n, &upcast)))
		return r;
	if (is16 && !force_sort) {
		r = prepare_hist(c, raw, 0, v->dtype, p);
	} else if (is16) {
		r = prepare_sorted16(c, raw, v->dtype, n, keep_raw, p);
	} else if (upcast) {
		r = prepare_hist(c, raw, 1, WD_BF16, p);
	} else {
		/*
		 * Our own copy of raw is sorted in place (it is one of the
		 * sort's two buffers) unless it is kept for pair statistics;
		 * then, or when it is the caller's memory, it is only read.
		 */
		int own = !p->dev_raw_borrowed && !keep_raw;
		if (own) {
			p->dev_raw = NULL;	/* the sort owns it now */
			p->dev_bytes -= bytes;
		}
		p->store = v->dtype;
		r = v->dtype == WD_F64 ? sort_values<double>(c, (double *)raw, own, n, p)
				       : sort_values<float>(c, (float *)raw, own, n, p);
	}
	if (r)
		return r;
	if (count_in_place)	/* the caller may reuse its memory once we return */
		CU(cudaStreamSynchronize(c->compute));
	if (!keep_raw)
		drop_raw(c, p, bytes);
	return 0;
}

extern "C" int cuda_prepare(struct cuda_engine *c, const struct wd_view *v, unsigned flags,
			    struct wd_prepared *p)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, prepare(c, v, flags, p));
}

extern "C" int cuda_settle(struct cuda_engine *c, struct wd_prepared *p)
{
	if (!p->counts_pending)
		return 0;
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, settle(c, p));
}

extern "C" void cuda_prepared_release(struct cuda_engine *c, struct wd_prepared *p)
{
	on_device on(c->device);	/* on failure the frees below fail, and say nothing */
	settle_drop(c, p);
	dev_free(c, &p->dev_keys, 0);	/* accounted below, as a whole */
	dev_free(c, &p->dev_hist, 0);
	if (p->dev_raw_borrowed)
		p->dev_raw = NULL;	/* the caller's memory */
	else
		dev_free(c, &p->dev_raw, 0);
	p->dev_raw_borrowed = 0;
	c->used -= p->dev_bytes < c->used ? p->dev_bytes : c->used;
	p->dev_bytes = 0;
}

/* --- W1 --- */

/*
 * A prepared 16-bit count as sorted floats, in a new device buffer: the
 * counts in value order, scanned on the device into offsets (no host
 * round trip, no sync), then spread over every thread.
 */
static int expand_to_values(struct cuda_engine *c, const struct wd_prepared *p, float **out)
{
	int f = fmt_index(p->store);
	unsigned n_order = c->n_order[f];
	size_t off_bytes = (n_order + 1) * sizeof(unsigned long long), tmp_bytes = 0;
	void *gathered = NULL, *off = NULL, *tmp = NULL;
	cudaError_t err;
	int r;

	*out = NULL;
	err = cub::DeviceScan::ExclusiveSum(NULL, tmp_bytes, (unsigned long long *)NULL,
					    (unsigned long long *)NULL, (int)n_order + 1, c->compute);
	if (err != cudaSuccess)
		return cuda_fail(err, "DeviceScan (size)", __FILE__, __LINE__);
	if ((r = dev_alloc(c, (void **)out, p->n_finite * 4)) ||
	    (r = dev_alloc(c, &gathered, off_bytes)) || (r = dev_alloc(c, &off, off_bytes)) ||
	    (r = dev_alloc(c, &tmp, tmp_bytes)))
		goto done;
	gather_counts_kernel<<<grid_for(c, n_order + 1, 256), 256, 0, c->compute>>>(
		(const unsigned long long *)p->dev_hist, c->d_order[f], n_order,
		(unsigned long long *)gathered);
	if ((err = cudaGetLastError()) != cudaSuccess) {
		r = cuda_fail(err, "gather_counts_kernel", __FILE__, __LINE__);
		goto done;
	}
	err = cub::DeviceScan::ExclusiveSum(tmp, tmp_bytes, (unsigned long long *)gathered,
					    (unsigned long long *)off, (int)n_order + 1, c->compute);
	if (err != cudaSuccess) {
		r = cuda_fail(err, "DeviceScan", __FILE__, __LINE__);
		goto done;
	}
	{
		unsigned g = grid_for(c, (p->n_finite + EXPAND_ITEMS - 1) / EXPAND_ITEMS, 256);
		if (p->store == WD_BF16)
			expand_kernel<fmt_bf16><<<g, 256, 0, c->compute>>>(
				(const unsigned long long *)off, c->d_order[f], n_order, *out);
		else
			expand_kernel<fmt_f16><<<g, 256, 0, c->compute>>>(
				(const unsigned long long *)off, c->d_order[f], n_order, *out);
		if ((err = cudaGetLastError()) != cudaSuccess)
			r = cuda_fail(err, "expand_kernel", __FILE__, __LINE__);
	}
done:
	dev_free(c, &tmp, tmp_bytes);	/* stream-ordered: after the kernels */
	dev_free(c, &off, off_bytes);
	dev_free(c, &gathered, off_bytes);
	if (r)
		dev_free(c, (void **)out, p->n_finite * 4);
	return r;
}

/* Queues W1 of two sorted value arrays. */
template <typename TA, typename TB>
static int w1_sorted(struct cuda_engine *c, const TA *a, size_t na, const TB *b, size_t nb,
		     double *out)
{
	size_t first;
	unsigned g;
	int r;

	if (sizeof(TA) == sizeof(TB) && na == nb) {
		const int V = 16 / sizeof(TA);
		int vec = aligned16(a) && aligned16(b);
		g = grid_for(c, vec ? (na + V - 1) / V : na, RED_THREADS);
		if ((r = arena_take(c, g, 1, &first)))
			return r;
		if (vec)
			w1_equal_kernel<TA, TA, 16 / sizeof(TA)><<<g, RED_THREADS, 0, c->compute>>>(
				a, (const TA *)b, na, c->d_arena + first);
		else
			w1_equal_kernel<TA, TA, 1><<<g, RED_THREADS, 0, c->compute>>>(
				a, (const TA *)b, na, c->d_arena + first);
		CU_LAUNCH();
		return queue_result(c, out, first, g, 1, 1.0 / (double)na);
	}
	g = grid_for(c, (na + nb + MERGE_ITEMS - 1) / MERGE_ITEMS, RED_THREADS);
	if ((r = arena_take(c, g, 1, &first)))
		return r;
	w1_merge_kernel<TA, TB><<<g, RED_THREADS, 0, c->compute>>>(a, na, b, nb, c->d_arena + first);
	CU_LAUNCH();
	return queue_result(c, out, first, g, 1, 1.0);
}

/* The finite sorted values of p; a 16-bit count is expanded (owned). */
struct sorted {
	const void *values;
	int wide;	/* doubles */
	float *owned;
};

static int sorted_of(struct cuda_engine *c, struct wd_prepared *p, struct sorted *s)
{
	int r;

	s->owned = NULL;
	s->wide = p->method == WD_METHOD_SORT && p->store == WD_F64;
	if (p->method == WD_METHOD_SORT) {
		if ((r = settle(c, p)))
			return r;
		s->values = (const char *)p->dev_keys + p->dev_first * (s->wide ? 8 : 4);
		return 0;
	}
	r = expand_to_values(c, p, &s->owned);
	s->values = s->owned;
	return r;
}

static int w1_async(struct cuda_engine *c, struct wd_prepared *a, struct wd_prepared *b,
		    double *out)
{
	size_t first;
	int r;

	if ((r = settle(c, a)) || (r = settle(c, b)))
		return r;
	if (a->method == WD_METHOD_HIST16 && b->method == WD_METHOD_HIST16 && a->store == b->store) {
		int f = fmt_index(a->store);
		if ((r = arena_take(c, 1, 1, &first)))
			return r;
		w1_hist_scan_kernel<<<1, SCAN_THREADS, 0, c->compute>>>(
			(const unsigned long long *)a->dev_hist, a->n_finite,
			(const unsigned long long *)b->dev_hist, b->n_finite,
			c->d_order[f], c->d_gap[f], c->n_order[f], c->d_arena + first);
		CU_LAUNCH();
		return queue_result(c, out, first, 1, 1, 1.0);
	}
	struct sorted sa, sb;
	if ((r = sorted_of(c, a, &sa)))
		return r;
	if ((r = sorted_of(c, b, &sb))) {
		dev_free(c, (void **)&sa.owned, a->n_finite * 4);
		return r;
	}
	if (!sa.wide && !sb.wide)
		r = w1_sorted(c, (const float *)sa.values, a->n_finite, (const float *)sb.values,
			      b->n_finite, out);
	else if (sa.wide && sb.wide)
		r = w1_sorted(c, (const double *)sa.values, a->n_finite, (const double *)sb.values,
			      b->n_finite, out);
	else if (sa.wide)
		r = w1_sorted(c, (const double *)sa.values, a->n_finite, (const float *)sb.values,
			      b->n_finite, out);
	else
		r = w1_sorted(c, (const float *)sa.values, a->n_finite, (const double *)sb.values,
			      b->n_finite, out);
	dev_free(c, (void **)&sa.owned, a->n_finite * 4);	/* stream-ordered: after use */
	dev_free(c, (void **)&sb.owned, b->n_finite * 4);
	return r;
}

extern "C" int cuda_w1_async(struct cuda_engine *c, const struct wd_prepared *a,
			     const struct wd_prepared *b, double *out)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	/* settling fills in counts: the tensors' values do not change */
	return lost(c, w1_async(c, (struct wd_prepared *)a, (struct wd_prepared *)b, out));
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

/*
 * Host value of the finite sorted value at index i. Copies go on the
 * compute stream: the legacy stream would also wait for the caller's work.
 */
static int value_at(const struct cuda_engine *c, const struct wd_prepared *p, size_t i,
		    double *v)
{
	size_t es = p->store == WD_F64 ? 8 : 4;
	const char *src = (const char *)p->dev_keys + (p->dev_first + i) * es;
	if (es == 8) {
		CU(cudaMemcpyAsync(v, src, 8, cudaMemcpyDeviceToHost, c->compute));
		CU(cudaStreamSynchronize(c->compute));
	} else {
		float f;
		CU(cudaMemcpyAsync(&f, src, 4, cudaMemcpyDeviceToHost, c->compute));
		CU(cudaStreamSynchronize(c->compute));
		*v = f;
	}
	return 0;
}

/*
 * Summary of a sorted device tensor: min and max are its ends; the sums are
 * shifted by the median m (summary_body), so a large mean does not cancel
 * a small spread.
 */
static int summarize(struct cuda_engine *c, struct wd_prepared *p)
{
	struct wd_summary *s = &p->summary;
	double mid;
	size_t first;
	int r;

	if ((r = settle(c, p)))
		return r;
	s->numel = p->numel;
	s->n_finite = p->n_finite;
	s->nonfinite = p->nonfinite;
	s->mean = s->std = s->min = s->max = NAN;
	s->l2 = 0;
	if (!p->n_finite) {
		p->have_summary = 1;
		return 0;
	}
	int wide = p->store == WD_F64;
	const void *v = (const char *)p->dev_keys + p->dev_first * (wide ? 8 : 4);
	int vec = aligned16(v);
	size_t per = vec ? (wide ? 2 : 4) : 1;
	unsigned g = grid_for(c, (p->n_finite + per - 1) / per, RED_THREADS);
	/* past the queued results' partials: those stay for wd_engine_sync */
	if ((r = arena_take(c, g, SUMMARY_PARTIALS, &first)))
		return r;
	double *d = c->d_arena + first;
	if (wide && vec)
		summary_kernel<double, 2><<<g, RED_THREADS, 0, c->compute>>>((const double *)v, p->n_finite, d);
	else if (wide)
		summary_kernel<double, 1><<<g, RED_THREADS, 0, c->compute>>>((const double *)v, p->n_finite, d);
	else if (vec)
		summary_kernel<float, 4><<<g, RED_THREADS, 0, c->compute>>>((const float *)v, p->n_finite, d);
	else
		summary_kernel<float, 1><<<g, RED_THREADS, 0, c->compute>>>((const float *)v, p->n_finite, d);
	CU_LAUNCH();
	CU(cudaMemcpyAsync(c->h_arena + first, d, (size_t)g * SUMMARY_PARTIALS * sizeof(double),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	if ((r = value_at(c, p, 0, &s->min)) || (r = value_at(c, p, p->n_finite - 1, &s->max)) ||
	    (r = value_at(c, p, p->n_finite / 2, &mid)))
		return r;
	summary_finish(c->h_arena + first, g, mid, (double)p->n_finite, &s->mean, &s->std, &s->l2);
	p->have_summary = 1;
	return 0;
}

extern "C" int cuda_summarize(struct cuda_engine *c, struct wd_prepared *p)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, summarize(c, p));
}

/* --- element-wise statistics and copies back --- */

template <typename LA>
static void launch_pair_a(const struct cuda_engine *c, unsigned g, const struct wd_prepared *a,
			  const struct wd_prepared *b, double *out)
{
	const typename LA::T *pa = (const typename LA::T *)a->dev_raw;
	switch (b->dtype) {
	case WD_F32: pair_stats_kernel<LA, load_f32><<<g, RED_THREADS, 0, c->compute>>>(
			pa, (const float *)b->dev_raw, a->numel, out); break;
	case WD_F64: pair_stats_kernel<LA, load_f64><<<g, RED_THREADS, 0, c->compute>>>(
			pa, (const double *)b->dev_raw, a->numel, out); break;
	case WD_F16: pair_stats_kernel<LA, load_f16><<<g, RED_THREADS, 0, c->compute>>>(
			pa, (const uint16_t *)b->dev_raw, a->numel, out); break;
	case WD_BF16: pair_stats_kernel<LA, load_bf16><<<g, RED_THREADS, 0, c->compute>>>(
			pa, (const uint16_t *)b->dev_raw, a->numel, out); break;
	}
}

static int pair_stats(struct cuda_engine *c, const struct wd_prepared *a,
		      const struct wd_prepared *b, struct wd_pair_stats *out)
{
	unsigned g = grid_for(c, (a->numel + PAIR_UNROLL - 1) / PAIR_UNROLL, RED_THREADS);
	size_t first;
	int r;

	if ((r = arena_take(c, g, PAIR_PARTIALS, &first)))	/* as in summarize() */
		return r;
	double *d = c->d_arena + first;
	switch (a->dtype) {
	case WD_F32: launch_pair_a<load_f32>(c, g, a, b, d); break;
	case WD_F64: launch_pair_a<load_f64>(c, g, a, b, d); break;
	case WD_F16: launch_pair_a<load_f16>(c, g, a, b, d); break;
	case WD_BF16: launch_pair_a<load_bf16>(c, g, a, b, d); break;
	}
	CU_LAUNCH();
	CU(cudaMemcpyAsync(c->h_arena + first, d, (size_t)g * PAIR_PARTIALS * sizeof(double),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	pair_stats_finish(c->h_arena + first, g, &out->max_abs_diff, &out->rel_l2,
			  &out->n_compared, &out->n_diff);
	return 0;
}

extern "C" int cuda_pair_stats(struct cuda_engine *c, const struct wd_prepared *a,
			       const struct wd_prepared *b, struct wd_pair_stats *out)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, pair_stats(c, a, b, out));
}

/*
 * p on the host, in a new buffer: a sort's finite values, or a count's
 * 65536 counts (through the pinned buffer).
 */
static int to_host(struct cuda_engine *c, struct wd_prepared *p, void **values)
{
	int r = settle(c, p);
	if (r)
		return r;
	int counted = p->method == WD_METHOD_HIST16;
	size_t es = p->store == WD_F64 ? 8 : 4, n = p->n_finite;
	size_t bytes = counted ? 65536 * sizeof(uint64_t) : n * es;
	void *h = malloc(bytes + es);

	*values = NULL;
	if (!h)
		return -ENOMEM;
	const void *src = counted ? p->dev_hist : (const char *)p->dev_keys + p->dev_first * es;
	cudaError_t err = cudaMemcpyAsync(counted ? (void *)c->h_hist : h, src, bytes,
					  cudaMemcpyDeviceToHost, c->compute);	/* after the sort */
	if (err == cudaSuccess)
		err = cudaStreamSynchronize(c->compute);
	if (err != cudaSuccess) {
		free(h);
		return cuda_fail(err, "copy to host", __FILE__, __LINE__);
	}
	if (counted)
		memcpy(h, c->h_hist, bytes);
	*values = h;
	return 0;
}

extern "C" int cuda_to_host(struct cuda_engine *c, const struct wd_prepared *p, void **values)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, to_host(c, (struct wd_prepared *)p, values));
}

/*
 * For engine.c: device memory to the host, a device view of any device
 * (read_device) or a prepared tensor's raw copy. The compute stream is
 * synced first: a raw copy is written on our non-blocking streams, which
 * the legacy stream that cudaMemcpy uses does not wait for.
 */
extern "C" int cuda_copy_to_host(struct cuda_engine *c, const void *dev, size_t bytes, void **out)
{
	void *h = malloc(bytes ? bytes : 1);
	int owner = -1, r;

	*out = NULL;
	if (!h)
		return -ENOMEM;
	on_device on(c->device);
	if (!on.ok) {
		free(h);
		return lost(c, -EIO);
	}
	cudaError_t err = cudaStreamSynchronize(c->compute);
	if (err != cudaSuccess) {
		free(h);
		return lost(c, cuda_fail(err, "cudaStreamSynchronize", __FILE__, __LINE__));
	}
	mem_kind_of(c, dev, 1, &owner);
	if ((r = read_device(c, h, dev, bytes, owner))) {
		free(h);
		return lost(c, r);
	}
	*out = h;
	return 0;
}
