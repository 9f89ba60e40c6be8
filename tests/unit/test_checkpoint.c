/*
 * test_checkpoint.c: the HDF5 checkpoint reader on files written here with
 * the HDF5 C API: every element type and storage form, names and order,
 * and the datasets it must refuse, with messages naming file and dataset.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "checkpoint.h"
#include "harness.h"

static char dir[] = "/tmp/wdrift-test-ckpt-XXXXXX";
static char path[256];

static void put(hid_t f, const char *name, hid_t ftype, hid_t mtype, hsize_t n,
		const void *data)
{
	hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
	H5Pset_create_intermediate_group(lcpl, 1);
	hid_t sp = H5Screate_simple(1, &n, NULL);
	hid_t ds = H5Dcreate2(f, name, ftype, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
	if (n)
		H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
	H5Dclose(ds);
	H5Sclose(sp);
	H5Pclose(lcpl);
}

static void put_attr(hid_t f, const char *ds_name, const char *value, int variable)
{
	hid_t ds = H5Dopen2(f, ds_name, H5P_DEFAULT), st = H5Tcopy(H5T_C_S1);
	hid_t sp = H5Screate(H5S_SCALAR);
	if (variable) {
		H5Tset_size(st, H5T_VARIABLE);
		hid_t a = H5Acreate2(ds, "dtype", st, sp, H5P_DEFAULT, H5P_DEFAULT);
		H5Awrite(a, st, &value);
		H5Aclose(a);
	} else {	/* exactly strlen bytes, null-padded: as np.bytes_ gives */
		H5Tset_size(st, strlen(value));
		H5Tset_strpad(st, H5T_STR_NULLPAD);
		hid_t a = H5Acreate2(ds, "dtype", st, sp, H5P_DEFAULT, H5P_DEFAULT);
		H5Awrite(a, st, value);
		H5Aclose(a);
	}
	H5Sclose(sp);
	H5Tclose(st);
	H5Dclose(ds);
}

/* A 16-bit little-endian float type: HDF5 predefines neither fp16 nor bf16. */
static hid_t float16_type(size_t ebits, size_t mbits, size_t bias)
{
	hid_t t = H5Tcopy(H5T_IEEE_F32LE);
	H5Tset_fields(t, 15, mbits, ebits, 0, mbits);
	H5Tset_offset(t, 0);
	H5Tset_precision(t, 16);
	H5Tset_size(t, 2);
	H5Tset_ebias(t, bias);
	return t;
}

static void write_good(void)
{
	float f32[3] = { 1.5f, -2, 0.25f };
	double f64[2] = { 1e300, -0.0 };
	uint16_t f16[2] = { 0x3c00, 0xc000 };	/* 1, -2 */
	uint16_t bf[2] = { 0x3f80, 0xc000 };	/* 1, -2 */
	int32_t i32[2] = { 1, 2 };
	hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	hid_t bft = float16_type(8, 7, 127);

	put(f, "layers.10.w", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, f32);
	put(f, "layers.2.w", H5T_IEEE_F32BE, H5T_NATIVE_FLOAT, 3, f32);
	put(f, "model/deep/f64", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, f64);
	put(f, "half", H5T_NATIVE_UINT16, H5T_NATIVE_UINT16, 2, f16);
	H5Dclose(H5Dopen2(f, "half", H5P_DEFAULT));
	put(f, "bf_attr_vlen", H5T_STD_U16LE, H5T_NATIVE_UINT16, 2, bf);
	put_attr(f, "bf_attr_vlen", "bfloat16", 1);
	put(f, "bf_attr_fixed", H5T_STD_U16LE, H5T_NATIVE_UINT16, 2, bf);
	put_attr(f, "bf_attr_fixed", "bfloat16", 0);
	put(f, "bf_float", bft, bft, 2, bf);
	put(f, "bad_int", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, i32);
	put(f, "bad_i16_bf", H5T_STD_I16LE, H5T_NATIVE_UINT16, 2, bf);
	put_attr(f, "bad_i16_bf", "bfloat16", 1);
	put(f, "bad_u16", H5T_STD_U16LE, H5T_NATIVE_UINT16, 2, bf);	/* bf16 codes, the attribute forgotten */
	put(f, "empty", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 0, NULL);
	H5Tclose(bft);
	H5Fclose(f);
	/* Replace the placeholder "half" with an IEEE binary16 dataset. */
	f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	H5Ldelete(f, "half", H5P_DEFAULT);
	hid_t ht = float16_type(5, 10, 15);
	put(f, "half", ht, ht, 2, f16);
	H5Tclose(ht);
	H5Fclose(f);
}

static const struct wd_ckpt_entry *find(struct wd_ckpt *c, const char *name)
{
	long i = wd_ckpt_find(c, name);
	return i < 0 ? NULL : wd_ckpt_entry(c, (size_t)i);
}

static void test_types(void)
{
	struct wd_ckpt *c;
	char err[WD_CKPT_ERR_MAX];
	void *buf;

	write_good();
	CHECK(wd_ckpt_open(path, &c, err) == 0, "open a good file (%s)", err);
	if (!c)
		return;
	CHECK(wd_ckpt_count(c) == 11, "11 datasets listed, got %zu", wd_ckpt_count(c));
	long i2 = wd_ckpt_find(c, "layers.2.w"), i10 = wd_ckpt_find(c, "layers.10.w");
	CHECK(i2 >= 0 && i10 > i2, "natural order: layers.2 before layers.10");
	const struct wd_ckpt_entry *e = find(c, "model/deep/f64");
	CHECK(e && e->dtype == WD_F64 && !e->problem[0], "nested dataset named by its path");
	CHECK(wd_ckpt_read(c, (size_t)i2, &buf, err) == 0 && ((float *)buf)[0] == 1.5f &&
	      ((float *)buf)[1] == -2, "big-endian f32 reads as native values");
	free(buf);
	static const char *bf[] = { "bf_attr_vlen", "bf_attr_fixed", "bf_float", "half" };
	for (int k = 0; k < 4; k++) {
		e = find(c, bf[k]);
		enum wd_dtype want = k == 3 ? WD_F16 : WD_BF16;
		CHECK(e && e->dtype == want && !e->problem[0], "'%s' is %s (%s)", bf[k],
		      wd_dtype_name(want), e ? e->problem : "missing");
		if (!e || e->problem[0])
			continue;
		CHECK(wd_ckpt_read(c, (size_t)wd_ckpt_find(c, bf[k]), &buf, err) == 0 &&
		      ((uint16_t *)buf)[1] == 0xc000, "'%s' codes read back (%s)", bf[k], err);
		free(buf);
	}
	static const struct { const char *name, *says; } bad[] = {
		{ "bad_int", "unsupported element type (4-byte signed integer)" },	/* no bf16 hint: noise */
		{ "bad_i16_bf", "needs a uint16 dataset" },
		{ "bad_u16", "(2-byte unsigned integer; bf16 as uint16 needs the attribute dtype = \"bfloat16\")" },
		{ "empty", "zero-size dataset" },
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		long i = wd_ckpt_find(c, bad[k].name);
		int r = i < 0 ? 0 : wd_ckpt_read(c, (size_t)i, &buf, err);
		CHECK(r < 0 && strstr(err, path) && strstr(err, bad[k].name) && strstr(err, bad[k].says),
		      "'%s' refused naming file and dataset: %s", bad[k].name, err);
	}
	wd_ckpt_close(&c);
	CHECK(c == NULL, "close nulls the pointer");
}

static void test_bad_files(void)
{
	struct wd_ckpt *c;
	char err[WD_CKPT_ERR_MAX], p2[300];

	snprintf(p2, sizeof(p2), "%s/missing.h5", dir);
	CHECK(wd_ckpt_open(p2, &c, err) < 0 && strstr(err, p2) && strstr(err, "No such file"),
	      "missing file: %s", err);
	CHECK(wd_ckpt_open(dir, &c, err) < 0 && strstr(err, "directory"), "directory: %s", err);
	/* a FIFO: HDF5's blocking open waited for a writer until the sandbox's deadline */
	snprintf(p2, sizeof(p2), "%s/fifo.h5", dir);
	alarm(10);
	CHECK(mkfifo(p2, 0600) == 0 && wd_ckpt_open(p2, &c, err) < 0 && strstr(err, p2) &&
	      strstr(err, "is a FIFO, not a checkpoint file"), "a FIFO, refused at once: %s", err);
	alarm(0);
	unlink(p2);
	snprintf(p2, sizeof(p2), "%s/text.h5", dir);
	FILE *f = fopen(p2, "w");
	fputs("not hdf5\n", f);
	fclose(f);
	CHECK(wd_ckpt_open(p2, &c, err) < 0 && strstr(err, "not an HDF5 file"), "text file: %s", err);
	CHECK(!strstr(err, "it is"), "... and not said to be anything else: %s", err);
	/* the formats a user brings instead: said what they are, and where the converter is (a trial) */
	static const struct {
		const char *what, *head;
		size_t len;
		const char *said;
	} others[] = {
		{ "torch.save", "PK\x03\x04\x14\0\0\0", 8, "a zip archive, as PyTorch's torch.save writes" },
		{ "legacy torch.save", "\x80\x02\x8a\x0alZ\xfc", 8, "a Python pickle" },
		{ "safetensors", "\x15\0\0\0\0\0\0\0{\"w\":{\"dtype\":\"F32\"}}", 29, "a safetensors file" },
		{ "numpy .npy", "\x93NUMPY\x01\0", 8, "a numpy .npy file" },
	};
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		snprintf(p2, sizeof(p2), "%s/other.h5", dir);
		f = fopen(p2, "w");
		fwrite(others[i].head, 1, others[i].len, f);
		for (int k = 0; k < 100; k++)
			fputs("padding\n", f);
		fclose(f);
		CHECK(wd_ckpt_open(p2, &c, err) < 0 && strstr(err, "not an HDF5 file") && strstr(err, others[i].said) &&
		      strstr(err, "docs/checkpoints.md"), "a %s file: what it is, and the converter: %s", others[i].what,
		      err);
		unlink(p2);
	}
	/* Truncated: keep the first 1 KiB of a file with a large dataset. */
	snprintf(p2, sizeof(p2), "%s/trunc.h5", dir);
	hid_t h = H5Fcreate(p2, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	float *big = calloc(100000, sizeof(float));
	put(h, "big", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 100000, big);
	free(big);
	H5Fclose(h);
	CHECK(truncate(p2, 200000) == 0, "truncate the file");
	int r = wd_ckpt_open(p2, &c, err);
	if (r == 0) {	/* the superblock may survive; the read must then fail */
		void *buf;
		r = wd_ckpt_read(c, 0, &buf, err);
		wd_ckpt_close(&c);
	}
	CHECK(r < 0 && strstr(err, p2), "truncated file refused: %s", err);
}

/*
 * The read around libhdf5 (read_direct, for contiguous data that needs no
 * conversion) against what H5Dread gives: a file with a user block, which
 * HDF5's addresses count from; chunked and compact datasets, which
 * go through H5Dread; a file cut short after it was listed.
 */
static void test_layouts(void)
{
	enum { N = 1000 };
	char p[300], err[WD_CKPT_ERR_MAX];
	float x[N], *got = NULL;
	hsize_t n = N, chunk = 128, ten = 10;
	struct wd_ckpt *c;

	for (int i = 0; i < N; i++)
		x[i] = (float)i * 0.5f - 3;
	snprintf(p, sizeof(p), "%s/layouts.h5", dir);
	hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
	H5Pset_userblock(fcpl, 4096);
	hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
	put(f, "contiguous", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, N, x);
	hid_t sp = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_chunk(dcpl, 1, &chunk);
	hid_t ds = H5Dcreate2(f, "chunked", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
	H5Dclose(ds);
	H5Sclose(sp);
	H5Pclose(dcpl);
	sp = H5Screate_simple(1, &ten, NULL);
	dcpl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_layout(dcpl, H5D_COMPACT);
	ds = H5Dcreate2(f, "compact", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
	H5Dclose(ds);
	H5Sclose(sp);
	H5Pclose(dcpl);
	ds = H5Dopen2(f, "contiguous", H5P_DEFAULT);
	haddr_t at = H5Dget_offset(ds);	/* in the file: the user block included */
	H5Dclose(ds);
	H5Fclose(f);
	H5Pclose(fcpl);
	int r = wd_ckpt_open(p, &c, err);
	CHECK(r == 0, "a file with a 4 KiB user block: %s", r ? err : "opened");
	if (r)
		return;
	static const char *const names[] = { "chunked", "compact", "contiguous" };
	for (int k = 0; k < 3; k++) {
		long i = wd_ckpt_find(c, names[k]);
		r = i >= 0 ? wd_ckpt_read(c, (size_t)i, (void **)&got, err) : -1;
		CHECK(r == 0 && !memcmp(got, x, (k == 1 ? 10 : N) * sizeof(float)),
		      "%s, past a user block: the values written (%s)", names[k], r ? err : "");
		free(got);
		got = NULL;
	}
	/* cut short after the listing, in the middle of the data: the read says so, gives nothing */
	long i = wd_ckpt_find(c, "contiguous");
	CHECK(at != HADDR_UNDEF && truncate(p, (off_t)(at + 1000)) == 0, "truncate the file");
	r = wd_ckpt_read(c, (size_t)i, (void **)&got, err);
	/* the read around libhdf5's words: H5Dread's would not count the bytes */
	CHECK(r < 0 && !got && strstr(err, p) && strstr(err, "ends 1000 bytes into its 4000"),
	      "a file cut short after it was listed: %s", err);
	wd_ckpt_close(&c);
}

/* wd_ckpt_write: every dtype round-trips through the reader, bit for bit. */
static void test_write(void)
{
	float a[6] = { 1, -2, 3.5f, -0.0f, 5, 6 };
	uint16_t bf[3] = { 0x3f80, 0x7fc0, 0xc000 }, h16[2] = { 0x3c00, 0xfc00 };
	double d[2] = { 1e300, -1e-300 };
	uint64_t dims[2] = { 2, 3 };
	struct wd_ckpt_tensor t[4] = {
		{ "layers/0/w", { WD_F32, a, 6 }, 2, dims },
		{ "bf", { WD_BF16, bf, 3 }, 0, NULL },
		{ "h", { WD_F16, h16, 2 }, 0, NULL },
		{ "d", { WD_F64, d, 2 }, 0, NULL },
	};
	char err[WD_CKPT_ERR_MAX], p[300];
	struct wd_ckpt *c;
	const void *want[4] = { a, bf, h16, d };

	snprintf(p, sizeof(p), "%s/written.h5", dir);
	CHECK(wd_ckpt_write(p, t, 4, err) == 0, "write 4 tensors (%s)", err);
	CHECK(access(p, F_OK) == 0 && wd_ckpt_open(p, &c, err) == 0, "and read them back");
	for (int i = 0; i < 4; i++) {
		long k = wd_ckpt_find(c, t[i].name);
		void *buf = NULL;
		const struct wd_ckpt_entry *e = k < 0 ? NULL : wd_ckpt_entry(c, (size_t)k);
		int ok = e && e->dtype == t[i].view.dtype && e->numel == t[i].view.numel &&
			 wd_ckpt_read(c, (size_t)k, &buf, err) == 0 &&
			 !memcmp(buf, want[i], t[i].view.numel * wd_dtype_size(t[i].view.dtype));
		CHECK(ok, "'%s' round-trips bit for bit", t[i].name);
		free(buf);
	}
	CHECK(wd_ckpt_entry(c, (size_t)wd_ckpt_find(c, "layers/0/w"))->rank == 2, "shape kept");
	wd_ckpt_close(&c);
	snprintf(p, sizeof(p), "%s/no/such/dir/x.h5", dir);
	CHECK(wd_ckpt_write(p, t, 1, err) == -ENOENT && strstr(err, "cannot create: No such file"),
	      "unwritable path: %s", err);
}

/* wd_ckpt_open_image: the same listing and bytes from memory as from the file. */
static void test_image(void)
{
	struct wd_ckpt *c = NULL, *m = NULL;
	char err[WD_CKPT_ERR_MAX] = "";
	FILE *f = fopen(path, "rb");
	static char image[1 << 16];
	size_t len = f ? fread(image, 1, sizeof(image), f) : 0;
	int same = 1;

	if (f)
		fclose(f);
	CHECK(len > 0 && len < sizeof(image), "the good file in memory: %zu bytes", len);
	CHECK(wd_ckpt_open(path, &c, err) == 0 && wd_ckpt_open_image(image, len, "mem.h5", &m, err) == 0,
	      "opened from the file and from memory (%s)", err);
	if (!c || !m)
		goto out;
	CHECK(wd_ckpt_count(m) == wd_ckpt_count(c) && !strcmp(wd_ckpt_path(m), "mem.h5"),
	      "as many datasets: %zu", wd_ckpt_count(m));
	for (size_t i = 0; i < wd_ckpt_count(c) && i < wd_ckpt_count(m); i++) {
		const struct wd_ckpt_entry *a = wd_ckpt_entry(c, i), *b = wd_ckpt_entry(m, i);
		void *x = NULL, *y = NULL;
		int rx = wd_ckpt_read(c, i, &x, err), ry = wd_ckpt_read(m, i, &y, err);
		same &= !strcmp(a->name, b->name) && a->dtype == b->dtype && a->numel == b->numel &&
			!strcmp(a->problem, b->problem) && rx == ry &&
			(rx < 0 || !memcmp(x, y, a->numel * wd_dtype_size(a->dtype)));
		free(x);
		free(y);
	}
	CHECK(same, "every entry and tensor alike");
	wd_ckpt_close(&m);
	CHECK(wd_ckpt_open_image(image, 100, "cut.h5", &m, err) < 0 && !m && strstr(err, "'cut.h5'"),
	      "a cut image: %s", err);
	CHECK(wd_ckpt_open_image(image, 0, "empty.h5", &m, err) < 0 && strstr(err, "not an HDF5 file"),
	      "an empty one: %s", err);
out:
	wd_ckpt_close(&c);
	wd_ckpt_close(&m);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		printf("not ok 1 - mkdtemp\n");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/good.h5", dir);
	test_types();
	test_image();
	test_bad_files();
	test_layouts();
	test_write();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", dir);
	return tap_done();
}
