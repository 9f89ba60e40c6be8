/*
 * test_keys.c: CURVE key files (lib/keys.c): what `wdrift keygen` writes
 * reads back, and every malformed or unsafe file is refused with a line
 * that names the file, the line and what is wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "harness.h"
#include "keys.h"

static char dir[] = "/tmp/wdrift-test-keys-XXXXXX";
static char pub[WD_KEY_Z85 + 1], sec[WD_KEY_Z85 + 1];

static const char *put(const char *name, const char *text, mode_t mode)
{
	static char path[4][256];
	static int next;
	char *p = path[next++ % 4];
	FILE *f;

	snprintf(p, 256, "%s/%s", dir, name);
	f = fopen(p, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
	chmod(p, mode);
	return p;
}

static void good_files(void)
{
	char text[512], p[WD_KEY_Z85 + 1], s[WD_KEY_Z85 + 1], err[600] = "";	/* written only on failure */
	const char *path;

	snprintf(text, sizeof(text), "# a comment\n\npublic-key: \"%s\"\r\n  secret-key:   %s  \n", pub, sec);
	path = put("pair", text, 0600);
	CHECK(wd_keyfile_read(path, p, s, err, sizeof(err)) == 0 && !strcmp(p, pub) && !strcmp(s, sec),
	      "a key pair file reads back, quoted or not, with comments, blank lines and CRLF: %s", err);
	CHECK(wd_keyfile_read(path, p, NULL, err, sizeof(err)) == 0 && !strcmp(p, pub),
	      "its public key alone: %s", err);
	chmod(path, 0640);
	CHECK(wd_keyfile_read(path, p, s, err, sizeof(err)) == 0, "group-readable (a daemon's group) is fine");
	snprintf(text, sizeof(text), "public-key: %s\n", pub);
	path = put("pub", text, 0644);
	CHECK(wd_key_public(path, p, err, sizeof(err)) == 0 && !strcmp(p, pub),
	      "wd_key_public: a .pub file: %s", err);
	CHECK(wd_key_public(pub, p, err, sizeof(err)) == 0 && !strcmp(p, pub), "wd_key_public: a Z85 key");
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * A FIFO given as a key file (red team, t28): open() for reading waited
 * forever for a writer, so `wdrift status --server-key FIFO` and
 * wdrift.Publisher(server_key=FIFO) hung. It is refused at once, named,
 * and so is it through wd_key_public and wd_client_keys_load, which add
 * the option's name. The alarm turns a regression into a failure, not a
 * hung test run.
 */
static void fifo_refused(void)
{
	char path[256], err[600] = "", p[WD_KEY_Z85 + 1], s[WD_KEY_Z85 + 1], want[300];
	struct wd_client_keys k;
	double t0 = mono();

	snprintf(path, sizeof(path), "%s/fifo.pub", dir);
	if (mkfifo(path, 0600) < 0) {
		CHECK(0, "mkfifo %s", path);
		return;
	}
	alarm(10);
	snprintf(want, sizeof(want), "%s: a FIFO, not a regular file", path);
	CHECK(wd_keyfile_read(path, p, NULL, err, sizeof(err)) == -1 && !strncmp(err, want, strlen(want)),
	      "a FIFO as a public key file is refused, named: %s", err);
	CHECK(wd_keyfile_read(path, p, s, err, sizeof(err)) == -1 && !strncmp(err, want, strlen(want)),
	      "and as a key pair file (the daemon's auth.server_key): %s", err);
	CHECK(wd_key_public(path, p, err, sizeof(err)) == -1 && !strncmp(err, want, strlen(want)),
	      "wd_key_public: %s", err);
	unsetenv("WDRIFT_SERVER_KEY");
	unsetenv("WDRIFT_KEY");
	CHECK(wd_client_keys_load_as(path, path, "server_key=", "key=", &k, err, sizeof(err)) == -1 &&
	      !strncmp(err, "server_key=: ", 13) && strstr(err, want), "with the option's name: %s", err);
	alarm(0);
	CHECK(mono() - t0 < 2.0, "at once, not waiting for a writer (%.3f s)", mono() - t0);
	unlink(path);
}

struct bad {
	const char *text;
	const char *why;	/* a substring of the error, after the path */
	int secret;		/* read with the secret key */
	mode_t mode;
};

static void bad_files(void)
{
	char pk[80], both[200], mism[200], twice[200], nul[64];
	char other_pub[WD_KEY_Z85 + 1], other_sec[WD_KEY_Z85 + 1];

	zmq_curve_keypair(other_pub, other_sec);
	snprintf(pk, sizeof(pk), "public-key: %s\n", pub);
	snprintf(both, sizeof(both), "public-key: %s\nsecret-key: %s\n", pub, sec);
	snprintf(mism, sizeof(mism), "public-key: %s\nsecret-key: %s\n", pub, other_sec);
	snprintf(twice, sizeof(twice), "public-key: %s\npublic-key: %s\n", pub, pub);
	const struct bad bad[] = {
		{ "", "no public-key line: not a wdrift key file", 0, 0644 },
		{ "# only a comment\n", "no public-key line", 0, 0644 },
		{ "hello\n", ":1: expected 'public-key: KEY' or 'secret-key: KEY'", 0, 0644 },
		{ "public-key: abc\n", ":1: public-key: expected 40 characters of Z85 (as wdrift keygen writes), not 3", 0, 0644 },
		{ "public-key: \"\"\n", ":1: public-key: expected 40 characters of Z85", 0, 0644 },
		{ "public-key: 0000000000000000000000000000000000000000x\n", "not 41", 0, 0644 },
		{ "public-key: 000000000000000000000000000000000000000\"\n", "expected 40 characters", 0, 0644 },
		{ "\n\nprivate-key: x\n", ":3: unknown key 'private-key' (expected public-key or secret-key)", 0, 0644 },
		{ twice, ":2: public-key given twice", 0, 0644 },
		{ pk, "no secret-key line: a public key file, where a key pair file is needed", 1, 0600 },
		{ mism, "the public key is not the secret key's", 1, 0600 },
		{ both, "mode 0644 lets every user read this secret key: chmod 600", 1, 0644 },
		{ both, "mode 0604 lets every user read", 1, 0604 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char p[WD_KEY_Z85 + 1], s[WD_KEY_Z85 + 1], err[600] = "", name[32];
		snprintf(name, sizeof(name), "bad%zu", i);
		const char *path = put(name, bad[i].text, bad[i].mode);
		int r = wd_keyfile_read(path, p, bad[i].secret ? s : NULL, err, sizeof(err));
		CHECK(r == -1 && !strncmp(err, path, strlen(path)) && strstr(err, bad[i].why) &&
		      !strchr(err, '\n'), "bad #%zu: want '%s', got '%s'", i, bad[i].why, err);
	}

	/* not regular files, too large, NUL bytes, missing */
	char err[600] = "", p[WD_KEY_Z85 + 1];
	CHECK(wd_keyfile_read(dir, p, NULL, err, sizeof(err)) == -1 && strstr(err, "not a regular file"),
	      "a directory: %s", err);
	fifo_refused();
	CHECK(wd_keyfile_read("/nonexistent/k", p, NULL, err, sizeof(err)) == -1 &&
	      !strcmp(err, "/nonexistent/k: cannot open: No such file or directory"), "a missing file: %s", err);
	{	/* a typo of a key file beside it: named, as the full path the user typed */
		char typo[300], want[700];
		put("server.key", "x\n", 0600);
		snprintf(typo, sizeof(typo), "%s/server.kye", dir);
		snprintf(want, sizeof(want), "%s: cannot open: No such file or directory; did you mean "
			 "'%s/server.key'?", typo, dir);
		CHECK(wd_keyfile_read(typo, p, NULL, err, sizeof(err)) == -1 && !strcmp(err, want),
		      "a typo of a key file: did you mean it: %s", err);
		snprintf(typo, sizeof(typo), "%s/client.pub", dir);
		CHECK(wd_keyfile_read(typo, p, NULL, err, sizeof(err)) == -1 && !strstr(err, "did you mean"),
		      "a far name: no suggestion: %s", err);
		snprintf(typo, sizeof(typo), "%s/server.key", dir);
		unlink(typo);
	}
	char *big = malloc(70000);
	memset(big, '#', 69999);
	big[69999] = 0;
	CHECK(wd_keyfile_read(put("big", big, 0600), p, NULL, err, sizeof(err)) == -1 &&
	      strstr(err, "too large for a key file"), "70000 bytes: %s", err);
	free(big);
	const char *np = put("nul", "", 0600);
	FILE *f = fopen(np, "w");
	snprintf(nul, sizeof(nul), "public-key: %s", pub);
	fwrite(nul, 1, 12, f);
	fputc(0, f);
	fputs(pub, f);
	fclose(f);
	CHECK(wd_keyfile_read(np, p, NULL, err, sizeof(err)) == -1 && strstr(err, "holds a NUL byte"),
	      "a NUL byte: %s", err);
	CHECK(wd_key_public("nope-not-a-key", p, err, sizeof(err)) == -1 &&
	      strstr(err, "'nope-not-a-key' is neither a key (40 characters of Z85, or "
		     "z85:KEY) nor an existing key file"),
	      "wd_key_public: neither: %s", err);
	/* a typo of a .pub beside it: the file named, as --key's typos are (a trial) */
	char typo[512];
	const char *pubfile = put("server.pub", pub, 0644);
	snprintf(typo, sizeof(typo), "%.*sserver.pbu", (int)(strrchr(pubfile, '/') + 1 - pubfile), pubfile);
	CHECK(wd_key_public(typo, p, err, sizeof(err)) == -1 && strstr(err, "did you mean") &&
	      strstr(err, "server.pub"), "wd_key_public: a typo of a key file's name: %s", err);
	CHECK(!wd_key_is_z85("") && !wd_key_is_z85("short") && wd_key_is_z85(pub) &&
	      !wd_key_is_z85("000000000000000000000000000000000000000 ") &&
	      !wd_key_is_z85("0000000000000000000000000000000000000000\""), "wd_key_is_z85");
}

static void client_keys(void)
{
	char text[200], err[600] = "";
	struct wd_client_keys k;

	snprintf(text, sizeof(text), "public-key: %s\nsecret-key: %s\n", pub, sec);
	const char *pair = put("client", text, 0600);
	unsetenv("WDRIFT_SERVER_KEY");
	unsetenv("WDRIFT_KEY");
	CHECK(wd_client_keys_load(NULL, NULL, &k, err, sizeof(err)) == 0 && !k.on,
	      "no keys anywhere: a plain connection");
	CHECK(wd_client_keys_load(pub, pair, &k, err, sizeof(err)) == 0 && k.on &&
	      !strcmp(k.server, pub) && !strcmp(k.pub, pub) && !strcmp(k.sec, sec),
	      "both given: CURVE on: %s", err);
	CHECK(wd_client_keys_load(NULL, pair, &k, err, sizeof(err)) == -1 &&
	      strstr(err, "--key is given but not the server's public key"), "--key alone: %s", err);
	CHECK(wd_client_keys_load(pub, NULL, &k, err, sizeof(err)) == -1 &&
	      strstr(err, "--server-key is given but not this client's key pair"), "--server-key alone: %s", err);
	/* the secret key pasted for the key pair's file: said, never echoed (a trial's went to the log whole) */
	CHECK(wd_client_keys_load(pub, sec, &k, err, sizeof(err)) == -1 && !strstr(err, sec) &&
	      strstr(err, "--key takes this client's key pair file, from wdrift keygen, not a key"),
	      "a secret key given as --key: said, not shown: %s", err);
	CHECK(wd_client_keys_load_as(pub, sec, "server_key=", "key=", &k, err, sizeof(err)) == -1 &&
	      !strstr(err, sec) && strstr(err, "key= takes this client's key pair file"),
	      "... and as Python's key=: %s", err);
	setenv("WDRIFT_SERVER_KEY", pub, 1);
	setenv("WDRIFT_KEY", pair, 1);
	CHECK(wd_client_keys_load(NULL, NULL, &k, err, sizeof(err)) == 0 && k.on, "from the environment: %s", err);
	setenv("WDRIFT_KEY", "/nonexistent/k", 1);
	CHECK(wd_client_keys_load(NULL, NULL, &k, err, sizeof(err)) == -1 &&
	      !strncmp(err, "WDRIFT_KEY: /nonexistent/k: cannot open", 39), "a bad WDRIFT_KEY is named: %s", err);
	CHECK(wd_client_keys_load(NULL, pair, &k, err, sizeof(err)) == 0 && k.on,
	      "a flag wins over the environment: %s", err);
	setenv("WDRIFT_KEY", "", 1);
	CHECK(wd_client_keys_load(NULL, NULL, &k, err, sizeof(err)) == -1 &&
	      strstr(err, "WDRIFT_SERVER_KEY is given but not"), "an empty variable is not given: %s", err);
	unsetenv("WDRIFT_SERVER_KEY");
	unsetenv("WDRIFT_KEY");
}

/*
 * Issue 11, item 5: a key file's path can be exactly 40 characters of the
 * Z85 alphabet ('/', '.', '-', letters and digits all are). It was taken
 * for the key itself, and the client then failed as "daemon not
 * answering". An existing file wins; z85:KEY says "a key" explicitly; 40
 * such characters that look like a missing file's path are an error.
 */
static void key_paths(void)
{
	char text[200], path[64], err[600] = "", p[WD_KEY_Z85 + 1], arg[64];
	struct wd_client_keys k;
	size_t room = WD_KEY_Z85 - strlen(dir) - 1;	/* the name that makes the path 40 long */

	snprintf(text, sizeof(text), "public-key: %s\n", pub);
	snprintf(path, sizeof(path), "%s/%.*s.pub", dir, (int)(room - 4), "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkk");
	CHECK(strlen(path) == WD_KEY_Z85 && wd_key_is_z85(path), "'%s' is 40 characters of Z85", path);
	put(path + strlen(dir) + 1, text, 0644);
	CHECK(wd_key_public(path, p, err, sizeof(err)) == 0 && !strcmp(p, pub),
	      "a .pub file whose path looks like a key is read as the file: %s", err);
	snprintf(text, sizeof(text), "public-key: %s\nsecret-key: %s\n", pub, sec);
	const char *pair = put("pair40", text, 0600);
	unsetenv("WDRIFT_SERVER_KEY");
	unsetenv("WDRIFT_KEY");
	CHECK(wd_client_keys_load(path, pair, &k, err, sizeof(err)) == 0 && k.on &&
	      !strcmp(k.server, pub), "and so is --server-key with it: %s", err);
	setenv("WDRIFT_SERVER_KEY", path, 1);
	CHECK(wd_client_keys_load(NULL, pair, &k, err, sizeof(err)) == 0 && k.on &&
	      !strcmp(k.server, pub), "and WDRIFT_SERVER_KEY: %s", err);
	unsetenv("WDRIFT_SERVER_KEY");

	snprintf(arg, sizeof(arg), "z85:%s", pub);
	CHECK(wd_key_public(arg, p, err, sizeof(err)) == 0 && !strcmp(p, pub), "z85:KEY is the key: %s", err);
	snprintf(arg, sizeof(arg), "z85:%s", path);
	CHECK(wd_key_public(arg, p, err, sizeof(err)) == 0 && !strcmp(p, path),
	      "z85: takes the 40 characters even where they name a file");
	CHECK(wd_key_public("z85:short", p, err, sizeof(err)) == -1 &&
	      strstr(err, "'z85:short': after 'z85:', expected the key: 40 characters of Z85 (got 5 "
		     "characters)"), "z85: with no key after it: %s", err);

	path[strlen(path) - 5] = 'q';	/* the same length, and no such file */
	CHECK(wd_key_public(path, p, err, sizeof(err)) == -1 && strstr(err, "no such key file '") &&
	      strstr(err, "write them as z85:"), "a missing .pub path of 40 characters is an error: %s", err);
	snprintf(path, sizeof(path), "%s/%.*s", dir, (int)room, "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk");
	CHECK(strlen(path) == WD_KEY_Z85 && wd_key_public(path, p, err, sizeof(err)) == -1 &&
	      strstr(err, "no such key file"), "so is one in an existing directory: %s", err);
	mkdir(path, 0700);
	CHECK(wd_key_public(path, p, err, sizeof(err)) == -1 && strstr(err, "not a regular file"),
	      "a directory of that name is read as a file, and refused: %s", err);
	rmdir(path);
	const char *rootish = "/kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk";	/* 1 key in 85 starts with '/' */
	CHECK(wd_key_public(rootish, p, err, sizeof(err)) == 0 && !strcmp(p, rootish),
	      "a key that starts with '/' and names no file is still a key: %s", err);
}

int main(void)
{
	if (!mkdtemp(dir) || zmq_curve_keypair(pub, sec) < 0) {
		CHECK(0, "setup: a temp dir and a key pair");
		return tap_done();
	}
	good_files();
	bad_files();
	client_keys();
	key_paths();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0, "temp dir removed");
	return tap_done();
}
