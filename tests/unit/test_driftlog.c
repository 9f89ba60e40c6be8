/*
 * test_driftlog.c: the drift log file: created with its proxies, appended to,
 * reopened and appended to again, names interned once; a file made for
 * other proxies, or not a drift log, is refused so the daemon rebuilds it.
 * Copies of damaged drift logs: each has a name of its own (two in one
 * second used to keep one), and only the newest are kept.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "driftlog.h"

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

static void put(const char *d, const char *name, const char *text)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/%s", d, name);
	FILE *f = fopen(p, "w");
	if (!f || fputs(text, f) < 0)
		printf("# cannot write '%s'\n", p);
	if (f)
		fclose(f);
}

/* The text of d/name, or "" when it cannot be read. */
static const char *text_of(const char *d, const char *name)
{
	static char buf[256];
	char p[400];
	snprintf(p, sizeof(p), "%s/%s", d, name);
	FILE *f = fopen(p, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	return buf;
}

/* The names in d, sorted, joined with spaces. */
static const char *listing(const char *d)
{
	static char out[2048];
	struct dirent **v;
	int n = scandir(d, &v, NULL, alphasort);
	out[0] = 0;
	for (int i = 0; i < n; i++) {
		if (v[i]->d_name[0] != '.')
			snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", out[0] ? " " : "",
				 v[i]->d_name);
		free(v[i]);
	}
	if (n >= 0)
		free(v);
	return out;
}

static char removed_names[8][400];
static uint64_t removed_bytes[8];
static int n_removed;

static void on_removed(void *ctx, const char *path, uint64_t bytes, int errnum)
{
	(void)ctx;
	if (n_removed < 8 && !errnum) {
		snprintf(removed_names[n_removed], sizeof(removed_names[0]), "%s", path);
		removed_bytes[n_removed] = bytes;
	}
	n_removed++;
}

static void test_set_aside(void)
{
	char d[300], path[400], aside[500], err[512] = "", want[500];

	snprintf(d, sizeof(d), "%s/aside", dir);
	if (mkdir(d, 0700) < 0)
		printf("# mkdir '%s' failed\n", d);
	snprintf(path, sizeof(path), "%s/fa.h5", d);
	CHECK(driftlog_set_aside(path, DRIFTLOG_ASIDE_BROKEN, 1000, 3, aside, sizeof(aside),
				 on_removed, NULL, err, sizeof(err)) ==
	      -ENOENT, "no drift log: -ENOENT, nothing made");
	/* two in the same second: two copies (the reproducer of issue 6's loss) */
	put(d, "fa.h5", "first\n");
	int r1 = driftlog_set_aside(path, DRIFTLOG_ASIDE_BROKEN, 1000, 3, aside, sizeof(aside),
				    on_removed, NULL, err, sizeof(err));
	snprintf(want, sizeof(want), "%s/fa.h5.broken-1000.1", d);
	CHECK(r1 == 0 && !strcmp(aside, want), "the first copy is fa.h5.broken-1000.1 (%s)", aside);
	put(d, "fa.h5", "second\n");
	int r2 = driftlog_set_aside(path, DRIFTLOG_ASIDE_BROKEN, 1000, 3, aside, sizeof(aside),
				    on_removed, NULL, err, sizeof(err));
	snprintf(want, sizeof(want), "%s/fa.h5.broken-1000.2", d);
	CHECK(r2 == 0 && !strcmp(aside, want), "a second in the same second: fa.h5.broken-1000.2 (%s)", aside);
	CHECK(!strcmp(text_of(d, "fa.h5.broken-1000.1"), "first\n") &&
	      !strcmp(text_of(d, "fa.h5.broken-1000.2"), "second\n"),
	      "both copies keep their contents: %s", listing(d));
	/* a copy named as before (the second alone) is the oldest; other
	 * studies' copies and names that are not copies are not touched */
	put(d, "fa.h5.broken-999", "old style\n");
	put(d, "fab.h5.broken-1.1", "other study\n");
	put(d, "fa.h5.h5.broken-1.1", "study fa.h5\n");
	put(d, "fa.h5.broken-x", "not a copy\n");
	put(d, "fa.h5.broken-7.1.tmp", "not a copy\n");
	put(d, "fa.h5.broken-", "not a copy\n");
	n_removed = 0;
	put(d, "fa.h5", "third\n");
	/* the clock set back: the order is N's, so this one is still the newest */
	int r3 = driftlog_set_aside(path, DRIFTLOG_ASIDE_BROKEN, 500, 3, aside, sizeof(aside),
				    on_removed, NULL, err, sizeof(err));
	snprintf(want, sizeof(want), "%s/fa.h5.broken-500.3", d);
	CHECK(r3 == 0 && !strcmp(aside, want), "N goes on from the highest present: %s", aside);
	snprintf(want, sizeof(want), "%s/fa.h5.broken-999", d);
	CHECK(n_removed == 1 && !strcmp(removed_names[0], want) && removed_bytes[0] == 10,
	      "4 copies, 3 kept: the old-style one is removed and reported with its size (%d: %s, %llu bytes)",
	      n_removed, n_removed ? removed_names[0] : "", (unsigned long long)removed_bytes[0]);
	n_removed = 0;
	put(d, "fa.h5", "fourth\n");
	int r4 = driftlog_set_aside(path, DRIFTLOG_ASIDE_BROKEN, 500, 3, aside, sizeof(aside),
				    on_removed, NULL, err, sizeof(err));
	snprintf(want, sizeof(want), "%s/fa.h5.broken-1000.1", d);
	CHECK(r4 == 0 && n_removed == 1 && !strcmp(removed_names[0], want),
	      "the next removes the lowest N, fa.h5.broken-1000.1, though named for a later second (%s)",
	      n_removed ? removed_names[0] : "none");
	CHECK(!strcmp(listing(d), "fa.h5.broken- fa.h5.broken-1000.2 fa.h5.broken-500.3 "
		      "fa.h5.broken-500.4 fa.h5.broken-7.1.tmp fa.h5.broken-x fa.h5.h5.broken-1.1 "
		      "fab.h5.broken-1.1"),
	      "left: the newest 3 and the files that are not its copies: %s", listing(d));
	CHECK(!strcmp(text_of(d, "fa.h5.broken-500.4"), "fourth\n") &&
	      !strcmp(text_of(d, "fa.h5.broken-500.3"), "third\n") &&
	      !strcmp(text_of(d, "fa.h5.broken-1000.2"), "second\n"), "with their contents");
	/*
	 * A copy set aside for a change of proxy labels (a config change, not
	 * damage) says so in its name and goes on with the copies' N. Each
	 * kind has its own keep: config changes must not prune the only copy
	 * of a damaged file (a review's).
	 */
	char name[64];
	for (int k = 5; k <= 8; k++) {
		n_removed = 0;
		put(d, "fa.h5", "relabeled\n");
		int rk = driftlog_set_aside(path, DRIFTLOG_ASIDE_RELABELED, 600, 3, aside, sizeof(aside),
					    on_removed, NULL, err, sizeof(err));
		snprintf(name, sizeof(name), "fa.h5.proxies-changed-600.%d", k);
		snprintf(want, sizeof(want), "%s/%s", d, name);
		CHECK(rk == 0 && !strcmp(aside, want) && !strcmp(text_of(d, name), "relabeled\n"),
		      "a relabeled copy: %s, its N after the others' (%s)", name, aside);
	}
	snprintf(want, sizeof(want), "%s/fa.h5.proxies-changed-600.5", d);
	CHECK(n_removed == 1 && !strcmp(removed_names[0], want),
	      "the 4th relabeled copy removes the oldest relabeled one, not a broken one (%s)",
	      n_removed ? removed_names[0] : "none");
	CHECK(!strcmp(text_of(d, "fa.h5.broken-1000.2"), "second\n") &&
	      !strcmp(text_of(d, "fa.h5.broken-500.3"), "third\n") &&
	      !strcmp(text_of(d, "fa.h5.broken-500.4"), "fourth\n"), "the 3 broken copies are all kept: %s",
	      listing(d));
	n_removed = 0;
	put(d, "fa.h5", "broken again\n");
	int r6 = driftlog_set_aside(path, DRIFTLOG_ASIDE_BROKEN, 600, 3, aside, sizeof(aside), on_removed, NULL,
				    err, sizeof(err));
	snprintf(want, sizeof(want), "%s/fa.h5.broken-600.9", d);
	CHECK(r6 == 0 && !strcmp(aside, want), "a broken copy after them goes on from their N: %s", aside);
	snprintf(want, sizeof(want), "%s/fa.h5.broken-1000.2", d);
	CHECK(n_removed == 1 && !strcmp(removed_names[0], want),
	      "... and removes the oldest broken one, fa.h5.broken-1000.2 (%s)", n_removed ? removed_names[0] : "none");
	/* keep 0: nothing removed */
	n_removed = 0;
	put(d, "fa.h5", "fifth\n");
	CHECK(driftlog_set_aside(path, DRIFTLOG_ASIDE_BROKEN, 500, 0, aside, sizeof(aside),
				 on_removed, NULL, err, sizeof(err)) == 0 &&
	      n_removed == 0, "keep 0 removes nothing (%d removed)", n_removed);
}

int main(void)
{
	const char *proxies[2] = { "fp16", "seed" }, *other[1] = { "fp16" };
	char path[300], err[512] = "";	/* driftlog_open writes it only on failure */
	struct driftlog_writer *s;

	if (!mkdtemp(dir))
		return printf("not ok 1 - mkdtemp\n"), 1;
	snprintf(path, sizeof(path), "%s/fa.h5", dir);
	CHECK(driftlog_open(path, proxies, 2, &s, err, sizeof(err)) == 0, "create (%s)", err);
	struct drift_row r[3] = { row(100, "layers.0.w", "fa", 1e-5), row(100, "emb", "fa", 2e-5),
				  row(100, NULL, "fa", 2e-5) };
	CHECK(s && driftlog_append(s, r, 3, err, sizeof(err)) == 0 && driftlog_rows(s) == 3, "append 3 rows");
	driftlog_close(&s);
	CHECK(!s, "close nulls the pointer");
	CHECK(driftlog_open(path, proxies, 2, &s, err, sizeof(err)) == 0 && driftlog_rows(s) == 3,
	      "reopen: 3 rows (%s)", err);
	struct drift_row r2[2] = { row(200, "layers.0.w", "fa", 3e-5), row(200, "new", "seed2", 4e-5) };
	CHECK(s && driftlog_append(s, r2, 2, err, sizeof(err)) == 0 && driftlog_rows(s) == 5,
	      "append after reopen: 5 rows");
	driftlog_close(&s);
	CHECK(driftlog_open(path, other, 1, &s, err, sizeof(err)) == DRIFTLOG_OTHER_LABELS && !s &&
	      strstr(err, "made for the proxy labels [") && strstr(err, "and the study has ["),
	      "other proxy labels are refused, as a change of the config, both lists named: %s", err);
	char junk[300];
	snprintf(junk, sizeof(junk), "%s/junk.h5", dir);
	FILE *f = fopen(junk, "w");
	fputs("not hdf5", f);
	fclose(f);
	CHECK(driftlog_open(junk, proxies, 2, &s, err, sizeof(err)) == -1 && strstr(err, "cannot open"),
	      "a damaged file is refused: %s", err);
	/* A name longer than the table's 1024 bytes is cut, and interned once as cut. */
	{
		char longname[1500], lpath[300];
		memset(longname, 'x', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = 0;
		snprintf(lpath, sizeof(lpath), "%s/long.h5", dir);
		struct drift_row lr[2] = { row(1, longname, "fa", 1), row(2, longname, "fa", 2) };
		int ok = driftlog_open(lpath, proxies, 2, &s, err, sizeof(err)) == 0 &&
			 driftlog_append(s, lr, 1, err, sizeof(err)) == 0 &&
			 driftlog_append(s, lr + 1, 1, err, sizeof(err)) == 0;
		driftlog_close(&s);
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
	test_set_aside();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# cleanup failed\n");
	return tap_done();
}
