/*
 * test_ckpt_write.c: wd_ckpt_write (lib/checkpoint.c) when the disk is full
 * (issue 11, item 7). The failure returns its cause as -errno (-ENOSPC,
 * ...), says it in words, and leaves nothing behind: no .tmp file, no
 * file under the name, no file descriptor (an fd left open on an unlinked
 * file would keep its space). Once there is room, the same write works.
 *
 * The disk is a 1 MiB tmpfs (root only: skipped where mount(2) is not
 * permitted). The process must also exit cleanly (run.sh counts a crash as
 * a failure): HDF5 1.10 leaves a freed file's ID behind when a close fails,
 * and crashes at exit on it. (RLIMIT_FSIZE would fill a "disk" anywhere,
 * but it also bounds the memory file a failed file is closed through, so
 * that close fails: checkpoint.h, wd_h5_discard_writes.)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "harness.h"

static char dir[] = "/tmp/wdrift-test-ckptw-XXXXXX";

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* One f32 tensor of n elements, 0, 1, 2, ... */
static struct wd_ckpt_tensor tensor(const char *name, float *data, size_t n)
{
	for (size_t i = 0; i < n; i++)
		data[i] = (float)i;
	return (struct wd_ckpt_tensor){ name, { WD_F32, data, n }, 0, NULL };
}

/* Writes until the file system is full; returns the filler's fd (closed by the caller). */
static int fill(const char *path)
{
	static char block[65536];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	memset(block, 7, sizeof(block));
	while (fd >= 0 && write(fd, block, sizeof(block)) > 0)
		;
	while (fd >= 0 && write(fd, block, 1) > 0)
		;
	return fd;
}

static int reads_back(const char *path, const char *name, size_t n)
{
	struct wd_ckpt *c = NULL;
	char err[WD_CKPT_ERR_MAX];
	void *buf = NULL;
	long k;
	int ok;

	if (wd_ckpt_open(path, &c, err) < 0)
		return 0;
	k = wd_ckpt_find(c, name);
	ok = k >= 0 && wd_ckpt_entry(c, (size_t)k)->numel == n && wd_ckpt_read(c, (size_t)k, &buf, err) == 0 &&
	     ((float *)buf)[n - 1] == (float)(n - 1);
	free(buf);
	wd_ckpt_close(&c);
	return ok;
}

/* Fills the tmpfs at mnt, then frees room bytes of it; the filler's path in filler. */
static int fill_leaving(const char *mnt, char *filler, size_t len, off_t room)
{
	struct stat st;
	int fd, ok;

	snprintf(filler, len, "%s/filler", mnt);
	fd = fill(filler);
	ok = fd >= 0 && errno == ENOSPC && fstat(fd, &st) == 0 &&
	     ftruncate(fd, st.st_size > room ? st.st_size - room : 0) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

static void test_enospc(void)
{
	static float big[1 << 17], small[100];	/* 512 KiB, and 400 bytes (buffered by HDF5) */
	struct wd_ckpt_tensor tb = tensor("w", big, 1 << 17), ts[200];
	static char names[200][16];
	char mnt[256], path[300], tmp[320], filler[300], err[WD_CKPT_ERR_MAX] = "";
	/* full; 64 KiB free, a tensor larger; 64 KiB free, 200 small tensors (more than that) */
	static const struct { off_t room; int many; const char *what; } cases[] = {
		{ 0, 0, "on a full disk (refused before HDF5 starts)" },
		{ 64 << 10, 0, "512 KiB with 64 KiB free (a write fails mid-way)" },
		{ 64 << 10, 1, "200 tensors of 400 bytes with 64 KiB free (HDF5 buffers them)" },
	};
	int fds, r;

	for (int i = 0; i < 200; i++) {
		snprintf(names[i], sizeof(names[i]), "t%d", i);
		ts[i] = tensor(names[i], small, 100);
	}
	snprintf(mnt, sizeof(mnt), "%s/tmpfs", dir);
	mkdir(mnt, 0700);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") < 0) {
		printf("ok %d # skip a full tmpfs: mount: %s (not root?)\n", ++tap_n, strerror(errno));
		return;
	}
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		CHECK(fill_leaving(mnt, filler, sizeof(filler), cases[c].room),
		      "a 1 MiB tmpfs filled to ENOSPC, then %lld bytes freed", (long long)cases[c].room);
		fds = count_fds();
		snprintf(path, sizeof(path), "%s/%zu.h5", mnt, c);
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		r = cases[c].many ? wd_ckpt_write(path, ts, 200, err) : wd_ckpt_write(path, &tb, 1, err);
		CHECK(r == -ENOSPC, "%s: -ENOSPC (%d)", cases[c].what, r);
		CHECK(strstr(err, "No space left on device") != NULL && strstr(err, ".h5.tmp'"),
		      "and the message says no space left: %s", err);
		CHECK(!exists(tmp) && !exists(path), "no .tmp and no file are left");
		CHECK(count_fds() == fds, "no file descriptor is left open (%d, was %d)", count_fds(), fds);
		unlink(filler);
	}
	snprintf(path, sizeof(path), "%s/0.h5", mnt);
	CHECK(wd_ckpt_write(path, &tb, 1, err) == 0 && reads_back(path, "w", 1 << 17),
	      "with the filler removed, the same write works and reads back: %s", err);
	CHECK(umount(mnt) == 0, "tmpfs unmounted");
}

/*
 * A file truncated after it was listed (a writer still copying it, a disk
 * that filled): HDF5's sec2 driver reads past the end of the file as
 * zeros, so without a check the tensor would read as zeros, no error.
 */
static void test_truncated_after_open(void)
{
	static float big[1 << 16];
	struct wd_ckpt_tensor t[2] = { tensor("a", big, 1 << 16), tensor("b", big, 1 << 16) };
	struct wd_ckpt *c = NULL;
	char path[300], err[WD_CKPT_ERR_MAX] = "";
	struct stat st;
	void *buf = NULL;
	long k;

	snprintf(path, sizeof(path), "%s/cut.h5", dir);
	CHECK(wd_ckpt_write(path, t, 2, err) == 0 && wd_ckpt_open(path, &c, err) == 0 &&
	      stat(path, &st) == 0, "two 256 KiB tensors written and listed: %s", err);
	if (!c)
		return;
	CHECK(truncate(path, st.st_size / 2) == 0, "the file cut to half its size, after the listing");
	k = wd_ckpt_find(c, "b") >= 0 ? wd_ckpt_find(c, "b") : 0;
	int r = wd_ckpt_read(c, (size_t)k, &buf, err);
	CHECK(r < 0 && strstr(err, path) && strstr(err, "truncated"),
	      "reading a tensor past the new end fails, naming the file and the truncation (%d): %s", r, err);
	free(buf);
	wd_ckpt_close(&c);
	unlink(path);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		CHECK(0, "mkdtemp");
		return tap_done();
	}
	test_truncated_after_open();
	test_enospc();
	char mnt[256], cmd[300];
	snprintf(mnt, sizeof(mnt), "%s/tmpfs", dir);
	umount(mnt);	/* a failed check may have left it mounted */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0, "temp dir removed");
	return tap_done();
}
