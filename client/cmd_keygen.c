/*
 * cmd_keygen.c: `wdrift keygen FILE`: a new CURVE key pair (docs/security.md).
 *
 * The secret key never exists with looser permissions than 0600: each file
 * is written to a temporary name created with its final mode, fsynced, then
 * linked (or, with --force, renamed) into place.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

#include "cli.h"
#include "keys.h"

static const char usage[] =
"usage: wdrift keygen [--force] [--json] FILE\n"
"\n"
"Makes a new CURVE key pair for wdriftd or one of its clients\n"
"(docs/security.md). FILE gets the key pair, readable by its owner only\n"
"(mode 0600); FILE.pub gets the public key alone. The public key is printed.\n"
"\n"
"  The daemon's: auth.server_key: FILE; give clients FILE.pub (--server-key,\n"
"  WDRIFT_SERVER_KEY, or Publisher(server_key=...)).\n"
"  A client's: add the printed key to the daemon's auth.clients under a name,\n"
"  in double quotes (trainer: \"KEY\"): a key may start with a character such\n"
"  as ! & * [ { @ that YAML reads otherwise; the client uses FILE (--key,\n"
"  WDRIFT_KEY, or Publisher(key=...)).\n"
"\n"
"      --force        replace FILE and FILE.pub if they exist (default: refuse)\n"
"      --json         print {\"public_key\", \"key_file\", \"public_file\"} as JSON\n"
"  -h, --help         this help\n"
"\n"
"exit status: 0 written; 1 not written (nothing is left half-written); 2 usage.\n";

/* Writes text to path with mode, whole or not at all. Returns 0 or -1 (printed). */
static int write_whole(const char *path, const char *text, mode_t mode, int force)
{
	char tmp[4096];
	size_t len = strlen(text);
	int fd, e;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid()) >= sizeof(tmp))
		return cli_error("%s: name too long", path), -1;
	/* errors name path, the file the user asked for, never the temporary name */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0)
		return cli_error("%s: cannot create: %s", path, strerror(errno)), -1;
	/* through stdio, which writes on after a short write and keeps the errno that stopped it */
	FILE *f = fchmod(fd, mode) < 0 ? NULL : fdopen(fd, "w");
	if (!f || fwrite(text, 1, len, f) != len || fflush(f) != 0 || fsync(fd) < 0) {
		e = errno;
		if (f)
			fclose(f);
		else
			close(fd);
		unlink(tmp);
		return cli_error("%s: cannot write: %s", path, strerror(e)), -1;
	}
	fclose(f);
	if ((force ? rename(tmp, path) : link(tmp, path)) < 0) {
		e = errno;
		unlink(tmp);
		if (e == EEXIST)
			return cli_error("%s: exists (give --force to replace it)", path), -1;
		return cli_error("%s: cannot write: %s", path, strerror(e)), -1;
	}
	if (!force)
		unlink(tmp);
	return 0;
}

struct keygen_opts {
	int force, json;
};

static int on_opt(int c, const char *arg, void *ctx)
{
	struct keygen_opts *o = ctx;
	(void)arg;
	switch (c) {
	case 'f': o->force = 1; return 0;
	case 'J': o->json = 1; cli_json_errors = 1; return 0;	/* a failure is JSON too */
	}
	return 1;
}

int cmd_keygen(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "json", no_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	char pub[WD_KEY_Z85 + 1], sec[WD_KEY_Z85 + 1], pubfile[4096], when[64];
	char keytext[512], pubtext[512];
	struct keygen_opts o = { 0 };
	time_t now = time(NULL);
	int r = cli_opts(argc, argv, ":h", opts, usage, on_opt, &o);

	if (r < 0)
		return cli_opts_exit(r);
	if (argc - r != 1)
		return cli_usage_error("expected one FILE, got %d", argc - r);
	const char *file = argv[r];
	if ((size_t)snprintf(pubfile, sizeof(pubfile), "%s.pub", file) >= sizeof(pubfile) - 32)
		return cli_usage_error("'%s': name too long", file);
	if (!o.force)
		for (int i = 0; i < 2; i++)
			if (access(i ? pubfile : file, F_OK) == 0)
				return cli_error("%s: exists (give --force to replace it)", i ? pubfile : file);
	if (zmq_curve_keypair(pub, sec) < 0)
		return cli_error("cannot make a key pair: %s (libzmq without CURVE?)", zmq_strerror(errno));
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	snprintf(keytext, sizeof(keytext),
		 "# wdrift CURVE key pair, made by wdrift keygen at %s.\n"
		 "# Secret: readable by its owner only. The .pub file beside it holds the\n"
		 "# public key alone.\n"
		 "public-key: \"%s\"\nsecret-key: \"%s\"\n", when, pub, sec);
	snprintf(pubtext, sizeof(pubtext),
		 "# wdrift CURVE public key, made by wdrift keygen at %s.\n"
		 "public-key: \"%s\"\n", when, pub);
	memset(sec, 0, sizeof(sec));
	int bad = write_whole(file, keytext, 0600, o.force) < 0;
	memset(keytext, 0, sizeof(keytext));
	if (bad)
		return EXIT_FAIL;
	if (write_whole(pubfile, pubtext, 0644, o.force) < 0) {
		unlink(file);	/* all or nothing */
		return EXIT_FAIL;
	}
	if (o.json) {
		json_t *j = json_pack("{s:s,s:s,s:s}", "public_key", pub, "key_file", file,
				      "public_file", pubfile);
		json_dumpf(j, stdout, JSON_INDENT(1));
		putchar('\n');
		json_decref(j);
	} else
		printf("%s\n", pub);
	return EXIT_OK;
}
