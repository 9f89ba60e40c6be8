/*
 * test_spool_index.c: the spool's owner (daemon/spool_index.c) without a
 * daemon: where a snapshot's file lives; step alignment (the nearest
 * durable step within alignment.tolerance, the exact one first, then the
 * lower of two equally near); retention (spool.retention.every thins all
 * but candidates, disk_budget drops the oldest steps but never a run's
 * latest, each drop in the WAL before its file goes); the start-up sweep;
 * a run's files removed for runs rm.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "logging.h"
#include "records.h"
#include "rng.h"
#include "spool_index.h"
#include "wal.h"

static char dir[] = "/tmp/wdrift-test-spool-XXXXXX";

/* The drops for the disk budget that spool_retain told, "run:step;" each. */
static char budget_drops[256];

static void told_drop(void *ctx, const struct spool_index *ix, const char *run, int64_t step)
{
	(void)ctx;
	(void)ix;
	size_t at = strlen(budget_drops);
	snprintf(budget_drops + at, sizeof(budget_drops) - at, "%s:%lld;", run, (long long)step);
}

static void make_file(const char *run, long long step, const char *tail, size_t bytes)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/spool", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/spool/%s", dir, run);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/spool/%s/%lld.%s", dir, run, step, tail);
	FILE *f = fopen(path, "w");
	for (size_t i = 0; f && i < bytes; i++)
		fputc('x', f);
	if (f)
		fclose(f);
}

static int exists(const char *run, long long step, const char *tail)
{
	char path[512];
	struct stat st;
	snprintf(path, sizeof(path), "%s/spool/%s/%lld.%s", dir, run, step, tail);
	return stat(path, &st) == 0;
}

static void test_paths(void)
{
	char buf[64];

	CHECK(spool_path(buf, sizeof(buf), "/var/lib/wdrift", "base", 120) == 0 &&
	      !strcmp(buf, "/var/lib/wdrift/spool/base/120.h5"), "a snapshot's file: %s", buf);
	CHECK(spool_path(buf, sizeof(buf), "", "base", -1) == 0 && !strcmp(buf, "spool/base/-1.h5"),
	      "relative to storage.dir, as the WAL names it: %s", buf);
	CHECK(spool_run_dir(buf, sizeof(buf), "/s", "fa") == 0 && !strcmp(buf, "/s/spool/fa"),
	      "a run's directory: %s", buf);
	CHECK(spool_path(buf, 16, "/var/lib/wdrift", "base", 120) == -ENAMETOOLONG,
	      "a path that does not fit is refused, not cut silently");
}

static void test_alignment(void)
{
	struct spool_rules rules = { .tolerance = 0 };
	struct spool_index ix;

	spool_index_init(&ix, dir, &rules);
	CHECK(spool_index_add(&ix, "base", 10, 100) == 0 && spool_index_add(&ix, "base", 20, 100) == 0 &&
	      spool_index_add(&ix, "base", 30, 100) == 0 && spool_index_add(&ix, "fa", 15, 7) == 0,
	      "four snapshots noted");
	CHECK(spool_index_add(&ix, "base", 20, 100) == 1 && ix.n == 4 && ix.bytes == 307,
	      "one noted again is there once, its bytes counted once (%llu)", (unsigned long long)ix.bytes);
	CHECK(spool_index_has(&ix, "base", 20) && !spool_index_has(&ix, "base", 15) &&
	      !spool_index_has(&ix, "fa", 10), "has: by run and step");
	CHECK(spool_index_nearest(&ix, "base", 20) == 20, "tolerance 0: the exact step");
	CHECK(spool_index_nearest(&ix, "base", 21) == -1, "tolerance 0: step 21 has none");
	ix.rules.tolerance = 3;
	CHECK(spool_index_nearest(&ix, "base", 22) == 20 && spool_index_nearest(&ix, "base", 27) == 30,
	      "tolerance 3: 22 aligns to 20, 27 to 30");
	CHECK(spool_index_nearest(&ix, "base", 23) == 20, "3 away is within tolerance 3");
	CHECK(spool_index_nearest(&ix, "base", 26) == -1, "26 is 4 from 30: none within 3");
	CHECK(spool_index_nearest(&ix, "base", 25) == -1, "25 is 5 from both: none within 3");
	ix.rules.tolerance = 5;
	CHECK(spool_index_nearest(&ix, "base", 25) == 20, "tolerance 5: 25 is as near 20 as 30: the lower");
	CHECK(spool_index_nearest(&ix, "base", 15) == 10, "and 15 between 10 and 20: the lower, 10");
	CHECK(spool_index_add(&ix, "base", 16, 1) == 0 && spool_index_nearest(&ix, "base", 16) == 16 &&
	      spool_index_nearest(&ix, "base", 15) == 16, "the exact step first, then the nearest (16 for 15)");
	CHECK(spool_index_nearest(&ix, "fa", 12) == 15 && spool_index_nearest(&ix, "lowprec", 15) == -1,
	      "only the run's own steps count");
	spool_index_release(&ix);

	/*
	 * A baseline step's partner is a step of the run whose own nearest
	 * baseline step it is: with the baseline at 0, 10, 20, 30 and the
	 * candidate at 25 and 35 (tolerance 5), 25 belongs to 20 (the lower
	 * of two equally near) and 35 to 30. Step 30 took 25, as near to it
	 * as 35 and lower (a new user's trial: a wrong row, in silence).
	 */
	spool_index_init(&ix, dir, &rules);
	ix.rules.tolerance = 5;
	for (int64_t st = 0; st <= 30; st += 10)
		spool_index_add(&ix, "base", st, 1);
	spool_index_add(&ix, "fa", 25, 1);
	CHECK(spool_index_aligned(&ix, "fa", "base", 20) == 25 && spool_index_aligned(&ix, "fa", "base", 30) == -1,
	      "candidate 25 alone: baseline 20's, not 30's");
	spool_index_add(&ix, "fa", 35, 1);
	CHECK(spool_index_aligned(&ix, "fa", "base", 30) == 35 && spool_index_aligned(&ix, "fa", "base", 20) == 25,
	      "candidate 35 arrives: baseline 30 takes it, 20 keeps 25");
	spool_index_add(&ix, "fa", 30, 1);
	spool_index_add(&ix, "fa", 18, 1);
	CHECK(spool_index_aligned(&ix, "fa", "base", 30) == 30 && spool_index_aligned(&ix, "fa", "base", 20) == 18,
	      "the exact step first; then the nearest of those that belong to it (18, not 25)");
	CHECK(spool_index_aligned(&ix, "fa", "base", 0) == -1 && spool_index_aligned(&ix, "fa", "base", 40) == -1,
	      "a baseline step with no step of the run that belongs to it: none");
	CHECK(spool_index_aligned(&ix, "lowprec", "base", 20) == -1, "a run with no snapshot: none");
	spool_index_release(&ix);
	spool_index_init(&ix, dir, &rules);
	spool_index_add(&ix, "fa", 15, 7);
	spool_index_add(&ix, "base", 10, 100);
	spool_index_add(&ix, "base", 20, 100);
	spool_index_add(&ix, "base", 30, 100);
	spool_index_add(&ix, "base", 16, 1);
	CHECK(spool_index_forget(&ix, "base") == 4 && ix.n == 1 && ix.bytes == 7 &&
	      spool_index_nearest(&ix, "base", 20) == -1, "runs rm: the run's entries and bytes go");
	spool_index_release(&ix);
}

/*
 * spool_index_aligned looks at bstep's two neighbours only: against the
 * rule stated plainly (the run's steps whose own nearest baseline step is
 * bstep, the nearest of them) on random steps and tolerances, ties and
 * out-of-order steps included.
 */
static int64_t aligned_plain(const struct spool_index *ix, const char *run, int64_t bstep)
{
	int64_t best = -1, dist = ix->rules.tolerance + 1;

	for (size_t i = 0; i < ix->n; i++) {
		int64_t s = ix->v[i].step, d = s > bstep ? s - bstep : bstep - s;
		if (!strcmp(ix->v[i].run, run) && spool_nearer(s, d, best, dist) &&
		    spool_index_nearest(ix, "base", s) == bstep) {
			best = s;
			dist = d;
		}
	}
	return best;
}

static void test_alignment_random(void)
{
	struct spool_rules rules = { .tolerance = 0 };
	struct spool_index ix;
	long cases = 0, bad = 0, moved = 0;

	rng_state = 0x5eed;
	for (int round = 0; round < 300; round++) {
		spool_index_init(&ix, dir, &rules);
		ix.rules.tolerance = (int64_t)(rng_next() % 12);
		for (int k = 0, n = 1 + (int)(rng_next() % 8); k < n; k++)
			spool_index_add(&ix, "base", (int64_t)(rng_next() % 60), 1);
		for (int k = 0, n = 1 + (int)(rng_next() % 10); k < n; k++)
			spool_index_add(&ix, "fa", (int64_t)(rng_next() % 60), 1);
		for (int64_t b = 0; b < 60; b++) {
			if (!spool_index_has(&ix, "base", b))
				continue;
			cases++;
			bad += spool_index_aligned(&ix, "fa", "base", b) != aligned_plain(&ix, "fa", b);
			int64_t prev, next;
			spool_index_neighbours(&ix, "base", b, &prev, &next);
			moved += prev >= 0 && spool_index_between(&ix, "fa", b, prev);
		}
		spool_index_release(&ix);
	}
	CHECK(cases > 1000 && bad == 0, "aligned by the neighbours = the rule stated plainly: %ld of %ld differ",
	      bad, cases);
	CHECK(moved > 0, "some cases have a run step within the tolerance of two baseline steps (%ld)", moved);
}

static void test_retention_rules(void)
{
	struct spool_rules rules = { .keep_every = 10 };
	struct spool_index ix;
	char why[128] = "";

	spool_index_init(&ix, dir, &rules);
	spool_index_add(&ix, "base", 10, 100);
	spool_index_add(&ix, "base", 15, 100);
	spool_index_add(&ix, "fa", 15, 100);
	long i = spool_retention_next(&ix, "base", 15, 1, why, sizeof(why));
	CHECK(i >= 0 && !strcmp(ix.v[i].run, "base") && ix.v[i].step == 15 && strstr(why, "every (10)"),
	      "every 10: base's step 15 goes (%s)", why);
	CHECK(spool_retention_next(&ix, "base", 10, 1, why, sizeof(why)) == -1,
	      "a multiple of 10 stays");
	CHECK(spool_retention_next(&ix, "fa", 15, 0, why, sizeof(why)) == -1,
	      "a candidate's step 15 stays: candidates are never thinned");
	spool_index_release(&ix);

	/* disk budget: a:1 a:2 a:3 b:1, 100 bytes each, within 250 */
	rules = (struct spool_rules){ .disk_budget = 250 };
	spool_index_init(&ix, dir, &rules);
	spool_index_add(&ix, "a", 2, 100);
	spool_index_add(&ix, "b", 1, 100);
	spool_index_add(&ix, "a", 3, 100);
	spool_index_add(&ix, "a", 1, 100);
	i = spool_retention_next(&ix, "a", 3, 1, why, sizeof(why));
	CHECK(i >= 0 && !strcmp(ix.v[i].run, "a") && ix.v[i].step == 1 && strstr(why, "disk_budget (250"),
	      "over the budget: the oldest step goes, a:1, not b:1, b's latest (%s)", why);
	CHECK(ix.v[i].step == 1, "(step %lld)", (long long)ix.v[i].step);
	ix.rules.disk_budget = 50;
	int dropped = 0, latest_kept = 1;
	while ((i = spool_retention_next(&ix, "a", 3, 1, why, sizeof(why))) >= 0 && dropped < 10) {
		latest_kept &= !(ix.v[i].step == 3 || !strcmp(ix.v[i].run, "b"));
		ix.bytes -= ix.v[i].bytes;	/* as spool_drop would, without the WAL */
		free(ix.v[i].run);
		ix.v[i] = ix.v[--ix.n];
		dropped++;
	}
	CHECK(dropped == 2 && latest_kept && ix.n == 2 && ix.bytes == 200,
	      "within 50 bytes: a:1 and a:2 go, a:3 and b:1 (each run's latest) stay over the budget "
	      "(%d dropped, %zu left)", dropped, ix.n);
	ix.rules.disk_budget = 0;
	spool_index_add(&ix, "a", 4, 1000000);
	CHECK(spool_retention_next(&ix, "a", 4, 1, why, sizeof(why)) == -1, "no budget: nothing goes");
	spool_index_release(&ix);
}

static int n_drops;
static char drops[8][128];

static int collect_drops(void *ctx, const char *payload, size_t len)
{
	struct record r;
	(void)ctx;
	if (record_decode(payload, len, &r, NULL, 0) == 0 && r.kind == RECORD_DROP && n_drops < 8)
		snprintf(drops[n_drops++], sizeof(drops[0]), "%s:%lld", r.run, (long long)r.step);
	record_release(&r);
	return 0;
}

static void test_retain(void)
{
	char waldir[512], err[512];
	struct spool_rules rules = { .keep_every = 10, .disk_budget = 250 };
	struct spool_index ix;
	struct wal *wal;

	snprintf(waldir, sizeof(waldir), "%s/wal", dir);
	mkdir(waldir, 0700);
	CHECK(wal_open(waldir, 0, collect_drops, NULL, &wal, err, sizeof(err)) == 0, "a WAL (%s)", err);
	make_file("base", 10, "h5", 100);
	make_file("base", 15, "h5", 100);
	make_file("base", 20, "h5", 100);
	make_file("fa", 15, "h5", 100);
	spool_index_init(&ix, dir, &rules);
	spool_index_add(&ix, "base", 10, -1);
	spool_index_add(&ix, "base", 15, -1);
	spool_index_add(&ix, "base", 20, -1);
	spool_index_add(&ix, "fa", 15, -1);
	CHECK(ix.bytes == 400, "sizes read from the files: %llu bytes", (unsigned long long)ix.bytes);
	budget_drops[0] = 0;
	size_t n = spool_retain(&ix, wal, "base", 15, 1, told_drop, NULL);
	CHECK(n == 2 && !exists("base", 15, "h5") && !exists("base", 10, "h5") && exists("base", 20, "h5") &&
	      exists("fa", 15, "h5"), "retain: base:15 (every) and base:10 (budget) removed; %zu drops", n);
	CHECK(!strcmp(budget_drops, "base:10;"), "the budget's drop is told, the thinning not (%s)", budget_drops);
	CHECK(ix.n == 2 && ix.bytes == 200, "the index follows: %zu entries, %llu bytes", ix.n,
	      (unsigned long long)ix.bytes);
	wal_close(&wal);
	n_drops = 0;
	CHECK(wal_open(waldir, 0, collect_drops, NULL, &wal, err, sizeof(err)) == 0 && n_drops == 2 &&
	      !strcmp(drops[0], "base:15") && !strcmp(drops[1], "base:10"),
	      "each drop is in the WAL, in order (%d: %s %s)", n_drops, drops[0], drops[1]);
	wal_close(&wal);
	spool_index_release(&ix);
}

static int durable_1(void *ctx, const char *run, int64_t step)
{
	(void)ctx;
	return !strcmp(run, "s") && step == 1;
}

static void test_sweep(void)
{
	make_file("s", 1, "h5", 4);
	make_file("s", 2, "h5", 4);
	make_file("s", 3, "h5.tmp", 4);
	make_file("s", 4, "h5.orphan", 4);
	spool_sweep(dir, 1, durable_1, NULL);
	CHECK(exists("s", 1, "h5") && !exists("s", 2, "h5") && exists("s", 2, "h5.orphan") &&
	      !exists("s", 3, "h5.tmp") && exists("s", 4, "h5.orphan"),
	      "--force: a file with no record is kept as .orphan, a .tmp removed, old orphans left");
	make_file("s", 5, "h5", 4);
	spool_sweep(dir, 0, durable_1, NULL);
	CHECK(exists("s", 1, "h5") && !exists("s", 5, "h5") && exists("s", 2, "h5.orphan"),
	      "without --force: a file with no record is removed, the durable one stays");
	CHECK(spool_remove(dir, "s", 1) == 1 && !exists("s", 1, "h5") && spool_remove(dir, "s", 1) == 0,
	      "spool_remove: 1 removed, then 0 (none)");
	CHECK(spool_remove_run(dir, "s") == 2 && spool_remove_run(dir, "s") == -ENOENT,
	      "runs rm: the run's files (the orphans too) and directory go");
}

int main(void)
{
	log_level = LOG_ERR;	/* the drops' notices are expected here */
	if (!mkdtemp(dir)) {
		printf("not ok 1 - mkdtemp\n");
		return 1;
	}
	test_paths();
	test_alignment();
	test_alignment_random();
	test_retention_rules();
	test_retain();
	test_sweep();
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# cleanup failed\n");
	return tap_done();
}
