/* driftlog_read.c: reading a drift log (driftlog.h, docs/storage.md). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "driftlog.h"
#include "error.h"

#define DL_READ_ATTEMPTS 28	/* SWMR re-reads of a bad block: 2^28 ns of sleep at most */

/* Closes a dataset and its file and memory types; a negative id was never opened. */
static void close_dataset(hid_t ds, hid_t file_type, hid_t mem_type)
{
	if (mem_type >= 0)
		H5Tclose(mem_type);
	if (file_type >= 0)
		H5Tclose(file_type);
	if (ds >= 0)
		H5Dclose(ds);
}

static hsize_t extent(hid_t ds)
{
	hsize_t dim = 0;
	hid_t sp = H5Dget_space(ds);
	if (sp < 0)
		return 0;
	if (H5Sget_simple_extent_ndims(sp) != 1)
		dim = (hsize_t)-1;
	else
		H5Sget_simple_extent_dims(sp, &dim, NULL);
	H5Sclose(sp);
	return dim;
}

/* A 1-D table of fixed-length strings into NUL-terminated copies. */
static int read_names(hid_t file, const char *path, const char *name, char ***out, size_t *n,
		      char *err, size_t errlen)
{
	hid_t ds = H5Dopen2(file, name, H5P_DEFAULT), ft = -1, mt = -1;
	char *buf = NULL;
	int r = -1;

	*out = NULL;
	*n = 0;
	if (ds < 0)
		return wd_error(err, errlen, "%s: no dataset '%s': not a drift log", path, name);
	ft = H5Dget_type(ds);
	hsize_t len = extent(ds);
	size_t width = ft >= 0 ? H5Tget_size(ft) : 0;
	if (ft < 0 || H5Tget_class(ft) != H5T_STRING || H5Tis_variable_str(ft) > 0 || !width ||
	    width > 65536) {
		wd_error(err, errlen, "%s: '%s': not a table of fixed-length strings", path, name);
		goto out;
	}
	if (len == (hsize_t)-1 || len > (1u << 26)) {
		wd_error(err, errlen, "%s: '%s': not a 1-D table of names", path, name);
		goto out;
	}
	mt = H5Tcopy(H5T_C_S1);
	H5Tset_size(mt, width);
	H5Tset_strpad(mt, H5T_STR_NULLPAD);
	buf = calloc(len + 1, width + 1);
	*out = calloc(len + 1, sizeof(char *));
	if (!buf || !*out) {
		wd_error(err, errlen, "%s: '%s': out of memory", path, name);
		goto out;
	}
	if (len && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
		wd_error(err, errlen, "%s: '%s': cannot be read", path, name);
		goto out;
	}
	for (hsize_t i = 0; i < len; i++) {
		char *s = malloc(width + 1);
		if (!s) {
			wd_error(err, errlen, "%s: '%s': out of memory", path, name);
			goto out;
		}
		memcpy(s, buf + i * width, width);
		s[width] = 0;
		(*out)[(*n)++] = s;
	}
	r = 0;
out:
	if (r < 0 && *out) {
		for (size_t i = 0; i < *n; i++)
			free((*out)[i]);
		free(*out);
		*out = NULL;
		*n = 0;
	}
	free(buf);
	close_dataset(ds, ft, mt);
	return r;
}

/* Every field the reader needs is in the file's row type, as a number. */
static int check_fields(hid_t ft, size_t n_proxies, const char *path, char *err, size_t errlen)
{
	static const char *const need[] = { "step", "tensor", "run", "kind", "role", "w1",
		"max_abs_diff", "rel_l2", "nan", "posinf", "neginf", "wall", "numel" };

	if (H5Tget_class(ft) != H5T_COMPOUND)
		return wd_error(err, errlen, "%s: 'rows': not a table of records", path);
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		int k = H5Tget_member_index(ft, need[i]);
		H5T_class_t c = k < 0 ? H5T_NO_CLASS : H5Tget_member_class(ft, (unsigned)k);
		if (c != H5T_INTEGER && c != H5T_FLOAT)
			return wd_error(err, errlen, "%s: 'rows': %s field '%s'", path,
				    k < 0 ? "no" : "a non-numeric", need[i]);
	}
	int k = H5Tget_member_index(ft, "ratio");
	if (!n_proxies)
		return 0;
	hid_t at = k < 0 ? -1 : H5Tget_member_type(ft, (unsigned)k);
	hsize_t dim = 0;
	int ok = at >= 0 && H5Tget_class(at) == H5T_ARRAY && H5Tget_array_ndims(at) == 1 &&
		 H5Tget_array_dims2(at, &dim) == 1 && dim == n_proxies;
	if (at >= 0)
		H5Tclose(at);
	if (!ok)
		return wd_error(err, errlen, "%s: 'rows': field 'ratio' is not %zu numbers, one per "
			    "entry of 'proxies'", path, n_proxies);
	return 0;
}

/* The rows' order: the log, and each run's place among the runs' names. */
struct row_order {
	const struct driftlog *d;
	const uint32_t *run_rank;
};

static int cmp_run_names(const void *a, const void *b, void *ctx)
{
	char *const *runs = ctx;
	return strcmp(runs[*(const uint32_t *)a], runs[*(const uint32_t *)b]);
}

/*
 * Runs by name, so that two daemons fed in another order export the same
 * rows alike (the log's run table is in arrival order: a trial's export
 * put the synthetic proxy before the candidate). Tensors stay in the
 * log's order, the snapshot's, as drift shows them.
 */
static int cmp_rows(const void *a, const void *b, void *ctx)
{
	const struct row_order *o = ctx;
	const struct driftlog *d = o->d;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	const struct driftlog_disk_row *x = dl_row(d, i), *y = dl_row(d, j);

	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	if (x->run != y->run)
		return o->run_rank[x->run] < o->run_rank[y->run] ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->tensor != y->tensor)
		return x->tensor < y->tensor ? -1 : 1;
	return (i > j) - (i < j);	/* file order last: the later row wins */
}

static int same_key(const struct driftlog_disk_row *x, const struct driftlog_disk_row *y)
{
	return x->step == y->step && x->run == y->run && x->kind == y->kind && x->tensor == y->tensor;
}

/* Checks every row, then keeps the current one of each key, sorted. */
static int settle(struct driftlog *d, const char *path, char *err, size_t errlen)
{
	for (size_t i = 0; i < d->n_written; i++) {
		const struct driftlog_disk_row *r = dl_row(d, i);
		if (r->kind > 3 || (r->role != 1 && r->role != 2))
			return wd_error(err, errlen, "%s: rows[%zu]: kind %u, role %u: out of range%s", path, i,
				    r->kind, r->role, r->role ? "" : " (a row never written: the file "
				    "is truncated or damaged)");
		if (r->run >= d->n_runs)
			return wd_error(err, errlen, "%s: rows[%zu]: run index %u beyond the %zu names in 'runs'",
				    path, i, r->run, d->n_runs);
		if (r->kind == 0 ? r->tensor >= d->n_tensors : r->tensor != DL_AGGREGATE)
			return wd_error(err, errlen, "%s: rows[%zu]: tensor index %u %s", path, i, r->tensor,
				    r->kind ? "on an aggregate row (must be 4294967295)"
					    : "beyond the names in 'tensors'");
	}
	uint32_t *order = malloc((d->n_written + 1) * sizeof(*order));
	uint32_t *by_name = malloc((d->n_runs + 1) * sizeof(*by_name));
	uint32_t *run_rank = malloc((d->n_runs + 1) * sizeof(*run_rank));
	unsigned char *kept = malloc((d->n_written + 1) * d->row_size);
	if (!order || !by_name || !run_rank || !kept) {
		free(order);
		free(by_name);
		free(run_rank);
		free(kept);
		return wd_error(err, errlen, "%s: out of memory for %zu rows", path, d->n_written);
	}
	for (size_t k = 0; k < d->n_runs; k++)
		by_name[k] = (uint32_t)k;
	qsort_r(by_name, d->n_runs, sizeof(*by_name), cmp_run_names, d->runs);
	for (size_t k = 0; k < d->n_runs; k++)
		run_rank[by_name[k]] = (uint32_t)k;
	free(by_name);
	for (size_t i = 0; i < d->n_written; i++)
		order[i] = (uint32_t)i;
	struct row_order o = { d, run_rank };
	qsort_r(order, d->n_written, sizeof(*order), cmp_rows, &o);
	free(run_rank);
	size_t n = 0;
	for (size_t i = 0; i < d->n_written; i++) {
		if (i + 1 < d->n_written && same_key(dl_row(d, order[i]), dl_row(d, order[i + 1])))
			continue;	/* superseded by a later row */
		memcpy(kept + n++ * d->row_size, dl_row(d, order[i]), d->row_size);
	}
	free(order);
	free(d->rows);
	d->rows = kept;
	d->n_rows = n;
	return 0;
}

int driftlog_read(const char *path, struct driftlog *d, char *err, size_t errlen)
{
	hid_t file, ds = -1, ft = -1, mt = -1;
	int r = -1;
	/* O_NONBLOCK: a FIFO's open would wait for a writer; fstat refuses it */
	int probe = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;

	memset(d, 0, sizeof(*d));
	if (probe < 0)
		return wd_error(err, errlen, "%s: cannot open: %m", path);
	if (fstat(probe, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(probe);
		return wd_error(err, errlen, "%s: not a regular file, not a drift log", path);
	}
	close(probe);
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	/*
	 * SWMR: the daemon may be appending; a file not written for SWMR still
	 * opens plainly. A SWMR reader re-reads a block whose checksum fails,
	 * in case the writer was half-way through it, sleeping 1 ns, 2 ns, 4 ns
	 * and so on: HDF5's default of 100 attempts turns one damaged block into
	 * a wait of centuries. DL_READ_ATTEMPTS bounds it near a quarter second,
	 * still far longer than a torn read of the writer's pwrite lasts.
	 */
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0 || H5Pset_metadata_read_attempts(fapl, DL_READ_ATTEMPTS) < 0) {
		if (fapl >= 0)
			H5Pclose(fapl);
		return wd_error(err, errlen, "%s: cannot set up the HDF5 library", path);
	}
	file = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
	H5Pclose(fapl);
	if (file < 0)
		file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (file < 0)
		return wd_error(err, errlen, "%s: not an HDF5 file, or damaged", path);
	if (read_names(file, path, "proxies", &d->proxies, &d->n_proxies, err, errlen) < 0)
		goto out;
	if (d->n_proxies > DRIFTLOG_MAX_PROXIES) {
		wd_error(err, errlen, "%s: 'proxies': %zu labels, at most %d", path, d->n_proxies, DRIFTLOG_MAX_PROXIES);
		goto out;
	}
	/* rows before the name tables: the daemon appends names first, so
	 * every row read has its names in the tables read after it */
	if ((ds = H5Dopen2(file, "rows", H5P_DEFAULT)) < 0) {
		wd_error(err, errlen, "%s: no dataset 'rows': not a drift log", path);
		goto out;
	}
	if ((ft = H5Dget_type(ds)) < 0 || check_fields(ft, d->n_proxies, path, err, errlen) < 0) {
		if (ft < 0)
			wd_error(err, errlen, "%s: 'rows': unreadable type", path);
		goto out;
	}
	hsize_t n = extent(ds);
	if (n == (hsize_t)-1 || n >= UINT32_MAX) {
		wd_error(err, errlen, "%s: 'rows': not a 1-D table of fewer than 2^32 rows", path);
		goto out;
	}
	mt = driftlog_row_type(d->n_proxies, &d->row_size);
	d->n_written = n;
	d->rows = calloc(n + 1, d->row_size);
	if (!d->rows) {
		wd_error(err, errlen, "%s: out of memory for %llu rows", path, (unsigned long long)n);
		goto out;
	}
	if (n) {
		hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(1, &n, NULL);
		hsize_t start = 0;
		herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &n, NULL);
		if (e >= 0)
			e = H5Dread(ds, mt, ms, fs, H5P_DEFAULT, d->rows);
		H5Sclose(ms);
		H5Sclose(fs);
		if (e < 0) {
			wd_error(err, errlen, "%s: 'rows': cannot be read (damaged?)", path);
			goto out;
		}
	}
	if (read_names(file, path, "tensors", &d->tensors, &d->n_tensors, err, errlen) < 0 ||
	    read_names(file, path, "runs", &d->runs, &d->n_runs, err, errlen) < 0 ||
	    settle(d, path, err, errlen) < 0)
		goto out;
	r = 0;
out:
	close_dataset(ds, ft, mt);
	H5Fclose(file);
	if (r < 0)
		driftlog_release(d);
	return r;
}

static void free_names(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void driftlog_release(struct driftlog *d)
{
	free_names(d->tensors, d->n_tensors);
	free_names(d->runs, d->n_runs);
	free_names(d->proxies, d->n_proxies);
	free(d->rows);
	memset(d, 0, sizeof(*d));
}
