/*
 * fuzz_checkpoint.c: the HDF5 checkpoint reader (lib/checkpoint.c): the
 * input is written to a file and opened as a checkpoint; every tensor it
 * lists is read. It opens or fails with a message; a tensor reads or fails
 * with one. HDF5 itself is not hardened against hostile files (see
 * docs/reliability.md): this target looks for bugs in our reader.
 */
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	char err[WD_CKPT_ERR_MAX];
	struct wd_ckpt *c = NULL;

	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/wdrift-fuzz-ckpt-%ld.h5", (long)getpid());
	FILE *f = fopen(path, "wb");
	if (!f)
		return 0;
	if (size)
		fwrite(data, 1, size, f);
	fclose(f);
	err[0] = 0;
	if (wd_ckpt_open(path, &c, err) < 0) {
		FUZZ_ASSERT(err[0] != 0);
		unlink(path);
		return 0;
	}
	for (size_t i = 0; i < wd_ckpt_count(c); i++) {
		void *buf = NULL;
		err[0] = 0;
		if (wd_ckpt_read(c, i, &buf, err) < 0)
			FUZZ_ASSERT(err[0] != 0 && buf == NULL);
		free(buf);
	}
	wd_ckpt_close(&c);
	unlink(path);
	return 0;
}
