/*
 * config_find.h: which configuration file wdrift and wdriftd read, and the
 * one reading of it both use (docs/config.md, "Which file"). The one owner
 * of the search order and of how relative ipc:// paths resolve, so that the
 * CLI finds the sockets the daemon bound, from any directory.
 *
 * The search, first match wins:
 *   1. -c FILE;
 *   2. $WDRIFT_CONFIG (set and not empty): a file that must exist;
 *   3. ./config/wdrift.yaml (a source tree's);
 *   4. PREFIX/etc/wdrift/wdrift.yaml, PREFIX being the directory above the
 *      running program's own (/proc/self/exe: /usr/local/bin/wdrift gives
 *      /usr/local), so that an installed wdrift or wdriftd reads the config
 *      `make install` put beside it, wherever PREFIX was, and a copied or
 *      DESTDIR-staged tree too;
 *   5. /etc/wdrift/wdrift.yaml (`make install-system`).
 * A file that exists is taken, readable or not: an unreadable one is an
 * error naming it, never skipped for the next.
 *
 * Depends on libc, config.h and lib/error.h.
 */
#ifndef WD_CONFIG_FIND_H
#define WD_CONFIG_FIND_H

#include <stddef.h>

#include "config.h"

#define WD_CONFIG_PATH_MAX 4096

struct wd_config_found {
	char path[WD_CONFIG_PATH_MAX];
	const char *origin;	/* how: "-c", "WDRIFT_CONFIG", "./config", "the install prefix", "/etc" */
};

/*
 * The --help lines every command that reads the config shares, after its
 * "-c, --config FILE  WHAT" line: where the file is looked for without -c.
 */
#define WD_CONFIG_SEARCH_HELP \
	"                     (default: $WDRIFT_CONFIG, else the first of\n" \
	"                     ./config/wdrift.yaml, PREFIX/etc/wdrift/wdrift.yaml (PREFIX:\n" \
	"                     where this program is installed), /etc/wdrift/wdrift.yaml)\n"

/*
 * Finds the file, in the order above; given is -c's FILE or NULL. Returns 0
 * with f filled; 1 when no file exists, with err saying where it looked
 * ("no configuration: none of A, B, C exists"); -1 with err when
 * WDRIFT_CONFIG names a file that does not exist.
 */
int wd_config_find(const char *given, struct wd_config_found *f, char *err, size_t errlen);

/*
 * " (./wdrift.yaml is here, but is not searched for: -c wdrift.yaml reads
 * it)" when that file is in the working directory and the config came from
 * the search (origin: wd_config_found's, or NULL when none was found), so
 * that an error naming another file (make install's, under PREFIX/etc)
 * names it too; "" otherwise.
 */
const char *wd_config_near_miss(const char *origin);

/*
 * Loads path as wd_config_load() does, then makes each relative ipc://
 * endpoint of listen.* absolute, against the directory of path (a regular
 * file; a pipe, as -c <(cmd) gives, leaves them relative to the working
 * directory). So `ipc://./run/control.sock` in /srv/wd/wdrift.yaml is
 * /srv/wd/run/control.sock for every process that reads that file.
 * Returns 0, or -1 with err, *out untouched.
 */
int wd_config_load_file(const char *path, struct wd_config *out, char *err, size_t errlen);

/*
 * For a config that does not load (an unknown key, a bad value, while the
 * daemon still runs the one before): the listen.control written in path's
 * YAML, or the built-in default when it has none, made absolute as
 * wd_config_load_file makes it, into ep. The CLI names it in its error, so
 * that the user can still reach the daemon with --endpoint. A file that
 * is not YAML (a syntax error) is read line by line for it. 0, or -1 when
 * the file cannot be read, or names a control there that cannot be read.
 */
int wd_config_peek_control(const char *path, char *ep, size_t size);

#endif
