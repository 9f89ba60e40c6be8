/*
 * config_file.h: the config file beside the configuration that runs, for
 * `wdrift status`. A file edited and not reloaded, or whose reload was
 * refused (a key that needs a restart, an error), runs the old config: a
 * trial saw nothing of that but in a reload's reply or the journal, which
 * SIGHUP's caller (`systemctl reload`) never reads. The file's bytes are
 * hashed (CRC-32) when a config is read from it, and again when status asks.
 * Depends on libc.
 */
#ifndef WD_CONFIG_FILE_H
#define WD_CONFIG_FILE_H

#include <stddef.h>
#include <stdint.h>

struct config_file {
	const char *path;	/* NULL: the built-in config, no file */
	uint64_t running;	/* the hash of the bytes the running config was read from */
	uint64_t refused;	/* the bytes of the last reload refused since */
	char why[1024];		/* its error; "" when none was refused since */
	/*
	 * A reload's checks without the reload, of the file as it is now: 0,
	 * or -1 with why and the hash of the bytes checked (NULL: not asked).
	 * "`wdrift reload` applies it" of a file a reload would refuse sent a
	 * trial's on-call to a refusal. A pass is kept for the bytes checked; a
 * refusal is checked again at each ask (a key file fixed since passes).
	 */
	int (*check)(void *ctx, uint64_t *hash, char *why, size_t len);
	void *check_ctx;
	uint64_t checked;	/* the bytes last checked (0: none) */
	int check_failed;
	char check_why[1024];
};

/* The hash of path's bytes into *h: 0, or -errno. */
int config_file_hash(const char *path, uint64_t *h);

/* A config was read from the file, whose bytes hashed to h before it was. */
void config_file_ran(struct config_file *f, uint64_t h);

/* A reload of the file, whose bytes hashed to h, was refused with why. */
void config_file_refused(struct config_file *f, uint64_t h, const char *why);

/*
 * NULL when the file holds what runs (or there is none); else why not,
 * into buf: its last reload was refused (with the error, while the file
 * is as it was then), it changed since it was read (and whether a reload
 * would take it, f->check, once per change), or it cannot be read.
 */
const char *config_file_pending(struct config_file *f, char *buf, size_t len);

#endif
