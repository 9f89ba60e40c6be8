/* spool_index.c: the spool's files, index and retention (see spool_index.h). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "logging.h"
#include "records.h"
#include "spool_index.h"
#include "grow.h"
#include "wal.h"

/* --- paths --- */

int spool_path(char *buf, size_t size, const char *dir, const char *run, int64_t step)
{
	int n = snprintf(buf, size, "%s%sspool/%s/%lld.h5", dir, *dir ? "/" : "", run, (long long)step);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int spool_run_dir(char *buf, size_t size, const char *dir, const char *run)
{
	int n = snprintf(buf, size, "%s%sspool/%s", dir, *dir ? "/" : "", run);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* --- the index --- */

int spool_index_init(struct spool_index *ix, const char *dir, const struct spool_rules *rules)
{
	memset(ix, 0, sizeof(*ix));
	ix->rules = *rules;
	return (ix->dir = strdup(dir)) ? 0 : -ENOMEM;
}

void spool_index_release(struct spool_index *ix)
{
	for (size_t i = 0; i < ix->n; i++)
		free(ix->v[i].run);
	free(ix->v);
	free(ix->dir);
	memset(ix, 0, sizeof(*ix));
}

static long find(const struct spool_index *ix, const char *run, int64_t step)
{
	for (size_t i = 0; i < ix->n; i++)
		if (ix->v[i].step == step && !strcmp(ix->v[i].run, run))
			return (long)i;
	return -1;
}

int spool_index_has(const struct spool_index *ix, const char *run, int64_t step)
{
	return find(ix, run, step) >= 0;
}

int spool_index_add(struct spool_index *ix, const char *run, int64_t step, int64_t bytes)
{
	char path[4200];
	struct stat st;

	if (spool_index_has(ix, run, step))
		return 1;
	struct spool_entry *v = wd_grow(ix->v, ix->n, &ix->cap, sizeof(*v), 256);
	if (!v)
		return -ENOMEM;
	ix->v = v;
	if (bytes < 0)
		bytes = spool_path(path, sizeof(path), ix->dir, run, step) == 0 && stat(path, &st) == 0 ?
			st.st_size : 0;
	if (!(ix->v[ix->n].run = strdup(run)))
		return -ENOMEM;
	ix->v[ix->n].step = step;
	ix->v[ix->n].bytes = (uint64_t)bytes;
	ix->bytes += ix->v[ix->n++].bytes;
	return 0;
}

/* Takes entry i out; the last one takes its place. */
static void remove_at(struct spool_index *ix, size_t i)
{
	ix->bytes -= ix->v[i].bytes < ix->bytes ? ix->v[i].bytes : ix->bytes;
	free(ix->v[i].run);
	ix->v[i] = ix->v[--ix->n];
}

int64_t spool_index_nearest(const struct spool_index *ix, const char *run, int64_t step)
{
	int64_t best = -1, dist = ix->rules.tolerance + 1;

	for (size_t i = 0; i < ix->n; i++) {
		if (strcmp(ix->v[i].run, run))
			continue;
		int64_t s = ix->v[i].step, d = s > step ? s - step : step - s;
		if (spool_nearer(s, d, best, dist)) {
			best = s;
			dist = d;
		}
	}
	return best;
}

void spool_index_neighbours(const struct spool_index *ix, const char *baseline, int64_t bstep,
			    int64_t *prev, int64_t *next)
{
	*prev = *next = -1;
	for (size_t i = 0; i < ix->n; i++) {
		int64_t s = ix->v[i].step;
		if (s == bstep || strcmp(ix->v[i].run, baseline))
			continue;
		if (s < bstep && s > *prev)
			*prev = s;
		if (s > bstep && (*next < 0 || s < *next))
			*next = s;
	}
}

/*
 * Does step s, within tolerance of bstep, belong to bstep? Another held
 * baseline step that beats bstep for s would be beaten, or matched, by
 * bstep's neighbour on s's side (any such step lies between s's mirror
 * image and bstep), so those two are all there is to look at.
 */
static int belongs(int64_t s, int64_t bstep, int64_t prev, int64_t next)
{
	int64_t d = s > bstep ? s - bstep : bstep - s;
	int64_t other = s < bstep ? prev : s > bstep ? next : -1;

	if (other < 0)
		return 1;
	int64_t od = other > s ? other - s : s - other;
	return !spool_nearer(other, od, bstep, d);
}

int64_t spool_index_aligned(const struct spool_index *ix, const char *run, const char *baseline,
			    int64_t bstep)
{
	int64_t best = -1, dist = ix->rules.tolerance + 1, prev, next;

	spool_index_neighbours(ix, baseline, bstep, &prev, &next);
	for (size_t i = 0; i < ix->n; i++) {
		if (strcmp(ix->v[i].run, run))
			continue;
		int64_t s = ix->v[i].step, d = s > bstep ? s - bstep : bstep - s;
		if (spool_nearer(s, d, best, dist) && belongs(s, bstep, prev, next)) {
			best = s;
			dist = d;
		}
	}
	return best;
}

int spool_index_between(const struct spool_index *ix, const char *run, int64_t bstep, int64_t other)
{
	int64_t tol = ix->rules.tolerance;

	for (size_t i = 0; i < ix->n; i++) {
		int64_t s = ix->v[i].step;
		if ((s > bstep ? s - bstep : bstep - s) <= tol && (s > other ? s - other : other - s) <= tol &&
		    !strcmp(ix->v[i].run, run))
			return 1;
	}
	return 0;
}

static int by_step(const void *x, const void *y)
{
	int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
	return (a > b) - (a < b);
}

size_t spool_index_steps(const struct spool_index *ix, const char *run, int64_t **steps)
{
	size_t n = 0;

	*steps = NULL;
	for (size_t i = 0; i < ix->n; i++)
		n += !strcmp(ix->v[i].run, run);
	if (!n || !(*steps = malloc(n * sizeof(**steps))))
		return 0;
	n = 0;
	for (size_t i = 0; i < ix->n; i++)
		if (!strcmp(ix->v[i].run, run))
			(*steps)[n++] = ix->v[i].step;
	qsort(*steps, n, sizeof(**steps), by_step);
	return n;
}

size_t spool_index_forget(struct spool_index *ix, const char *run)
{
	size_t n = 0;

	for (size_t i = 0; i < ix->n;)
		if (!strcmp(ix->v[i].run, run)) {
			remove_at(ix, i);
			n++;
		} else {
			i++;
		}
	return n;
}

/* --- retention --- */

/* Is entry i its run's newest snapshot? Those stay whatever the budget. */
static int is_latest(const struct spool_index *ix, size_t i)
{
	for (size_t k = 0; k < ix->n; k++)
		if (k != i && ix->v[k].step > ix->v[i].step && !strcmp(ix->v[k].run, ix->v[i].run))
			return 0;
	return 1;
}

long spool_retention_next(const struct spool_index *ix, const char *run, int64_t step, int thin,
			  char *why, size_t whylen)
{
	const struct spool_rules *rules = &ix->rules;
	long i;

	if (thin && rules->keep_every > 1 && step % rules->keep_every != 0 &&
	    (i = find(ix, run, step)) >= 0) {
		snprintf(why, whylen, "step is not a multiple of spool.retention.every (%lld)",
			 (long long)rules->keep_every);
		return i;
	}
	if (!rules->disk_budget || ix->bytes <= rules->disk_budget)
		return -1;
	size_t oldest = ix->n;
	for (size_t k = 0; k < ix->n; k++)
		if ((oldest == ix->n || ix->v[k].step < ix->v[oldest].step) && !is_latest(ix, k))
			oldest = k;
	if (oldest == ix->n)
		return -1;	/* only latest snapshots left: nothing more to give */
	snprintf(why, whylen, "spool over spool.retention.disk_budget (%llu bytes)",
		 (unsigned long long)rules->disk_budget);
	return (long)oldest;
}

int spool_drop(struct spool_index *ix, struct wal *wal, size_t i, const char *why)
{
	char path[4200];
	const struct spool_entry *e = &ix->v[i];
	char *payload = record_drop(e->run, e->step, why);
	int r = payload ? wal_append(wal, payload, strlen(payload)) : -ENOMEM;

	free(payload);
	if (r == 0)
		r = wal_sync(wal);
	spool_path(path, sizeof(path), ix->dir, e->run, e->step);
	if (r < 0) {
		log_err("retention: write-ahead log: cannot record the drop of '%s' (%s): keeping it",
			path, strerror(-r));
		return r;
	}
	if (unlink(path) < 0 && errno != ENOENT)
		log_warning("retention: cannot remove '%s': %s", path, strerror(errno));
	log_notice("retention: dropped run '%s' step %lld (%llu bytes): %s", e->run, (long long)e->step,
		   (unsigned long long)e->bytes, why);
	remove_at(ix, i);
	return 0;
}

size_t spool_retain(struct spool_index *ix, struct wal *wal, const char *run, int64_t step, int thin,
		    spool_dropped_fn *dropped, void *ctx)
{
	char why[128];
	size_t n = 0;
	long i;

	/* a failed drop stops it: the same snapshot would be picked again */
	while ((i = spool_retention_next(ix, run, step, thin, why, sizeof(why))) >= 0) {
		const struct spool_entry *e = &ix->v[i];
		/* spool_retention_next thins only the snapshot just compared */
		int thinned = thin && ix->rules.keep_every > 1 && step % ix->rules.keep_every != 0 &&
			      e->step == step && !strcmp(e->run, run);
		char *name = dropped && !thinned ? strdup(e->run) : NULL;
		int64_t at = e->step;
		if (spool_drop(ix, wal, (size_t)i, why) != 0) {
			free(name);
			break;
		}
		n++;
		if (name)
			dropped(ctx, ix, name, at);
		free(name);
	}
	return n;
}

/* --- files --- */

void spool_sweep(const char *dir, int force,
		 int (*is_durable)(void *ctx, const char *run, int64_t step), void *ctx)
{
	char path[4200];
	DIR *top, *sub;
	struct dirent *de, *fe;

	snprintf(path, sizeof(path), "%s/spool", dir);
	if (!(top = opendir(path)))
		return;
	while ((de = readdir(top))) {
		if (de->d_name[0] == '.')
			continue;
		char run_dir[4200 + 260];
		snprintf(run_dir, sizeof(run_dir), "%s/%s", path, de->d_name);
		if (!(sub = opendir(run_dir)))
			continue;
		while ((fe = readdir(sub))) {
			long long step;
			char tail[16];
			int n = sscanf(fe->d_name, "%lld.%15s", &step, tail);
			int orphan = n == 2 && !strcmp(tail, "h5") && !is_durable(ctx, de->d_name, step);
			int torn = n == 2 && !strcmp(tail, "h5.tmp");
			if (!orphan && !torn)
				continue;
			char file[4200 + 520];
			snprintf(file, sizeof(file), "%s/%s", run_dir, fe->d_name);
			if (orphan && force) {
				char aside[4200 + 540];
				snprintf(aside, sizeof(aside), "%s.orphan", file);
				if (rename(file, aside) == 0)
					log_warning("spool: kept '%s' as '%s': no write-ahead log record "
						    "(--force may have moved it aside)", file, aside);
				continue;
			}
			if (unlink(file) == 0)
				log_notice("spool: removed '%s': %s", file, torn ? "a write cut short"
					   : "never acked (no write-ahead log record)");
		}
		closedir(sub);
	}
	closedir(top);
}

int spool_remove(const char *dir, const char *run, int64_t step)
{
	char path[4200];
	int r = spool_path(path, sizeof(path), dir, run, step);

	if (r < 0)
		return r;
	if (unlink(path) == 0)
		return 1;
	return errno == ENOENT ? 0 : -errno;
}

long spool_remove_run(const char *dir, const char *run)
{
	char path[4200], file[4500];
	struct dirent *de;
	long n = 0;

	if (spool_run_dir(path, sizeof(path), dir, run) < 0)
		return -ENAMETOOLONG;
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
		if (unlink(file) == 0)
			n++;
	}
	closedir(d);
	rmdir(path);
	return n;
}
