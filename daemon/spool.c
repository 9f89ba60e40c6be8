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
#include "dirs.h"
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

#define SPARE_JOBS 8	/* jobs kept for when none can be allocated */

struct spool {
	char *dir;
	struct job *spare;		/* SPARE_JOBS of them, refilled as jobs are taken */
	size_t n_spare;
	struct wal *wal;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct job *jobs, *jobs_tail, *done;
	size_t depth;
	int stopping, efd;
};

/* fsync(2) of a directory: 0 or -errno. */
static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = fd < 0 || fsync(fd) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	return r;
}

/*
 * why for a failure with cause r (-errno) while doing what: a full disk
 * says so, with storage.dir and what a user can do about it; any other
 * cause is detail (what failed, in its words).
 */
static void say_why(const struct spool *sp, int r, char *why, size_t whylen, const char *what,
		    const char *detail)
{
	int n;

	if (r == -ENOSPC || r == -EDQUOT)	/* the part that counts first: a long name is cut */
		n = snprintf(why, whylen, "%s in storage.dir '%.100s': free space, then re-send (%.120s)",
			     r == -ENOSPC ? "no space left on device" : "disk quota exceeded", sp->dir, what);
	else
		n = snprintf(why, whylen, "%.255s", detail);
	if (n >= (int)whylen && whylen > 4)
		memcpy(why + whylen - 4, "...", 4);
}

/*
 * Removes a spool file that will not be acked (what came after its write
 * failed), and makes the removal durable: its space is given back now, not
 * at the next start's sweep.
 */
static void unspool(const char *path, const char *dir)
{
	int r;

	if (unlink(path) < 0 && errno != ENOENT) {
		log_warning("spool: cannot remove '%s', which was not acked: %s (the next start "
			    "removes it)", path, strerror(errno));
		return;
	}
	if ((r = fsync_path(dir)) < 0)
		log_warning("spool: fsync of '%s' after removing '%s': %s", dir, path, strerror(-r));
}

/* Writes one snapshot durably: 0, or -errno of the cause with why filled. */
static int store(struct spool *sp, struct snapshot *snap, char *why, size_t whylen)
{
	char dir[4096], path[4200], err[WD_CKPT_ERR_MAX], what[600], detail[WD_CKPT_ERR_MAX + 64];
	struct wd_ckpt_tensor *t = calloc(snap->n_tensors + 1, sizeof(*t));
	int r = 0, stands = 0;

	if (!t)
		return snprintf(why, whylen, "out of memory"), -ENOMEM;
	snprintf(dir, sizeof(dir), "%s/spool/%s", sp->dir, snap->run->name);
	struct stat st;
	int fresh = stat(dir, &st) < 0;	/* a run's first snapshot: its directory is new */
	if ((r = dirs_make(dir, 0)) < 0) {
		snprintf(what, sizeof(what), "creating spool/%.200s", snap->run->name);
		snprintf(detail, sizeof(detail), "cannot create '%.180s': %s", dir, strerror(-r));
		say_why(sp, r, why, whylen, what, detail);
		free(t);
		return r;
	}
	if (fresh) {	/* the new directories' entries must survive a crash too */
		char parent[4200];
		snprintf(parent, sizeof(parent), "%s/spool", sp->dir);
		if ((r = fsync_path(parent)) < 0 || (r = fsync_path(sp->dir)) < 0) {
			snprintf(detail, sizeof(detail), "cannot fsync the spool directory: %s", strerror(-r));
			say_why(sp, r, why, whylen, "making the spool directory durable", detail);
			free(t);
			return r;
		}
	}
	snprintf(path, sizeof(path), "%s/%lld.h5", dir, (long long)snap->step);
	snprintf(what, sizeof(what), "writing spool/%.200s/%lld.h5", snap->run->name,
		 (long long)snap->step);
	for (size_t i = 0; i < snap->n_tensors; i++) {
		struct tensor_buf *b = &snap->tensors[i];
		t[i].name = b->name;
		t[i].view = (struct wd_view){ b->dtype, b->data, b->total };
		t[i].rank = b->ndims;
		t[i].dims = b->shape;
	}
	r = wd_ckpt_write(path, t, snap->n_tensors, err);
	free(t);
	if (r < 0) {	/* nothing is left of it: wd_ckpt_write removes its .tmp */
		log_debug("spool: %s", err);
		say_why(sp, r, why, whylen, what, err);
		return r;
	}
	/* the rename must survive a crash too: no ack without it */
	if ((r = fsync_path(dir)) < 0) {
		snprintf(detail, sizeof(detail), "cannot fsync '%.180s': %s", dir, strerror(-r));
		say_why(sp, r, why, whylen, what, detail);
		unspool(path, dir);
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
	r = payload ? wal_append_sync(sp->wal, payload, strlen(payload), &stands) : -ENOMEM;
	free(payload);
	if (r < 0) {
		snprintf(detail, sizeof(detail), "write-ahead log: %s", strerror(-r));
		say_why(sp, r, why, whylen, "appending to the write-ahead log", detail);
		/*
		 * Not acked, so its file goes now (a failed append left no record
		 * of it). Where the record may stand after all (it could not be cut
		 * off), the file stays with it: a record without its file would
		 * be an acked-looking snapshot with nothing to compare.
		 */
		if (!stands)
			unspool(path, dir);
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

static void free_jobs(struct job *j)
{
	while (j) {
		struct job *next = j->next;
		free(j);
		j = next;
	}
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
	for (; sp->n_spare < SPARE_JOBS; sp->n_spare++) {
		struct job *j = calloc(1, sizeof(*j));
		if (!j) {
			free_jobs(sp->spare);
			free(sp->dir);
			free(sp);
			return -ENOMEM;
		}
		j->next = sp->spare;
		sp->spare = j;
	}
	sp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&sp->lock, NULL);
	pthread_cond_init(&sp->wake, NULL);
	if (sp->efd < 0 || (r = pthread_create(&sp->thread, NULL, spool_main, sp)) != 0) {
		r = sp->efd < 0 ? -errno : -r;
		if (sp->efd >= 0)
			close(sp->efd);
		free_jobs(sp->spare);
		free(sp->dir);
		free(sp);
		return r;
	}
	*out = sp;
	return 0;
}

/*
 * A job that cannot be allocated: the snapshot still comes back through
 * spool_take, as failed with -ENOMEM (the publisher is told, and may
 * re-send), on one of the spare jobs. With none left either (SPARE_JOBS
 * such failures before the main thread takes one), it is logged, and its
 * publisher learns of it only by its ack timeout.
 */
static void submit_failed(struct spool *sp, struct snapshot *snap)
{
	struct job *j = sp->spare;
	uint64_t one = 1;

	if (!j) {
		log_err("spool: out of memory queueing run '%s' step %lld, with no spare job left: "
			"its publisher is not told", snap->run->name, (long long)snap->step);
		return;
	}
	sp->spare = j->next;
	sp->n_spare--;
	memset(j, 0, sizeof(*j));
	j->snap = snap;
	j->err = -ENOMEM;
	snprintf(j->why, sizeof(j->why), "out of memory queueing it for the spool");
	j->next = sp->done;
	sp->done = j;
	sp->depth++;
	if (write(sp->efd, &one, sizeof(one)) < 0)
		log_err("spool: eventfd: %s", strerror(errno));
}

void spool_submit(struct spool *sp, struct snapshot *snap)
{
	struct job *j = calloc(1, sizeof(*j));

	pthread_mutex_lock(&sp->lock);
	if (!j) {	/* reported as failed; the publisher re-sends */
		submit_failed(sp, snap);
		pthread_mutex_unlock(&sp->lock);
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
		snap = j->snap;
		*err = j->err;
		snprintf(why, whylen, "%s", j->why);
		if (sp->n_spare < SPARE_JOBS) {	/* the spares first, for the next failure */
			j->next = sp->spare;
			sp->spare = j;
			sp->n_spare++;
			j = NULL;
		}
	} else if (read(sp->efd, &n, sizeof(n)) < 0 && errno != EAGAIN) {
		log_err("spool: eventfd: %s", strerror(errno));
	}
	pthread_mutex_unlock(&sp->lock);
	free(j);
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
	free_jobs(sp->spare);
	free(sp->dir);
	free(sp);	/* jobs left on "done" belong to the caller: take them first */
	*psp = NULL;
}
