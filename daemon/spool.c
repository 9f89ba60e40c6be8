/*
 * spool.c: the spool thread (see spool.h), a workq (workq.h): jobs from the
 * main thread, each written durably here and handed back. Where the file
 * goes is spool_index.h's; what the record says, records.h's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dirs.h"
#include "logging.h"
#include "records.h"
#include "spool.h"
#include "spool_index.h"
#include "wal.h"
#include "workq.h"

struct job {
	struct workq_item item;
	struct snapshot *snap;
	int err;		/* 0: durable; else -errno, the cause as far as known */
	char why[256];
};

#define SPARE_JOBS 8	/* jobs kept for when none can be allocated */

struct spool {
	struct workq q;
	char *dir;
	struct wal *wal;
	/* the main thread's only (spool_submit, spool_take): refilled as jobs are taken */
	struct job *spare[SPARE_JOBS];
	size_t n_spare;
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
	if ((r = spool_run_dir(dir, sizeof(dir), sp->dir, snap->run->name)) < 0) {
		free(t);
		return snprintf(why, whylen, "run name too long for a path"), r;
	}
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
	spool_path(path, sizeof(path), sp->dir, snap->run->name, snap->step);	/* fits: dir did */
	snprintf(what, sizeof(what), "writing %.500s", path + strlen(sp->dir) + 1);
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
	char *payload = record_snapshot(snap, path + strlen(sp->dir) + 1, now_wall());
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

static void work(struct workq *q, struct workq_item *item, void *ctx)
{
	struct spool *sp = ctx;
	struct job *j = workq_entry(item, struct job, item);

	j->err = store(sp, j->snap, j->why, sizeof(j->why));
	workq_finish(q, &j->item);
}

int spool_start(const char *dir, struct wal *wal, struct spool **out)
{
	struct spool *sp = calloc(1, sizeof(*sp));
	int r = -ENOMEM;

	*out = NULL;
	if (!sp || !(sp->dir = strdup(dir)))
		goto fail;
	sp->wal = wal;
	for (; sp->n_spare < SPARE_JOBS; sp->n_spare++)
		if (!(sp->spare[sp->n_spare] = calloc(1, sizeof(struct job))))
			goto fail;
	if ((r = workq_start(&sp->q, "spool", work, sp)) < 0)
		goto fail;
	*out = sp;
	return 0;
fail:
	for (size_t i = 0; sp && i < sp->n_spare; i++)
		free(sp->spare[i]);
	if (sp)
		free(sp->dir);
	free(sp);
	return r;
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
	struct job *j = NULL;

	if (sp->n_spare)
		j = sp->spare[--sp->n_spare];
	if (!j) {
		log_err("spool: out of memory queueing run '%s' step %lld, with no spare job left: "
			"its publisher is not told", snap->run->name, (long long)snap->step);
		return;
	}
	memset(j, 0, sizeof(*j));
	j->snap = snap;
	j->err = -ENOMEM;
	snprintf(j->why, sizeof(j->why), "out of memory queueing it for the spool");
	workq_finish(&sp->q, &j->item);
}

void spool_submit(struct spool *sp, struct snapshot *snap)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j) {	/* reported as failed; the publisher re-sends */
		submit_failed(sp, snap);
		return;
	}
	j->snap = snap;
	workq_push(&sp->q, &j->item);
}

int spool_fd(const struct spool *sp)
{
	return workq_fd(&sp->q);
}

struct snapshot *spool_take(struct spool *sp, int *err, char *why, size_t whylen)
{
	struct workq_item *i = workq_take(&sp->q);

	if (!i)
		return NULL;
	struct job *j = workq_entry(i, struct job, item);
	struct snapshot *snap = j->snap;
	*err = j->err;
	snprintf(why, whylen, "%s", j->why);
	if (sp->n_spare < SPARE_JOBS)	/* the spares first, for the next failure */
		sp->spare[sp->n_spare++] = j;
	else
		free(j);
	return snap;
}

size_t spool_depth(struct spool *sp)
{
	/* a snapshot counts until its ack goes: queued, being stored, or stored and not taken */
	return workq_pending(&sp->q) + workq_ready(&sp->q);
}

/* A stored job not taken: its snapshot is still on the main thread's pending list. */
static void drop_job(struct workq_item *item)
{
	free(workq_entry(item, struct job, item));
}

void spool_stop(struct spool **psp)
{
	struct spool *sp = *psp;
	if (!sp)
		return;
	workq_stop(&sp->q, 1, NULL, drop_job);
	for (size_t i = 0; i < sp->n_spare; i++)
		free(sp->spare[i]);
	free(sp->dir);
	free(sp);
	*psp = NULL;
}
