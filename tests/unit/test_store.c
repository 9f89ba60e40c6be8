/*
 * test_store.c: the drift log file: created with its proxies, appended to,
 * reopened and appended to again, names interned once; a file made for
 * other proxies, or not a drift log, is refused so the daemon rebuilds it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "store.h"

static char dir[] = "/tmp/wdrift-test-store-XXXXXX";

static struct drift_row row(int64_t step, const char *tensor, const char *run, double w1)
{
	struct drift_row r;
	memset(&r, 0, sizeof(r));
	r.step = step;
	r.kind = tensor ? ROW_TENSOR : ROW_MAX;
	r.role = ROLE_CANDIDATE;
	r.tensor = tensor;
	r.run = run;
	r.w1 = w1;
	r.max_abs_diff = r.rel_l2 = NAN;
	r.ratio[0] = w1 * 2;
	r.ratio[1] = NAN;
	r.numel = 10;
	return r;
}

int main(void)
{
	const char *proxies[2] = { "fp16", "seed" }, *other[1] = { "fp16" };
	char path[300], err[512] = "";	/* store_open writes it only on failure */
	struct store *s;

	if (!mkdtemp(dir))
		return printf("not ok 1 - mkdtemp\n"), 1;
	snprintf(path, sizeof(path), "%s/fa.h5", dir);
	CHECK(store_open(path, proxies, 2, &s, err, sizeof(err)) == 0, "create (%s)", err);
	struct drift_row r[3] = { row(100, "layers.0.w", "fa", 1e-5), row(100, "emb", "fa", 2e-5),
				  row(100, NULL, "fa", 2e-5) };
	CHECK(s && store_append(s, r, 3, err, sizeof(err)) == 0 && store_rows(s) == 3, "append 3 rows");
	store_close(&s);
	CHECK(!s, "close nulls the pointer");
	CHECK(store_open(path, proxies, 2, &s, err, sizeof(err)) == 0 && store_rows(s) == 3,
	      "reopen: 3 rows (%s)", err);
	struct drift_row r2[2] = { row(200, "layers.0.w", "fa", 3e-5), row(200, "new", "seed2", 4e-5) };
	CHECK(s && store_append(s, r2, 2, err, sizeof(err)) == 0 && store_rows(s) == 5,
	      "append after reopen: 5 rows");
	store_close(&s);
	CHECK(store_open(path, other, 1, &s, err, sizeof(err)) == -1 && !s && strstr(err, "other proxy"),
	      "other proxy labels are refused: %s", err);
	char junk[300];
	snprintf(junk, sizeof(junk), "%s/junk.h5", dir);
	FILE *f = fopen(junk, "w");
	fputs("not hdf5", f);
	fclose(f);
	CHECK(store_open(junk, proxies, 2, &s, err, sizeof(err)) == -1 && strstr(err, "cannot open"),
	      "a damaged file is refused: %s", err);
	/* A name longer than the table's 1024 bytes is cut, and interned once as cut. */
	{
		char longname[1500], lpath[300];
		memset(longname, 'x', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = 0;
		snprintf(lpath, sizeof(lpath), "%s/long.h5", dir);
		struct drift_row lr[2] = { row(1, longname, "fa", 1), row(2, longname, "fa", 2) };
		int ok = store_open(lpath, proxies, 2, &s, err, sizeof(err)) == 0 &&
			 store_append(s, lr, 1, err, sizeof(err)) == 0 &&
			 store_append(s, lr + 1, 1, err, sizeof(err)) == 0;
		store_close(&s);
		char lcmd[700];
		snprintf(lcmd, sizeof(lcmd), "/usr/bin/python3 -c \"import h5py,sys; f=h5py.File('%s','r'); "
			 "t=f['tensors']; r=f['rows']; sys.exit(0 if len(t)==1 and len(t[0])==1023 and "
			 "r[0]['tensor']==0 and r[1]['tensor']==0 else 1)\" 2>/dev/null", lpath);
		CHECK(ok && system(lcmd) == 0, "a name over 1023 bytes is cut and interned once (%s)", err);
	}
	/* h5py, where present, reads it as the docs say (tests/integration checks SWMR) */
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c \"import h5py,sys; f=h5py.File('%s','r',swmr=True); "
		 "r=f['rows']; n=f['tensors'][:].astype(str); sys.exit(0 if len(r)==5 and "
		 "list(n)==['layers.0.w','emb','new'] and r[3]['step']==200 and abs(r[0]['ratio'][0]-2e-5)<1e-20 "
		 "and r[2]['tensor']==4294967295 else 1)\" 2>/dev/null", path);
	int rc = system(cmd);
	CHECK(rc == 0, "h5py reads rows, names and ratios back in SWMR mode");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# cleanup failed\n");
	return tap_done();
}
