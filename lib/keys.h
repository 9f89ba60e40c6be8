/*
 * keys.h: CURVE keys (docs/security.md): the key files `wdrift keygen`
 * writes, and the client side of a CURVE connection, shared by the
 * daemon, the CLI and the publisher library.
 *
 * A key is 32 bytes, written as 40 characters of Z85 (ZeroMQ's RFC 32
 * encoding). A key file is text:
 *
 *     # comment lines
 *     public-key: <40 characters>
 *     secret-key: <40 characters>      (a key pair file only, mode 0600)
 *
 * Internal to wdrift; libc and libzmq.
 */
#ifndef WD_KEYS_H
#define WD_KEYS_H

#include <stddef.h>
#include <string.h>

#define WD_KEY_Z85 40			/* characters of a key in Z85 */

/* The Z85 alphabet (ZeroMQ's RFC 32). */
#define WD_Z85_CHARS "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

/* True when s is exactly 40 characters of the Z85 alphabet. */
static inline int wd_key_is_z85(const char *s)
{
	size_t n = strspn(s, WD_Z85_CHARS);

	return n == WD_KEY_Z85 && !s[n];
}

/*
 * Reads a key file. pub gets its public key; sec, when not NULL, its
 * secret key, which the file must then hold, and which others (not owner
 * or group) must not be able to read. Returns 0, or -1 with err naming the file
 * (and line) and what is wrong.
 */
int wd_keyfile_read(const char *path, char pub[WD_KEY_Z85 + 1], char sec[WD_KEY_Z85 + 1],
		    char *err, size_t errlen);

#define WD_KEY_PREFIX "z85:"		/* a key given itself, never a file's name */

/*
 * A public key given as the name of a key file that holds one (a .pub
 * file, or a key pair file), as "z85:" and 40 characters of Z85, or as the
 * 40 characters alone. An existing file wins: a path can be 40 characters
 * of the Z85 alphabet too. 40 such characters that name no file are the
 * key, unless they look like a missing file's path (ending in .pub or
 * .key, or in an existing directory other than "/"): that is an error
 * naming the file and the z85: form. Returns 0 or -1 with err.
 */
int wd_key_public(const char *arg, char pub[WD_KEY_Z85 + 1], char *err, size_t errlen);

/*
 * The keys of a CURVE client: the server's public key, and the client's
 * key pair. on is 0 when neither is given: a plain (NULL) connection.
 */
struct wd_client_keys {
	int on;
	char server[WD_KEY_Z85 + 1], pub[WD_KEY_Z85 + 1], sec[WD_KEY_Z85 + 1];
};

/*
 * Fills k from server (a public key or key file, wd_key_public) and
 * keyfile (the client's key pair file). Either may be NULL, and then
 * comes from the environment: WDRIFT_SERVER_KEY and WDRIFT_KEY. Both or
 * neither: one alone is an error. Returns 0, or -1 with err.
 */
int wd_client_keys_load(const char *server, const char *keyfile, struct wd_client_keys *k,
			char *err, size_t errlen);
/*
 * The same, naming the two arguments as the caller's user knows them
 * ("--server-key" and "--key" for the CLI, "server_key=" and "key=" for
 * Python) in its messages.
 */
int wd_client_keys_load_as(const char *server, const char *keyfile, const char *server_arg,
			   const char *key_arg, struct wd_client_keys *k, char *err, size_t errlen);

/* Makes sock (before its connect) a CURVE client with k's keys; nothing when k->on is 0. */
int wd_client_keys_apply(void *sock, const struct wd_client_keys *k);

#endif
