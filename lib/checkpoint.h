/*
 * checkpoint.h: reading checkpoint files (HDF5), as docs/checkpoints.md
 * defines them: every dataset is one tensor, named by its full path without
 * the leading '/'. Elements are IEEE f16, f32 or f64, or bf16 stored either
 * as a 16-bit HDF5 float (8-bit exponent, 7-bit mantissa) or as a uint16
 * dataset with the attribute dtype = "bfloat16".
 *
 * Errors are written to the caller's buffer (WD_CKPT_ERR_MAX bytes), and
 * always name the file, and the dataset where there is one.
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
 * them is not stopped by them. Returns 0, or -1 with err filled.
 */
int wd_ckpt_open(const char *path, struct wd_ckpt **out, char *err);
void wd_ckpt_close(struct wd_ckpt **c);

const char *wd_ckpt_path(const struct wd_ckpt *c);
size_t wd_ckpt_count(const struct wd_ckpt *c);
const struct wd_ckpt_entry *wd_ckpt_entry(const struct wd_ckpt *c, size_t i);
/* Index of the named tensor, or -1. */
long wd_ckpt_find(const struct wd_ckpt *c, const char *name);

/*
 * Reads tensor i into a new buffer of numel * wd_dtype_size(dtype) bytes,
 * which the caller frees. Fails, with err naming the file and the dataset,
 * when the entry has a problem or the read fails (a truncated file).
 */
int wd_ckpt_read(struct wd_ckpt *c, size_t i, void **buf, char *err);

/*
 * Writes tensors to a new checkpoint file at path, in the format the reader
 * reads: f32/f64/f16 as IEEE datasets, bf16 as uint16 with the attribute
 * dtype = "bfloat16", names as paths (a '/' makes groups). The file is
 * written to path + ".tmp", fsync'd, and renamed over path, so path is
 * either absent or complete. Returns 0 or -1 with err naming the file and
 * the tensor.
 */
struct wd_ckpt_tensor {
	const char *name;
	struct wd_view view;
	int rank;
	const uint64_t *dims;	/* rank of them; NULL: 1-D of view.numel */
};

int wd_ckpt_write(const char *path, const struct wd_ckpt_tensor *t, size_t n, char *err);

#endif
