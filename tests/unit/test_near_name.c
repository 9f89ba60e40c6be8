/*
 * test_near_name.c: lib/near_name.c, the one "did you mean" of the config,
 * the publisher and the CLI. The distance (a swap of neighbours is one
 * edit; names over 64 bytes are never near), the bounds of wd_name_near
 * (1, 2, 3 edits for names of up to 4, 10, more bytes; an equal name is no
 * suggestion), and wd_suggest_socket over real socket files in a temporary
 * directory: the nearest socket, ties to the first in byte order, the
 * directory as the endpoint spells it, never a file that is not a socket,
 * never a far name (even the directory's only socket), nothing when the
 * suggestion would not fit; and a typo in the socket's directory, which is
 * not there: the near directory that holds a socket of the same name;
 * and wd_suggest_in_dir, the sockets of a directory an endpoint names.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "near_name.h"

static size_t dist(const char *a, const char *b)
{
	return wd_name_distance(a, strlen(a), b, strlen(b));
}

/* A bound AF_UNIX socket file at dir/name (left open: closed at exit). */
static int make_socket(const char *dir, const char *name)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", dir, name);
	return fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ? 0 : -1;
}

static void remove_tree(const char *dir, const char *const *names, size_t n)
{
	char p[512];

	for (size_t i = 0; i < n; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		if (unlink(p) < 0)	/* a directory among them (run/, rum/): left behind, every run, before */
			rmdir(p);
	}
	rmdir(dir);
}

/* wd_suggest_socket of the absolute endpoint ipc://TOP/REL into out, and into want "; did you mean
 * 'ipc://TOP/MEANT'?" (MEANT NULL: ""): whether out is want. */
static int suggests(const char *top, const char *rel, const char *meant, char *out, size_t len)
{
	char full[512], ep[600], want[600] = "";

	snprintf(full, sizeof(full), "%s/%s", top, rel);
	snprintf(ep, sizeof(ep), "ipc://%s", full);
	wd_suggest_socket(ep, full, out, len);
	if (meant)
		snprintf(want, sizeof(want), "; did you mean 'ipc://%s/%s'?", top, meant);
	return !strcmp(out, want);
}

int main(void)
{
	CHECK(dist("ingest", "ingest") == 0, "equal names: 0");
	CHECK(dist("ingest", "ingset") == 1, "a swap of neighbours is one edit");
	CHECK(dist("control", "control2") == 1 && dist("", "abc") == 3, "an insertion is one edit each");
	CHECK(dist("kitten", "sitting") == 3, "kitten/sitting: 3");
	char long_a[66], long_b[66];
	memset(long_a, 'a', 65);
	long_a[65] = 0;
	memcpy(long_b, long_a, sizeof(long_b));
	long_b[0] = 'b';
	CHECK(dist(long_a, long_b) == SIZE_MAX && dist(long_a + 1, long_b + 1) == 0,
	      "over 64 bytes: never near (SIZE_MAX); 64 bytes are measured");

	CHECK(wd_name_near("ab", "ab", 2) == SIZE_MAX, "an equal name is no suggestion");
	CHECK(wd_name_near("fa", "fb", 2) == 1 && wd_name_near("fa", "xy", 2) == SIZE_MAX,
	      "up to 4 bytes: 1 edit");
	CHECK(wd_name_near("lowpre", "lowprec", 7) == 1 && wd_name_near("ux-zz", "ux-af", 5) == 2 &&
	      wd_name_near("abcdefgh", "abcdxyzh", 8) == SIZE_MAX, "up to 10 bytes: 2 edits");
	CHECK(wd_name_near("memory.budjet", "memory.budget", 13) == 1 &&
	      wd_name_near("memory.bxxxet", "memory.budget", 13) == 3 &&
	      wd_name_near("memory.xxxxet", "memory.budget", 13) == SIZE_MAX, "beyond: 3 edits");
	CHECK(wd_name_near("memory.budget", "memory.budget.x", 13) == SIZE_MAX &&
	      wd_name_near("memory.budget", "memory.budget.x", 15) == 2,
	      "cand is cand[0..len): its first 13 bytes equal typed, all 15 are 2 edits away");

	char dir[] = "/tmp/wdrift-test-near-XXXXXX";
	static const char *const files[] = { "ingest.sock", "injest.sock", "control.sock", "events.txt",
					     "far.sock" };
	CHECK(mkdtemp(dir) != NULL, "a temporary directory");
	int ok = make_socket(dir, "ingest.sock") == 0 && make_socket(dir, "injest.sock") == 0 &&
		 make_socket(dir, "control.sock") == 0;
	char plain[512];
	snprintf(plain, sizeof(plain), "%s/events.txt", dir);
	FILE *f = fopen(plain, "w");
	ok = ok && f && fclose(f) == 0;
	CHECK(ok, "three socket files and a plain file in it");

	char ep[600], full[512], out[600];
	snprintf(full, sizeof(full), "%s/ingset.sock", dir);
	snprintf(ep, sizeof(ep), "ipc://%s", full);
	wd_suggest_socket(ep, full, out, sizeof(out));
	char want[600];
	snprintf(want, sizeof(want), "; did you mean 'ipc://%s/ingest.sock'?", dir);
	CHECK(!strcmp(out, want), "ingset.sock: ingest.sock, 1 edit, before injest.sock, 2 (%s)", out);

	snprintf(full, sizeof(full), "%s/ingxst.sock", dir);
	wd_suggest_socket("ipc://./d/ingxst.sock", full, out, sizeof(out));
	CHECK(!strcmp(out, "; did you mean 'ipc://./d/ingest.sock'?"),
	      "ingxst.sock: ingest.sock and injest.sock both 1 edit: the first in byte order, the "
	      "directory as typed (%s)", out);

	snprintf(full, sizeof(full), "%s/events.txx", dir);
	wd_suggest_socket("ipc://x/events.txx", full, out, sizeof(out));
	CHECK(out[0] == 0, "events.txt is near, but not a socket: nothing (%s)", out);

	snprintf(full, sizeof(full), "%s/metrics.sock", dir);
	wd_suggest_socket("ipc://x/metrics.sock", full, out, sizeof(out));
	CHECK(out[0] == 0, "a name near none of them: nothing (%s)", out);

	snprintf(full, sizeof(full), "%s/ingset.sock", dir);
	wd_suggest_socket("ipc://x/ingset.sock", full, out, 20);
	CHECK(out[0] == 0, "a suggestion that does not fit: none, not one cut short");

	wd_suggest_socket("ipc://x/ingset.sock", "/nonexistent-wdrift-dir/ingset.sock", out, sizeof(out));
	CHECK(out[0] == 0, "no such directory: nothing");
	remove_tree(dir, files, 5);

	/* the directory's only socket, of a far name: the control socket beside a tcp:// ingest */
	char lone[] = "/tmp/wdrift-test-near-XXXXXX";
	CHECK(mkdtemp(lone) && make_socket(lone, "control.sock") == 0, "a directory with one socket");
	snprintf(full, sizeof(full), "%s/ingest.sock", lone);
	wd_suggest_socket("ipc://x/ingest.sock", full, out, sizeof(out));
	CHECK(out[0] == 0, "its only socket, of a far name, is not offered (%s)", out);
	remove_tree(lone, files, 5);

	/* a typo in the socket's directory, which is not there: the same name in the one beside it */
	char top[] = "/tmp/wdrift-test-near-XXXXXX", sub[600];
	static const char *const subs[] = { "run/ingest.sock", "rum/other.sock", "run", "rum", "plain" };
	CHECK(mkdtemp(top) != NULL, "a temporary directory for directories");
	snprintf(sub, sizeof(sub), "%s/run", top);
	ok = mkdir(sub, 0700) == 0 && make_socket(sub, "ingest.sock") == 0;
	snprintf(sub, sizeof(sub), "%s/rum", top);
	ok = ok && mkdir(sub, 0700) == 0 && make_socket(sub, "other.sock") == 0;
	snprintf(sub, sizeof(sub), "%s/plain", top);
	f = fopen(sub, "w");
	CHECK(ok && f && fclose(f) == 0, "run/ingest.sock, rum/other.sock and a plain file");

	snprintf(full, sizeof(full), "%s/rn/ingest.sock", top);
	snprintf(ep, sizeof(ep), "ipc://%s", full);
	wd_suggest_socket(ep, full, out, sizeof(out));
	snprintf(want, sizeof(want), "; did you mean 'ipc://%s/run/ingest.sock'?", top);
	CHECK(!strcmp(out, want), "rn/ingest.sock, no rn/: run/, which holds ingest.sock; not rum/, "
	      "which does not (%s)", out);

	wd_suggest_socket("ipc://./rn/ingest.sock", full, out, sizeof(out));
	CHECK(!strcmp(out, "; did you mean 'ipc://./run/ingest.sock'?"), "the endpoint's spelling "
	      "kept around the directory (%s)", out);
	wd_suggest_socket("ipc://rn/ingest.sock", full, out, sizeof(out));
	CHECK(!strcmp(out, "; did you mean 'ipc://run/ingest.sock'?"), "a relative path with no "
	      "./ (%s)", out);

	snprintf(full, sizeof(full), "%s/rm/other.sock", top);
	snprintf(ep, sizeof(ep), "ipc://%s", full);
	wd_suggest_socket(ep, full, out, sizeof(out));
	snprintf(want, sizeof(want), "; did you mean 'ipc://%s/rum/other.sock'?", top);
	CHECK(!strcmp(out, want), "rm/other.sock: rum/, the near directory that holds it (%s)", out);

	snprintf(full, sizeof(full), "%s/rn/control.sock", top);
	snprintf(ep, sizeof(ep), "ipc://%s", full);
	wd_suggest_socket(ep, full, out, sizeof(out));
	CHECK(out[0] == 0, "no near directory holds control.sock: nothing (%s)", out);

	snprintf(full, sizeof(full), "%s/plian/ingest.sock", top);
	snprintf(ep, sizeof(ep), "ipc://%s", full);
	wd_suggest_socket(ep, full, out, sizeof(out));
	CHECK(out[0] == 0, "a near name that is a file, not a directory: nothing (%s)", out);

	snprintf(full, sizeof(full), "%s/xyz/ingest.sock", top);
	snprintf(ep, sizeof(ep), "ipc://%s", full);
	wd_suggest_socket(ep, full, out, sizeof(out));
	CHECK(out[0] == 0, "a directory name near none: nothing (%s)", out);

	snprintf(full, sizeof(full), "%s/rn/ingest.sock", top);
	wd_suggest_socket("ipc://x/rm/ingest.sock", full, out, sizeof(out));
	CHECK(out[0] == 0, "the endpoint spells the directory otherwise than the path looked at: "
	      "nothing rather than a wrong splice (%s)", out);

	/* near misses far in letters (a trial's): ".sock" left out, a directory left out */
	CHECK(suggests(top, "run/ingest", "run/ingest.sock", out, sizeof(out)),
	      "run/ingest: ingest.sock beside it (%s)", out);
	snprintf(full, sizeof(full), "%s/ingest.sock", top);
	wd_suggest_socket("ipc://./ingest.sock", full, out, sizeof(out));
	CHECK(!strcmp(out, "; did you mean 'ipc://./run/ingest.sock'?"), "./ingest.sock: run/ingest.sock, "
	      "one directory below, the endpoint's spelling kept (%s)", out);
	CHECK(suggests(top, "other.sock", "rum/other.sock", out, sizeof(out)),
	      "other.sock: rum/other.sock, the one subdirectory holding it (%s)", out);
	snprintf(sub, sizeof(sub), "%s/run", top);
	CHECK(make_socket(sub, "other.sock") == 0, "a second other.sock, in run/");
	CHECK(suggests(top, "other.sock", NULL, out, sizeof(out)),
	      "two subdirectories holding it: neither guessed (%s)", out);
	snprintf(sub, sizeof(sub), "%s/run/other.sock", top);
	unlink(sub);
	remove_tree(top, subs, 5);

	/* an endpoint naming the daemon's run/ directory (an ops trial's): the sockets it holds */
	char run[] = "/tmp/wdrift-test-near-run-XXXXXX", runep[64], held[512];
	static const char *const socks[] = { "ingest.sock", "control.sock", "events.sock", "zz.sock", "aa.sock",
					     "note.txt" };
	CHECK(mkdtemp(run) != NULL, "a temporary run/ directory");
	snprintf(runep, sizeof(runep), "ipc://%s", run);
	wd_suggest_in_dir(runep, run, NULL, out, sizeof(out));
	CHECK(out[0] == 0, "no socket in it: nothing (%s)", out);
	snprintf(plain, sizeof(plain), "%s/note.txt", run);
	f = fopen(plain, "w");
	CHECK(f && fclose(f) == 0 && make_socket(run, "ingest.sock") == 0, "a file and one socket in it");
	wd_suggest_in_dir(runep, run, NULL, out, sizeof(out));
	snprintf(held, sizeof(held), "; it holds a socket: did you mean '%s/ingest.sock'?", runep);
	CHECK(!strcmp(out, held), "one socket, not the file: that one (%s)", out);
	CHECK(make_socket(run, "control.sock") == 0 && make_socket(run, "events.sock") == 0, "three sockets");
	wd_suggest_in_dir(runep, run, NULL, out, sizeof(out));
	snprintf(held, sizeof(held), "; it holds sockets: did you mean '%s/control.sock', '%s/events.sock' or "
		 "'%s/ingest.sock'?", runep, runep, runep);
	CHECK(!strcmp(out, held), "three: each, by name (%s)", out);
	CHECK(make_socket(run, "zz.sock") == 0, "a fourth");
	wd_suggest_in_dir(runep, run, NULL, out, sizeof(out));
	CHECK(strstr(out, "' or '") && !strcmp(out + strlen(out) - strlen(" (and 1 other)?"), " (and 1 other)?") &&
	      !strstr(out, "zz.sock"), "four: the first three by name, the rest counted (%s)", out);
	CHECK(make_socket(run, "aa.sock") == 0, "a fifth, first by name, made last");
	wd_suggest_in_dir(runep, run, NULL, out, sizeof(out));
	snprintf(held, sizeof(held), "; it holds sockets: did you mean '%s/aa.sock', '%s/control.sock' or "
		 "'%s/events.sock' (and 2 others)?", runep, runep, runep);
	CHECK(!strcmp(out, held), "five: the first three by name, whatever the directory's order (%s)", out);
	char slashed[80];
	snprintf(slashed, sizeof(slashed), "%s//", runep);
	wd_suggest_in_dir(slashed, run, NULL, out, sizeof(out));
	CHECK(strstr(out, held + strlen("; it holds sockets: did you mean ")) != NULL,
	      "an endpoint ending in '/': joined without '//' (%s)", out);
	wd_suggest_in_dir(runep, run, NULL, out, 40);
	CHECK(out[0] == 0, "too long for out: nothing rather than a name cut short (%s)", out);
	/* the caller's own kind, when there: that one alone (a trial's publisher was offered control first) */
	wd_suggest_in_dir(runep, run, "ingest", out, sizeof(out));
	snprintf(held, sizeof(held), "; it holds a socket named for ingest: did you mean '%s/ingest.sock'?", runep);
	CHECK(!strcmp(out, held), "want ingest: ingest.sock alone (%s)", out);
	wd_suggest_in_dir(runep, run, "metrics", out, sizeof(out));
	CHECK(!strncmp(out, "; it holds sockets: did you mean", 32) && strstr(out, "(and 2 others)?"),
	      "want a kind it does not hold: the listing (%s)", out);
	remove_tree(run, socks, 6);
	return tap_done();
}
