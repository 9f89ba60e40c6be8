/*
 * keys.c: key files and the client side of CURVE (keys.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "error.h"
#include "keys.h"
#include "near_name.h"

#define KEYFILE_MAX 65536		/* a key file is a few lines */

/*
 * The whole file, NUL-terminated (malloc'd), and its mode; or NULL with err.
 * O_NONBLOCK: opening a FIFO for reading would otherwise wait, forever,
 * for a writer (and a device's open may wait too) before fstat could
 * refuse it. A regular file ignores the flag.
 */
static char *slurp(const char *path, mode_t *mode, char *err, size_t errlen)
{
	struct stat st;
	char *buf = NULL;
	ssize_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0) {
		int e = errno;
		char near[PATH_MAX + 32] = "";
		if (e == ENOENT)	/* a typo of a key file beside it */
			wd_suggest_file(path, near, sizeof(near));
		return wd_error(err, errlen, "%s: cannot open: %s%s", path, strerror(e), near), NULL;
	}
	if (fstat(fd, &st) < 0) {
		wd_error(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		wd_error(err, errlen, "%s: %s, not a regular file: a key file is needed", path,
			 wd_file_kind(st.st_mode));
		goto out;
	}
	*mode = st.st_mode;
	if (st.st_size > KEYFILE_MAX) {
		wd_error(err, errlen, "%s: %lld bytes: too large for a key file", path,
			 (long long)st.st_size);
		goto out;
	}
	if (!(buf = malloc((size_t)st.st_size + 1))) {
		wd_error(err, errlen, "%s: out of memory", path);
		goto out;
	}
	while (n < st.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)(st.st_size - n));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			wd_error(err, errlen, "%s: cannot read: %s", path, r ? strerror(errno) : "shorter than its size");
			free(buf);
			buf = NULL;
			goto out;
		}
		n += r;
	}
	buf[n] = 0;
	if (strlen(buf) != (size_t)n) {
		wd_error(err, errlen, "%s: holds a NUL byte: not a key file", path);
		free(buf);
		buf = NULL;
	}
out:
	close(fd);
	return buf;
}

static char *trim(char *s)
{
	char *e = s + strlen(s);

	while (*s == ' ' || *s == '\t')
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = 0;
	return s;
}

int wd_keyfile_read(const char *path, char pub[WD_KEY_Z85 + 1], char sec[WD_KEY_Z85 + 1],
		    char *err, size_t errlen)
{
	mode_t mode = 0;
	char *text = slurp(path, &mode, err, errlen), *line, *next;
	char got_pub[WD_KEY_Z85 + 1] = "", got_sec[WD_KEY_Z85 + 1] = "";
	int lineno = 0, r = -1;

	if (!text)
		return -1;
	for (line = text; line; line = next) {
		char *colon, *key, *val;

		lineno++;
		if ((next = strchr(line, '\n')))
			*next++ = 0;
		line = trim(line);
		if (!*line || *line == '#')
			continue;
		if (!(colon = strchr(line, ':'))) {
			wd_error(err, errlen, "%s:%d: expected 'public-key: KEY' or 'secret-key: KEY'",
				 path, lineno);
			goto out;
		}
		*colon = 0;
		key = trim(line);
		val = trim(colon + 1);
		if (*val == '"' && strlen(val) >= 2 && val[strlen(val) - 1] == '"') {
			val[strlen(val) - 1] = 0;
			val++;
		}
		char *dst = !strcmp(key, "public-key") ? got_pub : !strcmp(key, "secret-key") ? got_sec : NULL;
		if (!dst) {
			wd_error(err, errlen, "%s:%d: unknown key '%.40s' (expected public-key or secret-key)",
				 path, lineno, key);
			goto out;
		}
		if (*dst) {
			wd_error(err, errlen, "%s:%d: %s given twice", path, lineno, key);
			goto out;
		}
		if (!wd_key_is_z85(val)) {
			wd_error(err, errlen, "%s:%d: %s: expected 40 characters of Z85 (as wdrift keygen "
				 "writes), not %zu", path, lineno, key, strlen(val));
			goto out;
		}
		memcpy(dst, val, WD_KEY_Z85 + 1);
	}
	if (!*got_pub) {
		wd_error(err, errlen, "%s: no public-key line: not a wdrift key file", path);
		goto out;
	}
	if (sec) {
		char derived[WD_KEY_Z85 + 1];
		if (!*got_sec) {
			wd_error(err, errlen, "%s: no secret-key line: a public key file, where a key pair "
				 "file is needed", path);
			goto out;
		}
		if (zmq_curve_public(derived, got_sec) < 0 || strcmp(derived, got_pub)) {
			wd_error(err, errlen, "%s: the public key is not the secret key's", path);
			goto out;
		}
		if (mode & 0007) {
			wd_error(err, errlen, "%s: mode %04o lets every user read this secret key: "
				 "chmod 600 %s", path, (unsigned)(mode & 07777), path);
			goto out;
		}
		memcpy(sec, got_sec, sizeof(got_sec));
	}
	memcpy(pub, got_pub, sizeof(got_pub));
	r = 0;
out:
	memset(got_sec, 0, sizeof(got_sec));
	if (text)
		memset(text, 0, strlen(text));	/* what it held may be secret */
	free(text);
	return r;
}

/*
 * Whether arg, taken for a key, is more likely a key file's path that does
 * not exist: it ends like a key file's name, or its directory part (other
 * than "/", which 1 key in 85 starts with) is an existing directory.
 */
static int looks_like_missing_file(const char *arg)
{
	size_t n = strlen(arg);
	const char *slash = strrchr(arg, '/');
	struct stat st;
	char parent[WD_KEY_Z85 + 1];

	if (n > 4 && (!strcmp(arg + n - 4, ".pub") || !strcmp(arg + n - 4, ".key")))
		return 1;
	if (!slash || slash == arg || (size_t)(slash - arg) >= sizeof(parent))
		return 0;
	memcpy(parent, arg, (size_t)(slash - arg));
	parent[slash - arg] = 0;
	return stat(parent, &st) == 0 && S_ISDIR(st.st_mode);
}

int wd_key_public(const char *arg, char pub[WD_KEY_Z85 + 1], char *err, size_t errlen)
{
	struct stat st;

	if (!strncmp(arg, WD_KEY_PREFIX, strlen(WD_KEY_PREFIX))) {
		const char *key = arg + strlen(WD_KEY_PREFIX);
		if (!wd_key_is_z85(key))
			return wd_error(err, errlen, "'%.200s': after '" WD_KEY_PREFIX "', expected the key: "
					"40 characters of Z85 (got %zu characters)", arg, strlen(key));
		memcpy(pub, key, WD_KEY_Z85 + 1);
		return 0;
	}
	/*
	 * A file first: a path of 40 characters can be all Z85 ('/', '.', '-',
	 * letters and digits are), and taken for a key it would fail only later,
	 * as a daemon that does not answer.
	 */
	if (stat(arg, &st) == 0 || (errno != ENOENT && errno != ENOTDIR))
		return wd_keyfile_read(arg, pub, NULL, err, errlen);
	if (wd_key_is_z85(arg)) {
		if (looks_like_missing_file(arg))
			return wd_error(err, errlen, "no such key file '%s' (if these 40 characters are "
					"the key itself, write them as " WD_KEY_PREFIX "%s)", arg, arg);
		memcpy(pub, arg, WD_KEY_Z85 + 1);
		return 0;
	}
	char near[PATH_MAX + 32] = "";
	wd_suggest_file(arg, near, sizeof(near));	/* a typo of a .pub beside it, as for a key pair */
	return wd_error(err, errlen, "'%.200s' is neither a key (40 characters of Z85, or "
			WD_KEY_PREFIX "KEY) nor an existing key file%s", arg, near);
}

int wd_client_keys_load(const char *server, const char *keyfile, struct wd_client_keys *k,
			char *err, size_t errlen)
{
	return wd_client_keys_load_as(server, keyfile, "--server-key", "--key", k, err, errlen);
}

int wd_client_keys_load_as(const char *server, const char *keyfile, const char *server_arg,
			   const char *key_arg, struct wd_client_keys *k, char *err, size_t errlen)
{
	char why[512];
	const char *server_from = server_arg, *key_from = key_arg;

	memset(k, 0, sizeof(*k));
	if (!server || !*server) {
		server = getenv("WDRIFT_SERVER_KEY");
		server_from = "WDRIFT_SERVER_KEY";
	}
	if (!keyfile || !*keyfile) {
		keyfile = getenv("WDRIFT_KEY");
		key_from = "WDRIFT_KEY";
	}
	if (server && !*server)
		server = NULL;
	if (keyfile && !*keyfile)
		keyfile = NULL;
	if (!server && !keyfile)
		return 0;
	if (!server)
		return wd_error(err, errlen, "%s is given but not the server's public key "
				"(%s or WDRIFT_SERVER_KEY): CURVE needs both", key_from, server_arg);
	if (!keyfile)
		return wd_error(err, errlen, "%s is given but not this client's key pair "
				"(%s or WDRIFT_KEY): CURVE needs both", server_from, key_arg);
	if (wd_key_public(server, k->server, why, sizeof(why)) < 0)
		return wd_error(err, errlen, "%s: %s", server_from, why);
	/*
	 * A key pasted where the key pair's file goes, most likely the secret
	 * one: not echoed, as a job's stderr goes to shared logs (a trial's
	 * did, whole, in "cannot open").
	 */
	struct stat st;
	if (wd_key_is_z85(keyfile) && stat(keyfile, &st) < 0)
		return wd_error(err, errlen, "%s takes this client's key pair file, from wdrift keygen, not a "
				"key: it was given 40 characters of Z85, a key (not shown here: a secret key "
				"must not reach a log)", key_from);
	if (wd_keyfile_read(keyfile, k->pub, k->sec, why, sizeof(why)) < 0)
		return wd_error(err, errlen, "%s: %s", key_from, why);
	k->on = 1;
	return 0;
}

int wd_client_keys_apply(void *sock, const struct wd_client_keys *k)
{
	if (!k || !k->on)
		return 0;
	if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, k->server, WD_KEY_Z85) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, k->pub, WD_KEY_Z85) < 0 ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, k->sec, WD_KEY_Z85) < 0)
		return -1;
	return 0;
}
