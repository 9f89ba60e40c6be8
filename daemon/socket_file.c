/* socket_file.c: an ipc:// socket's file, removed at a clean stop (socket_file.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "logging.h"
#include "socket_file.h"
#include "zmtp_probe.h"

int socket_file_taken(const char *endpoint, long *pid)
{
	struct stat st;

	*pid = 0;
	if (strncmp(endpoint, "ipc://", 6) || endpoint[6] == '@' || stat(endpoint + 6, &st) < 0 ||
	    !S_ISSOCK(st.st_mode))
		return 0;
	/* EAGAIN: its queue is full, so something listens; connected, its pid names the process to stop */
	int e = wd_unix_connect_peer(endpoint + 6, pid);
	return e == 0 || e == EAGAIN;
}

void socket_file_note(struct socket_file *f, const char *endpoint)
{
	struct stat st;

	f->path[0] = 0;
	if (strncmp(endpoint, "ipc://", 6) || endpoint[6] == '@')	/* '@': abstract, no file */
		return;
	if (stat(endpoint + 6, &st) < 0 || !S_ISSOCK(st.st_mode))
		return;
	snprintf(f->path, sizeof(f->path), "%s", endpoint + 6);
	f->dev = st.st_dev;
	f->ino = st.st_ino;
}

void socket_file_remove(struct socket_file *f)
{
	struct stat st;

	if (!f->path[0])
		return;
	if (stat(f->path, &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino && unlink(f->path) < 0)
		log_warning("cannot remove the socket file '%s': %m", f->path);
	f->path[0] = 0;
}
