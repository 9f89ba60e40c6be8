/*
 * forget.h: `wdrift runs rm RUN` on disk (docs/storage.md, "forget"): the
 * WAL record that makes it durable, the result records rewritten without
 * the run, and its spool files removed. The compute thread does it, under
 * compute_forget(); start-up replays the record with the same filter, so a
 * restart does not bring the run back. Depends on libc, jansson.
 */
#ifndef WD_FORGET_H
#define WD_FORGET_H

#include <stddef.h>

/* The "forget" record's payload for run (malloc'd JSON); NULL on out of memory. */
char *forget_record(const char *run);

/*
 * A "result" record without run: 0 when run is not in it (*out untouched),
 * 1 when rows of run were taken out (*out: the new payload, malloc'd), 2
 * when the whole record goes (run was its baseline, or no row is left).
 */
int forget_filter(const char *payload, size_t len, const char *run, char **out);

/*
 * Filters n "result" records (malloc'd strings) in place through
 * forget_filter: records without run stay, the others are rewritten or
 * freed. seen (may be NULL) is called with each record run was in, before
 * it changes. Returns how many records are left.
 */
size_t forget_records(char **rec, size_t n, const char *run,
		      void (*seen)(void *ctx, const char *payload), void *ctx);

/*
 * Removes storage_dir/spool/RUN/ and the files in it; returns how many
 * files were removed, or -errno when the directory cannot be read (-ENOENT:
 * there was none).
 */
long forget_spool(const char *storage_dir, const char *run);

#endif
