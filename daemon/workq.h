/*
 * workq.h: the skeleton the daemon's workers share (docs/daemon.md,
 * "Queues"): one thread taking jobs from a list in order, and handing what
 * it finishes to the main thread through a second list, whose growth an
 * eventfd signals to the main loop's poll. The spool thread and the compute
 * thread are each one; what a job is and what a worker makes of it is
 * theirs. Items are intrusive: a job embeds a struct workq_item, which
 * workq_entry turns back into the job. Depends on libc and pthreads.
 */
#ifndef WD_WORKQ_H
#define WD_WORKQ_H

#include <pthread.h>
#include <stddef.h>

/* The struct of type whose member is the item at ptr. */
#define workq_entry(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

struct workq_item {
	struct workq_item *next;
	int waited;		/* workq_call's: its caller waits, and owns it */
	int finished;
};

struct workq;
/* Does one job, on the worker. It owns job unless job->waited. */
typedef void (*workq_fn)(struct workq *q, struct workq_item *job, void *ctx);

struct workq {
	const char *name;		/* for the log: "spool", "compute" */
	workq_fn work;
	void *ctx;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;		/* a job, or stopping */
	pthread_cond_t settled;		/* a waited job is done */
	struct workq_item *jobs, *jobs_tail;	/* not started */
	struct workq_item *current;		/* in progress */
	struct workq_item *ready, *ready_tail;	/* finished, for the main thread */
	size_t pending;			/* queued, and the one in progress */
	size_t n_jobs;			/* queued, not started */
	size_t n_ready;
	int stopping, finish_queued, efd;
};

/* Starts the worker thread: 0 or -errno (nothing is left to release then). */
int workq_start(struct workq *q, const char *name, workq_fn work, void *ctx);
/*
 * Stops the worker: after every queued job when finish_queued, else after
 * the job in progress. Then jobs not started go to drop_job, and finished
 * items not taken to drop_ready (either may be NULL when there can be none).
 */
void workq_stop(struct workq *q, int finish_queued, void (*drop_job)(struct workq_item *job),
		void (*drop_ready)(struct workq_item *item));

/* Queues a job, last. */
void workq_push(struct workq *q, struct workq_item *job);
/*
 * Queues job first and waits until the worker has done it (the job in
 * progress finishes before). job stays the caller's.
 */
void workq_call(struct workq *q, struct workq_item *job);
/*
 * Removes the queued jobs for which drop_if(job, ctx) is nonzero; drop_if
 * frees them. Under the queue's lock: drop_if must not call into q.
 */
void workq_remove_if(struct workq *q, int (*drop_if)(struct workq_item *job, void *ctx), void *ctx);
/* The same over the finished items not yet taken. */
void workq_remove_ready_if(struct workq *q, int (*drop_if)(struct workq_item *item, void *ctx),
			   void *ctx);

/*
 * From the worker (or the main thread): item goes to the main thread, and
 * is no longer the job in progress (workq_find); the eventfd wakes it.
 * The main thread may free it at once: the worker must not touch it after.
 */
void workq_finish(struct workq *q, struct workq_item *item);
/* Readable when finished items wait: put it in the poll set. */
int workq_fd(const struct workq *q);
/* One finished item, in order, or NULL (the eventfd is then cleared). */
struct workq_item *workq_take(struct workq *q);
/*
 * The first item, queued, in progress or finished and not taken, for which
 * match(item, ctx) is nonzero; NULL when none. match runs under the queue's
 * lock. The item stays where it is: the caller may read it, and change
 * what the worker does not read, only from the thread that takes items.
 */
struct workq_item *workq_find(struct workq *q, int (*match)(struct workq_item *item, void *ctx),
			      void *ctx);
/* Jobs queued or in progress. */
size_t workq_pending(struct workq *q);
/* Jobs queued, not started. */
size_t workq_queued(struct workq *q);
/* Finished items not yet taken. */
size_t workq_ready(struct workq *q);

#endif
