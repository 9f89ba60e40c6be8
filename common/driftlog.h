/*
 * driftlog.h: the drift log of one study, drift/STUDY.h5 (docs/storage.md):
 * an HDF5 file written in SWMR mode, so that h5py can read it while the
 * daemon runs. It is derived data: the write-ahead log holds every result,
 * and a drift log that does not open after a crash is rebuilt from it.
 *
 * One format, one module: the daemon writes it (driftlog_write.c), and
 * `wdrift report`, `wdrift export` and the tests read it (driftlog_read.c).
 */
#ifndef WD_DRIFTLOG_H
#define WD_DRIFTLOG_H

#include <stddef.h>
#include <stdint.h>

#define DRIFTLOG_NAME_MAX 1024	/* bytes of a name in the string tables, NUL included */
#define DRIFTLOG_MAX_PROXIES 64

enum row_kind { ROW_TENSOR = 0, ROW_MEAN = 1, ROW_MEDIAN = 2, ROW_MAX = 3 };
enum row_role { ROLE_CANDIDATE = 1, ROLE_PROXY = 2 };

/* One row, with names rather than indices; ratio has one value per proxy. */
struct drift_row {
	int64_t step;
	int kind, role;
	const char *tensor;	/* NULL for aggregate rows */
	const char *run;
	uint64_t numel;
	double w1, max_abs_diff, rel_l2;
	uint64_t nan, posinf, neginf;
	double ratio[DRIFTLOG_MAX_PROXIES];
	double wall;
};

/*
 * A row as the drift log holds it: these fields, then ratio[n_proxies]
 * doubles (the file's compound type, made by driftlog_row_type). The CLI's
 * reader (driftlog_read.c) reads rows into the same layout.
 */
struct driftlog_disk_row {
	int64_t step;
	uint32_t tensor;	/* index into tensors; UINT32_MAX for aggregate rows */
	uint16_t run;		/* index into runs */
	uint8_t kind, role;
	double w1, max_abs_diff, rel_l2;
	uint64_t nan, posinf, neginf;
	double wall;
	uint64_t numel;
};

/* The HDF5 compound type of a row (the caller H5Tclose's it); *size: bytes per row. */
int64_t driftlog_row_type(size_t n_proxies, size_t *size);

struct driftlog_writer;

/*
 * Opens path for appending, or creates it with these proxy labels. Returns
 * 0; with err, when the file exists but cannot be used, so that the caller
 * moves it aside and rebuilds: DRIFTLOG_OTHER_LABELS when it was made for
 * other proxy labels (the study's changed: a config change, not damage),
 * else -1 (damaged, still flagged open by a killed writer, another version).
 */
#define DRIFTLOG_OTHER_LABELS (-2)
int driftlog_open(const char *path, const char *const *proxies, size_t n_proxies,
	       struct driftlog_writer **out, char *err, size_t errlen);
/* Rows in the file. */
uint64_t driftlog_rows(const struct driftlog_writer *s);
/* Appends rows and flushes them, so SWMR readers see them. 0 or -1 with err. */
int driftlog_append(struct driftlog_writer *s, const struct drift_row *rows, size_t n, char *err, size_t errlen);
/*
 * Closes it (NULL: nothing to do): 0 when every row appended is in the file
 * and it closed cleanly, so that it opens again as it is; -1 when a write,
 * the flush or the close failed (what HDF5 still buffered is discarded).
 */
int driftlog_close(struct driftlog_writer **s);

/*
 * Copies of set-aside drift logs (docs/storage.md): the daemon moves a
 * drift log it cannot use (damaged, or made for other proxy labels) aside
 * and rebuilds it from the write-ahead log, and keeps the newest
 * DRIFTLOG_ASIDE_KEEP copies of each kind of each study, the one just made
 * included. Each copy is as large as the drift log was when moved aside.
 */
#define DRIFTLOG_ASIDE_KEEP 3

/* Told of each copy driftlog_set_aside removes: its path, its size, and 0 or
 * the errno of a failed unlink (then the copy is still there). */
typedef void (*driftlog_removed_fn)(void *ctx, const char *path, uint64_t bytes, int errnum);

/*
 * Why a drift log is set aside, the word its copy's name carries: it did
 * not open or held other rows (broken), or the study's proxy labels
 * changed (a config change; a trial read "broken" as damage). Both kinds
 * share one N sequence; each has its own keep, so that config changes do
 * not prune the only copy of a damaged file.
 */
#define DRIFTLOG_ASIDE_BROKEN "broken"
#define DRIFTLOG_ASIDE_RELABELED "proxies-changed"

/*
 * Renames the file at path to PATH.WHY-TIME.N, WHY being one of the words
 * above, TIME now (Unix seconds) and N one more than the highest N among
 * the copies of path present, of either kind (a copy named
 * PATH.broken-TIME, as before N, counts as N = 0), and never over an
 * existing file. Then removes the copies of the same kind with the lowest
 * N (then TIME) until keep of that kind remain, calling removed for each.
 * The order is N's, not the clock's: a clock set back does not make the
 * newest copy look old. keep 0 removes none.
 * Returns 0 with the new name in aside; -ENOENT when path does not exist; or
 * another negative errno with err filled, nothing renamed or removed.
 */
int driftlog_set_aside(const char *path, const char *why, long long now, unsigned keep, char *aside,
		       size_t asidelen, driftlog_removed_fn removed, void *ctx, char *err, size_t errlen);

/* --- reading (driftlog_read.c) --- */

/*
 * Reads a study's drift log, drift/STUDY.h5 (docs/storage.md),
 * for `wdrift report` and `wdrift export`. Opens it for SWMR reading, so
 * the daemon may be writing it at the same time, or stopped.
 *
 * Every row is checked against the string tables (an index beyond them, a
 * kind or role out of range, a ratio field whose length is not the number
 * of proxies is an error naming the file, dataset and row). Only current
 * rows are kept: the last one written for each (step, run, kind, tensor),
 * since a proxy arriving later appends new candidate rows with its ratio.
 */
#define DL_AGGREGATE UINT32_MAX	/* tensor index of the aggregate rows */

/* A row as read is a row as stored (struct driftlog_disk_row, above); its
 * proxies' ratios follow it in memory (dl_ratio). */

struct driftlog {
	size_t n_tensors, n_runs, n_proxies;
	char **tensors, **runs, **proxies;
	/* current rows, sorted by step, run name, kind (enum row_kind) and tensor (the log's order) */
	size_t n_rows;
	size_t row_size;	/* bytes: struct driftlog_disk_row then n_proxies doubles */
	unsigned char *rows;
	size_t n_written;	/* rows in the file, superseded ones included */
};

/* Reads path whole. Returns 0, or -1 with err ("PATH: DATASET: why"). */
int driftlog_read(const char *path, struct driftlog *d, char *err, size_t errlen);
void driftlog_release(struct driftlog *d);

static inline const struct driftlog_disk_row *dl_row(const struct driftlog *d, size_t i)
{
	return (const struct driftlog_disk_row *)(void *)(d->rows + i * d->row_size);
}

static inline const double *dl_ratio(const struct driftlog_disk_row *r)
{
	return (const double *)(const void *)(r + 1);
}

#endif
