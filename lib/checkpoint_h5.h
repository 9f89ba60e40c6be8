/*
 * checkpoint_h5.h: HDF5's error stack in our terms, for the checkpoint
 * reader (checkpoint.c, which owns it) and writer (checkpoint_write.c).
 * Internal to libwdrift; needs no HDF5 header of its own.
 */
#ifndef WD_CHECKPOINT_H5_H
#define WD_CHECKPOINT_H5_H

/*
 * What the error stack says: its innermost description, whether memory ran
 * out, and the errno of a failed system call, where a file driver recorded
 * one (0: none).
 */
struct h5_stack {
	char desc[160];
	int oom;
	int sys_errno;
};

/* Reads HDF5's current error stack into st, and clears it. */
void ckpt_h5_stack_take(struct h5_stack *st);

#endif
