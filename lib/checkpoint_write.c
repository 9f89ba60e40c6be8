/*
 * checkpoint_write.c: the HDF5 checkpoint writer (wd_ckpt_write in
 * checkpoint.h): tensors to a new file, whole or not at all, and the cause
 * of a failed write as an errno (a full disk above all). Also what other
 * HDF5 writers share with it: wd_h5_discard_writes. The reader, and the
 * reading of HDF5's error stack, are checkpoint.c's.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <hdf5.h>

#include "checkpoint.h"
#include "checkpoint_h5.h"

/* The HDF5 file type of a dtype: IEEE binary16 has no predefined type. */
static hid_t file_type_of(enum wd_dtype t)
{
	hid_t h;

	switch (t) {
	case WD_F32: return H5Tcopy(H5T_IEEE_F32LE);
	case WD_F64: return H5Tcopy(H5T_IEEE_F64LE);
	case WD_BF16: return H5Tcopy(H5T_STD_U16LE);
	case WD_F16:
		h = H5Tcopy(H5T_IEEE_F32LE);
		H5Tset_fields(h, 15, 10, 5, 0, 10);
		H5Tset_offset(h, 0);
		H5Tset_precision(h, 16);
		H5Tset_size(h, 2);
		H5Tset_ebias(h, 15);
		return h;
	}
	return -1;
}

/*
 * The bytes free on the file system that path (a file, perhaps not yet
 * made) would be on, as its writer sees them: root may use the reserved
 * blocks. 0, or -1 when statvfs fails.
 */
static int free_bytes(const char *path, uint64_t *avail)
{
	struct statvfs vfs;
	char dir[4096];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = 0;
	if (statvfs(slash ? dir : ".", &vfs) < 0)
		return -1;
	*avail = (uint64_t)(geteuid() ? vfs.f_bavail : vfs.f_bfree) * vfs.f_frsize;
	return 0;
}

/* The errnos that mean "the file system is out of room" or "cannot write there". */
static int io_errno(int e)
{
	return e == ENOSPC || e == EDQUOT || e == EFBIG || e == EIO || e == EROFS;
}

/*
 * The cause of a failed write to path, as -errno: the errno the error
 * stack records (st), else the one the failing call left (saved) where it
 * is an I/O cause, else -ENOSPC when path's file system has no room left
 * (what the call failed on, most likely, with nothing more said), else
 * -EIO. An allocation that failed on the stack is -ENOMEM.
 */
static int write_cause(const struct h5_stack *st, int saved, const char *path)
{
	uint64_t avail;

	if (st->oom)
		return -ENOMEM;
	if (st->sys_errno)
		return -st->sys_errno;
	if (io_errno(saved))
		return -saved;
	if (free_bytes(path, &avail) == 0 && avail < 65536)
		return -ENOSPC;
	return -EIO;
}

/*
 * A writer's failure: err is "'PATH': MESSAGE: CAUSE", the cause in
 * strerror's words where it is known (else HDF5's innermost message), and
 * the return is its -errno (write_cause). saved is errno as the failing
 * call left it. taken is HDF5's stack as read right after the failing call
 * (any later HDF5 call, a close included, clears it); with_h5 and no
 * taken, it is read (and cleared) here.
 */
__attribute__((format(printf, 6, 7)))
static int write_fail(char *err, const char *path, int saved, int with_h5, const struct h5_stack *taken,
		      const char *fmt, ...)
{
	char msg[400];
	struct h5_stack st = { "", 0, 0 };
	va_list ap;
	int r;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (taken)
		st = *taken;
	else if (with_h5)
		ckpt_h5_stack_take(&st);
	else
		st.sys_errno = saved;
	r = write_cause(&st, saved, path);
	if (r != -EIO || st.sys_errno == EIO || saved == EIO || !st.desc[0])
		snprintf(err, WD_CKPT_ERR_MAX, "'%s': %s: %s", path, msg, strerror(-r));
	else
		snprintf(err, WD_CKPT_ERR_MAX, "'%s': %s: %s", path, msg, st.desc);
	return r;
}

/* At a failed HDF5 call: errno and the error stack, before anything clears them. */
static void take_failure(int *saved, struct h5_stack *st)
{
	*saved = errno;
	ckpt_h5_stack_take(st);
}

/*
 * Writes one tensor's dataset. 0, or -1 with *saved the errno the failing
 * call left and *st HDF5's stack as it was then. Every close is checked:
 * HDF5 buffers small raw data (its sieve buffer) and writes it when the
 * dataset closes, so a full disk can show first there.
 */
static int write_tensor(hid_t file, const struct wd_ckpt_tensor *t, int *saved, struct h5_stack *st)
{
	hsize_t dims[WD_CKPT_MAX_RANK], one = t->view.numel;
	hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), space = -1, ftype = -1, ds = -1;
	int r = -1;

	*saved = 0;
	memset(st, 0, sizeof(*st));
	if (t->rank > WD_CKPT_MAX_RANK)
		goto out;
	for (int d = 0; d < t->rank; d++)
		dims[d] = t->dims[d];
	H5Pset_create_intermediate_group(lcpl, 1);
	space = t->dims ? H5Screate_simple(t->rank, dims, NULL) : H5Screate_simple(1, &one, NULL);
	ftype = file_type_of(t->view.dtype);
	if (space < 0 || ftype < 0) {
		take_failure(saved, st);
		goto out;
	}
	errno = 0;
	ds = H5Dcreate2(file, t->name, ftype, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
	/* memory type = file type: the bits go in as they are */
	if (ds < 0 || H5Dwrite(ds, ftype, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->view.data) < 0) {
		take_failure(saved, st);
		goto out;
	}
	if (t->view.dtype == WD_BF16) {
		hid_t sty = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
		H5Tset_size(sty, 9);	/* "bfloat16" and its NUL */
		hid_t a = H5Acreate2(ds, "dtype", sty, sp, H5P_DEFAULT, H5P_DEFAULT);
		int ok = a >= 0 && H5Awrite(a, sty, "bfloat16") >= 0;
		if (!ok)
			take_failure(saved, st);
		errno = 0;
		if (a >= 0 && H5Aclose(a) < 0 && ok) {
			take_failure(saved, st);
			ok = 0;
		}
		H5Sclose(sp);
		H5Tclose(sty);
		if (!ok)
			goto out;
	}
	r = 0;
out:
	if (ds >= 0) {
		errno = 0;
		if (H5Dclose(ds) < 0 && r == 0) {
			take_failure(saved, st);
			r = -1;
		}
	}
	if (ftype >= 0) H5Tclose(ftype);
	if (space >= 0) H5Sclose(space);
	H5Pclose(lcpl);
	return r;
}

/*
 * Closes a file that a write or a flush failed on, leaving no HDF5 ID
 * behind. HDF5 1.10 frees a file's structure when the flush inside
 * H5Fclose fails, yet keeps its ID, so that the next sweep of IDs (at
 * exit, at the latest) uses freed memory and crashes (HDF5's issue 2257,
 * CVE-2020-10812). On a full disk that flush does fail. So the file's
 * descriptor is first pointed at an anonymous memory file (memfd): the
 * close then writes what it still holds there, and succeeds; the real
 * file's last descriptor is gone with the dup2, and its space with its
 * unlink. What is written to the memory file is the little HDF5 still
 * buffers (metadata, a sieve buffer), freed at the close.
 */
static void close_failed(hid_t file)
{
	wd_h5_discard_writes(file);
	H5Fclose(file);
	H5Eclear2(H5E_DEFAULT);
}

int wd_h5_discard_writes(int64_t file)
{
	void *handle = NULL;
	int m, r = 0;

	if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || !handle) {
		H5Eclear2(H5E_DEFAULT);
		return -EINVAL;
	}
	if ((m = memfd_create("wdrift-h5-discard", MFD_CLOEXEC)) < 0)
		return -errno;
	if (dup2(m, *(int *)handle) < 0)
		r = -errno;
	close(m);
	return r;
}

/*
 * -ENOSPC, with err, when path's file system has fewer bytes free than the
 * raw data alone needs: the write could only fail, part-way, and libhdf5
 * leaks a little on the way out of a create that fails on a full disk.
 * Else 0. Free space as its writer sees it: root may use the reserved
 * blocks. (A quota, EDQUOT, is not seen here: the write finds it.)
 */
static int room_check(const char *path, uint64_t need, char *err)
{
	uint64_t avail;

	if (free_bytes(path, &avail) < 0 || avail >= need)
		return 0;	/* unknown: the write will say */
	snprintf(err, WD_CKPT_ERR_MAX, "'%.600s': cannot write %llu bytes: %s (%llu bytes free)", path,
		 (unsigned long long)need, strerror(ENOSPC), (unsigned long long)avail);
	return -ENOSPC;
}

int wd_ckpt_write(const char *path, const struct wd_ckpt_tensor *t, size_t n, char *err)
{
	char tmp[4096];
	hid_t file = -1;
	struct h5_stack st;
	int fd, r, saved;

	uint64_t need = 0;

	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	for (size_t i = 0; i < n; i++)
		need += t[i].view.numel * wd_dtype_size(t[i].view.dtype);
	if ((r = room_check(tmp, need, err)) < 0)
		return r;
	errno = 0;
	file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	if (file < 0) {
		r = write_fail(err, tmp, errno, 1, NULL, "cannot create");
		unlink(tmp);	/* made, perhaps, before what failed */
		return r;
	}
	for (size_t i = 0; i < n; i++)
		if (write_tensor(file, &t[i], &saved, &st) < 0) {
			r = write_fail(err, tmp, saved, 1, &st, "dataset '%s': cannot write", t[i].name);
			close_failed(file);
			unlink(tmp);
			return r;
		}
	/*
	 * What HDF5 still buffers is written here, where a failure can be
	 * handled (close_failed), rather than inside H5Fclose, where it
	 * cannot.
	 */
	errno = 0;
	if (H5Fflush(file, H5F_SCOPE_LOCAL) < 0) {
		r = write_fail(err, tmp, errno, 1, NULL, "cannot write");
		close_failed(file);
		unlink(tmp);
		return r;
	}
	errno = 0;
	if (H5Fclose(file) < 0) {	/* rare after the flush; the ID may be left (above) */
		r = write_fail(err, tmp, errno, 1, NULL, "cannot close");
		unlink(tmp);
		return r;
	}
	/* durable before it is visible under its name */
	fd = open(tmp, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0) {
		saved = errno;
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		return write_fail(err, tmp, saved, 0, NULL, "cannot fsync");
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		saved = errno;
		unlink(tmp);
		return write_fail(err, path, saved, 0, NULL, "cannot rename into place");
	}
	return 0;
}
