/*
 * backend_cpu.h: what the CPU backend gives engine.c, the twin of
 * backend_cuda.h. engine.c decides where work runs (lib/engine.c is the
 * only dispatcher); these functions only run it on the host, and call
 * nothing in engine.c. Internal; libc only.
 *
 *   prepare_cpu.c  cpu_prepare: classify, radix sort or count 16-bit codes
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

/*
 * The CPU backend's state: the radix sort's ping-pong buffer, grown on
 * demand and kept between prepares (a prepared tensor may take it over,
 * docs/engine.md "Ping-pong buffer adoption"). Zeroed is empty.
 */
struct cpu_engine {
	void *scratch;
	size_t scratch_size;
};

/* Frees the scratch buffer; c is empty (and usable) again. */
void cpu_engine_close(struct cpu_engine *c);

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
 * W1 between two prepared tensors in host memory (values[] or hist[]) that
 * both have finite values.
 */
double cpu_w1(const struct wd_prepared *a, const struct wd_prepared *b);

/*
 * The summary of a prepared tensor in host memory. With no finite value,
 * or neither values[] nor hist[] on the host (its device was lost), the
 * statistics are NaN and l2 is 0.
 */
void cpu_summarize(const struct wd_prepared *p, struct wd_summary *s);

/* Element-wise statistics of two raw tensors in host memory, same numel. */
int cpu_pair_stats(const struct wd_view *a, const struct wd_view *b,
		   struct wd_pair_stats *out);

#endif
