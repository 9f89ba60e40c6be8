/*
 * test_wal.c: the write-ahead log survives what a crash can do (a torn
 * last record, at every possible cut) and refuses what a crash cannot do
 * (damage with good records after it), unless forced. Its cuts are
 * fsync'd: this binary defines fsync and fdatasync itself, so the calls
 * wal.o makes come here and are recorded (then made, by syscall).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "logging.h"
#include "wal.h"

static char dir[] = "/tmp/wdrift-test-wal-XXXXXX";
static char seen[64][64];
static int n_seen;

static int collect(void *ctx, const char *payload, size_t len)
{
	(void)ctx;
	if (n_seen < 64)
		snprintf(seen[n_seen], sizeof(seen[0]), "%.*s", (int)len, payload);
	n_seen++;
	return 0;
}

static int open_replay(int force, struct wal **w, char *err)
{
	n_seen = 0;
	return wal_open(dir, force, collect, NULL, w, err, 512);
}

static void write_records(int n, int first)
{
	struct wal *w;
	char err[512], rec[64];
	open_replay(0, &w, err);
	for (int i = 0; i < n; i++) {
		snprintf(rec, sizeof(rec), "{\"t\":\"snapshot\",\"step\":%d}", first + i);
		wal_append(w, rec, strlen(rec));
	}
	wal_sync(w);
	wal_close(&w);
}

static void reset(void)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir '%s'", dir, dir);
	if (system(cmd) != 0)
		printf("# reset failed\n");
}

static off_t seg_size(unsigned seg)
{
	char p[256];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%06u.log", dir, seg);
	return stat(p, &st) == 0 ? st.st_size : -1;
}

/* What each fsync or fdatasync was called on: a directory, or a file's inode and size. */
static struct synced {
	int is_dir;
	ino_t ino;
	off_t size;
} syncs[64];
static int n_syncs;

static void note_sync(int fd)
{
	struct stat st;
	if (n_syncs < 64 && fstat(fd, &st) == 0)
		syncs[n_syncs] = (struct synced){ S_ISDIR(st.st_mode), st.st_ino, st.st_size };
	n_syncs++;
}

int fsync(int fd)
{
	note_sync(fd);
	return (int)syscall(SYS_fsync, fd);
}

int fdatasync(int fd)
{
	note_sync(fd);
	return (int)syscall(SYS_fdatasync, fd);
}

/* The index of the first sync of inode ino at size, after from; -1 if none. */
static int synced_at(int from, ino_t ino, off_t size)
{
	for (int i = from; i < n_syncs && i < 64; i++)
		if (!syncs[i].is_dir && syncs[i].ino == ino && syncs[i].size == size)
			return i;
	return -1;
}

static int dir_synced(int from, int to)
{
	for (int i = from; i < to && i < 64; i++)
		if (syncs[i].is_dir)
			return 1;
	return 0;
}

static ino_t inode_of(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_ino : 0;
}

static void test_replay(void)
{
	struct wal *w;
	char err[512];

	reset();
	CHECK(wal_bytes(dir) == 0 && wal_bytes("/nonexistent/wal") == 0, "wal_bytes: 0 with no segment, or no directory");
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 0, "a new log opens empty");
	wal_close(&w);
	write_records(5, 0);
	CHECK(wal_bytes(dir) > 5 * 20, "wal_bytes: the segments' bytes (%llu)", (unsigned long long)wal_bytes(dir));
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 5 && wal_records(w) == 5,
	      "5 records replay in order (%d)", n_seen);
	CHECK(!strcmp(seen[0], "{\"t\":\"snapshot\",\"step\":0}") &&
	      !strcmp(seen[4], "{\"t\":\"snapshot\",\"step\":4}"), "payloads intact");
	wal_close(&w);
	write_records(3, 5);
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 8, "appending after reopen: 8 records");
	wal_close(&w);
}

/* Cut the last record at every byte: each is a torn tail, recovered. */
static void test_torn_tail(void)
{
	struct wal *w;
	char err[512], p[256];
	int bad = 0;

	reset();
	write_records(3, 0);
	off_t full = seg_size(1);
	off_t rec = (full) / 3;	/* records have equal sizes here */
	snprintf(p, sizeof(p), "%s/000001.log", dir);
	for (off_t cut = full - rec + 1; cut < full; cut++) {
		reset();
		write_records(3, 0);
		if (truncate(p, cut) < 0)
			bad++;
		if (open_replay(0, &w, err) != 0 || n_seen != 2 || seg_size(1) != full - rec)
			bad++;
		wal_close(&w);
	}
	CHECK(!bad, "every cut of the last record (%lld cuts) recovers 2 records and truncates",
	      (long long)rec - 1);
	/* Zeros after the last record (a filesystem extended the file): torn. */
	reset();
	write_records(2, 0);
	int fd = open(p, O_WRONLY | O_APPEND);
	char zeros[100] = { 0 };
	if (fd < 0 || write(fd, zeros, sizeof(zeros)) != sizeof(zeros))
		printf("# append zeros failed\n");
	close(fd);
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 2, "trailing zeros are a torn tail");
	/* and the log goes on: a new record after recovery */
	wal_append(w, "x", 1);
	wal_close(&w);
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 3 && !strcmp(seen[2], "x"),
	      "appends after recovery replay");
	wal_close(&w);
}

/*
 * A truncation that is not fsync'd can come undone on power loss. The cut
 * is synced before wal_open returns, at the cut size; the warning names the
 * segment, the offset and the size. With --force, the copy of what follows
 * the damage (.corrupt) and the directory are synced before the cut.
 */
static void test_cut_synced(void)
{
	struct wal *w;
	char err[512], p[256], want[400], logp[300];

	reset();
	write_records(3, 0);
	snprintf(p, sizeof(p), "%s/000001.log", dir);
	off_t full = seg_size(1), rec = full / 3;
	if (truncate(p, full - 5) < 0)
		printf("# truncate failed\n");
	/* the warning, from the daemon's logger on stderr */
	snprintf(logp, sizeof(logp), "%s.stderr", dir);
	fflush(stderr);
	int saved = dup(2), lfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	dup2(lfd, 2);
	log_level = LOG_WARNING;
	n_syncs = 0;
	int r = open_replay(0, &w, err);
	int syncs_at_open = n_syncs;
	log_level = LOG_ERR;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(lfd);
	CHECK(r == 0 && n_seen == 2 && seg_size(1) == 2 * rec, "a torn tail is cut at %lld (%lld)",
	      (long long)(2 * rec), (long long)seg_size(1));
	int at = synced_at(0, inode_of(p), 2 * rec);
	CHECK(at >= 0 && at < syncs_at_open, "and the cut segment is fsync'd at its new size before "
	      "wal_open returns (%d syncs)", syncs_at_open);
	wal_close(&w);
	FILE *f = fopen(logp, "r");
	char text[1024] = "";
	size_t got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[got] = 0;
	if (f)
		fclose(f);
	unlink(logp);
	snprintf(want, sizeof(want), "'%s': torn record at offset %lld of %lld", p, (long long)(2 * rec),
		 (long long)(full - 5));
	CHECK(strstr(text, want) && strstr(text, "warning"), "with a warning naming the segment, the "
	      "offset and the size: %.*s", (int)strcspn(text, "\n"), text);

	/* --force: damage with a good record after it */
	reset();
	write_records(3, 0);
	int fd = open(p, O_RDWR);
	if (fd < 0 || pwrite(fd, "\x5a", 1, rec + 20) != 1)
		printf("# flip failed\n");
	close(fd);
	n_syncs = 0;
	r = open_replay(1, &w, err);
	syncs_at_open = n_syncs;
	char aside[300];
	snprintf(aside, sizeof(aside), "%s.corrupt", p);
	int kept = synced_at(0, inode_of(aside), 2 * rec);
	int cut = synced_at(0, inode_of(p), rec);
	CHECK(r == 0 && n_seen == 1 && kept >= 0 && cut > kept && cut < syncs_at_open &&
	      dir_synced(kept + 1, cut),
	      "--force: the .corrupt copy, then the directory, then the cut segment are fsync'd "
	      "(copy %d, cut %d, of %d syncs)", kept, cut, syncs_at_open);
	wal_close(&w);
}

static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	unsigned char c;
	if (fd < 0 || pread(fd, &c, 1, at) != 1) {
		printf("# flip failed\n");	/* c unread: write nothing back */
		if (fd >= 0)
			close(fd);
		return;
	}
	c ^= 0x5a;
	if (pwrite(fd, &c, 1, at) != 1)
		printf("# flip failed\n");
	close(fd);
}

static void test_corruption(void)
{
	struct wal *w;
	char err[512], p[256];

	reset();
	write_records(5, 0);
	snprintf(p, sizeof(p), "%s/000001.log", dir);
	off_t rec = seg_size(1) / 5;
	flip_byte(p, rec + 20);	/* inside record 2's payload */
	CHECK(open_replay(0, &w, err) == -1 && !w, "damage with good records after it is refused");
	CHECK(strstr(err, "000001.log") && strstr(err, "offset") && strstr(err, "--force"),
	      "the error names the segment, the offset and --force: %s", err);
	char want[32];
	snprintf(want, sizeof(want), "offset %lld", (long long)rec);
	CHECK(strstr(err, want) != NULL, "at the damaged record's offset (%s)", want);
	CHECK(seg_size(1) == 5 * rec, "a refused open changes nothing");
	CHECK(open_replay(1, &w, err) == 0 && n_seen == 1, "--force keeps the record before it");
	wal_close(&w);
	struct stat cst;
	char aside[300];
	snprintf(aside, sizeof(aside), "%s.corrupt", p);
	CHECK(stat(aside, &cst) == 0 && cst.st_size == 4 * rec,
	      "and moves the rest of the segment aside, not only later segments (%lld bytes)",
	      (long long)(stat(aside, &cst) == 0 ? cst.st_size : -1));
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 1, "and then opens cleanly");
	wal_close(&w);
}

static void test_segments(void)
{
	struct wal *w;
	char err[512], rec[64];

	reset();
	open_replay(0, &w, err);
	wal_set_segment_bytes(w, 200);
	for (int i = 0; i < 20; i++) {
		snprintf(rec, sizeof(rec), "{\"t\":\"result\",\"i\":%d}", i);
		wal_append(w, rec, strlen(rec));
	}
	wal_close(&w);
	CHECK(seg_size(2) > 0 && seg_size(3) > 0, "records roll over into new segments");
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 20 &&
	      !strcmp(seen[19], "{\"t\":\"result\",\"i\":19}"), "replay crosses segments in order");
	wal_close(&w);
	/* damage in an earlier segment is never a torn tail */
	char p[256];
	snprintf(p, sizeof(p), "%s/000001.log", dir);
	if (truncate(p, seg_size(1) - 3) < 0)
		printf("# truncate failed\n");
	CHECK(open_replay(0, &w, err) == -1 && strstr(err, "more segments"),
	      "a cut in a segment that is not the last is refused: %s", err);
	CHECK(open_replay(1, &w, err) == 0, "--force recovers");
	wal_close(&w);
}

/*
 * A write that fails part-way (disk full; here the file size limit) must
 * not leave half a record behind: the records appended after it would make
 * it "damage with good records after it", and the daemon would refuse to
 * start. The failed record is not durable (not acked); the log goes on.
 */
static void test_failed_write(void)
{
	struct wal *w;
	char err[512], rec[64];
	struct rlimit old, lim;

	reset();
	write_records(2, 0);
	off_t size = seg_size(1);
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 2, "2 records");
	signal(SIGXFSZ, SIG_IGN);
	getrlimit(RLIMIT_FSIZE, &old);
	lim = old;
	lim.rlim_cur = (rlim_t)size + 20;	/* room for part of the next record only */
	setrlimit(RLIMIT_FSIZE, &lim);
	snprintf(rec, sizeof(rec), "{\"t\":\"snapshot\",\"step\":%d}", 2);
	int r = wal_append(w, rec, strlen(rec));
	setrlimit(RLIMIT_FSIZE, &old);
	CHECK(r < 0, "an append that cannot be written whole fails (%d)", r);
	CHECK(seg_size(1) == size, "and leaves nothing of itself in the segment (%lld, was %lld)",
	      (long long)seg_size(1), (long long)size);
	snprintf(rec, sizeof(rec), "{\"t\":\"snapshot\",\"step\":%d}", 3);
	CHECK(wal_append(w, rec, strlen(rec)) == 0 && wal_sync(w) == 0, "the next append succeeds");
	wal_close(&w);
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 3 && !strcmp(seen[2], rec),
	      "the log opens with the 3 whole records (%s)", n_seen == 3 ? "" : err);
	wal_close(&w);
}

/*
 * A new segment that cannot be made (a full disk; here, a directory in
 * its place) fails that one append: the old segment stays open, and
 * appends work again once the new one can be made. (Issue 11: the old
 * segment was closed first, and every append after failed, EBADF, until a
 * restart.)
 */
static void test_rotate_fails(void)
{
	struct wal *w;
	char err[512], rec[3][64], blocker[300];
	int r;

	reset();
	CHECK(open_replay(0, &w, err) == 0, "an empty log: %s", err);
	wal_set_segment_bytes(w, 60);
	for (int i = 0; i < 3; i++)
		snprintf(rec[i], sizeof(rec[i]), "{\"t\":\"snapshot\",\"step\":%d,\"pad\":\"xxxxxxxxxxxx\"}", i);
	CHECK(wal_append(w, rec[0], strlen(rec[0])) == 0, "a first record");
	snprintf(blocker, sizeof(blocker), "%s/000002.log", dir);
	mkdir(blocker, 0700);
	r = wal_append(w, rec[1], strlen(rec[1]));
	CHECK(r == -EISDIR, "an append whose new segment cannot be opened fails (%d)", r);
	rmdir(blocker);
	CHECK(wal_append(w, rec[2], strlen(rec[2])) == 0 && wal_sync(w) == 0,
	      "the next one, once the segment can be made, succeeds");
	wal_close(&w);
	CHECK(open_replay(0, &w, err) == 0 && n_seen == 2 && !strcmp(seen[0], rec[0]) &&
	      !strcmp(seen[1], rec[2]), "the log opens with the 2 records appended (%d: %s)", n_seen, err);
	CHECK(seg_size(2) > 0, "the second in a segment of its own");
	wal_close(&w);
}

int main(void)
{
	log_level = LOG_ERR;	/* the torn-tail warnings are expected here */
	if (!mkdtemp(dir)) {
		printf("not ok 1 - mkdtemp\n");
		return 1;
	}
	test_replay();
	test_torn_tail();
	test_cut_synced();
	test_corruption();
	test_segments();
	test_failed_write();
	test_rotate_fails();
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# cleanup failed\n");
	return tap_done();
}
