/*
 * fuzz_checkpoint.c: the HDF5 checkpoint reader (lib/checkpoint.c): the
 * input is opened as a checkpoint from memory (wd_ckpt_open_image: HDF5's
 * core driver, no file written), and every tensor it lists is read. It
 * opens or fails with a message; a tensor reads or fails with one, and a
 * failed read leaves no buffer; afterwards no HDF5 object is left open.
 * Tensors over 1 MiB are checked but not read: the in-process reader
 * allocates what a file declares (for user files, ckpt_sandbox.c's memory
 * limit bounds that), and filling megabytes of fill values exercises
 * nothing of ours.
 *
 * HDF5 itself is not hardened against hostile files (docs/reliability.md):
 * this target looks for bugs in our reader. Its free lists are turned off,
 * so that what it holds between inputs does not look like a leak, and
 * make fuzz gives LeakSanitizer fuzz/lsan-hdf5.supp for the allocations
 * libhdf5 itself loses; the inputs on which it hangs are kept in
 * fuzz/hdf5-hangs/. Includes hdf5.h for those two checks only.
 */
#include <string.h>

#include <hdf5.h>

#include "checkpoint.h"
#include "fuzz.h"

#define READ_MAX (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int once;
	char err[WD_CKPT_ERR_MAX];
	struct wd_ckpt *c = NULL;

	if (!once++)
		H5set_free_list_limits(0, 0, 0, 0, 0, 0);
	err[0] = 0;
	if (wd_ckpt_open_image(data, size, "fuzz.h5", &c, err) < 0) {
		FUZZ_ASSERT(err[0] != 0 && c == NULL);
	} else {
		for (size_t i = 0; i < wd_ckpt_count(c); i++) {
			void *buf = NULL;
			size_t bytes;
			err[0] = 0;
			if (wd_ckpt_check(c, i, &bytes, err) < 0) {
				FUZZ_ASSERT(err[0] != 0);
				continue;
			}
			if (bytes > READ_MAX)
				continue;
			if (wd_ckpt_read(c, i, &buf, err) < 0)
				FUZZ_ASSERT(err[0] != 0 && buf == NULL);
			free(buf);
		}
		wd_ckpt_close(&c);
	}
	FUZZ_ASSERT(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
	return 0;
}
