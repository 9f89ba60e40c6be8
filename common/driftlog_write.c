/*
 * driftlog_write.c: writing the drift log (driftlog.h, docs/storage.md). SWMR needs
 * every dataset to exist before writing starts, so the file is made with
 * all of them: rows, and the tensors, runs and proxies string tables.
 * Datasets may grow under SWMR; new ones may not appear.
 *
 * Also the copies of damaged drift logs (driftlog_set_aside): plain file
 * operations, no HDF5. It does not log: the caller is told what it removed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "checkpoint.h"	/* wd_h5_errno, wd_h5_discard_writes */
#include "driftlog.h"
#include "error.h"
#include "grow.h"

struct names {
	char **v;
	size_t n, cap;
};

struct driftlog_writer {
	char *path;
	int failed;		/* a write failed: close discards what HDF5 still buffers */
	hid_t file, rows, tensors, runs, row_type, str_type;
	size_t n_proxies, row_size;
	uint64_t n_rows;
	struct names tensor_names, run_names;
};

/* The drift log's columns before ratio, in file order: one list (docs/storage.md). */
#define ROW_COLUMN(field, h5type) { #field, HOFFSET(struct driftlog_disk_row, field), h5type }

int64_t driftlog_row_type(size_t n_proxies, size_t *size)
{
	const struct {
		const char *name;
		size_t offset;
		hid_t type;
	} columns[] = {
		ROW_COLUMN(step, H5T_NATIVE_INT64),
		ROW_COLUMN(tensor, H5T_NATIVE_UINT32),
		ROW_COLUMN(run, H5T_NATIVE_UINT16),
		ROW_COLUMN(kind, H5T_NATIVE_UINT8),
		ROW_COLUMN(role, H5T_NATIVE_UINT8),
		ROW_COLUMN(w1, H5T_NATIVE_DOUBLE),
		ROW_COLUMN(max_abs_diff, H5T_NATIVE_DOUBLE),
		ROW_COLUMN(rel_l2, H5T_NATIVE_DOUBLE),
		ROW_COLUMN(nan, H5T_NATIVE_UINT64),
		ROW_COLUMN(posinf, H5T_NATIVE_UINT64),
		ROW_COLUMN(neginf, H5T_NATIVE_UINT64),
		ROW_COLUMN(wall, H5T_NATIVE_DOUBLE),
		ROW_COLUMN(numel, H5T_NATIVE_UINT64),
	};

	*size = sizeof(struct driftlog_disk_row) + n_proxies * sizeof(double);
	hid_t t = H5Tcreate(H5T_COMPOUND, *size);
	for (size_t i = 0; i < sizeof(columns) / sizeof(columns[0]); i++)
		H5Tinsert(t, columns[i].name, columns[i].offset, columns[i].type);
	if (n_proxies) {
		hsize_t dim = n_proxies;
		hid_t a = H5Tarray_create2(H5T_NATIVE_DOUBLE, 1, &dim);
		H5Tinsert(t, "ratio", sizeof(struct driftlog_disk_row), a);
		H5Tclose(a);
	}
	return t;
}

/* An empty, extendable, chunked 1-D dataset. */
static hid_t make_table(hid_t file, const char *name, hid_t type, hsize_t chunk)
{
	hsize_t dim = 0, max = H5S_UNLIMITED;
	hid_t space = H5Screate_simple(1, &dim, &max), dcpl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_chunk(dcpl, 1, &chunk);
	hid_t ds = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	H5Pclose(dcpl);
	H5Sclose(space);
	return ds;
}

static uint64_t table_len(hid_t ds)
{
	hsize_t dim = 0;
	hid_t space = H5Dget_space(ds);
	H5Sget_simple_extent_dims(space, &dim, NULL);
	H5Sclose(space);
	return dim;
}

/*
 * Appends n elements of buf (type t) to a 1-D table, and flushes it. 0, or
 * -1 with *cause the errno of the failed system call where HDF5 recorded
 * one (else 0), taken before any other HDF5 call clears its error stack.
 * On failure the table is cut back to its old length (where HDF5 can): a
 * grown extent whose write failed would show readers rows of zeros.
 */
static int table_append(hid_t ds, hid_t t, const void *buf, hsize_t n, int *cause)
{
	hsize_t old = table_len(ds), total = old + n;

	*cause = 0;
	if (H5Dset_extent(ds, &total) < 0) {
		*cause = wd_h5_errno();
		return -1;
	}
	hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(1, &n, NULL);
	int r = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &old, NULL, &n, NULL) < 0 ||
		H5Dwrite(ds, t, ms, fs, H5P_DEFAULT, buf) < 0 || H5Dflush(ds) < 0 ? -1 : 0;
	if (r < 0)
		*cause = wd_h5_errno();
	H5Sclose(ms);
	H5Sclose(fs);
	if (r < 0)
		H5Dset_extent(ds, &old);
	H5Eclear2(H5E_DEFAULT);
	return r;
}

/*
 * err for a failed write of what to s's file, with its cause (an errno, 0
 * when not known). A full disk says so, and what becomes of the rows: the
 * result records in the write-ahead log hold them, and the drift log is
 * rebuilt from it at the next start. Returns -1.
 */
static int write_failed(struct driftlog_writer *s, char *err, size_t errlen, const char *what, int e)
{
	H5Eclear2(H5E_DEFAULT);
	s->failed = 1;
	if (e == ENOSPC || e == EDQUOT)
		return wd_error(err, errlen, "'%s': %s: %s: the disk is full (free space in storage.dir; "
			    "the rows are in the write-ahead log, which the next start rebuilds the "
			    "drift log from)", s->path, what, strerror(e));
	return wd_error(err, errlen, "'%s': %s%s%s", s->path, what, e ? ": " : "", e ? strerror(e) : "");
}

static int names_add(struct names *nm, const char *s)
{
	char **v = wd_grow(nm->v, nm->n, &nm->cap, sizeof(*v), 64);
	if (!v)
		return -1;
	nm->v = v;
	if (!(nm->v[nm->n] = strdup(s)))
		return -1;
	nm->n++;
	return 0;
}

/* Reads a string table into memory (opening an existing file). */
static int names_load(hid_t ds, hid_t str, struct names *nm)
{
	uint64_t n = table_len(ds);
	char *buf = calloc(n + 1, DRIFTLOG_NAME_MAX);
	int r = 0;
	if (!buf || (n && H5Dread(ds, str, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0))
		r = -1;
	for (uint64_t i = 0; !r && i < n; i++) {
		buf[i * DRIFTLOG_NAME_MAX + DRIFTLOG_NAME_MAX - 1] = 0;
		r = names_add(nm, buf + i * DRIFTLOG_NAME_MAX);
	}
	free(buf);
	return r;
}

/* The index of name in a table, appending it to memory and file if new. */
/* The index of name in a name table, appended when new; -1 with *cause (table_append). */
static long name_index(struct names *nm, hid_t ds, hid_t str, const char *name, int *cause)
{
	char padded[DRIFTLOG_NAME_MAX];

	/* the table holds names cut to its width: look up the cut name, or a
	 * long name would be appended again at every row */
	memset(padded, 0, sizeof(padded));
	snprintf(padded, sizeof(padded), "%s", name);	/* longer names are cut: rare */
	for (size_t i = 0; i < nm->n; i++)
		if (!strcmp(nm->v[i], padded))
			return (long)i;
	if (table_append(ds, str, padded, 1, cause) < 0 || names_add(nm, padded) < 0)
		return -1;
	return (long)nm->n - 1;
}

/* labels as "[a, b]" ("[]": none), cut to fit size. */
static void label_list(char *out, size_t size, const char *const *labels, size_t n)
{
	size_t at = (size_t)snprintf(out, size, "[");
	for (size_t i = 0; i < n && at < size; i++)
		at += (size_t)snprintf(out + at, size - at, "%s%s", i ? ", " : "", labels[i]);
	if (at < size)
		snprintf(out + at, size - at, "]");
}

int driftlog_open(const char *path, const char *const *proxies, size_t n_proxies,
	       struct driftlog_writer **out, char *err, size_t errlen)
{
	struct driftlog_writer *s = calloc(1, sizeof(*s));
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	FILE *probe;
	int rc = -1;

	*out = NULL;
	if (!s || n_proxies > DRIFTLOG_MAX_PROXIES || !(s->path = strdup(path))) {
		free(s);
		H5Pclose(fapl);
		return wd_error(err, errlen, "'%s': out of memory or too many proxies", path);
	}
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);	/* SWMR needs it */
#if H5_VERSION_GE(1, 10, 7)
	/*
	 * No file lock: a reader (wdrift report and export, h5py) holds a
	 * shared one while it has the file open, and the compute thread opens
	 * its drift logs again after each idle close, which with HDF5's
	 * exclusive lock failed on any reader and rebuilt the file as damaged.
	 * The daemon's lock on its storage directory keeps a second writer out.
	 */
	H5Pset_file_locking(fapl, 0, 1);
#endif
	s->n_proxies = n_proxies;
	s->row_type = driftlog_row_type(n_proxies, &s->row_size);
	s->str_type = H5Tcopy(H5T_C_S1);
	H5Tset_size(s->str_type, DRIFTLOG_NAME_MAX);
	s->file = s->rows = s->tensors = s->runs = -1;
	if ((probe = fopen(path, "rb"))) {
		fclose(probe);
		s->file = H5Fopen(path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl);
		if (s->file < 0) {
			wd_error(err, errlen, "'%s': cannot open for writing (a writer was killed, or the "
			     "file is damaged)", path);
			goto fail;
		}
		s->rows = H5Dopen2(s->file, "rows", H5P_DEFAULT);
		s->tensors = H5Dopen2(s->file, "tensors", H5P_DEFAULT);
		s->runs = H5Dopen2(s->file, "runs", H5P_DEFAULT);
		hid_t px = H5Dopen2(s->file, "proxies", H5P_DEFAULT);
		struct names have = { 0 };
		int loaded = px >= 0 && names_load(px, s->str_type, &have) == 0;
		int same = loaded && have.n == n_proxies;
		for (size_t i = 0; same && i < n_proxies; i++)
			same = !strcmp(have.v[i], proxies[i]);
		char was[512], now[512];	/* the labels, for the message */
		label_list(was, sizeof(was), (const char *const *)have.v, have.n);
		label_list(now, sizeof(now), proxies, n_proxies);
		for (size_t i = 0; i < have.n; i++)
			free(have.v[i]);
		free(have.v);
		if (px >= 0)
			H5Dclose(px);
		hid_t rt = s->rows >= 0 ? H5Dget_type(s->rows) : -1;
		size_t rsize = rt >= 0 ? H5Tget_size(rt) : 0;
		if (rt >= 0)
			H5Tclose(rt);
		if (s->rows >= 0 && s->tensors >= 0 && s->runs >= 0 && loaded && !same) {
			/* the study's proxies changed (a reload): a config change, not damage */
			wd_error(err, errlen, "'%s': made for the proxy labels %s, and the study has %s now",
				 path, was, now);
			rc = DRIFTLOG_OTHER_LABELS;
			goto fail;
		}
		if (s->rows < 0 || s->tensors < 0 || s->runs < 0 || !same || rsize != s->row_size) {
			wd_error(err, errlen, "'%s': not a drift log of this version", path);
			goto fail;
		}
		if (names_load(s->tensors, s->str_type, &s->tensor_names) < 0 ||
		    names_load(s->runs, s->str_type, &s->run_names) < 0) {
			wd_error(err, errlen, "'%s': cannot read its name tables", path);
			goto fail;
		}
		s->n_rows = table_len(s->rows);
	} else {
		s->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
		if (s->file < 0) {
			write_failed(s, err, errlen, "cannot create", wd_h5_errno());
			goto fail;
		}
		s->rows = make_table(s->file, "rows", s->row_type, 1024);
		s->tensors = make_table(s->file, "tensors", s->str_type, 64);
		s->runs = make_table(s->file, "runs", s->str_type, 16);
		hsize_t np = n_proxies;
		hid_t sp = H5Screate_simple(1, &np, NULL);
		hid_t px = H5Dcreate2(s->file, "proxies", s->str_type, sp, H5P_DEFAULT, H5P_DEFAULT,
				      H5P_DEFAULT);
		char *buf = calloc(n_proxies + 1, DRIFTLOG_NAME_MAX);
		for (size_t i = 0; buf && i < n_proxies; i++)
			snprintf(buf + i * DRIFTLOG_NAME_MAX, DRIFTLOG_NAME_MAX, "%s", proxies[i]);
		int ok = s->rows >= 0 && s->tensors >= 0 && s->runs >= 0 && px >= 0 && buf &&
			 (!n_proxies || H5Dwrite(px, s->str_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
		free(buf);
		if (px >= 0)
			H5Dclose(px);
		H5Sclose(sp);
		if (!ok || H5Fstart_swmr_write(s->file) < 0) {
			write_failed(s, err, errlen, "cannot set up the drift log", wd_h5_errno());
			goto fail;
		}
	}
	H5Pclose(fapl);
	*out = s;
	return 0;
fail:
	H5Pclose(fapl);
	driftlog_close(&s);
	return rc;
}

uint64_t driftlog_rows(const struct driftlog_writer *s)
{
	return s->n_rows;
}

int driftlog_append(struct driftlog_writer *s, const struct drift_row *rows, size_t n, char *err, size_t errlen)
{
	unsigned char *buf = calloc(n + 1, s->row_size);
	int cause = 0;

	if (!buf)
		return wd_error(err, errlen, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const struct drift_row *r = &rows[i];
		struct driftlog_disk_row d;
		long t = r->tensor ? name_index(&s->tensor_names, s->tensors, s->str_type, r->tensor, &cause)
				   : (long)UINT32_MAX;
		long run = t < 0 ? -1 : name_index(&s->run_names, s->runs, s->str_type, r->run, &cause);
		if (t < 0 || run < 0) {
			free(buf);
			return write_failed(s, err, errlen, "cannot extend the name tables", cause);
		}
		memset(&d, 0, sizeof(d));
		d.step = r->step;
		d.tensor = (uint32_t)t;
		d.run = (uint16_t)run;
		d.kind = (uint8_t)r->kind;
		d.role = (uint8_t)r->role;
		d.w1 = r->w1;
		d.max_abs_diff = r->max_abs_diff;
		d.rel_l2 = r->rel_l2;
		d.nan = r->nan;
		d.posinf = r->posinf;
		d.neginf = r->neginf;
		d.wall = r->wall;
		d.numel = r->numel;
		memcpy(buf + i * s->row_size, &d, sizeof(d));
		memcpy(buf + i * s->row_size + sizeof(d), r->ratio, s->n_proxies * sizeof(double));
	}
	int rc = n ? table_append(s->rows, s->row_type, buf, n, &cause) : 0;
	free(buf);
	if (rc < 0) {
		char what[64];
		snprintf(what, sizeof(what), "cannot append %zu rows", n);
		return write_failed(s, err, errlen, what, cause);
	}
	s->n_rows += n;
	return 0;
}

/* fsync of the file at path: 0, or -1. */
static int sync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int r = fd < 0 || fsync(fd) < 0 ? -1 : 0;

	if (fd >= 0)
		close(fd);
	return r;
}

int driftlog_close(struct driftlog_writer **ps)
{
	struct driftlog_writer *s = *ps;
	int r = 0;

	if (!s)
		return 0;
	/*
	 * A flush first, where its failure can be handled: inside H5Fclose it
	 * would leave HDF5 1.10 holding an ID to freed memory (checkpoint.h,
	 * wd_h5_discard_writes). After a failed write, or a failed flush, what
	 * is still buffered is discarded: the WAL holds the rows.
	 */
	if (s->file >= 0 && (s->failed || H5Fflush(s->file, H5F_SCOPE_LOCAL) < 0)) {
		wd_h5_discard_writes(s->file);
		r = -1;
	}
	/*
	 * Synced before the close and after it: the close only clears the
	 * superblock's "open for writing" flag, so a power loss leaves either
	 * that flag (rebuilt at start-up) or a closed file whose rows are all
	 * on disk, never a closed file with rows missing.
	 */
	if (r == 0 && s->file >= 0 && sync_path(s->path) < 0)
		r = -1;
	if (s->rows >= 0 && H5Dclose(s->rows) < 0) r = -1;
	if (s->tensors >= 0 && H5Dclose(s->tensors) < 0) r = -1;
	if (s->runs >= 0 && H5Dclose(s->runs) < 0) r = -1;
	if (s->file >= 0 && H5Fclose(s->file) < 0) r = -1;
	if (r == 0 && s->file >= 0 && sync_path(s->path) < 0)
		r = -1;
	if (s->failed || s->file < 0) r = -1;
	H5Eclear2(H5E_DEFAULT);
	free(s->path);
	H5Tclose(s->row_type);
	H5Tclose(s->str_type);
	for (size_t i = 0; i < s->tensor_names.n; i++)
		free(s->tensor_names.v[i]);
	for (size_t i = 0; i < s->run_names.n; i++)
		free(s->run_names.v[i]);
	free(s->tensor_names.v);
	free(s->run_names.v);
	free(s);
	*ps = NULL;
	return r;
}

/* --- copies of damaged drift logs --- */

struct aside_copy {
	char *name;
	const char *why;	/* its kind: DRIFTLOG_ASIDE_BROKEN or _RELABELED */
	unsigned long n;	/* 0: named before N was (PATH.broken-TIME) */
	long long time;
};

/* Digits only, at most max of them, into *v: 1, or 0 when s is not that. */
static int all_digits(const char *s, size_t max, unsigned long long *v)
{
	size_t len = strlen(s);
	if (!len || len > max || strspn(s, "0123456789") != len)
		return 0;
	*v = strtoull(s, NULL, 10);
	return 1;
}

/* BASE.WHY- of a kind of copy: the length of ".WHY-" after base, its kind in *why; or 0. */
static size_t aside_kind(const char *after_base, const char **why)
{
	static const char *const kinds[] = { DRIFTLOG_ASIDE_BROKEN, DRIFTLOG_ASIDE_RELABELED };

	if (after_base[0] != '.')
		return 0;
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		size_t l = strlen(kinds[k]);
		if (!strncmp(after_base + 1, kinds[k], l) && after_base[1 + l] == '-') {
			*why = kinds[k];
			return l + 2;
		}
	}
	return 0;
}

/* Is name a copy of base (BASE.WHY-TIME or BASE.WHY-TIME.N)? */
static int aside_parse(const char *name, const char *base, struct aside_copy *c)
{
	char t[32];
	size_t bl = strlen(base), kl;
	unsigned long long tv, nv = 0;

	if (strncmp(name, base, bl) || !(kl = aside_kind(name + bl, &c->why)))
		return 0;
	name += bl + kl;
	const char *dot = strchr(name, '.');
	size_t tl = dot ? (size_t)(dot - name) : strlen(name);
	if (tl >= sizeof(t))
		return 0;
	memcpy(t, name, tl);
	t[tl] = 0;
	if (!all_digits(t, 18, &tv) || (dot && !all_digits(dot + 1, 9, &nv)))
		return 0;
	c->time = (long long)tv;
	c->n = (unsigned long)nv;
	return 1;
}

static int aside_older(const void *a, const void *b)
{
	const struct aside_copy *x = a, *y = b;
	if (x->n != y->n)
		return x->n < y->n ? -1 : 1;
	if (x->time != y->time)
		return x->time < y->time ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The copies of base in dir, oldest first. 0 or -errno. */
static int aside_list(const char *dir, const char *base, struct aside_copy **out, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t cap = 0;
	int r = 0;

	*out = NULL;
	*n = 0;
	if (!d)
		return -errno;
	while (!r && (de = readdir(d))) {
		struct aside_copy c;
		if (!aside_parse(de->d_name, base, &c))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 8;
			struct aside_copy *v = realloc(*out, cap * sizeof(*v));
			if (!v) {
				r = -ENOMEM;
				break;
			}
			*out = v;
		}
		if (!(c.name = strdup(de->d_name)))
			r = -ENOMEM;
		else
			(*out)[(*n)++] = c;
	}
	closedir(d);
	if (*n)
		qsort(*out, *n, sizeof(**out), aside_older);
	return r;
}

/*
 * rename(2) that never replaces to: RENAME_NOREPLACE, or where the
 * filesystem lacks it, a check first (the storage directory's lock keeps
 * other daemons out, so nothing can appear in between).
 */
static int rename_noreplace(const char *from, const char *to)
{
	struct stat st;

	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	if (lstat(to, &st) == 0)
		return -EEXIST;
	return rename(from, to) < 0 ? -errno : 0;
}

int driftlog_set_aside(const char *path, const char *why, long long now, unsigned keep, char *aside,
		       size_t asidelen, driftlog_removed_fn removed, void *ctx, char *err, size_t errlen)
{
	char dir[4096];
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	struct aside_copy *v = NULL;
	size_t n = 0;
	unsigned long next = 1;
	struct stat st;
	int r;

	if (stat(path, &st) < 0) {
		r = -errno;
		if (r != -ENOENT)
			wd_error(err, errlen, "'%s': %s", path, strerror(-r));
		return r;
	}
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if ((r = aside_list(dir, base, &v, &n)) < 0) {
		wd_error(err, errlen, "'%s': cannot list its copies: %s", dir, strerror(-r));
		goto out;
	}
	if (n)
		next = v[n - 1].n + 1;
	/* a name taken in between (it cannot be, under the lock): the next N */
	for (int tries = 0; tries < 100; tries++, next++) {
		snprintf(aside, asidelen, "%s.%s-%lld.%lu", path, why, now, next);
		if ((r = rename_noreplace(path, aside)) != -EEXIST)
			break;
	}
	if (r < 0) {
		wd_error(err, errlen, "'%s': cannot move it aside to '%s': %s", path, aside, strerror(-r));
		goto out;
	}
	/*
	 * The copies of this kind were there, one more now: remove the oldest
	 * beyond keep. Each kind its own keep: config changes must not prune
	 * the only copy of a damaged file (a review's).
	 */
	size_t same = 1;
	for (size_t i = 0; i < n; i++)
		same += !strcmp(v[i].why, why);
	for (size_t i = 0; keep && same > keep && i < n; i++) {
		if (strcmp(v[i].why, why))
			continue;
		same--;
		char p[4600];
		snprintf(p, sizeof(p), "%s/%s", dir, v[i].name);
		uint64_t bytes = stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
		int e = unlink(p) < 0 ? errno : 0;
		if (removed)
			removed(ctx, p, bytes, e);
	}
out:
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
	return r;
}
