/*
 * checkpoint.c: the HDF5 checkpoint reader, and the reading of HDF5's error
 * stack that the writer (checkpoint_write.c) shares. The programs' own,
 * with the other checkpoint_*.c and ckpt_sandbox*.c files (libwdrift-ckpt.a,
 * not libwdrift.so, which no HDF5 reaches); common/driftlog_*.c include
 * hdf5.h too. HDF5's own
 * error printing is turned off; the innermost message of its error stack
 * is folded into ours instead, and a failed allocation anywhere on that
 * stack makes the call return -ENOMEM, so that a caller running us under a
 * memory limit (ckpt_sandbox.c) can say so.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "checkpoint.h"
#include "checkpoint_h5.h"
#include "error.h"
#include "near_name.h"

struct wd_ckpt {
	char *path;
	hid_t file;		/* 0: a listing only (wd_ckpt_adopt), not open here */
	int oom;		/* an allocation failed while listing */
	size_t n, alloc;
	struct wd_ckpt_entry *e;
};

/*
 * The errno in an I/O error's description, or 0. HDF5 has no field for
 * it: its file drivers (sec2, core) put "errno = N" in the message of the
 * H5E_IO (or H5E_FILE, at open) error they push where a read, write,
 * truncate or open failed. Only a number in the errno range is taken.
 */
static int desc_errno(const H5E_error2_t *e)
{
	const char *p;
	char *end;
	long v;

	if (!e->desc || (e->maj_num != H5E_IO && e->maj_num != H5E_FILE && e->maj_num != H5E_VFL))
		return 0;
	if (!(p = strstr(e->desc, "errno = ")))
		return 0;
	v = strtol(p + 8, &end, 10);
	return end > p + 8 && v > 0 && v < 4096 ? (int)v : 0;
}

static herr_t h5_walk(unsigned n, const H5E_error2_t *e, void *data)
{
	struct h5_stack *st = data;

	if (n == 0 && e->desc)
		snprintf(st->desc, sizeof(st->desc), "%s", e->desc);
	if (e->maj_num == H5E_RESOURCE && (e->min_num == H5E_NOSPACE || e->min_num == H5E_CANTALLOC))
		st->oom = 1;
	if (!st->sys_errno)
		st->sys_errno = desc_errno(e);
	return 0;
}

void ckpt_h5_stack_take(struct h5_stack *st)
{
	st->desc[0] = 0;
	st->oom = 0;
	st->sys_errno = 0;
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk, st);
	H5Eclear2(H5E_DEFAULT);
}

/* The stack read as ckpt_h5_stack_take reads it, but left as it is. */
int wd_h5_errno(void)
{
	struct h5_stack st = { "", 0, 0 };

	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk, &st);
	return st.sys_errno;
}

/* ckpt_fail's how: fold in HDF5's error stack; or the failure is our own allocation. */
#define WITH_H5 1
#define OUR_OOM 2

/*
 * Formats err as "'PATH': MESSAGE[: hdf5 detail]". Returns -ENOMEM when an
 * allocation failed (OUR_OOM, or a resource error on HDF5's stack), else -1.
 */
static int ckpt_fail(char *err, const char *path, int how, const char *fmt, ...)
{
	char msg[400];
	struct h5_stack st = { "", 0, 0 };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (how & WITH_H5)
		ckpt_h5_stack_take(&st);
	snprintf(err, WD_CKPT_ERR_MAX, "'%s': %s%s%s", path, msg, st.desc[0] ? ": " : "", st.desc);
	return st.oom || (how & OUR_OOM) ? -ENOMEM : -1;
}

/*
 * Reads a string attribute (fixed or variable length) into buf: 1 if read,
 * 0 if absent or unreadable, -ENOMEM if an allocation failed on the way.
 */
static int read_string_attr(hid_t obj, const char *name, char *buf, size_t size)
{
	hid_t attr = -1, type = -1, mem = -1;
	struct h5_stack st;
	int ok = 0;

	if (H5Aexists(obj, name) <= 0)
		return 0;
	attr = H5Aopen(obj, name, H5P_DEFAULT);
	if (attr < 0 || (type = H5Aget_type(attr)) < 0 ||
	    H5Tget_class(type) != H5T_STRING)
		goto out;
	mem = H5Tcopy(H5T_C_S1);
	H5Tset_cset(mem, H5Tget_cset(type));
	if (H5Tis_variable_str(type) > 0) {
		char *s = NULL;
		H5Tset_size(mem, H5T_VARIABLE);
		if (H5Aread(attr, mem, &s) >= 0 && s) {
			snprintf(buf, size, "%s", s);
			H5free_memory(s);
			ok = 1;
		}
	} else {
		/* One byte more than the file's string, null-terminated: an
		 * 8-byte "bfloat16" must not lose its last byte to the NUL. */
		size_t len = H5Tget_size(type);
		char *s = calloc(1, len + 1);
		H5Tset_size(mem, len + 1);
		H5Tset_strpad(mem, H5T_STR_NULLTERM);
		if (!s)
			ok = -ENOMEM;
		else if (H5Aread(attr, mem, s) >= 0) {
			snprintf(buf, size, "%s", s);
			ok = 1;
		}
		free(s);
	}
out:
	if (mem >= 0) H5Tclose(mem);
	if (type >= 0) H5Tclose(type);
	if (attr >= 0) H5Aclose(attr);
	ckpt_h5_stack_take(&st);
	return st.oom ? -ENOMEM : ok;
}

/*
 * Works out the dtype of a dataset's element type, or says why not.
 * Returns -ENOMEM when reading the dtype attribute ran out of memory.
 */
static int classify_type(hid_t ds, hid_t type, struct wd_ckpt_entry *en)
{
	size_t size = H5Tget_size(type);
	char tag[64] = "";

	switch (H5Tget_class(type)) {
	case H5T_FLOAT: {
		size_t spos, epos, esize, mpos, msize;
		H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
		size_t bias = H5Tget_ebias(type);
		if (size == 4 && esize == 8 && msize == 23 && bias == 127)
			en->dtype = WD_F32;
		else if (size == 8 && esize == 11 && msize == 52 && bias == 1023)
			en->dtype = WD_F64;
		else if (size == 2 && spos == 15 && mpos == 0 && esize == 5 &&
			 msize == 10 && bias == 15)
			en->dtype = WD_F16;
		else if (size == 2 && spos == 15 && mpos == 0 && esize == 8 &&
			 msize == 7 && bias == 127)
			en->dtype = WD_BF16;
		else {
			snprintf(en->problem, sizeof(en->problem),
				 "unsupported float type (%zu bytes, %zu exponent bits, %zu mantissa bits)",
				 size, esize, msize);
			en->skippable = 1;
		}
		return 0;
	}
	case H5T_INTEGER:
		if (read_string_attr(ds, "dtype", tag, sizeof(tag)) == -ENOMEM) {
			snprintf(en->problem, sizeof(en->problem), "out of memory reading its attribute dtype");
			return -ENOMEM;
		}
		if (!strcmp(tag, "bfloat16") && size == 2 &&
		    H5Tget_sign(type) == H5T_SGN_NONE) {
			en->dtype = WD_BF16;
			return 0;
		}
		if (!strcmp(tag, "bfloat16"))
			snprintf(en->problem, sizeof(en->problem),
				 "attribute dtype = \"bfloat16\" needs a uint16 dataset, not a %zu-byte %s integer",
				 size, H5Tget_sign(type) == H5T_SGN_NONE ? "unsigned" : "signed");
		else {
			/* the bf16 hint only where it may be meant: a 2-byte integer (a trial: noise on int64) */
			snprintf(en->problem, sizeof(en->problem), "unsupported element type (%zu-byte %s integer%s)",
				 size, H5Tget_sign(type) == H5T_SGN_NONE ? "unsigned" : "signed",
				 size == 2 ? "; bf16 as uint16 needs the attribute dtype = \"bfloat16\"" : "");
			en->skippable = 1;
		}
		return 0;
	case H5T_STRING: snprintf(tag, sizeof(tag), "string"); break;
	case H5T_COMPOUND: snprintf(tag, sizeof(tag), "compound"); break;
	case H5T_ENUM: snprintf(tag, sizeof(tag), "enum"); break;
	case H5T_ARRAY: snprintf(tag, sizeof(tag), "array"); break;
	case H5T_OPAQUE: snprintf(tag, sizeof(tag), "opaque"); break;
	default: snprintf(tag, sizeof(tag), "HDF5 class %d", (int)H5Tget_class(type)); break;
	}
	snprintf(en->problem, sizeof(en->problem), "unsupported element type (%s)", tag);
	en->skippable = 1;
	return 0;
}

/*
 * Fills en from a dataset's header: shape, dtype, or the problem that keeps
 * it from being a tensor. Returns 0, or -ENOMEM when memory ran out.
 */
static int describe_dataset(hid_t ds, struct wd_ckpt_entry *en)
{
	hid_t space = H5Dget_space(ds), type = H5Dget_type(ds);
	hsize_t dims[H5S_MAX_RANK];
	struct h5_stack st = { "", 0, 0 };
	int rank, r = 0;

	en->numel = 0;
	if (space < 0 || type < 0) {
		snprintf(en->problem, sizeof(en->problem), "cannot read the dataset's header");
		goto out;
	}
	rank = H5Sget_simple_extent_ndims(space);
	if (rank < 0 || rank > WD_CKPT_MAX_RANK ||
	    H5Sget_simple_extent_type(space) == H5S_NULL) {
		snprintf(en->problem, sizeof(en->problem),
			 rank > WD_CKPT_MAX_RANK ? "too many dimensions" : "zero-size dataset (null dataspace)");
		en->skippable = rank <= WD_CKPT_MAX_RANK;
		goto out;
	}
	H5Sget_simple_extent_dims(space, dims, NULL);
	en->rank = rank;
	en->numel = 1;
	for (int d = 0; d < rank; d++) {
		en->dims[d] = dims[d];
		if (dims[d] && en->numel > UINT64_MAX / dims[d]) {
			snprintf(en->problem, sizeof(en->problem), "dataset too large");
			goto out;
		}
		en->numel *= dims[d];
	}
	r = classify_type(ds, type, en);
	if (!en->problem[0] && en->numel == 0) {
		snprintf(en->problem, sizeof(en->problem), "zero-size dataset");
		en->skippable = 1;	/* a model's empty buffer: nothing to compare, nothing wrong */
	}
out:
	if (space >= 0) H5Sclose(space);
	if (type >= 0) H5Tclose(type);
	ckpt_h5_stack_take(&st);
	return st.oom ? -ENOMEM : r;
}

static herr_t visit_link(hid_t group, const char *name, const H5L_info_t *info,
			 void *data)
{
	struct wd_ckpt *c = data;
	hid_t obj;

	if (info->type != H5L_TYPE_HARD)
		return 0;	/* soft and external links would list a tensor twice */
	obj = H5Oopen(group, name, H5P_DEFAULT);
	if (obj < 0)
		return -1;
	if (H5Iget_type(obj) == H5I_DATASET) {
		if (c->n == c->alloc) {
			size_t alloc = c->alloc ? 2 * c->alloc : 64;
			void *e = realloc(c->e, alloc * sizeof(*c->e));
			if (!e) {
				c->oom = 1;
				H5Oclose(obj);
				return -1;
			}
			c->e = e;
			c->alloc = alloc;
		}
		struct wd_ckpt_entry *en = &c->e[c->n];
		memset(en, 0, sizeof(*en));
		en->name = strdup(name);
		if (!en->name) {
			c->oom = 1;
			H5Oclose(obj);
			return -1;
		}
		c->n++;
		if (describe_dataset(obj, en) == -ENOMEM) {
			c->oom = 1;
			H5Oclose(obj);
			return -1;
		}
	}
	H5Oclose(obj);
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	return strverscmp(((const struct wd_ckpt_entry *)a)->name,
			  ((const struct wd_ckpt_entry *)b)->name);
}

/* A new checkpoint object for path, with no file open yet; NULL: out of memory. */
static struct wd_ckpt *ckpt_new(const char *path)
{
	struct wd_ckpt *c = calloc(1, sizeof(*c));

	if (c && !(c->path = strdup(path))) {
		free(c);
		c = NULL;
	}
	return c;
}

/* Lists c's open file into c->e, sorted. 0, or -1 / -ENOMEM with err. */
static int ckpt_list(struct wd_ckpt *c, char *err)
{
	if (H5Lvisit(c->file, H5_INDEX_NAME, H5_ITER_INC, visit_link, c) < 0)
		return ckpt_fail(err, c->path, WITH_H5 | (c->oom ? OUR_OOM : 0),
				 c->oom ? "out of memory listing datasets"
					: "cannot list datasets (truncated or corrupt file?)");
	if (c->n)
		qsort(c->e, c->n, sizeof(*c->e), entry_cmp);
	return 0;
}

/*
 * What a file that is not HDF5 is, by its first bytes, when it is a format
 * a user brings instead (a trial gave torch.save's file, and read only "not
 * an HDF5 file"): " (it is ...: ...)" for the error, or "".
 */
static const char *other_format(const char *path)
{
	unsigned char h[16] = { 0 };
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	ssize_t n = fd < 0 ? -1 : read(fd, h, sizeof(h));
	const char *what = NULL;

	if (fd >= 0)
		close(fd);
	if (n >= 4 && !memcmp(h, "PK\x03\x04", 4))
		what = "a zip archive, as PyTorch's torch.save writes";
	else if (n >= 2 && h[0] == 0x80 && h[1] >= 2 && h[1] <= 5)
		what = "a Python pickle, as torch.save's legacy format is";
	else if (n >= 6 && !memcmp(h, "\x93NUMPY", 6))
		what = "a numpy .npy file";
	else if (n >= 9 && h[8] == '{' && !h[6] && !h[7])	/* a little-endian header length, then JSON */
		what = "a safetensors file";
	if (!what)
		return "";
	static __thread char said[300];
	snprintf(said, sizeof(said), " (it is %s: wdrift reads HDF5; docs/checkpoints.md writes a state_dict "
		 "as HDF5 in a few lines)", what);
	return said;
}

/* Opens path read-only, after checking that it is an HDF5 file; the hid or a failure. */
static int open_file(const char *path, hid_t *file, char *err)
{
	struct stat st;
	htri_t is;

	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	if (stat(path, &st) < 0) {
		int e = errno;
		char near[PATH_MAX + 32] = "";
		if (e == ENOENT)	/* a typo of a file beside it */
			wd_suggest_file(path, near, sizeof(near));
		return ckpt_fail(err, path, 0, "cannot open: %s%s", strerror(e), near);
	}
	if (S_ISDIR(st.st_mode))
		return ckpt_fail(err, path, 0, "is a directory, not a checkpoint file");
	/*
	 * HDF5 opens with a blocking open(): a FIFO would wait for a writer
	 * (until the sandbox's deadline, which then blames the file), and a
	 * stream cannot be read at offsets anyway. A block device can hold one.
	 */
	if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode))
		return ckpt_fail(err, path, 0, "is %s, not a checkpoint file (a regular file is needed)",
				 wd_file_kind(st.st_mode));
	is = H5Fis_hdf5(path);
	if (is == 0)
		return ckpt_fail(err, path, 0, "not an HDF5 file%s", other_format(path));
	if (is < 0)
		return ckpt_fail(err, path, WITH_H5, "cannot open");
	*file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (*file < 0)
		return ckpt_fail(err, path, WITH_H5, "cannot open as HDF5 (truncated or corrupt file?)");
	return 0;
}

int wd_ckpt_open(const char *path, struct wd_ckpt **out, char *err)
{
	struct wd_ckpt *c;
	hid_t file = -1;
	int r;

	*out = NULL;
	if ((r = open_file(path, &file, err)) < 0)
		return r;
	if (!(c = ckpt_new(path))) {
		H5Fclose(file);
		return ckpt_fail(err, path, OUR_OOM, "out of memory");
	}
	c->file = file;
	if ((r = ckpt_list(c, err)) < 0) {
		wd_ckpt_close(&c);
		return r;
	}
	*out = c;
	return 0;
}

int wd_ckpt_open_image(const void *image, size_t len, const char *name, struct wd_ckpt **out,
		       char *err)
{
	struct wd_ckpt *c;
	hid_t fapl;
	int r;

	*out = NULL;
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	if (!len)
		return ckpt_fail(err, name, 0, "not an HDF5 file");
	if (!(c = ckpt_new(name)))
		return ckpt_fail(err, name, OUR_OOM, "out of memory");
	/* the core driver over a copy of the image, with no backing file */
	fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 16, 0) < 0 ||
	    H5Pset_file_image(fapl, (void *)image, len) < 0)
		r = ckpt_fail(err, name, WITH_H5, "cannot take the file image");
	else if ((c->file = H5Fopen(name, H5F_ACC_RDONLY, fapl)) < 0)
		r = ckpt_fail(err, name, WITH_H5, "cannot open as HDF5 (truncated or corrupt file?)");
	else
		r = ckpt_list(c, err);
	if (fapl >= 0)
		H5Pclose(fapl);
	if (r < 0) {
		c->file = c->file < 0 ? 0 : c->file;
		wd_ckpt_close(&c);
		return r;
	}
	*out = c;
	return 0;
}

int wd_ckpt_adopt(const char *path, struct wd_ckpt_entry *e, size_t n, struct wd_ckpt **out)
{
	struct wd_ckpt *c = ckpt_new(path);

	*out = NULL;
	if (!c)
		return -ENOMEM;
	c->e = e;
	c->n = c->alloc = n;
	if (n)
		qsort(c->e, c->n, sizeof(*c->e), entry_cmp);
	*out = c;
	return 0;
}

void wd_ckpt_close(struct wd_ckpt **pc)
{
	struct wd_ckpt *c = *pc;

	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		free(c->e[i].name);
	free(c->e);
	if (c->file > 0)
		H5Fclose(c->file);
	free(c->path);
	free(c);
	*pc = NULL;
}

const char *wd_ckpt_path(const struct wd_ckpt *c) { return c->path; }
size_t wd_ckpt_count(const struct wd_ckpt *c) { return c->n; }

const struct wd_ckpt_entry *wd_ckpt_entry(const struct wd_ckpt *c, size_t i)
{
	return i < c->n ? &c->e[i] : NULL;
}

long wd_ckpt_find(const struct wd_ckpt *c, const char *name)
{
	struct wd_ckpt_entry key = { .name = (char *)name };
	const struct wd_ckpt_entry *hit;

	if (!c->n)
		return -1;
	hit = bsearch(&key, c->e, c->n, sizeof(*c->e), entry_cmp);
	return hit ? (long)(hit - c->e) : -1;
}

int wd_ckpt_check(const struct wd_ckpt *c, size_t i, size_t *bytes, char *err)
{
	const struct wd_ckpt_entry *en = wd_ckpt_entry(c, i);

	*bytes = 0;
	if (!en)
		return ckpt_fail(err, c->path, 0, "no dataset #%zu", i);
	if (en->problem[0])
		return ckpt_fail(err, c->path, 0, "dataset '%s': %s", en->name, en->problem);
	if (en->numel > SIZE_MAX / 8)
		return ckpt_fail(err, c->path, 0, "dataset '%s': too large", en->name);
	*bytes = en->numel * wd_dtype_size(en->dtype);
	return 0;
}

int wd_ckpt_read_reuse(struct wd_ckpt *c, size_t i, void **buf, size_t *cap, char *err)
{
	size_t bytes;
	int r;

	if ((r = wd_ckpt_check(c, i, &bytes, err)) < 0)
		return r;
	if (!*buf || *cap < bytes) {
		free(*buf);
		*cap = 0;
		if (!(*buf = malloc(bytes ? bytes : 1)))
			return ckpt_fail(err, c->path, OUR_OOM,
					 "dataset '%s': out of memory for %llu elements", c->e[i].name,
					 (unsigned long long)c->e[i].numel);
		*cap = bytes;
	}
	return wd_ckpt_read_into(c, i, *buf, err);
}

int wd_ckpt_read(struct wd_ckpt *c, size_t i, void **buf, char *err)
{
	size_t cap = 0;
	int r;

	*buf = NULL;
	if ((r = wd_ckpt_read_reuse(c, i, buf, &cap, err)) < 0) {
		free(*buf);
		*buf = NULL;
	}
	return r;
}

/* The open file's descriptor, when HDF5 reads it through one (sec2); -1 for an image. */
static int file_descriptor(struct wd_ckpt *c)
{
	hid_t fapl = H5Fget_access_plist(c->file);
	int sec2 = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2;
	void *handle;

	if (fapl >= 0)
		H5Pclose(fapl);
	if (!sec2 || H5Fget_vfd_handle(c->file, H5P_DEFAULT, &handle) < 0)
		return -1;
	return *(int *)handle;
}

/*
 * HDF5's sec2 driver reads what lies past the end of the file as zeros: a
 * file cut short after it was opened (a copy still being written, a disk
 * that filled) would give a tensor of zeros and no error. HDF5 checks the
 * end of the file against its end of allocation at open only; this checks
 * it again after a read, on the open descriptor. 0, or -1 with err.
 * Files opened from an image (the core driver) have no descriptor.
 */
static int truncated_since_open(struct wd_ckpt *c, const char *name, char *err)
{
	int fd = file_descriptor(c);
	haddr_t eoa;
	struct stat st;

	if (fd < 0 || H5Fget_eoa(c->file, &eoa) < 0 || fstat(fd, &st) < 0)
		return 0;
	if ((haddr_t)st.st_size >= eoa)
		return 0;
	return ckpt_fail(err, c->path, 0, "dataset '%s': the file was truncated while it was read "
			 "(%lld bytes now, %llu when it was opened); it is being written, or damaged",
			 name, (long long)st.st_size, (unsigned long long)eoa);
}

/*
 * Where a dataset stored whole in the file, in the layout asked for
 * (contiguous, allocated, no conversion), lies: the file's descriptor,
 * with the offset in *at (from the file's start, a user block included:
 * H5Dget_offset adds it). -1 when it must go through H5Dread.
 */
static int direct_place(struct wd_ckpt *c, hid_t ds, hid_t ftype, hid_t mem, size_t bytes,
			uint64_t *at)
{
	haddr_t off;
	hid_t dcpl;
	int whole;

	if (!bytes || H5Tequal(ftype, mem) <= 0)
		return -1;
	dcpl = H5Dget_create_plist(ds);
	whole = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS;
	if (dcpl >= 0)
		H5Pclose(dcpl);
	if (!whole || (off = H5Dget_offset(ds)) == HADDR_UNDEF || H5Dget_storage_size(ds) != bytes)
		return -1;
	*at = (uint64_t)off;
	return file_descriptor(c);
}

/*
 * Whether a dataset at offset in the file, mapped, gives element-aligned
 * data: HDF5 packs small datasets back to back (its file alignment is 1),
 * so an odd count of 16-bit values puts the next dataset off a 4-byte
 * boundary, and the engine reads through float and double pointers.
 */
static int mapped_aligned(uint64_t offset, size_t elem)
{
	return elem && offset % elem == 0;
}

/*
 * A dataset that direct_place finds is read with pread on the file's
 * descriptor. libhdf5 runs one call at a time (Debian's thread-safe build
 * holds one lock over each), so the daemon's compute workers, which read
 * side by side, would otherwise read one after the other. 1 when read, 0
 * when it must go through H5Dread, or -1 with err (a read error, or a
 * file that ends before the dataset does).
 */
static int read_direct(struct wd_ckpt *c, hid_t ds, hid_t ftype, hid_t mem, const char *name,
		       void *dst, size_t bytes, char *err)
{
	uint64_t at;
	int fd = direct_place(c, ds, ftype, mem, bytes, &at);

	if (fd < 0)
		return 0;
	for (size_t done = 0; done < bytes;) {
		ssize_t n = pread(fd, (char *)dst + done, bytes - done, (off_t)(at + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ckpt_fail(err, c->path, 0, "dataset '%s': cannot read: %s", name,
					 strerror(errno));
		if (n == 0)
			return ckpt_fail(err, c->path, 0, "dataset '%s': the file ends %zu bytes into "
					 "its %zu (truncated while it was read?)", name, done, bytes);
		done += (size_t)n;
	}
	return 1;
}

/* A dataset open for reading (open_for_read), and the memory type to read it as. */
struct read_handles {
	hid_t ds, ftype, mem;
	size_t bytes;
};

static void close_read(struct read_handles *h)
{
	if (h->mem >= 0) H5Tclose(h->mem);
	if (h->ftype >= 0) H5Tclose(h->ftype);
	if (h->ds >= 0) H5Dclose(h->ds);
	H5Eclear2(H5E_DEFAULT);
}

/*
 * Opens tensor i for a read. Its header is read again first: a dataset
 * whose type or size changed since the listing fails instead of
 * overflowing the caller's buffer. 0, or -1 / -ENOMEM with err; h is to
 * be closed (close_read) either way.
 */
static int open_for_read(struct wd_ckpt *c, size_t i, struct read_handles *h, char *err)
{
	const struct wd_ckpt_entry *en = wd_ckpt_entry(c, i);
	struct wd_ckpt_entry now = { 0 };
	int r;

	*h = (struct read_handles){ -1, -1, -1, 0 };
	if ((r = wd_ckpt_check(c, i, &h->bytes, err)) < 0)
		return r;
	if (c->file <= 0)
		return ckpt_fail(err, c->path, 0, "dataset '%s': the file is not open in this process",
				 en->name);
	h->ds = H5Dopen2(c->file, en->name, H5P_DEFAULT);
	if (h->ds < 0 || (h->ftype = H5Dget_type(h->ds)) < 0)
		return ckpt_fail(err, c->path, WITH_H5, "dataset '%s': cannot open", en->name);
	if ((r = describe_dataset(h->ds, &now)) < 0 || now.problem[0] || now.dtype != en->dtype ||
	    now.numel != en->numel)
		return ckpt_fail(err, c->path, r == -ENOMEM ? OUR_OOM : 0,
				 "dataset '%s': changed since the file was listed%s%s", en->name,
				 now.problem[0] ? ": " : "", now.problem);
	switch (en->dtype) {
	case WD_F32: h->mem = H5Tcopy(H5T_NATIVE_FLOAT); break;
	case WD_F64: h->mem = H5Tcopy(H5T_NATIVE_DOUBLE); break;
	default:
		if (H5Tget_class(h->ftype) == H5T_INTEGER) {
			h->mem = H5Tcopy(H5T_NATIVE_UINT16);
		} else {	/* the file's own 16-bit float layout, little-endian */
			h->mem = H5Tcopy(h->ftype);
			if (h->mem >= 0)
				H5Tset_order(h->mem, H5T_ORDER_LE);
		}
		break;
	}
	if (h->mem < 0)
		return ckpt_fail(err, c->path, WITH_H5, "dataset '%s': cannot read", en->name);
	return 0;
}

/*
 * After a failed read: the first filter of ds's pipeline that this HDF5
 * cannot load, said as what to do about it, into buf; 0 if every filter
 * is there (then the file itself is the likely cause). Each call here
 * starts a new HDF5 error stack: the caller takes the read's first.
 */
static int missing_filter(hid_t ds, char *buf, size_t size)
{
	hid_t dcpl = H5Dget_create_plist(ds);
	int n = dcpl < 0 ? 0 : H5Pget_nfilters(dcpl), found = 0;

	for (int k = 0; k < n && !found; k++) {
		unsigned flags, config;
		size_t nelmts = 0;
		char name[80] = "";
		H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)k, &flags, &nelmts, NULL, sizeof(name), name,
						 &config);
		if (id >= 0 && H5Zfilter_avail(id) <= 0) {
			name[strcspn(name, ";")] = '\0';	/* "HDF5 lz4 filter; see http://..." */
			snprintf(buf, size, "its compression filter %d%s%.60s%s cannot be loaded: install the "
				 "filter's HDF5 plugin (Debian: hdf5-filter-plugin, for lz4 and bz2) or set "
				 "HDF5_PLUGIN_PATH to its directory", (int)id, name[0] ? " ('" : "", name,
				 name[0] ? "')" : "");
			found = 1;
		}
	}
	if (dcpl >= 0)
		H5Pclose(dcpl);
	return found;
}

int wd_ckpt_read_into(struct wd_ckpt *c, size_t i, void *dst, char *err)
{
	char filter[300];
	struct read_handles h;
	const char *name;
	int r;

	if ((r = open_for_read(c, i, &h, err)) < 0)
		goto out;
	name = c->e[i].name;
	if ((r = read_direct(c, h.ds, h.ftype, h.mem, name, dst, h.bytes, err)) == 0 &&
	    H5Dread(h.ds, h.mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0) {
		/* HDF5's stack first (a failed allocation is -ENOMEM), then the filters' probe */
		r = ckpt_fail(err, c->path, WITH_H5,
			      "dataset '%s': cannot read (truncated or corrupt file?)", name);
		if (r != -ENOMEM && missing_filter(h.ds, filter, sizeof(filter)))
			snprintf(err, WD_CKPT_ERR_MAX, "'%s': dataset '%s': cannot read: %s", c->path, name,
				 filter);
	}
	if (r >= 0)
		r = truncated_since_open(c, name, err);
out:
	close_read(&h);
	return r;
}

int wd_ckpt_locate(struct wd_ckpt *c, size_t i, struct wd_ckpt_place *at, char *err)
{
	struct read_handles h;
	struct stat st;
	int r;

	*at = (struct wd_ckpt_place){ -1, 0 };
	if ((r = open_for_read(c, i, &h, err)) < 0)
		goto out;
	if ((at->fd = direct_place(c, h.ds, h.ftype, h.mem, h.bytes, &at->offset)) < 0 ||
	    !mapped_aligned(at->offset, wd_dtype_size(c->e[i].dtype))) {
		at->fd = -1;
		goto out;	/* r = 0: read it */
	}
	if (fstat(at->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		at->fd = -1;	/* a descriptor that cannot be mapped: read it */
		goto out;
	}
	if (at->offset > (uint64_t)st.st_size || h.bytes > (uint64_t)st.st_size - at->offset) {
		r = ckpt_fail(err, c->path, 0, "dataset '%s': the file ends before the dataset "
			      "(%lld bytes now, the dataset's end at %llu); it is being written, or damaged",
			      c->e[i].name, (long long)st.st_size,
			      (unsigned long long)(at->offset + h.bytes));
		at->fd = -1;
		goto out;
	}
	r = 1;
out:
	close_read(&h);
	return r;
}
