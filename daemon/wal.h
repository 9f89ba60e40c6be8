/*
 * wal.h: the write-ahead log, the daemon's source of truth
 * (docs/storage.md). Append-only segments DIR/NNNNNN.log of records
 *   u32 magic "WDWL" | u32 length | u32 crc32(payload) | payload
 * (little-endian). A record is durable once wal_sync() returns. Depends on
 * libc, lib/wire.h (for the CRC-32) and lib/error.h.
 */
#ifndef WD_WAL_H
#define WD_WAL_H

#include <stddef.h>
#include <stdint.h>

#define WAL_MAGIC 0x4c574457u	/* "WDWL" */
#define WAL_MAX_RECORD (64u << 20)
#define WAL_SEGMENT_BYTES (256u << 20)

struct wal;

/* Called for each good record during wal_open, in order; nonzero stops it. */
typedef int (*wal_replay_fn)(void *ctx, const char *payload, size_t len);

/*
 * Opens (creating) the log in dir and replays it through fn. A record cut
 * short or with a bad CRC at the very end of the log is a torn tail: it is
 * truncated away with a warning. A bad record followed by good ones is
 * corruption: wal_open fails, naming the segment and offset, unless force,
 * which keeps the records before it and renames what follows aside (with
 * a warning). Returns 0 or -1 with err filled.
 */
int wal_open(const char *dir, int force, wal_replay_fn fn, void *ctx,
	     struct wal **out, char *err, size_t errlen);

/* Appends one record (buffered in the kernel until wal_sync). 0 or -errno.
 * wal_append and wal_sync may be called from several threads. */
int wal_append(struct wal *w, const void *payload, size_t len);
/* Makes every appended record durable (fsync). 0 or -errno. */
int wal_sync(struct wal *w);
/*
 * Appends one record and makes it durable, with no other append between
 * the two. 0, or -errno with the record cut off again, so that it is not
 * in the log (a record whose fsync failed might come back after a crash,
 * or not); *stands is then 0. Where the cut itself fails, *stands is 1:
 * the record may be in the log, and the log takes no more appends until a
 * restart (as after a failed append that cannot be undone).
 */
int wal_append_sync(struct wal *w, const void *payload, size_t len, int *stands);
/*
 * The bytes of the log's segments in dir, read without opening the log:
 * 0 when it has none, or dir is not there. For a daemon that starts on a
 * new storage.dir beside one that holds a log (daemon/main.c).
 */
uint64_t wal_bytes(const char *dir);
/* Records replayed at open, and appended since. */
uint64_t wal_records(const struct wal *w);
/* For tests: start a new segment past this many bytes. */
void wal_set_segment_bytes(struct wal *w, uint64_t bytes);
void wal_close(struct wal **w);

#endif
