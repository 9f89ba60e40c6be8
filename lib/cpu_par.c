/*
 * cpu_par.c: how the CPU backend splits its work between threads
 * (backend_cpu.h, docs/engine.md "Threads"). The engine's pool starts at
 * the first job big enough to split, with the thread count asked for, or
 * as many threads as the process may use cores (its affinity mask, not
 * the host's count: a container or taskset gives fewer). Every split is
 * arranged so that the result does not depend on it: sorts are stable
 * and unique, integer counts add in any order, and floating-point sums
 * go block by block, their partials added on the caller in block order.
 */
#include <stdlib.h>

#include "backend_cpu.h"
#include "pool.h"

void cpu_release_scratch(struct cpu_engine *c)
{
	free(c->scratch);
	c->scratch = NULL;
	c->scratch_size = 0;
}

void cpu_engine_close(struct cpu_engine *c)
{
	pool_close(&c->pool);
	cpu_release_scratch(c);
}

void cpu_engine_set_threads(struct cpu_engine *c, int threads)
{
	c->threads = threads < 0 ? 0 : threads > POOL_MAX ? POOL_MAX : threads;
	if (c->pool && pool_threads(c->pool) != cpu_engine_threads(c))
		pool_close(&c->pool);
}

int cpu_engine_threads(const struct cpu_engine *c)
{
	return c->threads ? c->threads : pool_cores_available();
}

int cpu_parts(struct cpu_engine *c, uint64_t n)
{
	uint64_t grain = c && c->grain ? c->grain : CPU_GRAIN;
	int parts;

	if (!c || n / grain < 2)
		return 1;
	parts = cpu_engine_threads(c);
	if ((uint64_t)parts > n / grain)
		parts = (int)(n / grain);
	if (parts < 2)
		return 1;
	if (!c->pool && pool_open(&c->pool, cpu_engine_threads(c)) < 0)
		return 1;	/* no threads to be had: one, with the same result */
	return parts;
}

struct blocks_job {
	void (*part)(void *ctx, uint64_t first, uint64_t b0, uint64_t b1);
	void *ctx;
	uint64_t first, end;	/* this round's blocks */
};

static void blocks_part(void *ctx, int i, int parts)
{
	const struct blocks_job *j = ctx;
	uint64_t len = j->end - j->first;
	uint64_t b0 = j->first + len * (unsigned)i / (unsigned)parts;
	uint64_t b1 = j->first + len * (unsigned)(i + 1) / (unsigned)parts;

	if (b0 < b1)
		j->part(j->ctx, j->first, b0, b1);
}

void cpu_blocks(struct cpu_engine *c, uint64_t nblocks, uint64_t n,
		void (*part)(void *ctx, uint64_t first, uint64_t b0, uint64_t b1),
		void (*combine)(void *ctx, uint64_t first, uint64_t end), void *ctx)
{
	int parts = cpu_parts(c, n);

	for (uint64_t first = 0; first < nblocks; first += CPU_ROUND) {
		struct blocks_job j = { part, ctx, first,
					nblocks - first < CPU_ROUND ? nblocks : first + CPU_ROUND };
		int p = (uint64_t)parts < j.end - first ? parts : (int)(j.end - first);
		pool_run(p > 1 ? c->pool : NULL, p, blocks_part, &j);
		combine(ctx, first, j.end);
	}
}
