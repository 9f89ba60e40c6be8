/*
 * simt_host.h: runs the engine's kernel bodies (cuda/kernel_bodies.h) on
 * the CPU, thread by thread, over the same grid the GPU would run.
 *
 * Each GPU thread is a fiber (ucontext) on one OS thread. A fiber runs
 * until it reaches a collective (a warp vote or shuffle, a block barrier,
 * a block reduction, a cluster barrier) and then yields to the scheduler,
 * which runs the other fibers round robin until every thread the
 * collective needs has arrived. So a warp vote sees the values of all 32
 * lanes at that point of the program, as on the GPU, and a body whose
 * lanes diverge around a collective, or exit before one, is reported as
 * an error instead of hanging. The blocks of a cluster run together and
 * can reach each other's shared memory; clusters run one after another.
 *
 * Atomics are plain read-modify-writes: only one fiber runs at a time.
 * Block reductions add in thread order (CUB's order differs, so results
 * may differ from the GPU's in the last bits; the tests allow 1e-9).
 *
 * ASan is told about every stack switch; valgrind about every stack.
 */
#ifndef WD_SIMT_HOST_H
#define WD_SIMT_HOST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#include "sanitizer.h"
#if WD_UNDER_ASAN
#define SIMT_ASAN 1
#endif
#ifdef SIMT_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define SIMT_VALGRIND 1
#endif

namespace simt {

enum op { OP_NONE, OP_ALL, OP_SHFL0, OP_SUM, OP_OR };

struct warp {
	unsigned arrived, exited;
	unsigned long gen;
	enum op op;
	uint64_t val[32], result;
};

/* A barrier for a group of threads (a block or a cluster). */
struct barrier {
	unsigned size, arrived, exited;
	unsigned long gen;
};

struct fiber {
	ucontext_t ctx;
	void *stack;
	int done;
	void *fake_stack;	/* ASan's, while switched away */
#ifdef SIMT_VALGRIND
	unsigned vg_id;
#endif
};

struct machine;

/* One GPU thread as a body sees it: the interface of dev_thread. */
struct host_thread {
	machine *m;
	unsigned t, b, bd, gd, csize;	/* thread, block, block and grid dims, cluster size */

	unsigned tid() const { return t; }
	unsigned bid() const { return b; }
	unsigned bdim() const { return bd; }
	unsigned lane() const { return t & 31; }
	size_t gtid() const { return (size_t)b * bd + t; }
	size_t gthreads() const { return (size_t)gd * bd; }

	void sync() const;
	int all(int p) const { return (int)warp_op(OP_ALL, p != 0); }
	unsigned shfl0(unsigned v) const { return (unsigned)warp_op(OP_SHFL0, v); }
	unsigned warp_sum(unsigned v) const { return (unsigned)warp_op(OP_SUM, v); }
	unsigned warp_or(unsigned v) const { return (unsigned)warp_op(OP_OR, v); }

	void atomic_add(unsigned *p, unsigned v) const { *p += v; }
	void atomic_add(unsigned long long *p, unsigned long long v) const { *p += v; }
	void atomic_or(unsigned long long *p, unsigned long long v) const { *p |= v; }

	unsigned cluster_rank() const { return b % csize; }
	unsigned cluster_id() const { return b / csize; }
	void cluster_sync() const;
	template <typename T> T *map_shared(T *p, unsigned rank) const;

	void block_sum_out(double v, double *out, int stride = 1, int k = 0) const;
	void block_max_out(double v, double *out, int stride = 1, int k = 0) const;
	unsigned long long block_exclusive_sum(unsigned long long v) const;

	uint64_t warp_op(enum op o, uint64_t v) const;
};

/* The threads of one cluster, and the scheduler that runs them. */
struct machine {
	unsigned bd, gd, csize, first_block;
	size_t shared_bytes;
	std::vector<fiber> fibers;
	std::vector<warp> warps;	/* per warp of the cluster */
	std::vector<barrier> blocks;	/* per block of the cluster */
	barrier cluster;
	std::vector<char> shared;	/* shared memory, per block */
	std::vector<double> red;	/* per thread: block reductions */
	std::vector<unsigned long long> scan;
	ucontext_t sched;
	unsigned current;
	unsigned long progress;	/* arrivals and exits: a pass without any is a deadlock */
	const char *error;
	std::function<void(host_thread &, void *)> body;
#ifdef SIMT_ASAN
	void *fake_stack;
	const void *main_bottom;
	size_t main_size;
#endif

	static const size_t STACK = 256 << 10;

	unsigned index(const host_thread &x) const { return (x.b - first_block) * bd + x.t; }
	void *shared_of(unsigned block_in_cluster)
	{
		return shared.data() + (size_t)block_in_cluster * shared_bytes;
	}

	/* Back to the scheduler until it resumes this fiber. */
	void yield()
	{
		fiber &f = fibers[current];
#ifdef SIMT_ASAN
		__sanitizer_start_switch_fiber(&f.fake_stack, main_bottom, main_size);
#endif
		swapcontext(&f.ctx, &sched);
#ifdef SIMT_ASAN
		__sanitizer_finish_switch_fiber(f.fake_stack, NULL, NULL);
#endif
	}

	/* Waits at b until its generation moves on; fails on exited threads. */
	void arrive(barrier &bar)
	{
		unsigned long gen = bar.gen;
		progress++;
		if (++bar.arrived + bar.exited == bar.size) {
			if (bar.exited)
				fail("a barrier with exited threads");
			bar.arrived = 0;
			bar.gen++;
			return;
		}
		while (bar.gen == gen && !error)
			yield();
	}

	void fail(const char *why)
	{
		if (!error)
			error = why;
	}
};

static thread_local machine *running;

inline uint64_t host_thread::warp_op(enum op o, uint64_t v) const
{
	warp &w = m->warps[m->index(*this) / 32];
	unsigned long gen = w.gen;
	if (w.arrived == 0)
		w.op = o;
	else if (w.op != o)
		m->fail("lanes of a warp in different collectives");
	w.val[lane()] = v;
	m->progress++;
	if (++w.arrived + w.exited == 32) {
		if (w.exited)
			m->fail("a warp collective with exited lanes");
		uint64_t r = o == OP_ALL ? 1 : 0;
		for (int l = 0; l < 32; l++)
			r = o == OP_ALL ? (r && w.val[l]) : o == OP_SUM ? r + w.val[l]
			  : o == OP_OR ? (r | w.val[l]) : w.val[0];
		w.result = r;
		w.arrived = 0;
		w.gen++;
		return r;
	}
	while (w.gen == gen && !m->error)
		m->yield();
	return w.result;
}

inline void host_thread::sync() const
{
	m->arrive(m->blocks[b - m->first_block]);
}

inline void host_thread::cluster_sync() const
{
	m->arrive(m->cluster);
}

template <typename T>
inline T *host_thread::map_shared(T *p, unsigned rank) const
{
	size_t off = (char *)p - (char *)m->shared_of(b - m->first_block);
	return (T *)((char *)m->shared_of(rank) + off);
}

inline void host_thread::block_sum_out(double v, double *out, int stride, int k) const
{
	double *r = &m->red[(size_t)(b - m->first_block) * bd];
	r[t] = v;
	sync();
	if (t == 0) {
		double s = 0;
		for (unsigned i = 0; i < bd; i++)
			s += r[i];
		out[(size_t)stride * b + k] = s;
	}
	sync();
}

inline void host_thread::block_max_out(double v, double *out, int stride, int k) const
{
	double *r = &m->red[(size_t)(b - m->first_block) * bd];
	r[t] = v;
	sync();
	if (t == 0) {
		double s = r[0];
		for (unsigned i = 1; i < bd; i++)
			s = s > r[i] ? s : r[i];
		out[(size_t)stride * b + k] = s;
	}
	sync();
}

inline unsigned long long host_thread::block_exclusive_sum(unsigned long long v) const
{
	unsigned long long *r = &m->scan[(size_t)(b - m->first_block) * bd];
	r[t] = v;
	sync();
	if (t == 0) {
		unsigned long long s = 0;
		for (unsigned i = 0; i < bd; i++) {
			unsigned long long x = r[i];
			r[i] = s;
			s += x;
		}
	}
	sync();
	unsigned long long mine = r[t];
	sync();
	return mine;
}

static void trampoline(void)
{
	machine *m = running;
#ifdef SIMT_ASAN
	__sanitizer_finish_switch_fiber(NULL, &m->main_bottom, &m->main_size);
#endif
	unsigned i = m->current;
	host_thread x;
	x.m = m;
	x.t = i % m->bd;
	x.b = m->first_block + i / m->bd;
	x.bd = m->bd;
	x.gd = m->gd;
	x.csize = m->csize;
	m->body(x, m->shared_of(i / m->bd));
	/* this thread is gone: collectives still waiting for it fail */
	m->warps[i / 32].exited++;
	warp &w = m->warps[i / 32];
	if (w.arrived && w.arrived + w.exited == 32)
		m->fail("a warp collective with exited lanes");
	m->blocks[i / m->bd].exited++;
	m->cluster.exited++;
	m->fibers[i].done = 1;
	m->progress++;
#ifdef SIMT_ASAN
	__sanitizer_start_switch_fiber(NULL, m->main_bottom, m->main_size);	/* this stack is done */
#endif
	setcontext(&m->sched);
}

/* Sets fiber i up to run the body from the start (getcontext returns twice). */
__attribute__((noinline)) static void start(machine &m, unsigned i)
{
	fiber &f = m.fibers[i];
	f.done = 0;
	getcontext(&f.ctx);
	f.ctx.uc_stack.ss_sp = f.stack;
	f.ctx.uc_stack.ss_size = machine::STACK;
	f.ctx.uc_link = NULL;
	makecontext(&f.ctx, trampoline, 0);
}

/*
 * Runs fiber i until it yields or ends. Apart, so that swapcontext, which
 * returns twice, clobbers no local of the scheduler's loop.
 */
__attribute__((noinline)) static void resume(machine &m, unsigned i)
{
	m.current = i;
#ifdef SIMT_ASAN
	__sanitizer_start_switch_fiber(&m.fake_stack, m.fibers[i].stack, machine::STACK);
#endif
	swapcontext(&m.sched, &m.fibers[i].ctx);
#ifdef SIMT_ASAN
	__sanitizer_finish_switch_fiber(m.fake_stack, NULL, NULL);
#endif
}

/*
 * Runs body(thread, its block's shared memory) for every thread of a 1-D
 * grid of grid blocks of block threads, in clusters of cluster blocks,
 * with shared_bytes of dynamic shared memory per block. Returns NULL, or
 * what went wrong.
 */
inline const char *run(unsigned grid, unsigned block, unsigned cluster, size_t shared_bytes,
		       std::function<void(host_thread &, void *)> body)
{
	machine m;
	unsigned n = block * cluster;

	if (block % 32 || grid % cluster)
		return "a block is not whole warps, or the grid not whole clusters";
	m.bd = block;
	m.gd = grid;
	m.csize = cluster;
	m.shared_bytes = (shared_bytes + 15) & ~(size_t)15;
	m.body = body;
	m.error = NULL;
	m.progress = 0;
	m.fibers.resize(n);
	for (unsigned i = 0; i < n; i++) {
		m.fibers[i].stack = mmap(NULL, machine::STACK, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m.fibers[i].stack == MAP_FAILED)
			return "no memory for fiber stacks";
#ifdef SIMT_VALGRIND
		m.fibers[i].vg_id = VALGRIND_STACK_REGISTER(m.fibers[i].stack,
							    (char *)m.fibers[i].stack + machine::STACK);
#endif
	}
	m.shared.assign(m.shared_bytes * cluster + 16, 0);
	m.red.assign(n, 0);
	m.scan.assign(n, 0);
	running = &m;
	for (unsigned c = 0; c < grid / cluster && !m.error; c++) {
		m.first_block = c * cluster;
		m.warps.assign(n / 32, warp());
		m.blocks.assign(cluster, barrier{ block, 0, 0, 0 });
		m.cluster = barrier{ n, 0, 0, 0 };
		/* shared memory starts as garbage on the GPU: so here */
		memset(m.shared.data(), 0xa5, m.shared.size());
		for (unsigned i = 0; i < n; i++)
			start(m, i);
		for (unsigned left = n; left && !m.error;) {
			unsigned long before = m.progress;
			left = 0;
			for (unsigned i = 0; i < n; i++) {
				if (m.fibers[i].done)
					continue;
				resume(m, i);
				left += !m.fibers[i].done;
			}
			if (left && m.progress == before)
				m.fail("threads wait on each other: a collective some never reach");
		}
	}
	for (unsigned i = 0; i < n; i++) {
#ifdef SIMT_VALGRIND
		VALGRIND_STACK_DEREGISTER(m.fibers[i].vg_id);
#endif
		munmap(m.fibers[i].stack, machine::STACK);
	}
	running = NULL;
	return m.error;
}

} /* namespace simt */

#endif
