/*
 * pool.c: the engine's worker threads (pool.h). One job at a time: the
 * caller publishes it under the lock with a new generation number, each
 * worker whose index is below the job's part count runs its part, and the
 * last to finish wakes the caller. Workers sleep on a condition variable
 * between jobs, so an idle pool costs nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "pool.h"

struct worker {
	struct wd_pool *pool;
	int index;		/* 1 .. threads - 1: part 0 is the caller's */
	pthread_t tid;
};

struct wd_pool {
	int threads;
	pthread_mutex_t lock;
	pthread_cond_t wake;	/* workers: a new job, or stop */
	pthread_cond_t done;	/* the caller: the last part is finished */
	pthread_mutex_t busy;	/* held by the caller of pool_run */
	unsigned long gen;	/* the job's number */
	int stop;
	/* the job */
	void (*fn)(void *ctx, int i, int parts);
	void *ctx;
	int parts;
	int left;		/* workers' parts not finished */
	struct worker *w;
	int started;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct wd_pool *p = w->pool;
	unsigned long seen = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->wake, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		if (w->index >= p->parts)
			continue;
		void (*fn)(void *, int, int) = p->fn;
		void *ctx = p->ctx;
		int parts = p->parts;
		pthread_mutex_unlock(&p->lock);
		fn(ctx, w->index, parts);
		pthread_mutex_lock(&p->lock);
		if (--p->left == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int pool_cores_available(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set) < POOL_MAX ? CPU_COUNT(&set) : POOL_MAX;
	return 1;
}

int pool_open(struct wd_pool **out, int threads)
{
	struct wd_pool *p;

	*out = NULL;
	if (threads < 1 || threads > POOL_MAX)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p || !(p->w = calloc((size_t)threads, sizeof(*p->w)))) {
		free(p);
		return -ENOMEM;
	}
	p->threads = threads;
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->busy, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 1; i < threads; i++) {
		p->w[i] = (struct worker){ p, i, 0 };
		if (pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i])) {
			pool_close(&p);
			return -EAGAIN;
		}
		p->started = i;
	}
	*out = p;
	return 0;
}

void pool_close(struct wd_pool **pp)
{
	struct wd_pool *p = *pp;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (int i = 1; i <= p->started; i++)
		pthread_join(p->w[i].tid, NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->busy);
	pthread_cond_destroy(&p->wake);
	pthread_cond_destroy(&p->done);
	free(p->w);
	free(p);
	*pp = NULL;
}

int pool_threads(const struct wd_pool *p)
{
	return p ? p->threads : 1;
}

void pool_run(struct wd_pool *p, int parts, void (*fn)(void *ctx, int i, int parts), void *ctx)
{
	if (parts < 1)
		return;
	if (!p || parts == 1 || parts > p->threads || pthread_mutex_trylock(&p->busy)) {
		/* no workers, or they are another caller's now: the parts in turn */
		for (int i = 0; i < parts; i++)
			fn(ctx, i, parts);
		return;
	}
	pthread_mutex_lock(&p->lock);
	p->fn = fn;
	p->ctx = ctx;
	p->parts = parts;
	p->left = parts - 1;
	p->gen++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	fn(ctx, 0, parts);
	pthread_mutex_lock(&p->lock);
	while (p->left)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->busy);
}
