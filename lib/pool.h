/*
 * pool.h: the CPU engine's threads (docs/engine.md, "Threads"). A pool of
 * n threads is the caller plus n - 1 workers, started when the pool is
 * opened and joined when it is closed. pool_run hands out one job split in
 * parts; the parts of one run are disjoint by construction, so they share
 * nothing but the job's read-only context and their own outputs.
 *
 * The engine owns its pool (one per engine, created at the first call
 * that splits work), and an engine is used by one thread at a time; a
 * pool_run from another thread while one is in flight (wd_summarize on a
 * tensor of an engine that another thread is using) runs its parts on the
 * caller, one after the other: the same result, later. Internal; libc and
 * pthreads only.
 */
#ifndef WD_POOL_H
#define WD_POOL_H

struct wd_pool;

/*
 * A pool of threads threads in all (1 to POOL_MAX): 0, -EINVAL, or
 * -ENOMEM / -EAGAIN when memory or a thread could not be had (the workers
 * already started are joined).
 */
int pool_open(struct wd_pool **out, int threads);
/* Joins the workers and frees the pool; *p is NULL after. */
void pool_close(struct wd_pool **p);
int pool_threads(const struct wd_pool *p);

/*
 * Runs fn(ctx, i, parts) for every i in 0 .. parts - 1 and returns when
 * all have returned. parts is at most pool_threads(p); part 0 runs on the
 * caller. p may be NULL: every part runs on the caller, in order.
 */
void pool_run(struct wd_pool *p, int parts, void (*fn)(void *ctx, int i, int parts), void *ctx);

/* The most threads a pool has. */
#define POOL_MAX 256

/* The cores this process may run on (sched_getaffinity), at least 1. */
int pool_cores_available(void);

#endif
