/*
 * engine_cuda.cuh: what the files of the CUDA backend share, internal to
 * cuda/: struct cuda_engine, the CU() check, on_device, and the host
 * functions one file gives the others. No kernels: the backend is built
 * without relocatable device code, so each kernel is launched only from
 * the file that compiles it (kernels.cuh's are static), and the files call
 * each other through host functions only.
 *
 *   engine_cuda.cu      open and close, the budget and device memory, the
 *                       results arena and sync
 *   prepare_cuda.cu     upload, the 16-bit count and the sort, counts that
 *                       reach the host later, copies of device views
 *   w1_stats_cuda.cu    W1, summaries, pair statistics, prepared tensors
 *                       copied back to the host
 *
 * Depends on the CUDA runtime and the engine's internal headers.
 */
#ifndef WD_ENGINE_CUDA_CUH
#define WD_ENGINE_CUDA_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

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
int cuda_fail(cudaError_t err, const char *what, const char *file, int line);

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

static inline int fmt_index(enum wd_dtype t) { return t == WD_BF16 ? 0 : 1; }

/* 16-byte loads need 16-byte aligned data; a device view may be less. */
static inline int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* --- engine_cuda.cu: device memory within the budget, in stream order --- */

/*
 * Allocates in stream order on s. Memory is usable on s only: a buffer
 * another stream writes first must be allocated on that stream, since the
 * pool may hand out memory whose cudaFreeAsync on s is still pending.
 * -ENOMEM over the budget (or the device is full).
 */
int dev_alloc_on(struct cuda_engine *c, void **p, size_t bytes, cudaStream_t s);
/* dev_alloc_on the compute stream */
int dev_alloc(struct cuda_engine *c, void **p, size_t bytes);
/* Frees *p (bytes of the budget) in compute-stream order, and clears it. */
void dev_free(struct cuda_engine *c, void **p, size_t bytes);
/* Blocks for n items of a grid-stride kernel: up to 8 per SM (kernel_bodies.h). */
unsigned grid_for(const struct cuda_engine *c, size_t n, unsigned threads);

/* --- engine_cuda.cu: results --- */

/* Queues a result made of partials [first, first + count) times scale. */
int queue_result(struct cuda_engine *c, double *out, size_t first, size_t count,
		 int stride, double scale);
/* Reserves room for count partials of stride doubles; syncs when full. */
int arena_take(struct cuda_engine *c, size_t count, int stride, size_t *first);
/*
 * Returns r; after -EIO (engine.c then gives the device up, and with it
 * the queue) the queued results are written as NaN first.
 */
int lost(struct cuda_engine *c, int r);

/* --- prepare_cuda.cu --- */

/*
 * Waits for a device tensor's counts (p->counts_pending) and fills them
 * in: n_finite, nonfinite, and a sort's dev_first. A no-op once done.
 */
int settle(struct cuda_engine *c, struct wd_prepared *p);
/* Lets the count kernels use their dynamic shared memory (at open). */
cudaError_t count16_kernels_setup(void);

/* --- w1_stats_cuda.cu --- */

/* Whether this device can run this build's kernels (at open). */
cudaError_t w1_kernels_probe(void);

#endif
