/*
 * socket_file.h: the files of the ipc:// sockets wdriftd binds. libzmq
 * leaves a bound socket's file behind when it closes, so a clean stop
 * looked like a crash to the CLI ("a wdriftd that stopped without removing
 * it (SIGKILL, a crash)?", after a 4.5 s wait). Each file is noted when
 * bound and removed at a clean stop, if it is still the one bound: another
 * daemon given the same path since (ZeroMQ's bind replaces the file) keeps
 * its own. Depends on libc.
 */
#ifndef WD_SOCKET_FILE_H
#define WD_SOCKET_FILE_H

#include <limits.h>
#include <sys/types.h>

struct socket_file {
	char path[PATH_MAX];	/* "": none (not ipc://, abstract, or not found) */
	dev_t dev;
	ino_t ino;
};

/*
 * 1 when a process accepts connections on endpoint's socket file: another
 * daemon (one started from another directory with the same -c finds
 * another storage.dir, so its lock does not stop it). ZeroMQ's bind would
 * replace the file, and that daemon would go on with no socket to reach
 * it. *pid: the listener's, from the connection's peer credentials (0:
 * not known). 0 for a file nothing listens on (a crash left it), no file,
 * or another transport (a tcp port in use fails the bind itself).
 */
int socket_file_taken(const char *endpoint, long *pid);

/* Notes the file endpoint was bound to (nothing for another transport). */
void socket_file_note(struct socket_file *f, const char *endpoint);
/* Removes it when it is still the one noted; forgets it either way. */
void socket_file_remove(struct socket_file *f);

#endif
