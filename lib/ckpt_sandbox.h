/*
 * ckpt_sandbox.h: reading checkpoint files that a user hands in (wdrift
 * compare, wdrift send) in a child process under resource limits, so that
 * a file on which libhdf5 hangs, bloats or crashes costs that child, and
 * the caller gets a one-line error instead (docs/checkpoints.md#sandbox).
 *
 * Opening a file forks one child for it. The child confines itself
 * (RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE = 0, RLIMIT_NOFILE = 16, no core
 * dump, no fd of the caller's), lists the file with checkpoint.h's reader
 * and sends the listing back; then it serves one tensor per request:
 * where the dataset lies in the file as stored, it sends the file's
 * descriptor and the offset, and the caller maps the file's own pages
 * (guarded against the file being cut short: mapguard.h); otherwise it
 * reads it straight into a memfd that the caller created and maps
 * afterwards. Either way the data is never copied between the two, and
 * the caller runs no libhdf5 on it. Each step (the listing, one
 * tensor) has a wall-clock deadline, after which the caller kills the
 * child. The caller's process never runs libhdf5 on these files.
 *
 * The caller must not ignore SIGCHLD (the child's status is read), nor be
 * inside libhdf5 in another thread when it opens one (fork), nor hold the
 * same file open through libhdf5: the child would reuse that open file
 * from its copy of the library's state, whose fd it has closed with the
 * others it inherited. wdrift compare and send use libhdf5 only through
 * these.
 */
#ifndef WD_CKPT_SANDBOX_H
#define WD_CKPT_SANDBOX_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"

/* The environment variables wd_sandbox_limits_env reads. */
#define WD_SANDBOX_ENV_TIMEOUT "WDRIFT_CKPT_TIMEOUT"
#define WD_SANDBOX_ENV_MEMORY "WDRIFT_CKPT_MEMORY"
#define WD_SANDBOX_TIMEOUT_DEFAULT 60.0
/* A tensor read gets one more second per this many bytes, beyond the timeout. */
#define WD_SANDBOX_BYTES_PER_S (32ull << 20)

struct wd_sandbox_limits {
	/* Wall clock, and CPU, for one step: seconds for the listing;
	 * seconds plus one per WD_SANDBOX_BYTES_PER_S for a tensor. */
	double seconds;
	/* Address space the child may add to what it inherits, the tensor
	 * it reads included. A larger tensor is refused before any read. */
	uint64_t memory;
};

/*
 * The limits from WDRIFT_CKPT_TIMEOUT (seconds, > 0; default 60) and
 * WDRIFT_CKPT_MEMORY (bytes, with an optional K, M, G or T suffix, powers
 * of 1024; at least 16M; default half the machine's memory, at least 1G).
 * 0, or -EINVAL with err naming the variable and its value.
 */
int wd_sandbox_limits_env(struct wd_sandbox_limits *lim, char *err, size_t errlen);

/* A checkpoint file open in a confined child. */
struct wd_ckpt_box;

/*
 * Starts the child for path and waits for its listing. 0, or -1 with err
 * (WD_CKPT_ERR_MAX bytes) naming the file: the reader's own message (not
 * HDF5, truncated, ...), or what became of the child (timed out after N s,
 * exceeded the memory limit, crashed with signal S). The child is then
 * reaped.
 */
int wd_ckpt_box_open(const char *path, const struct wd_sandbox_limits *lim,
		     struct wd_ckpt_box **out, char *err);
/*
 * The two halves of wd_ckpt_box_open, so that several files' children
 * list at once: _start forks the child for path and returns (0, or -1
 * with err and *out NULL); _listed waits for its listing (0, or -1 with
 * err as wd_ckpt_box_open's; the box is then of no use but to close).
 * The listing's deadline runs from the start. Until _listed has
 * succeeded, the listing is empty and a read fails.
 */
int wd_ckpt_box_start(const char *path, const struct wd_sandbox_limits *lim,
		      struct wd_ckpt_box **out, char *err);
int wd_ckpt_box_listed(struct wd_ckpt_box *b, char *err);
/* The listing, for wd_ckpt_count, _entry, _find, _check and _path. */
const struct wd_ckpt *wd_ckpt_box_listing(const struct wd_ckpt_box *b);

/*
 * A tensor's bytes, mapped read-only; released with wd_tensor_map_release.
 * Either the memfd the child filled, or the user's file itself, where the
 * dataset lies there as stored (contiguous, no conversion): then nothing
 * was copied, and should the file be cut short while the caller reads,
 * the tensor reads as zeros from then on and wd_tensor_map_intact fails
 * (no SIGBUS).
 * An empty map is all zeros.
 */
struct wd_tensor_map {
	const void *data;
	size_t bytes;
	/* the mapping itself, which may start before data (a page boundary) */
	void *map_base;
	size_t map_len;
	int guard;		/* mapguard.h's slot, or 0 (a memfd: nothing to cut) */
	/* for messages: the box's listing holds them, so a map is released before its box is closed */
	const char *path, *dataset;
};

/*
 * Reads tensor i in the child. 0 with m mapped, or -1 with err as above,
 * naming the file and the dataset, and m empty. After a failure that
 * ended the child, every later read fails with the same message.
 * wd_ckpt_box_request then wd_ckpt_box_collect.
 */
int wd_ckpt_box_read(struct wd_ckpt_box *b, size_t i, struct wd_tensor_map *m, char *err);
/*
 * The two halves of wd_ckpt_box_read, so that several files are read at
 * once (one child each) while the caller computes: _request starts the
 * read of tensor i and returns (0, or -1 with err: a problem of the
 * dataset, the memory limit, a dead child); _collect waits for it and maps
 * it, as wd_ckpt_box_read. One read per box is in flight at a time. The
 * read's deadline runs from the request: a reply that came in time is
 * taken however late the caller collects it.
 */
int wd_ckpt_box_request(struct wd_ckpt_box *b, size_t i, char *err);
int wd_ckpt_box_collect(struct wd_ckpt_box *b, struct wd_tensor_map *m, char *err);
/*
 * Whether what was read through m so far is the file's: 0, or -1 with err
 * naming the file and the dataset when the file was cut short under the
 * mapping. To be asked after the last read of m and before anything
 * computed from it is trusted.
 */
int wd_tensor_map_intact(const struct wd_tensor_map *m, char *err);
/* Unmaps m and empties it; an empty map is left alone. */
void wd_tensor_map_release(struct wd_tensor_map *m);

/* Ends the child (SIGKILL: it holds nothing to flush), reaps it, frees b, nulls *b. */
void wd_ckpt_box_close(struct wd_ckpt_box **b);

#endif
