/*
 * driftlog.h: reads a study's drift log, drift/STUDY.h5 (docs/storage.md),
 * for `wdrift report` and `wdrift export`. Opens it for SWMR reading, so
 * the daemon may be writing it at the same time, or stopped.
 *
 * Every row is checked against the string tables (an index beyond them, a
 * kind or role out of range, a ratio field whose length is not the number
 * of proxies is an error naming the file, dataset and row). Only current
 * rows are kept: the last one written for each (step, run, kind, tensor),
 * since a proxy arriving later appends new candidate rows with its ratio.
 */
#ifndef WD_DRIFTLOG_H
#define WD_DRIFTLOG_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define DL_AGGREGATE UINT32_MAX	/* tensor index of the aggregate rows */

/* A row as read is a row as stored (struct store_disk_row, store.h); its
 * proxies' ratios follow it in memory (dl_ratio). */

struct driftlog {
	size_t n_tensors, n_runs, n_proxies;
	char **tensors, **runs, **proxies;
	size_t n_rows;		/* current rows, sorted by step, run, kind, tensor */
	size_t row_size;	/* bytes: struct store_disk_row then n_proxies doubles */
	unsigned char *rows;
	size_t n_written;	/* rows in the file, superseded ones included */
};

/* Reads path whole. Returns 0, or -1 with err ("PATH: DATASET: why"). */
int driftlog_read(const char *path, struct driftlog *d, char *err, size_t errlen);
void driftlog_release(struct driftlog *d);

static inline const struct store_disk_row *dl_row(const struct driftlog *d, size_t i)
{
	return (const struct store_disk_row *)(void *)(d->rows + i * d->row_size);
}

static inline const double *dl_ratio(const struct store_disk_row *r)
{
	return (const double *)(const void *)(r + 1);
}

#endif
