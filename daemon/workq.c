/* workq.c: a worker thread between two lists (see workq.h). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "logging.h"
#include "workq.h"

static void *workq_main(void *arg)
{
	struct workq *q = arg;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!q->jobs && !q->stopping)
			pthread_cond_wait(&q->wake, &q->lock);
		if (!q->jobs || (q->stopping && !q->finish_queued))
			break;	/* what is left is the caller's to drop */
		struct workq_item *j = q->jobs;
		q->jobs = j->next;
		if (!q->jobs)
			q->jobs_tail = NULL;
		j->next = NULL;
		q->n_jobs--;
		q->current = j;
		int waited = j->waited;
		pthread_mutex_unlock(&q->lock);
		q->work(q, j, q->ctx);
		pthread_mutex_lock(&q->lock);
		q->current = NULL;
		q->pending--;
		if (waited) {	/* the caller owns it, and waits on settled */
			j->finished = 1;
			pthread_cond_broadcast(&q->settled);
		}
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int workq_start(struct workq *q, const char *name, workq_fn work, void *ctx)
{
	int r;

	memset(q, 0, sizeof(*q));
	q->name = name;
	q->work = work;
	q->ctx = ctx;
	if ((q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		return -errno;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->wake, NULL);
	pthread_cond_init(&q->settled, NULL);
	if ((r = pthread_create(&q->thread, NULL, workq_main, q)) != 0) {
		close(q->efd);
		pthread_mutex_destroy(&q->lock);
		pthread_cond_destroy(&q->wake);
		pthread_cond_destroy(&q->settled);
		return -r;
	}
	return 0;
}

/* Passes each item of a list to drop. */
static void drop_all(struct workq_item *i, void (*drop)(struct workq_item *))
{
	for (struct workq_item *n; i && drop; i = n) {
		n = i->next;
		drop(i);
	}
}

void workq_stop(struct workq *q, int finish_queued, void (*drop_job)(struct workq_item *job),
		void (*drop_ready)(struct workq_item *item))
{
	pthread_mutex_lock(&q->lock);
	q->stopping = 1;
	q->finish_queued = finish_queued;
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	drop_all(q->jobs, drop_job);
	drop_all(q->ready, drop_ready);
	close(q->efd);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->wake);
	pthread_cond_destroy(&q->settled);
	memset(q, 0, sizeof(*q));
	q->efd = -1;
}

/* Adds it at the end of the list head .. tail (either list, under the lock). */
static void append(struct workq_item **head, struct workq_item **tail, struct workq_item *it)
{
	it->next = NULL;
	if (*tail)
		(*tail)->next = it;
	else
		*head = it;
	*tail = it;
}

void workq_push(struct workq *q, struct workq_item *job)
{
	pthread_mutex_lock(&q->lock);
	append(&q->jobs, &q->jobs_tail, job);
	q->pending++;
	q->n_jobs++;
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->lock);
}

void workq_call(struct workq *q, struct workq_item *job)
{
	job->waited = 1;
	job->finished = 0;
	pthread_mutex_lock(&q->lock);
	job->next = q->jobs;
	q->jobs = job;
	if (!q->jobs_tail)
		q->jobs_tail = job;
	q->pending++;
	q->n_jobs++;
	pthread_cond_signal(&q->wake);
	while (!job->finished)
		pthread_cond_wait(&q->settled, &q->lock);
	pthread_mutex_unlock(&q->lock);
}

/* Unlinks from *head the items drop_if takes; returns how many, and fixes *tail. */
static size_t remove_if(struct workq_item **head, struct workq_item **tail,
			int (*drop_if)(struct workq_item *, void *), void *ctx)
{
	size_t n = 0;

	*tail = NULL;
	for (struct workq_item **p = head; *p;) {
		struct workq_item *i = *p, *next = i->next;	/* drop_if may free i */
		if (!i->waited && drop_if(i, ctx)) {
			*p = next;
			n++;
		} else {
			*tail = i;
			p = &i->next;
		}
	}
	return n;
}

void workq_remove_if(struct workq *q, int (*drop_if)(struct workq_item *job, void *ctx), void *ctx)
{
	pthread_mutex_lock(&q->lock);
	size_t n = remove_if(&q->jobs, &q->jobs_tail, drop_if, ctx);
	q->pending -= n;
	q->n_jobs -= n;
	pthread_mutex_unlock(&q->lock);
}

void workq_remove_ready_if(struct workq *q, int (*drop_if)(struct workq_item *item, void *ctx),
			   void *ctx)
{
	pthread_mutex_lock(&q->lock);
	q->n_ready -= remove_if(&q->ready, &q->ready_tail, drop_if, ctx);
	pthread_mutex_unlock(&q->lock);
}

void workq_finish(struct workq *q, struct workq_item *item)
{
	uint64_t one = 1;

	pthread_mutex_lock(&q->lock);
	/*
	 * No longer in progress: once it is ready the main thread may take and
	 * free it before the worker returns from work(), and workq_find would
	 * then read it as q->current.
	 */
	if (q->current == item)
		q->current = NULL;
	append(&q->ready, &q->ready_tail, item);
	q->n_ready++;
	if (write(q->efd, &one, sizeof(one)) < 0)
		log_err("%s: eventfd: %s", q->name, strerror(errno));
	pthread_mutex_unlock(&q->lock);
}

int workq_fd(const struct workq *q)
{
	return q->efd;
}

struct workq_item *workq_take(struct workq *q)
{
	uint64_t n;

	pthread_mutex_lock(&q->lock);
	struct workq_item *i = q->ready;
	if (i) {
		q->ready = i->next;
		if (!q->ready)
			q->ready_tail = NULL;
		q->n_ready--;
		i->next = NULL;
	} else if (read(q->efd, &n, sizeof(n)) < 0 && errno != EAGAIN) {
		log_err("%s: eventfd: %s", q->name, strerror(errno));
	}
	pthread_mutex_unlock(&q->lock);
	return i;
}

struct workq_item *workq_find(struct workq *q, int (*match)(struct workq_item *item, void *ctx),
			      void *ctx)
{
	struct workq_item *found = NULL;

	pthread_mutex_lock(&q->lock);
	struct workq_item *lists[] = { q->jobs, q->current, q->ready };
	for (size_t l = 0; !found && l < 3; l++)
		for (struct workq_item *i = lists[l]; i && !found; i = l == 1 ? NULL : i->next)
			if (match(i, ctx))
				found = i;
	pthread_mutex_unlock(&q->lock);
	return found;
}

/* One of q's counters, read under its lock. */
static size_t counter(struct workq *q, const size_t *field)
{
	pthread_mutex_lock(&q->lock);
	size_t n = *field;
	pthread_mutex_unlock(&q->lock);
	return n;
}

size_t workq_queued(struct workq *q)
{
	return counter(q, &q->n_jobs);
}

size_t workq_pending(struct workq *q)
{
	return counter(q, &q->pending);
}

size_t workq_ready(struct workq *q)
{
	return counter(q, &q->n_ready);
}
