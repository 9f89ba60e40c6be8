/*
 * near_name.h: "did you mean": how far apart two names are, and the
 * socket file or file beside a missing one that its name is a typo of.
 * One measure for the config's keys and studies (common/config_suggest.c),
 * a publisher's ipc:// endpoint (publisher.c), the CLI's (client/), and
 * the files the programs are given (a config, a checkpoint).
 * Depends on libc.
 */
#ifndef WD_NEAR_NAME_H
#define WD_NEAR_NAME_H

#include <stddef.h>

/*
 * Optimal string alignment distance between a[0..la) and b[0..lb) (a swap
 * of neighbours costs 1), or SIZE_MAX when either is longer than 64 bytes.
 */
size_t wd_name_distance(const char *a, size_t la, const char *b, size_t lb);

/*
 * The distance of cand[0..len) from typed when it is near enough to be
 * suggested (1 edit for names of up to 4 bytes, 2 up to 10, 3 beyond) and
 * not equal to it; SIZE_MAX otherwise.
 */
size_t wd_name_near(const char *typed, const char *cand, size_t len);

/*
 * "; did you mean 'ipc://DIR/NAME'?" into out when the directory of full
 * (the endpoint's path, as this process opens it) holds a socket file that
 * the path's last name is a typo of (wd_name_near); DIR as the endpoint
 * spells it. When that directory is not there, a directory beside it that
 * its name is a typo of and that holds a socket of the same name (rn/ for
 * run/). Else NAME.sock beside it, or the one subdirectory holding a
 * socket NAME (a directory left out). "" otherwise, or when it does not
 * fit. Reads at most 4096 directory entries.
 */
void wd_suggest_socket(const char *endpoint, const char *full, char *out, size_t len);

/*
 * "; started in another directory? a socket listens at
 * 'ipc:///a/run/ingest.sock'" into out when rel, a relative ipc:// path as
 * the endpoint spells it after "./" (and any "../"), is the tail of a
 * listening Unix socket's path elsewhere (/proc/net/unix: every listener
 * this network namespace has) that is not full and whose socket file this
 * process sees: the job started in the wrong directory, its daemon up in
 * the right one (a trial's; the CLI names the running daemons too). At
 * most 2 are named, this user's first, then those sharing the most
 * directories with full, and " (and N others)" counts the rest; "" when
 * none, or when it does not fit. An absolute rel is a path in a wrong
 * directory, or its daemon's before it started: "; its daemon not up
 * yet, or a wrong directory? a socket of that name listens at '...'", of
 * this user's listeners whose last name is rel's and that share a
 * directory below / with full.
 */
void wd_suggest_listening(const char *rel, const char *full, char *out, size_t len);

/*
 * 1 when the directory of the socket file full (a path as this process
 * opens it) is there: a daemon's run/ directory, left without its socket
 * by a daemon that stopped (the publisher's relative endpoint, the CLI's
 * from its config); 0 otherwise.
 */
int wd_socket_dir_there(const char *full);

/*
 * "; did you mean 'DIR/NAME'?" into out when the directory of path (a file
 * that does not exist) holds a regular file that path's last name is a
 * typo of (-c wdrift.yml beside wdrift.yaml); DIR as path spells it. ""
 * otherwise, or when it does not fit.
 */
void wd_suggest_file(const char *path, char *out, size_t len);

/*
 * "; it holds sockets: did you mean 'ENDPOINT/control.sock', ... or
 * 'ENDPOINT/ingest.sock'?" into out, of the socket files in dir (the
 * directory an ipc:// endpoint names, as this process opens it): at most
 * 3, by name, " (and N others)" counting the rest; "" when it holds none,
 * or when it does not fit. When it holds want's ("ingest": ingest.sock,
 * the one the caller connects to; NULL: none), that one alone: a trial's
 * publisher was offered the control socket first. An endpoint naming
 * wdriftd's run/ directory, not a socket in it, is a trial's.
 */
void wd_suggest_in_dir(const char *endpoint, const char *dir, const char *want, char *out, size_t len);

#endif
