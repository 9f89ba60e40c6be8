/*
 * backend_cpu.h: what the CPU backend gives engine.c, the twin of
 * backend_cuda.h. engine.c decides where work runs (lib/engine.c is the
 * only dispatcher); these functions only run it on the host, and call
 * nothing in engine.c. Internal; libc only.
 *
 *   prepare_cpu.c  cpu_prepare: classify, sort (sort_vq.h or radix_sort.h)
 *                  or count 16-bit codes
 *   cpu_par.c      the threads: cpu_parts, cpu_blocks (pool.c below them)
 *   w1.c           cpu_w1: the three W1 kernels
 *   stats.c        cpu_summarize, cpu_pair_stats
 *
 * Errors: -ENOMEM, -EINVAL a bad argument.
 */
#ifndef WD_BACKEND_CPU_H
#define WD_BACKEND_CPU_H

#include <stddef.h>
#include <stdint.h>
#include "wdrift.h"

struct wd_prepared;

struct wd_pool;

/*
 * The CPU backend's state: the radix sort's ping-pong buffer, grown on
 * demand and kept between prepares (a prepared tensor may take it over,
 * docs/engine.md "Ping-pong buffer adoption"), and its threads. Zeroed is
 * empty, with as many threads as the process has cores.
 */
struct cpu_engine {
	void *scratch;
	size_t scratch_size;
	int threads;		/* asked for; 0: the cores available */
	uint64_t grain;		/* the fewest elements a part gets; 0: CPU_GRAIN */
	struct wd_pool *pool;	/* started by the first split (cpu_parts) */
	enum wd_sort sort;	/* fp32 and fp64: vqsort where it can (AUTO), or radix */
};

/* A part of a split job has this many elements at least, by default. */
#define CPU_GRAIN (1u << 16)

/* Whether fp32 and fp64 are sorted by vqsort (docs/engine.md, "The sort"). */
int cpu_sort_vq(const struct cpu_engine *c);
/* Whether a tensor of n values with keys of key_size bytes is: not mid-size fp32 on AUTO with vqsort on AVX2. */
int cpu_sort_vq_for(const struct cpu_engine *c, uint64_t n, size_t key_size);
/*
 * Whether preparing v on one thread needs no memory but its result: 16-bit
 * counts, or vqsort's in-place sort of the keys (the radix sort takes a
 * scratch buffer of the keys' size besides).
 */
int cpu_prepare_in_result(const struct cpu_engine *c, const struct wd_view *v, unsigned flags);
/*
 * What preparing v costs, in elements of a sort: its element count, or a
 * sixteenth of it for a 16-bit count (a 2^24 bf16 tensor is counted in 6
 * ms on one thread, c, where an fp32 one is sorted in about 110). For
 * sharing a batch's work out between threads.
 */
uint64_t cpu_prepare_cost(const struct wd_view *v, unsigned flags);
/* wd_prepare_bytes on c: a prepare's result and scratch, on one thread. */
uint64_t cpu_prepare_bytes(const struct cpu_engine *c, const struct wd_view *v, unsigned flags);
/* Frees the scratch buffer the radix sort keeps between prepares (wd_engine_release_scratch). */
void cpu_release_scratch(struct cpu_engine *c);
/* Frees the scratch buffer and joins the threads; c is empty (and usable) again. */
void cpu_engine_close(struct cpu_engine *c);
/* Sets the thread count (0: the cores available); the pool restarts when next needed. */
void cpu_engine_set_threads(struct cpu_engine *c, int threads);
/* The thread count in effect: threads, or the cores available. */
int cpu_engine_threads(const struct cpu_engine *c);
/*
 * How many parts to split n elements into (1 when c is NULL, n is small,
 * or the threads could not be started), with c->pool ready for them.
 * Results never depend on it: every split gives the one-thread bits.
 */
int cpu_parts(struct cpu_engine *c, uint64_t n);

/*
 * Runs a blocked reduction over nblocks blocks of a job of n elements:
 * part(ctx, first, b0, b1) computes the partials of blocks [b0, b1) into
 * the caller's round buffer at b - first, on the parts, in rounds of at
 * most CPU_ROUND blocks; after each round combine(ctx, first, b1) adds
 * them on the caller in block order. The sum's order, and so its bits,
 * is the same whatever the split.
 */
#define CPU_ROUND (1u << 16)
void cpu_blocks(struct cpu_engine *c, uint64_t nblocks, uint64_t n,
		void (*part)(void *ctx, uint64_t first, uint64_t b0, uint64_t b1),
		void (*combine)(void *ctx, uint64_t first, uint64_t end), void *ctx);
/*
 * Defines cpu_blocks' part for a job of type job_type (ctx) whose round
 * buffer is its member partial: partial[b - first] = block(job, b) for
 * each of its blocks. What differs between reductions is block and their
 * combine.
 */
#define CPU_BLOCKS_PART(name, job_type, block)						\
	static void name(void *ctx, uint64_t first, uint64_t b0, uint64_t b1)		\
	{										\
		job_type *j = ctx;							\
		for (uint64_t blk = b0; blk < b1; blk++)				\
			j->partial[blk - first] = block(j, blk);			\
	}

/*
 * Prepares v into p, whose dtype, numel and method (WD_METHOD_SORT) the
 * caller has set: counts NaN/+Inf/-Inf, then sorts the finite values or
 * counts the 16-bit codes (WD_PREP_FORCE_SORT sorts those too). With
 * WD_PREP_KEEP_RAW, p keeps a reference to v->data. On error p may hold
 * buffers: the caller frees it with wd_prepared_free.
 */
int cpu_prepare(struct cpu_engine *c, const struct wd_view *v, unsigned flags,
		struct wd_prepared *p);

/*
 * Freed buffers kept for reuse (lib/spares.h says why and how much): a
 * zeroed 65,536-bin count (HIST16's hist[], 512 KiB), and a buffer of at
 * least size bytes for sort keys (a sorted tensor's values[]), and their
 * returns. Key buffers of CPU_KEYS_SPARE_MIN usable bytes or more are
 * kept (smaller ones go to malloc and free), those of CPU_KEYS_SPARE_MAX
 * or more (bigbuf's huge-page ones) only until the next cpu_spares_trim.
 * Each list keeps CPU_SPARE_BYTES at any time, and as much again as the
 * peak handed out since the last cpu_spares_trim exceeds what is handed
 * out now. The puts take any buffer from malloc, or NULL. cpu_spares_trim
 * (wd_engine_release_scratch) frees every large one and what else is kept
 * beyond CPU_SPARE_BYTES, and starts the peaks again.
 */
#define CPU_SPARE_BYTES (32u << 20)
#define CPU_KEYS_SPARE_MIN (64u << 10)
#define CPU_KEYS_SPARE_MAX (4u << 20)
uint64_t *cpu_hist_get(void);
void cpu_hist_put(uint64_t *hist);
void *cpu_keys_get(size_t size);
void cpu_keys_put(void *keys);
void cpu_spares_trim(void);
uint64_t cpu_spares_kept(void);

/*
 * W1 between two prepared tensors in host memory (values[] or hist[]) that
 * both have finite values.
 */
double cpu_w1(struct cpu_engine *c, const struct wd_prepared *a, const struct wd_prepared *b);

/*
 * The summary of a prepared tensor in host memory, split over c's threads
 * (c may be NULL: one thread). With no finite value,
 * or neither values[] nor hist[] on the host (its device was lost), the
 * statistics are NaN and l2 is 0.
 */
void cpu_summarize(struct cpu_engine *c, const struct wd_prepared *p, struct wd_summary *s);

/*
 * The code the pair statistics of fp32 and bf16 pairs run in (stats.c),
 * each giving the same bits: the plain C lanes, SSE2 vectors (x86-64) or
 * AVX2 vectors (x86-64, where the CPU has AVX2). cpu_pair_code is -1, the
 * best this build and CPU run (cpu_pair_code_best), unless a test sets it
 * to run another (between calls, on no other thread).
 */
enum { CPU_PAIR_C = 0, CPU_PAIR_SSE2 = 1, CPU_PAIR_AVX2 = 2 };
extern int cpu_pair_code;
int cpu_pair_code_best(void);

/* Element-wise statistics of two raw tensors in host memory, same numel. */
int cpu_pair_stats(struct cpu_engine *c, const struct wd_view *a, const struct wd_view *b,
		   struct wd_pair_stats *out);

#endif
