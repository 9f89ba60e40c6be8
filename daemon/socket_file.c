/* socket_file.c: an ipc:// socket's file, removed at a clean stop (socket_file.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "logging.h"
#include "socket_file.h"
#include "zmtp_probe.h"

/* The pid of the process listening on the unix socket file path (its listen()'s credentials), or 0. */
static long listener_pid(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct ucred cred = { 0 };
	socklen_t len = sizeof(cred);
	int fd;

	if (strlen(path) >= sizeof(a.sun_path) ||
	    (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return 0;
	memcpy(a.sun_path, path, strlen(path) + 1);
	long pid = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		   getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? (long)cred.pid : 0;
	close(fd);
	return pid > 0 ? pid : 0;
}

int socket_file_taken(const char *endpoint, long *pid)
{
	struct stat st;

	*pid = 0;
	if (strncmp(endpoint, "ipc://", 6) || endpoint[6] == '@' || stat(endpoint + 6, &st) < 0 ||
	    !S_ISSOCK(st.st_mode))
		return 0;
	/* EAGAIN: its queue is full, so something listens */
	int e = wd_unix_connect_errno(endpoint + 6);
	if (e != 0 && e != EAGAIN)
		return 0;
	*pid = listener_pid(endpoint + 6);
	return 1;
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
