/*
 * test_ckpt_sandbox.c: checkpoint files read by a resource-limited child
 * (lib/ckpt_sandbox.c): the same listing and the same bytes as the
 * in-process reader; the file on which libhdf5 loops forever, stopped at
 * the deadline; a read that does not answer (the child stopped), stopped
 * at its deadline; a file that makes libhdf5 allocate a 256 MiB chunk for
 * 16 elements, stopped by the memory limit; a child killed by a signal,
 * while listing and while idle; a file replaced between listing and
 * reading; the limits from the environment; two files read at once
 * (request, then collect), each failure naming its own file, and a reply
 * that came in time taken however late it is collected; tensors mapped from
 * the file itself, and that file cut short under the map. After all of it: every child
 * reaped, no fd and no mapping left behind. Run from the repository root
 * (it reads fuzz/hdf5-hangs/).
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "ckpt_sandbox.h"
#include "ckpt_sandbox_wire.h"
#include "harness.h"
#include "sanitizer.h"

#define HANG_FILE "fuzz/hdf5-hangs/h5hg-read-loop.h5"

static char dir[] = "/tmp/wdrift-test-sbx-XXXXXX";
/*
 * Room for reads that must succeed: under valgrind on a loaded machine,
 * test_memory's 256 MiB chunk once took over 30 s to inflate (a helper's
 * run), and its read failed on the limit, not on the memory tested.
 */
static const struct wd_sandbox_limits roomy = { 120, 1ull << 30 };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* Lines of /proc/self/maps whose mapped file's name ends with tail. */
static int count_maps(const char *tail)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	while (f && fgets(line, sizeof(line), f)) {
		size_t len = strcspn(line, "\n"), t = strlen(tail);
		n += len >= t && !memcmp(line + len - t, tail, t);
	}
	if (f)
		fclose(f);
	return n;
}

/* Lines of /proc/self/maps that name a wdrift memfd. */
static int count_memfd_maps(void)
{
	return count_maps("memfd:wdrift-tensor (deleted)") + count_maps("memfd:wdrift-tensor");
}

/* 1-D dataset; chunk > 0 makes it chunked (with an unlimited maximum) and deflated. */
static void put(hid_t f, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *data,
		hsize_t chunk)
{
	hsize_t unlimited = H5S_UNLIMITED;
	hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
	H5Pset_create_intermediate_group(lcpl, 1);
	if (chunk) {
		H5Pset_chunk(dcpl, 1, &chunk);
		H5Pset_deflate(dcpl, 1);
	}
	hid_t sp = H5Screate_simple(1, &n, chunk ? &unlimited : NULL);
	hid_t ds = H5Dcreate2(f, name, ftype, sp, lcpl, dcpl, H5P_DEFAULT);
	H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
	H5Dclose(ds);
	H5Sclose(sp);
	H5Pclose(dcpl);
	H5Pclose(lcpl);
}

static void write_good(const char *path, int n)
{
	float *f = malloc(n * sizeof(float));
	double d[3] = { 1e300, -0.0, 5 };
	int32_t i32[2] = { 1, 2 };
	for (int k = 0; k < n; k++)
		f[k] = (float)k * 0.5f - 3;
	hid_t h = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	put(h, "layers.10.w", H5T_IEEE_F32BE, H5T_NATIVE_FLOAT, n, f, 0);
	put(h, "layers.2.w", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, n, f, 0);
	put(h, "deep/f64", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 3, d, 0);
	put(h, "steps", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, i32, 0);
	H5Fclose(h);
	free(f);
}

/* The reader child of the calling thread's box, once there is one. */
static pid_t child_of(pid_t tid)
{
	char path[64];
	int child = 0;

	for (int k = 0; k < 500 && !child; k++) {
		snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)tid);
		FILE *f = fopen(path, "r");
		if (f && fscanf(f, "%d", &child) != 1)
			child = 0;
		if (f)
			fclose(f);
		if (!child)
			usleep(10000);
	}
	return child;
}

/*
 * Every tensor: the same entry and the same bytes in the child as in this
 * process. The in-process reader is closed before the child starts: the
 * child would otherwise share this process's open file in libhdf5, whose
 * fd it closes (ckpt_sandbox.h).
 */
static void test_same_as_in_process(const char *path)
{
	struct wd_ckpt *in = NULL;
	struct wd_ckpt_box *box = NULL;
	struct wd_ckpt_entry want_e[4];
	char err[WD_CKPT_ERR_MAX] = "", want_err[4][WD_CKPT_ERR_MAX];
	void *want[4] = { 0 };

	write_good(path, 1000);
	CHECK(wd_ckpt_open(path, &in, err) == 0 && wd_ckpt_count(in) == 4,
	      "in-process: 4 datasets (%s)", err);
	if (!in || wd_ckpt_count(in) != 4)
		goto out;
	for (size_t i = 0; i < 4; i++) {
		want_e[i] = *wd_ckpt_entry(in, i);
		want_e[i].name = strdup(want_e[i].name);
		wd_ckpt_read(in, i, &want[i], want_err[i]);
	}
	wd_ckpt_close(&in);
	CHECK(wd_ckpt_box_open(path, &roomy, &box, err) == 0 &&
	      wd_ckpt_count(wd_ckpt_box_listing(box)) == 4, "in a box: 4 datasets (%s)", err);
	for (size_t i = 0; box && i < 4; i++) {
		const struct wd_ckpt_entry *a = &want_e[i], *b = wd_ckpt_entry(wd_ckpt_box_listing(box), i);
		struct wd_tensor_map m;
		CHECK(b && !strcmp(a->name, b->name) && a->dtype == b->dtype && a->numel == b->numel &&
		      a->rank == b->rank && a->dims[0] == b->dims[0] && !strcmp(a->problem, b->problem),
		      "entry %zu '%s' listed alike", i, a->name);
		int r = wd_ckpt_box_read(box, i, &m, err);
		if (want[i])
			CHECK(r == 0 && m.bytes == a->numel * wd_dtype_size(a->dtype) &&
			      !memcmp(want[i], m.data, m.bytes), "'%s' reads the same bytes (%s)", a->name,
			      r ? err : "");
		else
			CHECK(r < 0 && !strcmp(err, want_err[i]) && !m.data, "'%s' fails alike: %s",
			      a->name, err);
		/* stored as read (little-endian, contiguous): the file's own pages; else a memfd */
		int in_file = strcmp(a->name, "layers.10.w") != 0;
		if (!r)
			CHECK(count_memfd_maps() == !in_file && count_maps(path) == in_file &&
			      !m.guard == !in_file, "'%s': %s mapped while held", a->name,
			      in_file ? "the file itself" : "one memfd");
		wd_tensor_map_release(&m);
		CHECK(!m.data && !m.bytes, "release empties the map");
	}
	for (int i = 0; i < 4; i++) {
		free(want_e[i].name);
		free(want[i]);
	}
out:
	wd_ckpt_close(&in);
	wd_ckpt_box_close(&box);
	CHECK(!box, "close nulls the pointer");
}

static void test_hang(void)
{
	struct wd_sandbox_limits lim = { 1, 1ull << 30 };
	struct wd_ckpt_box *b = NULL;
	char err[WD_CKPT_ERR_MAX] = "";
	double t0 = now();
	int r = wd_ckpt_box_open(HANG_FILE, &lim, &b, err);
	double took = now() - t0;

	CHECK(r < 0 && !b && strstr(err, HANG_FILE) && strstr(err, "listing datasets: timed out after 1 s") &&
	      strstr(err, "WDRIFT_CKPT_TIMEOUT"), "libhdf5's endless loop: %s", err);
	CHECK(took >= 1 && took < 3, "stopped at the deadline: %.2f s", took);
}

/*
 * A read that does not answer: the child is stopped (SIGSTOP) between two
 * reads. The read times out, the child is killed, and the box stays dead.
 */
static void test_read_deadline(const char *path)
{
	struct wd_sandbox_limits lim = { 1, 1ull << 30 };
	struct wd_ckpt_box *b = NULL;
	struct wd_tensor_map m;
	char err[WD_CKPT_ERR_MAX] = "", first[WD_CKPT_ERR_MAX];

	write_good(path, 10);
	if (wd_ckpt_box_open(path, &lim, &b, err) < 0) {
		CHECK(0, "open (%s)", err);
		return;
	}
	pid_t child = child_of(gettid());
	CHECK(child > 0 && kill(child, SIGSTOP) == 0, "stopped the reader child %d", (int)child);
	double t0 = now();
	int r = wd_ckpt_box_read(b, 1, &m, err);
	double took = now() - t0;
	CHECK(r < 0 && !m.data && strstr(err, "dataset 'layers.2.w': timed out after 1 s"),
	      "a read that does not answer: %s", err);
	CHECK(took >= 1 && took < 3, "stopped at the deadline: %.2f s", took);
	snprintf(first, sizeof(first), "%s", err);
	CHECK(wd_ckpt_box_read(b, 0, &m, err) < 0 && !strcmp(err, first),
	      "and later reads say the same: %s", err);
	wd_ckpt_box_close(&b);
}

/*
 * 16 floats in one deflated chunk of 2^26 elements: libhdf5 allocates the
 * whole 256 MiB chunk to read them. Under a 64 MiB limit that fails; the
 * same file reads under 1 GiB.
 */
static void test_memory(const char *path)
{
	struct wd_sandbox_limits tight = { 30, 64ull << 20 };
	float v[16];
	struct wd_ckpt_box *b = NULL;
	struct wd_tensor_map m;
	char err[WD_CKPT_ERR_MAX] = "";
	int r;

	if (getenv("WDRIFT_SANITIZE")) {
		printf("ok %d - # SKIP the memory limit: no RLIMIT_AS under ASan\n", ++tap_n);
		return;
	}
	for (int k = 0; k < 16; k++)
		v[k] = (float)k;
	hid_t h = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	put(h, "w", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 16, v, 1ull << 26);
	H5Fclose(h);
	CHECK(wd_ckpt_box_open(path, &tight, &b, err) == 0, "the chunk bomb lists (%s)", err);
	if (!b)
		return;
	CHECK(wd_ckpt_box_read(b, 0, &m, err) < 0 && !m.data && strstr(err, path) &&
	      strstr(err, "dataset 'w'") && strstr(err, "exceeded the memory limit of 64 MiB"),
	      "a 256 MiB chunk under a 64 MiB limit: %s", err);
	wd_ckpt_box_close(&b);
	CHECK(wd_ckpt_box_open(path, &roomy, &b, err) == 0 &&
	      (r = wd_ckpt_box_read(b, 0, &m, err)) == 0 && m.bytes == sizeof(v) &&
	      !memcmp(m.data, v, sizeof(v)), "and reads under 1 GiB (%s)", b && !r ? "" : err);
	wd_tensor_map_release(&m);
	wd_ckpt_box_close(&b);
}

/* A tensor larger than the limit is refused, and the child lives on. */
static void test_too_large(const char *path)
{
	struct wd_sandbox_limits tiny = { 30, 16ull << 20 };
	struct wd_ckpt_box *b = NULL;
	struct wd_tensor_map m;
	char err[WD_CKPT_ERR_MAX] = "";

	write_good(path, 5 << 20);	/* 20 MiB of f32 */
	if (wd_ckpt_box_open(path, &tiny, &b, err) < 0) {
		CHECK(0, "open (%s)", err);
		return;
	}
	long i = wd_ckpt_find(wd_ckpt_box_listing(b), "layers.2.w");
	CHECK(wd_ckpt_box_read(b, (size_t)i, &m, err) < 0 &&
	      strstr(err, "dataset 'layers.2.w': its 20 MiB exceed the memory limit of 16 MiB"),
	      "a 20 MiB tensor under a 16 MiB limit: %s", err);
	i = wd_ckpt_find(wd_ckpt_box_listing(b), "deep/f64");
	CHECK(wd_ckpt_box_read(b, (size_t)i, &m, err) == 0 && m.bytes == 24, "a small one reads after it");
	wd_tensor_map_release(&m);
	wd_ckpt_box_close(&b);
}

/*
 * A file replaced (renamed over) after the listing: the child holds the
 * file it listed open, and reads that one, as listed.
 */
static void test_replaced(const char *path)
{
	struct wd_ckpt_box *b = NULL;
	struct wd_tensor_map m;
	char err[WD_CKPT_ERR_MAX] = "", tmp[300];

	write_good(path, 10);
	CHECK(wd_ckpt_box_open(path, &roomy, &b, err) == 0, "open (%s)", err);
	if (!b)
		return;
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	write_good(tmp, 100000);
	rename(tmp, path);
	long i = wd_ckpt_find(wd_ckpt_box_listing(b), "layers.2.w");
	int r = wd_ckpt_box_read(b, (size_t)i, &m, err);
	CHECK(r == 0 && m.bytes == 40 && ((const float *)m.data)[9] == 1.5f,
	      "replaced after the listing: the file listed is the file read (%s)", r ? err : "");
	wd_tensor_map_release(&m);
	wd_ckpt_box_close(&b);
}

/*
 * A child that dies of a signal: SIGABRT sent to the child that reads the
 * hanging file (not SIGSEGV, which ASan would catch and report); SIGKILL
 * sent to an idle one, as the out-of-memory killer would.
 */
static pid_t opener_tid;

static void *open_hang(void *arg)
{
	struct wd_sandbox_limits lim = { 20, 1ull << 30 };
	struct wd_ckpt_box *b = NULL;

	opener_tid = gettid();
	wd_ckpt_box_open(HANG_FILE, &lim, &b, arg);
	wd_ckpt_box_close(&b);
	return NULL;
}

static void test_crash(const char *path)
{
	char err[WD_CKPT_ERR_MAX] = "";
	struct wd_ckpt_box *b = NULL;
	struct wd_tensor_map m;
	pthread_t t;
	pid_t child = 0;

	pthread_create(&t, NULL, open_hang, err);
	while (!opener_tid)
		usleep(1000);
	child = child_of(opener_tid);
	usleep(200000);	/* into libhdf5's loop */
	CHECK(child > 0 && kill(child, SIGABRT) == 0, "found the reader child %d", (int)child);
	pthread_join(t, NULL);
	CHECK(strstr(err, HANG_FILE) && strstr(err, "listing datasets: the reader crashed with signal 6 (SIGABRT)"),
	      "a crashed reader: %s", err);

	write_good(path, 10);
	if (wd_ckpt_box_open(path, &roomy, &b, err) < 0) {
		CHECK(0, "open (%s)", err);
		return;
	}
	child = child_of(gettid());
	CHECK(child > 0 && kill(child, SIGKILL) == 0, "killed the idle reader child %d", (int)child);
	usleep(100000);
	CHECK(wd_ckpt_box_read(b, 1, &m, err) < 0 && strstr(err, "crashed with signal 9 (SIGKILL)"),
	      "the next read says so: %s", err);
	wd_ckpt_box_close(&b);
}

static void test_env(void)
{
	struct wd_sandbox_limits lim;
	char err[256];

	unsetenv("WDRIFT_CKPT_TIMEOUT");
	unsetenv("WDRIFT_CKPT_MEMORY");
	CHECK(wd_sandbox_limits_env(&lim, err, sizeof(err)) == 0 && lim.seconds == 60 &&
	      lim.memory >= 1ull << 30, "defaults: 60 s, %llu bytes", (unsigned long long)lim.memory);
	setenv("WDRIFT_CKPT_TIMEOUT", "2.5", 1);
	setenv("WDRIFT_CKPT_MEMORY", "64M", 1);
	CHECK(wd_sandbox_limits_env(&lim, err, sizeof(err)) == 0 && lim.seconds == 2.5 &&
	      lim.memory == 64ull << 20, "2.5 and 64M");
	setenv("WDRIFT_CKPT_MEMORY", "3g", 1);
	CHECK(wd_sandbox_limits_env(&lim, err, sizeof(err)) == 0 && lim.memory == 3ull << 30, "3g");
	static const char *bad_mem[] = { "1M", "64X", "64MB", "-5G", "G", "99999999999999T" };
	for (int k = 0; k < 6; k++) {
		setenv("WDRIFT_CKPT_MEMORY", bad_mem[k], 1);
		CHECK(wd_sandbox_limits_env(&lim, err, sizeof(err)) == -EINVAL &&
		      strstr(err, "WDRIFT_CKPT_MEMORY") && strstr(err, bad_mem[k]),
		      "memory '%s' refused: %s", bad_mem[k], err);
	}
	unsetenv("WDRIFT_CKPT_MEMORY");
	static const char *bad_t[] = { "0", "-1", "abc", "5s", "inf", "nan" };
	for (int k = 0; k < 6; k++) {
		setenv("WDRIFT_CKPT_TIMEOUT", bad_t[k], 1);
		CHECK(wd_sandbox_limits_env(&lim, err, sizeof(err)) == -EINVAL &&
		      strstr(err, "WDRIFT_CKPT_TIMEOUT") && strstr(err, bad_t[k]),
		      "timeout '%s' refused: %s", bad_t[k], err);
	}
	unsetenv("WDRIFT_CKPT_TIMEOUT");
}

/* Whether m holds write_good's n floats k * 0.5 - 3. */
static int holds_good(const struct wd_tensor_map *m, int n)
{
	if (!m->data || m->bytes != (size_t)n * sizeof(float))
		return 0;
	for (int k = 0; k < n; k++)
		if (((const float *)m->data)[k] != (float)k * 0.5f - 3)
			return 0;
	return 1;
}

/*
 * Two files read at once: both requests in flight, collected in the
 * opposite order, each with its own bytes; one request per box at a time;
 * a collect with nothing in flight; a failure of one (its reader stopped,
 * so it misses its deadline) that names that file, while the other reads.
 */
static void test_concurrent(const char *path)
{
	struct wd_sandbox_limits lim = { 1, 1ull << 30 };
	struct wd_ckpt_box *a = NULL, *b = NULL;
	struct wd_tensor_map ma, mb;
	char err[WD_CKPT_ERR_MAX] = "", other[300];
	pid_t child_b = 0;
	long ia, ib;

	snprintf(other, sizeof(other), "%s.other", path);
	write_good(path, 1000);
	write_good(other, 300000);
	/* b first, so that its child is this thread's only one when looked for */
	if (wd_ckpt_box_open(other, &lim, &b, err) < 0 || !(child_b = child_of(gettid())) ||
	    wd_ckpt_box_open(path, &lim, &a, err) < 0) {
		CHECK(0, "open both (%s)", err);
		goto out;
	}
	ia = wd_ckpt_find(wd_ckpt_box_listing(a), "layers.2.w");
	ib = wd_ckpt_find(wd_ckpt_box_listing(b), "layers.2.w");
	CHECK(wd_ckpt_box_request(a, (size_t)ia, err) == 0 && wd_ckpt_box_request(b, (size_t)ib, err) == 0,
	      "two reads in flight at once (%s)", err);
	CHECK(wd_ckpt_box_request(a, 0, err) < 0 && strstr(err, path) &&
	      strstr(err, "a read of dataset 'layers.2.w' is still in flight"),
	      "a second request on one box: %s", err);
	err[0] = 0;
	CHECK(wd_ckpt_box_collect(b, &mb, err) == 0 && holds_good(&mb, 300000),
	      "the second file's collected first, its own bytes (%s)", err);
	CHECK(wd_ckpt_box_collect(a, &ma, err) == 0 && holds_good(&ma, 1000),
	      "then the first file's, its own bytes (%s)", err);
	CHECK(count_maps(path) == 1 && count_maps(other) == 1 && count_memfd_maps() == 0,
	      "both files mapped while held, no memfd");
	wd_tensor_map_release(&ma);
	wd_tensor_map_release(&mb);
	CHECK(wd_ckpt_box_collect(a, &ma, err) < 0 && !ma.data && strstr(err, path) &&
	      strstr(err, "no read in flight"), "a collect with nothing in flight: %s", err);

	/* b's reader stops: only its read fails, naming its file */
	CHECK(kill(child_b, SIGSTOP) == 0, "stopped the other file's reader %d", (int)child_b);
	CHECK(wd_ckpt_box_request(a, (size_t)ia, err) == 0 && wd_ckpt_box_request(b, (size_t)ib, err) == 0,
	      "both requested again (%s)", err);
	int rb = wd_ckpt_box_collect(b, &mb, err);
	CHECK(rb < 0 && !mb.data && strstr(err, other) && strstr(err, "dataset 'layers.2.w': timed out"),
	      "the stopped reader's read fails, naming its file and the dataset: %s", err);
	wd_tensor_map_release(&mb);
	CHECK(wd_ckpt_box_collect(a, &ma, err) == 0 && holds_good(&ma, 1000),
	      "the other read, in flight meanwhile, succeeds (%s)", err);
	wd_tensor_map_release(&ma);
out:
	wd_ckpt_box_close(&a);
	wd_ckpt_box_close(&b);
	unlink(other);
}

/*
 * A read's deadline runs from its request, and a reply that came within it
 * is taken when the caller collects after the deadline (it computed
 * meanwhile): the child is not blamed for the caller's time.
 */
static void test_late_collect(const char *path)
{
	struct wd_sandbox_limits lim = { 1, 1ull << 30 };
	struct wd_ckpt_box *b = NULL;
	struct wd_tensor_map m;
	char err[WD_CKPT_ERR_MAX] = "";

	write_good(path, 1000);
	if (wd_ckpt_box_open(path, &lim, &b, err) < 0) {
		CHECK(0, "open (%s)", err);
		return;
	}
	long i = wd_ckpt_find(wd_ckpt_box_listing(b), "layers.2.w");
	CHECK(wd_ckpt_box_request(b, (size_t)i, err) == 0, "requested (%s)", err);
	usleep(1600 * 1000);	/* past the 1 s (+ 1 per 32 MiB) deadline */
	CHECK(wd_ckpt_box_collect(b, &m, err) == 0 && holds_good(&m, 1000),
	      "collected 1.6 s after a 1 s deadline: the reply came in time (%s)", err);
	wd_tensor_map_release(&m);
	wd_ckpt_box_close(&b);
}

/*
 * HDF5 packs small datasets back to back: three 16-bit values (6 bytes) put
 * the f32 dataset written after them off a 4-byte boundary in the file
 * (the one written first starts aligned).
 * Mapped there, the engine's float reads would be misaligned: such a
 * dataset is read into a memfd instead, aligned, with the same values;
 * one written at an aligned offset is mapped. A SIGBUS sent with kill()
 * still ends the process after a map is guarded (a forked one).
 */
static void test_alignment(const char *path)
{
	const uint16_t half[3] = { 0x3c00, 0x4000, 0x4200 };
	float f[1000];
	struct wd_ckpt_box *b = NULL;
	struct wd_tensor_map m;
	char err[WD_CKPT_ERR_MAX] = "";
	haddr_t off_odd = 0, off_even = 0;

	for (int k = 0; k < 1000; k++)
		f[k] = (float)k * 0.5f - 3;
	hid_t h = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	put(h, "c.even", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1000, f, 0);
	put(h, "a.half", H5T_STD_U16LE, H5T_NATIVE_UINT16, 3, half, 0);
	put(h, "b.odd", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1000, f, 0);
	hid_t d = H5Dopen2(h, "b.odd", H5P_DEFAULT);
	off_odd = H5Dget_offset(d);
	H5Dclose(d);
	d = H5Dopen2(h, "c.even", H5P_DEFAULT);
	off_even = H5Dget_offset(d);
	H5Dclose(d);
	H5Fclose(h);
	CHECK(off_odd % 4 != 0 && off_even % 4 == 0, "the file packs b.odd at %llu, c.even at %llu",
	      (unsigned long long)off_odd, (unsigned long long)off_even);
	if (wd_ckpt_box_open(path, &roomy, &b, err) < 0) {
		CHECK(0, "open (%s)", err);
		return;
	}
	long i = wd_ckpt_find(wd_ckpt_box_listing(b), "b.odd");
	CHECK(wd_ckpt_box_read(b, (size_t)i, &m, err) == 0 && !m.guard &&
	      (uintptr_t)m.data % sizeof(float) == 0 && holds_good(&m, 1000),
	      "off its element size in the file: read into a memfd, aligned, the same values (%s)", err);
	wd_tensor_map_release(&m);
	i = wd_ckpt_find(wd_ckpt_box_listing(b), "c.even");
	CHECK(wd_ckpt_box_read(b, (size_t)i, &m, err) == 0 && m.guard &&
	      (uintptr_t)m.data % sizeof(float) == 0 && holds_good(&m, 1000),
	      "at an aligned offset: the file mapped (%s)", err);

	pid_t pid = WD_UNDER_ASAN ? -1 : fork();	/* ASan's own SIGBUS report would end it */
	if (pid == 0) {
		wd_ckpt_box_close(&b);	/* the guard stays installed, with m */
		kill(getpid(), SIGBUS);
		_exit(9);
	}
	int status = 0;
	if (pid > 0 && waitpid(pid, &status, 0) == pid)
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
		      "a SIGBUS sent with kill() still ends the process (status %#x)", status);
	wd_tensor_map_release(&m);
	wd_ckpt_box_close(&b);
}

/*
 * Started apart from listed (wdrift compare starts every file's child,
 * then takes each listing): a read before the listing is refused by
 * name; a file that is not HDF5 fails at its listing, naming it, and the
 * box is dead; a good one started beside it lists and reads.
 */
static void test_start_then_list(const char *path)
{
	struct wd_ckpt_box *good = NULL, *bad = NULL;
	struct wd_tensor_map m;
	char err[WD_CKPT_ERR_MAX] = "", junk[300];
	FILE *f;

	snprintf(junk, sizeof(junk), "%s.junk", path);
	write_good(path, 1000);
	if ((f = fopen(junk, "w"))) {
		fputs("not an HDF5 file\n", f);
		fclose(f);
	}
	CHECK(wd_ckpt_box_start(path, &roomy, &good, err) == 0 &&
	      wd_ckpt_box_start(junk, &roomy, &bad, err) == 0, "both children started (%s)", err);
	if (!good || !bad)
		goto out;
	CHECK(wd_ckpt_box_request(good, 0, err) < 0 && strstr(err, path) &&
	      strstr(err, "listing has not been taken"), "a read before the listing: %s", err);
	CHECK(wd_ckpt_box_listed(bad, err) < 0 && strstr(err, junk),
	      "the junk file fails at its listing, naming it: %s", err);
	CHECK(wd_ckpt_box_read(bad, 0, &m, err) < 0 && strstr(err, junk), "... and stays dead: %s", err);
	CHECK(wd_ckpt_box_listed(good, err) == 0 && wd_ckpt_count(wd_ckpt_box_listing(good)) == 4 &&
	      wd_ckpt_box_listed(good, err) == 0, "the good one lists (twice is once) (%s)", err);
	long i = wd_ckpt_find(wd_ckpt_box_listing(good), "layers.2.w");
	CHECK(wd_ckpt_box_read(good, (size_t)i, &m, err) == 0 && holds_good(&m, 1000),
	      "and reads (%s)", err);
	wd_tensor_map_release(&m);
out:
	wd_ckpt_box_close(&good);
	wd_ckpt_box_close(&bad);
	unlink(junk);
}

/*
 * A file cut short while its tensor is mapped: reading the cut part gives
 * zeros instead of a SIGBUS, and wd_tensor_map_intact names the file and
 * the dataset; a map read whole before any cut is intact. A file cut
 * between the child's answer and the collect fails the collect. A SIGBUS
 * at an address no map holds still ends the process (a forked one).
 */
static void test_cut_short(const char *path)
{
	const int n = 1 << 20;
	struct wd_ckpt_box *b = NULL;
	struct wd_tensor_map m;
	char err[WD_CKPT_ERR_MAX] = "";
	struct stat st;
	double sum = 0;
	long i;

	write_good(path, n);
	if (wd_ckpt_box_open(path, &roomy, &b, err) < 0 || stat(path, &st) < 0) {
		CHECK(0, "open (%s)", err);
		return;
	}
	i = wd_ckpt_find(wd_ckpt_box_listing(b), "layers.2.w");
	CHECK(wd_ckpt_box_read(b, (size_t)i, &m, err) == 0 && m.guard && holds_good(&m, n) &&
	      wd_tensor_map_intact(&m, err) == 0, "mapped from the file, read whole: intact (%s)", err);
	CHECK(truncate(path, st.st_size / 4) == 0, "the file cut to a quarter under the map");
	for (int k = 0; m.data && k < n; k++)
		sum += ((const float *)m.data)[k];
	/*
	 * Under memcheck the load that faulted runs again with registers that
	 * its default --vex-iropt-register-updates leaves stale: no SIGBUS, but
	 * not the zeros either. Natively and under ASan, zeros.
	 */
	if (getenv("WDRIFT_VALGRIND"))
		printf("# memcheck: the cut part's values not checked\n");
	else
		CHECK(sum == 0, "the cut part reads as zeros, no SIGBUS (sum %g)", sum);
	CHECK(wd_tensor_map_intact(&m, err) < 0 && strstr(err, path) && strstr(err, "'layers.2.w'") &&
	      strstr(err, "cut short while it was read"), "intact says so: %s", err);
	wd_tensor_map_release(&m);
	CHECK(!m.data && !m.guard && count_maps(path) == 0, "released: nothing of the file mapped");
	wd_ckpt_box_close(&b);

	/* cut after the child answered, before the collect: the collect checks the size itself */
	write_good(path, n);
	if (wd_ckpt_box_open(path, &roomy, &b, err) < 0 || stat(path, &st) < 0) {
		CHECK(0, "open again (%s)", err);
		return;
	}
	i = wd_ckpt_find(wd_ckpt_box_listing(b), "layers.2.w");
	CHECK(wd_ckpt_box_request(b, (size_t)i, err) == 0, "requested (%s)", err);
	usleep(300 * 1000);	/* the child has answered (either way, the message is the same) */
	CHECK(truncate(path, st.st_size / 4) == 0, "the file cut to a quarter");
	CHECK(wd_ckpt_box_collect(b, &m, err) < 0 && !m.data && strstr(err, path) &&
	      strstr(err, "'layers.2.w'") && strstr(err, "the file ends before the dataset"),
	      "the collect fails, naming the file: %s", err);
	wd_ckpt_box_close(&b);

	/* a SIGBUS that is not a guarded map's: the process still dies of it (under ASan, of its report) */
	if (WD_UNDER_ASAN)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		write_good(path, n);
		int fd = open(path, O_RDONLY);
		if (wd_ckpt_box_open(path, &roomy, &b, err) < 0 || fd < 0)
			_exit(2);
		i = wd_ckpt_find(wd_ckpt_box_listing(b), "layers.2.w");
		if (wd_ckpt_box_read(b, (size_t)i, &m, err) < 0 || !m.guard)
			_exit(3);	/* the guard's handler is installed now */
		/* its reader reaped now: dying with this process, it would hold the file's lock a while */
		wd_ckpt_box_close(&b);
		const volatile char *own = mmap(NULL, 1 << 20, PROT_READ, MAP_SHARED, fd, 0);
		if (own == MAP_FAILED || truncate(path, 0) < 0)
			_exit(4);
		_exit(own[4096] + 5);	/* SIGBUS */
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
	      "a SIGBUS outside every map still ends the process (status %#x)", status);
}

int main(void)
{
	char path[256], cmd[300];
	int fds;

	if (!mkdtemp(dir)) {
		printf("not ok 1 - mkdtemp\n");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/c.h5", dir);
	alarm(120);	/* a deadline that failed would hang this test: fail it instead */
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	fds = count_fds();
	test_same_as_in_process(path);
	test_hang();
	test_read_deadline(path);
	test_memory(path);
	test_too_large(path);
	test_replaced(path);
	test_crash(path);
	test_env();
	test_concurrent(path);
	test_late_collect(path);
	test_cut_short(path);
	test_alignment(path);
	test_start_then_list(path);
	errno = 0;
	CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD, "every child reaped: no zombie");
	CHECK(count_fds() == fds, "no fd left open: %d, as before", count_fds());
	CHECK(count_memfd_maps() == 0 && count_maps(path) == 0, "no memfd and no file left mapped");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", dir);
	return tap_done();
}
