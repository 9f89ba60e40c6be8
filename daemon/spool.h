/*
 * spool.h: the spool thread (docs/storage.md, docs/daemon.md). It makes a
 * committed snapshot durable: spool/RUN/STEP.h5 written, fsync'd and
 * renamed, then a "snapshot" record in the write-ahead log, fsync'd. Only
 * then does the main thread ack. The queue hands snapshots over by pointer:
 * while a snapshot is committing, only the spool thread reads it, and
 * nobody writes it.
 */
#ifndef WD_SPOOL_H
#define WD_SPOOL_H

#include "state.h"

struct spool;
struct wal;

/* Starts the thread; dir is storage.dir. Returns 0 or -errno. */
int spool_start(const char *dir, struct wal *wal, struct spool **out);
void spool_submit(struct spool *sp, struct snapshot *snap);
/* Readable when finished snapshots wait: put it in the poll set. */
int spool_fd(const struct spool *sp);
/*
 * Takes one finished snapshot, or NULL. *err is 0 when it is durable, else
 * -errno of the cause (-ENOSPC, -EDQUOT: the disk; -EIO when not known),
 * and why says what failed.
 */
struct snapshot *spool_take(struct spool *sp, int *err, char *why, size_t whylen);
size_t spool_depth(struct spool *sp);
/* Finishes what was submitted, then stops the thread. */
void spool_stop(struct spool **sp);

#endif
