/*
 * engine_cuda.cu: the CUDA backend of the engine (lib/backend_cuda.h), for
 * sm_90 (H100/H200). engine.c decides where work runs; this file runs it on
 * the device and never exits: every CUDA call is checked, and an error
 * returns -EIO (or -ENOMEM for an allocation over the budget) so that the
 * engine can fall back to the CPU.
 *
 * The flow of one tensor, prepared from host memory:
 *   host --(pinned staging, copy stream)--> raw on the device
 *     fp32/fp64: classify (keys, non-finite counts) -> CUB radix sort -> summary
 *     bf16/fp16 and upcast-bf16 fp32: 65536-bin count (copied to the host too)
 * wd_prepare returns once the upload is done; the sort runs on the compute
 * stream while the next tensor uploads. Device memory given as a view is
 * read in place when it is on the engine's device and aligned to its
 * element size; otherwise it is copied to the host and uploaded as pageable
 * memory. W1 kernels write per-block partials
 * into a results arena; wd_engine_sync copies the arena back once and adds
 * the partials on the host in a fixed order.
 *
 * The engine runs on one device, chosen at open. Every entry point makes it
 * current for its work and gives the caller's current device back before it
 * returns (struct on_device), so that a framework on another device (or the
 * same one) sees no change.
 *
 * Depends on CUDA, CUB and the engine's internal headers; not on HDF5,
 * ZeroMQ or YAML.
 */
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
	uint64_t budget, used;
	uint64_t peak;			/* most used since the last trim */
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

static unsigned grid_for(const struct cuda_engine *c, size_t n, unsigned threads)
{
	size_t blocks = (n + threads - 1) / threads;
	size_t cap = (size_t)c->sms * 4;
	if (cap > MAX_PARTIALS)
		cap = MAX_PARTIALS;
	return (unsigned)(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
}

/* --- open and close --- */

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
	OPEN_CU(cudaFuncSetAttribute(hist16_kernel<uint16_t, 0>,
				     cudaFuncAttributeMaxDynamicSharedMemorySize, HIST_HALF * 4));
	OPEN_CU(cudaFuncSetAttribute(hist16_kernel<uint32_t, 16>,
				     cudaFuncAttributeMaxDynamicSharedMemorySize, HIST_HALF * 4));
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

/* --- prepare --- */

static int count_nonfinite(struct cuda_engine *c, struct wd_prepared *p)
{
	CU(cudaMemcpyAsync(c->h_counts, c->d_counts, 4 * sizeof(unsigned long long),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaEventRecord(c->done, c->compute));
	CU(cudaEventSynchronize(c->done));
	p->nonfinite.nan = c->h_counts[0];
	p->nonfinite.posinf = c->h_counts[1];
	p->nonfinite.neginf = c->h_counts[2];
	p->n_finite = p->numel - p->nonfinite.nan - p->nonfinite.posinf - p->nonfinite.neginf;
	return 0;
}

/* The 65536 counts of raw's codes into p->dev_hist and p->hist (one sync). */
static int count16(struct cuda_engine *c, const void *raw, int upper, struct wd_prepared *p)
{
	size_t bytes = 65536 * sizeof(unsigned long long);
	unsigned blocks = (unsigned)(2 * ((p->numel + HIST_CHUNK - 1) / HIST_CHUNK));

	CU(cudaMemsetAsync(p->dev_hist, 0, bytes, c->compute));
	if (upper)
		hist16_kernel<uint32_t, 16><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint32_t *)raw, p->numel, (unsigned long long *)p->dev_hist);
	else
		hist16_kernel<uint16_t, 0><<<blocks, HIST_THREADS, HIST_HALF * 4, c->compute>>>(
			(const uint16_t *)raw, p->numel, (unsigned long long *)p->dev_hist);
	CU_LAUNCH();
	CU(cudaMemcpyAsync(p->hist, p->dev_hist, bytes, cudaMemcpyDeviceToHost, c->compute));
	CU(cudaEventRecord(c->done, c->compute));
	CU(cudaEventSynchronize(c->done));	/* host counts are used right away */
	return 0;
}

/* Counts 16-bit codes of raw (uint16, or the upper halves of uint32). */
static int prepare_hist(struct cuda_engine *c, const void *raw, int upper,
			enum wd_dtype fmt, struct wd_prepared *p)
{
	size_t bytes = 65536 * sizeof(unsigned long long);
	int r = dev_alloc(c, &p->dev_hist, bytes);
	if (r)
		return r;
	p->dev_bytes += bytes;
	p->hist = (uint64_t *)malloc(bytes);
	if (!p->hist)
		return -ENOMEM;
	if ((r = count16(c, raw, upper, p))) {
		/* engine.c clears p to start again on the cpu: free it here */
		free(p->hist);
		p->hist = NULL;
		return r;
	}
	p->method = WD_METHOD_HIST16;
	p->store = fmt;
	p->nonfinite = (struct wd_nonfinite){ 0, 0, 0 };
	half_count_nonfinite(fmt, p->hist, &p->nonfinite);
	const struct half_table *t = half_table_get(fmt);
	p->n_finite = 0;
	for (uint32_t j = 0; j < t->n_order; j++)
		p->n_finite += p->hist[t->order[j]];
	return 0;
}

/*
 * Writes the radix keys of raw (fp32 keys for 16-bit data) and counts its
 * non-finite values into p (one sync); for fp32, h_counts[3] is then zero
 * when the data is upcast bf16.
 */
static int keys_and_counts(struct cuda_engine *c, enum wd_dtype t, const void *raw,
			   void *keys, size_t n, struct wd_prepared *p)
{
	unsigned g = grid_for(c, n, 256) * 4;

	CU(cudaMemsetAsync(c->d_counts, 0, 4 * sizeof(unsigned long long), c->compute));
	switch (t) {
	case WD_F32:
		classify_kernel<uint32_t><<<g, 256, 0, c->compute>>>(
			(const uint32_t *)raw, (uint32_t *)keys, n, c->d_counts);
		break;
	case WD_F64:
		classify_kernel<unsigned long long><<<g, 256, 0, c->compute>>>(
			(const unsigned long long *)raw, (unsigned long long *)keys, n, c->d_counts);
		break;
	case WD_BF16:
		keys_from16_kernel<load_bf16><<<g, 256, 0, c->compute>>>(
			(const uint16_t *)raw, (uint32_t *)keys, n, c->d_counts);
		break;
	case WD_F16:
		keys_from16_kernel<load_f16><<<g, 256, 0, c->compute>>>(
			(const uint16_t *)raw, (uint32_t *)keys, n, c->d_counts);
		break;
	}
	CU_LAUNCH();
	return count_nonfinite(c, p);
}

/*
 * Sorts keys (n of them, non-finite last). Takes ownership of keys: on
 * success p->dev_keys holds the result; on failure every buffer is freed,
 * so that the budget stays right when the tensor goes to the CPU.
 */
template <typename K>
static int sort_keys(struct cuda_engine *c, K *keys, size_t n, struct wd_prepared *p)
{
	void *mine = keys, *alt = NULL, *tmp = NULL, *other;
	size_t bytes = n * sizeof(K), tmp_bytes = 0;
	cudaError_t err;
	int r;

	if ((r = dev_alloc(c, &alt, bytes)))
		goto fail;
	{
		cub::DoubleBuffer<K> db(keys, (K *)alt);
		err = cub::DeviceRadixSort::SortKeys(NULL, tmp_bytes, db, (int64_t)n, 0,
						     (int)(8 * sizeof(K)), c->compute);
		if (err != cudaSuccess) {
			r = cuda_fail(err, "SortKeys (size)", __FILE__, __LINE__);
			goto fail;
		}
		if ((r = dev_alloc(c, &tmp, tmp_bytes)))
			goto fail;
		err = cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, db, (int64_t)n, 0,
						     (int)(8 * sizeof(K)), c->compute);
		if (err != cudaSuccess) {
			r = cuda_fail(err, "SortKeys", __FILE__, __LINE__);
			goto fail;
		}
		p->dev_keys = db.Current();
	}
	p->dev_bytes += bytes;
	other = p->dev_keys == mine ? alt : mine;
	dev_free(c, &tmp, tmp_bytes);	/* in stream order: after the sort */
	dev_free(c, &other, bytes);
	return 0;
fail:
	dev_free(c, &tmp, tmp_bytes);
	dev_free(c, &alt, bytes);
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

static int prepare(struct cuda_engine *c, const struct wd_view *v, unsigned flags,
		   struct wd_prepared *p)
{
	size_t esize = wd_dtype_size(v->dtype), n = v->numel, bytes = n * esize;
	int is16 = v->dtype == WD_BF16 || v->dtype == WD_F16;
	int keep_raw = flags & WD_PREP_KEEP_RAW;
	void *raw = NULL, *keys = NULL;
	int owner, r;

	if (n == 0)
		return -ENOMEM;	/* nothing to gain: the CPU path handles empty tensors */
	enum mem_kind kind = mem_kind_of(c, v->data, esize, &owner);
	p->view_on_device = kind == MEM_DEVICE || kind == MEM_OTHER;
	if (kind == MEM_DEVICE) {	/* already there: read it in place */
		raw = (void *)v->data;
		p->dev_raw = raw;
		p->dev_raw_borrowed = 1;
		if ((r = after_caller(c, c->compute)))
			return r;
	} else {
		/* on the copy stream, which writes it first */
		if ((r = dev_alloc_on(c, &raw, bytes, c->copy)))
			return r;
		p->dev_raw = raw;	/* owned by p from here, so release() frees it */
		p->dev_bytes = bytes;
		if (kind == MEM_OTHER)
			r = upload_other(c, raw, v->data, bytes, owner);
		else if (kind == MEM_PINNED && !(r = after_caller(c, c->copy)))
			r = upload(c, raw, v->data, bytes, 1);
		else if (kind == MEM_PAGEABLE)
			r = upload(c, raw, v->data, bytes, 0);
		if (r)
			return r;
	}
	if (is16 && !(flags & WD_PREP_FORCE_SORT)) {
		r = prepare_hist(c, raw, 0, v->dtype, p);
	} else {
		/* fp32 or fp64 keys; 16-bit data is sorted as fp32 keys */
		int wide = v->dtype == WD_F64;
		size_t key_bytes = is16 ? n * 4 : bytes;
		if ((r = dev_alloc(c, &keys, key_bytes)))
			return r;
		if ((r = keys_and_counts(c, v->dtype, raw, keys, n, p))) {
			dev_free(c, &keys, key_bytes);
			return r;
		}
		if (!is16 && !wide && !(flags & WD_PREP_FORCE_SORT) && c->h_counts[3] == 0) {
			dev_free(c, &keys, key_bytes);
			r = prepare_hist(c, raw, 1, WD_BF16, p);
		} else {
			/*
			 * The keys are written (keys_and_counts synced): free raw
			 * now, before the sort is queued. A free queued after the
			 * sort would make the pool order the next tensor's upload,
			 * which reuses that memory on the copy stream, after this
			 * sort.
			 */
			if (!keep_raw)
				drop_raw(c, p, bytes);
			p->store = wide ? WD_F64 : WD_F32;
			r = wide ? sort_keys<unsigned long long>(c, (unsigned long long *)keys, n, p)
				 : sort_keys<uint32_t>(c, (uint32_t *)keys, n, p);	/* owns keys */
		}
	}
	if (r)
		return r;
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

extern "C" void cuda_prepared_release(struct cuda_engine *c, struct wd_prepared *p)
{
	on_device on(c->device);	/* on failure the frees below fail, and say nothing */
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

/* A prepared 16-bit count as sorted fp32 keys, in a new device buffer. */
static int expand_to_keys(struct cuda_engine *c, const struct wd_prepared *p, uint32_t **keys)
{
	const struct half_table *t = half_table_get(p->store);
	unsigned long long *off = (unsigned long long *)malloc(t->n_order * sizeof(*off));
	void *d_off = NULL;
	int r;

	if (!off)
		return -ENOMEM;
	unsigned long long sum = 0;
	for (uint32_t j = 0; j < t->n_order; j++) {
		off[j] = sum;
		sum += p->hist[t->order[j]];
	}
	if ((r = dev_alloc(c, (void **)keys, p->n_finite * 4)) ||
	    (r = dev_alloc(c, &d_off, t->n_order * sizeof(*off)))) {
		free(off);
		dev_free(c, (void **)keys, p->n_finite * 4);
		return r;
	}
	cudaError_t err = cudaMemcpyAsync(d_off, off, t->n_order * sizeof(*off),
					  cudaMemcpyHostToDevice, c->compute);
	if (err == cudaSuccess)
		err = cudaStreamSynchronize(c->compute);	/* off is pageable */
	free(off);
	if (err != cudaSuccess)
		return cuda_fail(err, "offsets upload", __FILE__, __LINE__);
	int f = fmt_index(p->store);
	if (p->store == WD_BF16)
		expand_hist_kernel<load_bf16><<<4096, 256, 0, c->compute>>>(
			(const unsigned long long *)p->dev_hist, c->d_order[f],
			(const unsigned long long *)d_off, t->n_order, *keys);
	else
		expand_hist_kernel<load_f16><<<4096, 256, 0, c->compute>>>(
			(const unsigned long long *)p->dev_hist, c->d_order[f],
			(const unsigned long long *)d_off, t->n_order, *keys);
	CU_LAUNCH();
	dev_free(c, &d_off, t->n_order * sizeof(*off));
	return 0;
}

/* Queues W1 of two sorted key arrays. */
template <typename KA, typename KB>
static int w1_sorted(struct cuda_engine *c, const KA *a, size_t na, const KB *b, size_t nb,
		     double *out)
{
	size_t first;
	unsigned g;
	int r;

	if (sizeof(KA) == sizeof(KB) && na == nb) {
		g = grid_for(c, na, RED_THREADS);
		if ((r = arena_take(c, g, 1, &first)))
			return r;
		w1_equal_kernel<KA><<<g, RED_THREADS, 0, c->compute>>>(a, (const KA *)b, na,
								      c->d_arena + first);
		CU_LAUNCH();
		return queue_result(c, out, first, g, 1, 1.0 / (double)na);
	}
	g = grid_for(c, (na + nb + MERGE_ITEMS - 1) / MERGE_ITEMS, RED_THREADS);
	if ((r = arena_take(c, g, 1, &first)))
		return r;
	w1_merge_kernel<KA, KB><<<g, RED_THREADS, 0, c->compute>>>(a, na, b, nb, c->d_arena + first);
	CU_LAUNCH();
	return queue_result(c, out, first, g, 1, 1.0);
}

/* The keys of p as fp32 or fp64 keys; 16-bit counts are expanded (owned). */
struct keyed {
	const void *keys;
	int wide;
	uint32_t *owned;
};

static int keyed_of(struct cuda_engine *c, const struct wd_prepared *p, struct keyed *k)
{
	k->owned = NULL;
	k->wide = p->method == WD_METHOD_SORT && p->store == WD_F64;
	if (p->method == WD_METHOD_SORT) {
		k->keys = p->dev_keys;
		return 0;
	}
	int r = expand_to_keys(c, p, &k->owned);
	k->keys = k->owned;
	return r;
}

static int w1_async(struct cuda_engine *c, const struct wd_prepared *a,
		    const struct wd_prepared *b, double *out)
{
	size_t first;
	int r;

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
	struct keyed ka, kb;
	if ((r = keyed_of(c, a, &ka)))
		return r;
	if ((r = keyed_of(c, b, &kb))) {
		dev_free(c, (void **)&ka.owned, a->n_finite * 4);
		return r;
	}
	if (!ka.wide && !kb.wide)
		r = w1_sorted(c, (const uint32_t *)ka.keys, a->n_finite, (const uint32_t *)kb.keys,
			      b->n_finite, out);
	else if (ka.wide && kb.wide)
		r = w1_sorted(c, (const unsigned long long *)ka.keys, a->n_finite,
			      (const unsigned long long *)kb.keys, b->n_finite, out);
	else if (ka.wide)
		r = w1_sorted(c, (const unsigned long long *)ka.keys, a->n_finite,
			      (const uint32_t *)kb.keys, b->n_finite, out);
	else
		r = w1_sorted(c, (const uint32_t *)ka.keys, a->n_finite,
			      (const unsigned long long *)kb.keys, b->n_finite, out);
	dev_free(c, (void **)&ka.owned, a->n_finite * 4);	/* stream-ordered: after use */
	dev_free(c, (void **)&kb.owned, b->n_finite * 4);
	return r;
}

extern "C" int cuda_w1_async(struct cuda_engine *c, const struct wd_prepared *a,
			     const struct wd_prepared *b, double *out)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, w1_async(c, a, b, out));
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
		const double *h = c->h_arena + q->first;
		double sum = 0;
		for (size_t k = 0; k < q->count; k++)
			sum += h[k];
		*q->out = sum * q->scale;
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
 * Host value of one sorted device key at index i. Copies go on the compute
 * stream: the legacy stream would also wait for the caller's own work.
 */
static int key_value_at(const struct cuda_engine *c, const struct wd_prepared *p, size_t i,
			double *v)
{
	if (p->store == WD_F64) {
		unsigned long long k, u;
		CU(cudaMemcpyAsync(&k, (const unsigned long long *)p->dev_keys + i, 8,
				   cudaMemcpyDeviceToHost, c->compute));
		CU(cudaStreamSynchronize(c->compute));
		u = k ^ (((k >> 63) - 1) | 0x8000000000000000ull);
		memcpy(v, &u, 8);
	} else {
		uint32_t k, u;
		float f;
		CU(cudaMemcpyAsync(&k, (const uint32_t *)p->dev_keys + i, 4,
				   cudaMemcpyDeviceToHost, c->compute));
		CU(cudaStreamSynchronize(c->compute));
		u = k ^ (((k >> 31) - 1) | 0x80000000u);
		memcpy(&f, &u, 4);
		*v = f;
	}
	return 0;
}

/*
 * Summary of a sorted device tensor: min and max are its ends; the sums are
 * shifted by the median m (sum (x-m), sum (x-m)^2), so a large mean does not
 * cancel a small spread.
 */
static int summarize(struct cuda_engine *c, struct wd_prepared *p)
{
	struct wd_summary *s = &p->summary;
	unsigned g = grid_for(c, p->n_finite, RED_THREADS);
	double mid, s1 = 0, s2 = 0, sq = 0, n = (double)p->n_finite;
	size_t first;
	int r;

	s->numel = p->numel;
	s->n_finite = p->n_finite;
	s->nonfinite = p->nonfinite;
	s->mean = s->std = s->min = s->max = NAN;
	s->l2 = 0;
	if (!p->n_finite) {
		p->have_summary = 1;
		return 0;
	}
	/* past the queued results' partials: those stay for wd_engine_sync */
	if ((r = arena_take(c, g, 3, &first)))
		return r;
	if (p->store == WD_F64)
		summary_kernel<unsigned long long><<<g, RED_THREADS, 0, c->compute>>>(
			(const unsigned long long *)p->dev_keys, p->n_finite, c->d_arena + first);
	else
		summary_kernel<uint32_t><<<g, RED_THREADS, 0, c->compute>>>(
			(const uint32_t *)p->dev_keys, p->n_finite, c->d_arena + first);
	CU_LAUNCH();
	CU(cudaMemcpyAsync(c->h_arena + first, c->d_arena + first, (size_t)g * 3 * sizeof(double),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	for (unsigned k = 0; k < g; k++) {
		s1 += c->h_arena[first + 3 * k];
		s2 += c->h_arena[first + 3 * k + 1];
		sq += c->h_arena[first + 3 * k + 2];
	}
	if ((r = key_value_at(c, p, 0, &s->min)) ||
	    (r = key_value_at(c, p, p->n_finite - 1, &s->max)) ||
	    (r = key_value_at(c, p, p->n_finite / 2, &mid)))
		return r;
	s->mean = mid + s1 / n;
	double var = (s2 - s1 * s1 / n) / n;
	s->std = sqrt(var > 0 ? var : 0);
	s->l2 = sqrt(sq);
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
	unsigned g = grid_for(c, a->numel, RED_THREADS);
	size_t first;
	int r;

	if ((r = arena_take(c, g, 5, &first)))	/* as in summarize() */
		return r;
	double *d = c->d_arena + first;
	switch (a->dtype) {
	case WD_F32: launch_pair_a<load_f32>(c, g, a, b, d); break;
	case WD_F64: launch_pair_a<load_f64>(c, g, a, b, d); break;
	case WD_F16: launch_pair_a<load_f16>(c, g, a, b, d); break;
	case WD_BF16: launch_pair_a<load_bf16>(c, g, a, b, d); break;
	}
	CU_LAUNCH();
	CU(cudaMemcpyAsync(c->h_arena + first, d, (size_t)g * 5 * sizeof(double),
			   cudaMemcpyDeviceToHost, c->compute));
	CU(cudaStreamSynchronize(c->compute));
	double mx = 0, dd = 0, aa = 0, ncmp = 0, ndiff = 0;
	const double *h = c->h_arena + first;
	for (unsigned k = 0; k < g; k++) {
		mx = fmax(mx, h[5 * k]);
		dd += h[5 * k + 1];
		aa += h[5 * k + 2];
		ncmp += h[5 * k + 3];
		ndiff += h[5 * k + 4];
	}
	out->n_compared = (uint64_t)ncmp;
	out->n_diff = (uint64_t)ndiff;
	out->max_abs_diff = ncmp > 0 ? mx : NAN;
	out->rel_l2 = dd == 0 ? (ncmp > 0 ? 0 : NAN) : aa > 0 ? sqrt(dd) / sqrt(aa) : NAN;
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

static int to_host(struct cuda_engine *c, const struct wd_prepared *p, void **values)
{
	size_t ks = p->store == WD_F64 ? 8 : 4, n = p->n_finite;
	void *h = malloc(n * ks + ks);

	*values = NULL;
	if (!h)
		return -ENOMEM;
	cudaError_t err = cudaMemcpyAsync(h, p->dev_keys, n * ks, cudaMemcpyDeviceToHost,
					  c->compute);	/* after the sort */
	if (err == cudaSuccess)
		err = cudaStreamSynchronize(c->compute);
	if (err != cudaSuccess) {
		free(h);
		return cuda_fail(err, "copy to host", __FILE__, __LINE__);
	}
	/* keys back to the floats' bits, as the CPU engine stores them */
	if (ks == 4)
		for (size_t i = 0; i < n; i++) {
			uint32_t k = ((uint32_t *)h)[i];
			((uint32_t *)h)[i] = k ^ (((k >> 31) - 1) | 0x80000000u);
		}
	else
		for (size_t i = 0; i < n; i++) {
			unsigned long long k = ((unsigned long long *)h)[i];
			((unsigned long long *)h)[i] = k ^ (((k >> 63) - 1) | 0x8000000000000000ull);
		}
	*values = h;
	return 0;
}

extern "C" int cuda_to_host(struct cuda_engine *c, const struct wd_prepared *p, void **values)
{
	on_device on(c->device);
	if (!on.ok)
		return lost(c, -EIO);
	return lost(c, to_host(c, p, values));
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
