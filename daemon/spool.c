/*
 * spool.c: the spool thread (see spool.h). Two lists under one mutex:
 * "jobs" filled by the main thread, "done" filled here; an eventfd wakes
 * the main thread's poll when "done" grows.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint.h"
#include "identity.h"
#include "logging.h"
#include "spool.h"
#include "wal.h"

struct job {
	struct snapshot *snap;
	int err;		/* 0: durable; else -errno, the cause as far as known */
	char why[256];
	struct job *next;
};

struct spool {
	char *dir;
	struct wal *wal;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct job *jobs, *jobs_tail, *done;
	size_t depth;
	int stopping, efd;
};

static int mkdir_p(const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, 0750) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	return mkdir(tmp, 0750) < 0 && errno != EEXIST ? -errno : 0;
}

/* fsync(2) of a directory: 0 or -errno. */
static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = fd < 0 || fsync(fd) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	return r;
}

/* Writes one snapshot durably: 0, or -errno of the cause with why filled. */
static int store(struct spool *sp, struct snapshot *snap, char *why, size_t whylen)
{
	char dir[4096], path[4200], err[WD_CKPT_ERR_MAX];
	struct wd_ckpt_tensor *t = calloc(snap->n_tensors + 1, sizeof(*t));
	int r = 0;

	if (!t)
		return snprintf(why, whylen, "out of memory"), -ENOMEM;
	snprintf(dir, sizeof(dir), "%s/spool/%s", sp->dir, snap->run->name);
	struct stat st;
	int fresh = stat(dir, &st) < 0;	/* a run's first snapshot: its directory is new */
	if ((r = mkdir_p(dir)) < 0) {
		snprintf(why, whylen, "cannot create '%.180s': %s", dir, strerror(-r));
		free(t);
		return r;
	}
	if (fresh) {	/* the new directories' entries must survive a crash too */
		char parent[4200];
		snprintf(parent, sizeof(parent), "%s/spool", sp->dir);
		if ((r = fsync_path(parent)) < 0 || (r = fsync_path(sp->dir)) < 0) {
			snprintf(why, whylen, "cannot fsync the spool directory: %s", strerror(-r));
			free(t);
			return r;
		}
	}
	snprintf(path, sizeof(path), "%s/%lld.h5", dir, (long long)snap->step);
	for (size_t i = 0; i < snap->n_tensors; i++) {
		struct tensor_buf *b = &snap->tensors[i];
		t[i].name = b->name;
		t[i].view = (struct wd_view){ b->dtype, b->data, b->total };
		t[i].rank = b->ndims;
		t[i].dims = b->shape;
	}
	r = wd_ckpt_write(path, t, snap->n_tensors, err);
	free(t);
	if (r < 0) {
		snprintf(why, whylen, "%.255s", err);
		return -EIO;	/* the cause inside HDF5 is not known here */
	}
	/* the rename must survive a crash too: no ack without it */
	if ((r = fsync_path(dir)) < 0) {
		snprintf(why, whylen, "cannot fsync '%.180s': %s", dir, strerror(-r));
		return r;
	}
	/* content: what identifies it, so that a re-send with other content is refused */
	json_t *content = identity_content_json(snap);
	json_t *rec = content ? json_pack("{s:s,s:s,s:I,s:I,s:I,s:s,s:o}", "t", "snapshot", "run",
				snap->run->name, "step", (json_int_t)snap->step, "tensors",
				(json_int_t)snap->n_tensors, "bytes", (json_int_t)snap->bytes, "file",
				path + strlen(sp->dir) + 1, "content", content) : NULL;
	char *payload = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
	json_decref(rec);
	r = payload ? wal_append(sp->wal, payload, strlen(payload)) : -ENOMEM;
	free(payload);
	if (r == 0)
		r = wal_sync(sp->wal);
	if (r < 0) {
		snprintf(why, whylen, "write-ahead log: %s", strerror(-r));
		return r;
	}
	return 0;
}

static void *spool_main(void *arg)
{
	struct spool *sp = arg;

	pthread_mutex_lock(&sp->lock);
	for (;;) {
		while (!sp->jobs && !sp->stopping)
			pthread_cond_wait(&sp->wake, &sp->lock);
		if (!sp->jobs)
			break;	/* stopping, and everything done */
		struct job *j = sp->jobs;
		sp->jobs = j->next;
		if (!sp->jobs)
			sp->jobs_tail = NULL;
		pthread_mutex_unlock(&sp->lock);
		j->err = store(sp, j->snap, j->why, sizeof(j->why));
		pthread_mutex_lock(&sp->lock);
		j->next = sp->done;
		sp->done = j;
		uint64_t one = 1;
		if (write(sp->efd, &one, sizeof(one)) < 0)
			log_err("spool: eventfd: %s", strerror(errno));
	}
	pthread_mutex_unlock(&sp->lock);
	return NULL;
}

int spool_start(const char *dir, struct wal *wal, struct spool **out)
{
	struct spool *sp = calloc(1, sizeof(*sp));
	int r = 0;

	*out = NULL;
	if (!sp || !(sp->dir = strdup(dir))) {
		free(sp);
		return -ENOMEM;
	}
	sp->wal = wal;
	sp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&sp->lock, NULL);
	pthread_cond_init(&sp->wake, NULL);
	if (sp->efd < 0 || (r = pthread_create(&sp->thread, NULL, spool_main, sp)) != 0) {
		r = sp->efd < 0 ? -errno : -r;
		if (sp->efd >= 0)
			close(sp->efd);
		free(sp->dir);
		free(sp);
		return r;
	}
	*out = sp;
	return 0;
}

void spool_submit(struct spool *sp, struct snapshot *snap)
{
	struct job *j = calloc(1, sizeof(*j));

	pthread_mutex_lock(&sp->lock);
	if (!j) {	/* report it as failed; the publisher re-sends */
		pthread_mutex_unlock(&sp->lock);
		log_err("spool: out of memory queueing run '%s' step %lld", snap->run->name,
			(long long)snap->step);
		return;
	}
	j->snap = snap;
	if (sp->jobs_tail)
		sp->jobs_tail->next = j;
	else
		sp->jobs = j;
	sp->jobs_tail = j;
	sp->depth++;
	pthread_cond_signal(&sp->wake);
	pthread_mutex_unlock(&sp->lock);
}

int spool_fd(const struct spool *sp)
{
	return sp->efd;
}

struct snapshot *spool_take(struct spool *sp, int *err, char *why, size_t whylen)
{
	struct snapshot *snap = NULL;
	uint64_t n;

	pthread_mutex_lock(&sp->lock);
	struct job *j = sp->done;
	if (j) {
		sp->done = j->next;
		sp->depth--;
	} else if (read(sp->efd, &n, sizeof(n)) < 0 && errno != EAGAIN) {
		log_err("spool: eventfd: %s", strerror(errno));
	}
	pthread_mutex_unlock(&sp->lock);
	if (j) {
		snap = j->snap;
		*err = j->err;
		snprintf(why, whylen, "%s", j->why);
		free(j);
	}
	return snap;
}

size_t spool_depth(struct spool *sp)
{
	pthread_mutex_lock(&sp->lock);
	size_t d = sp->depth;
	pthread_mutex_unlock(&sp->lock);
	return d;
}

void spool_stop(struct spool **psp)
{
	struct spool *sp = *psp;
	if (!sp)
		return;
	pthread_mutex_lock(&sp->lock);
	sp->stopping = 1;
	pthread_cond_signal(&sp->wake);
	pthread_mutex_unlock(&sp->lock);
	pthread_join(sp->thread, NULL);
	close(sp->efd);
	pthread_mutex_destroy(&sp->lock);
	pthread_cond_destroy(&sp->wake);
	free(sp->dir);
	free(sp);	/* jobs left on "done" belong to the caller: take them first */
	*psp = NULL;
}
