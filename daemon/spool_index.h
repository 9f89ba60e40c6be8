/*
 * spool_index.h: the spool on disk (docs/storage.md, "Spool"): where a
 * snapshot's file lives (spool/RUN/STEP.h5, named here and nowhere else),
 * which snapshots are durable (the index the compute thread aligns runs
 * by), what retention drops, the start-up sweep of files no record names,
 * and a run's files removed for `runs rm`. Plain data and files: no
 * threads, no sockets; the compute thread owns one index, and the spool
 * thread (spool.c) writes the files it names. Depends on libc, wal.h and
 * records.h (a drop is recorded before its file goes).
 */
#ifndef WD_SPOOL_INDEX_H
#define WD_SPOOL_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct wal;

/*
 * The spool file of run at step: "DIR/spool/RUN/STEP.h5", DIR storage.dir
 * (or "" for the path relative to it). 0, or -ENAMETOOLONG when it does not
 * fit in size (buf then holds it cut short).
 */
int spool_path(char *buf, size_t size, const char *dir, const char *run, int64_t step);
/* The directory of run's spool files, "DIR/spool/RUN": 0 or -ENAMETOOLONG. */
int spool_run_dir(char *buf, size_t size, const char *dir, const char *run);

/* One durable snapshot whose spool file is kept. */
struct spool_entry {
	char *run;
	int64_t step;
	uint64_t bytes;		/* of its spool file, for the disk budget */
};

/* The config's rules (alignment.tolerance, spool.retention), copied at each reload. */
struct spool_rules {
	int64_t tolerance;	/* steps a candidate or proxy may be from the baseline's */
	int64_t keep_every;	/* retention.every: 0 or 1 keeps every step */
	uint64_t disk_budget;	/* retention.disk_budget in bytes; 0: none */
};

struct spool_index {
	char *dir;		/* storage.dir */
	struct spool_entry *v;	/* in no order */
	size_t n, cap;
	uint64_t bytes;		/* the sum of v[].bytes */
	struct spool_rules rules;
};

/* An empty index of the spool under storage.dir dir: 0 or -ENOMEM. */
int spool_index_init(struct spool_index *ix, const char *dir, const struct spool_rules *rules);
void spool_index_release(struct spool_index *ix);

/* Is run's snapshot at step in the index? */
int spool_index_has(const struct spool_index *ix, const char *run, int64_t step);
/*
 * Notes run's snapshot at step as durable, bytes the size of its file
 * (-1: read it from the file; a missing file counts 0). 0, 1 when it was
 * there already, -ENOMEM.
 */
int spool_index_add(struct spool_index *ix, const char *run, int64_t step, int64_t bytes);
/*
 * The alignment rule's order, its one statement: is step s, d away from
 * the step aligned to, a better match than best, dist away? The nearer;
 * of two equally near, the lower (the exact step is the nearest).
 */
static inline int spool_nearer(int64_t s, int64_t d, int64_t best, int64_t dist)
{
	return d < dist || (d == dist && s < best);
}

/*
 * Step alignment (docs/daemon.md, "Alignment"): run's durable step nearest
 * to step within rules.tolerance, the exact step first, then the lower of
 * two equally near; -1 when there is none.
 */
int64_t spool_index_nearest(const struct spool_index *ix, const char *run, int64_t step);
/*
 * The other side of it: run's durable step that belongs to baseline's
 * step bstep, that is whose own nearest baseline step (above) is bstep,
 * the nearest such to bstep (the exact step first, then the lower of two
 * equally near); -1 when there is none. Over the snapshots held now: a
 * baseline step that arrives later may take a step from its neighbour,
 * whose row compute.c then computes again. O(entries).
 */
int64_t spool_index_aligned(const struct spool_index *ix, const char *run, const char *baseline,
			    int64_t bstep);
/* The baseline's held steps just below and just above bstep (-1: none). */
void spool_index_neighbours(const struct spool_index *ix, const char *baseline, int64_t bstep,
			    int64_t *prev, int64_t *next);
/*
 * Has run a held step within the tolerance of both baseline steps bstep
 * and other? Such a step may have belonged to other before bstep came,
 * so other's row is to be computed again (compute.c).
 */
int spool_index_between(const struct spool_index *ix, const char *run, int64_t bstep, int64_t other);
/*
 * Run's durable steps in the index, oldest first, in a malloc'd array
 * (*steps; the caller frees it): how many, or 0 with *steps NULL (none, or
 * out of memory). A reload's new study is computed over them (compute.c).
 */
size_t spool_index_steps(const struct spool_index *ix, const char *run, int64_t **steps);
/* Takes run's entries out of the index (runs rm); returns how many. */
size_t spool_index_forget(struct spool_index *ix, const char *run);

/*
 * Retention (docs/storage.md): the entry to drop next after run's snapshot
 * at step was compared, or -1 when none. First that snapshot itself, when
 * thin (run is no study's candidate) and step is not a multiple of
 * keep_every; then, while the index is over disk_budget, the oldest step
 * that is not its run's latest. why says which rule, for the log and the
 * WAL. Calling it again after each drop gives the next one.
 */
long spool_retention_next(const struct spool_index *ix, const char *run, int64_t step, int thin,
			  char *why, size_t whylen);
/*
 * Drops entry i: a "drop" record in wal, fsync'd, first (a crash after it
 * leaves a file the next start removes; a crash after the unlink alone
 * would leave a durable snapshot whose file is gone), then the file and the
 * entry. Logged at notice. 0, or -errno of the WAL (the entry is kept).
 */
int spool_drop(struct spool_index *ix, struct wal *wal, size_t i, const char *why);
/* Told of each snapshot that spool.retention.disk_budget dropped, after its drop. */
typedef void spool_dropped_fn(void *ctx, const struct spool_index *ix, const char *run, int64_t step);
/*
 * Retention after run's snapshot at step was compared: spool_retention_next
 * and spool_drop until nothing is left to drop, or the WAL fails; each
 * drop for the disk budget (not a thinning by spool.retention.every, which
 * the config chose) told to dropped (may be NULL). Returns how many
 * snapshots were dropped.
 */
size_t spool_retain(struct spool_index *ix, struct wal *wal, const char *run, int64_t step, int thin,
		    spool_dropped_fn *dropped, void *ctx);

/*
 * Start-up, before the spool thread: a spool file that is_durable says no
 * record names was never acked (the daemon died between its rename and its
 * record) and is removed, as is a STEP.h5.tmp a crash cut short. Under
 * force, the WAL may have moved acked records aside, so such a file is
 * renamed STEP.h5.orphan instead, which later sweeps leave alone. Each is
 * logged.
 */
void spool_sweep(const char *dir, int force,
		 int (*is_durable)(void *ctx, const char *run, int64_t step), void *ctx);
/* Removes run's spool file at step, if any: 1 removed, 0 none, -errno. */
int spool_remove(const char *dir, const char *run, int64_t step);
/*
 * Removes DIR/spool/RUN/ and the files in it; returns how many files were
 * removed, or -errno when the directory cannot be read (-ENOENT: there was
 * none).
 */
long spool_remove_run(const char *dir, const char *run);

#endif
