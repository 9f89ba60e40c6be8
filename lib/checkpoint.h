/*
 * checkpoint.h: reading checkpoint files (HDF5), as docs/checkpoints.md
 * defines them: every dataset is one tensor, named by its full path without
 * the leading '/'. Elements are IEEE f16, f32 or f64, or bf16 stored either
 * as a 16-bit HDF5 float (8-bit exponent, 7-bit mantissa) or as a uint16
 * dataset with the attribute dtype = "bfloat16".
 *
 * Errors are written to the caller's buffer (WD_CKPT_ERR_MAX bytes), and
 * always name the file, and the dataset where there is one. Functions that
 * read return 0, -ENOMEM when an allocation failed (ours or libhdf5's), or
 * -1 for any other failure.
 *
 * This reader runs libhdf5 in the calling process, and libhdf5 is not built
 * to resist hostile files (a damaged one can hang or crash it): use it on
 * files this program wrote itself. Files a user hands in are read through
 * ckpt_sandbox.h, which runs this reader in a resource-limited child.
 */
#ifndef WD_CHECKPOINT_H
#define WD_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "wdrift.h"

#define WD_CKPT_ERR_MAX 768
#define WD_CKPT_MAX_RANK 32

struct wd_ckpt_entry {
	char *name;
	/* Empty when the dataset is a tensor we can read; else why not. */
	char problem[128];
	/*
	 * With a problem: one compare --skip-other leaves out, its element type
	 * none of the four floats (an integer counter, a string, fp8) or no
	 * element at all (an empty buffer); 0 for a file's mistake (a bf16
	 * attribute on the wrong type).
	 */
	int skippable;
	enum wd_dtype dtype;
	uint64_t numel;
	int rank;
	uint64_t dims[WD_CKPT_MAX_RANK];
};

struct wd_ckpt;

/*
 * Opens a checkpoint and lists its datasets, sorted by name in natural
 * order (layers.2 before layers.10). Datasets that are not readable tensors
 * are listed with their problem set, so that a caller that never asks for
 * them is not stopped by them. Returns 0, or -1 / -ENOMEM with err filled.
 */
int wd_ckpt_open(const char *path, struct wd_ckpt **out, char *err);
/*
 * The same on a file image in memory (HDF5's core driver over a copy of
 * it): what the fuzz target uses, with no file to write. name stands for
 * the path in messages.
 */
int wd_ckpt_open_image(const void *image, size_t len, const char *name, struct wd_ckpt **out,
		       char *err);
/*
 * A checkpoint object from a listing made elsewhere (ckpt_sandbox.c: by a
 * child process), with no file open: the object takes e (n entries, each
 * name malloc'd) and sorts it. It lists, finds and checks; wd_ckpt_read
 * fails on it. 0 or -ENOMEM (e is then still the caller's).
 */
int wd_ckpt_adopt(const char *path, struct wd_ckpt_entry *e, size_t n, struct wd_ckpt **out);
void wd_ckpt_close(struct wd_ckpt **c);

const char *wd_ckpt_path(const struct wd_ckpt *c);
size_t wd_ckpt_count(const struct wd_ckpt *c);
const struct wd_ckpt_entry *wd_ckpt_entry(const struct wd_ckpt *c, size_t i);
/* Index of the named tensor, or -1. */
long wd_ckpt_find(const struct wd_ckpt *c, const char *name);

/*
 * Whether tensor i can be read, without reading it: 0 with its size in
 * bytes, or -1 with err naming the file and the dataset (its problem).
 */
int wd_ckpt_check(const struct wd_ckpt *c, size_t i, size_t *bytes, char *err);
/*
 * Reads tensor i into a new buffer of numel * wd_dtype_size(dtype) bytes,
 * which the caller frees. Fails, with err naming the file and the dataset,
 * when the entry has a problem or the read fails (a truncated file).
 */
int wd_ckpt_read(struct wd_ckpt *c, size_t i, void **buf, char *err);
/*
 * The same into *buf of *cap bytes, kept for the next read: used as it is
 * when it holds the tensor, else freed and allocated again at the
 * tensor's size (*buf and *cap say so; NULL and 0 when that fails). On a
 * failed read the buffer stays the caller's. For a caller that reads many
 * tensors in turn (wdriftd's compute workers).
 */
int wd_ckpt_read_reuse(struct wd_ckpt *c, size_t i, void **buf, size_t *cap, char *err);
/*
 * The same into the caller's dst of numel * wd_dtype_size(dtype) bytes.
 * The dataset's header is read again first: one whose type or size changed
 * since the listing fails instead of overflowing dst.
 */
int wd_ckpt_read_into(struct wd_ckpt *c, size_t i, void *dst, char *err);
/*
 * Where tensor i lies in the file as it is stored, for a caller that maps
 * the bytes instead of reading them (ckpt_sandbox.c): a contiguous dataset,
 * allocated, that needs no conversion, at an offset that is a multiple of
 * its element size (a mapping then gives aligned elements), in a file
 * opened from disk. 1 with
 * at->fd (the open file's own descriptor: not to be closed) and at->offset
 * (from the file's start) when it does, and the file holds the whole
 * dataset now; 0 when it must be read (wd_ckpt_read_into); -1 with err, as
 * wd_ckpt_read_into, the header checked again the same way.
 */
struct wd_ckpt_place {
	int fd;
	uint64_t offset;
};
int wd_ckpt_locate(struct wd_ckpt *c, size_t i, struct wd_ckpt_place *at, char *err);

/*
 * Writes tensors to a new checkpoint file at path, in the format the reader
 * reads: f32/f64/f16 as IEEE datasets, bf16 as uint16 with the attribute
 * dtype = "bfloat16", names as paths (a '/' makes groups). The file is
 * written to path + ".tmp", fsync'd, and renamed over path, so path is
 * either absent or complete; on any failure the .tmp file is removed.
 * Returns 0, or a negative errno, the cause, with err naming the file, the
 * tensor and the cause in words: -ENOSPC or -EDQUOT when the disk is full
 * (HDF5's error stack carries the errno of the failed write; where it
 * does not, a file system with no room left is taken to be the cause),
 * -ENOMEM, the errno of a failed create, fsync or rename, and -EIO when
 * nothing says more.
 */
struct wd_ckpt_tensor {
	const char *name;
	struct wd_view view;
	int rank;
	const uint64_t *dims;	/* rank of them; NULL: 1-D of view.numel */
};

int wd_ckpt_write(const char *path, const struct wd_ckpt_tensor *t, size_t n, char *err);

/*
 * For other HDF5 writers (common/driftlog_write.c), so that they need not read
 * HDF5's messages themselves:
 *
 * wd_h5_errno: the errno of the failed system call that HDF5's current
 * error stack records (its file drivers write "errno = N" into the
 * message), or 0. The stack is left as it is.
 *
 * wd_h5_discard_writes: points an open file's descriptor (sec2 driver) at
 * an anonymous memory file, so that what HDF5 still buffers for it is
 * written there, and its close succeeds. For a file whose writes failed
 * (a full disk): HDF5 1.10 frees a file's structure when the flush inside
 * H5Fclose fails, yet keeps its ID, and crashes on it at exit. The real
 * file's descriptor is closed; what was not yet written to it never will
 * be. 0 or -errno. (A file that failed on RLIMIT_FSIZE still fails to
 * close: the memory file is held to the same limit when HDF5 extends it.)
 */
int wd_h5_errno(void);
int wd_h5_discard_writes(int64_t file);

#endif
