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

int socket_file_taken(const char *endpoint, long *pid)
{
	const char *path = endpoint + 6;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct ucred cred = { 0 };
	socklen_t len = sizeof(cred);
	struct stat st;
	int fd;

	*pid = 0;
	if (strncmp(endpoint, "ipc://", 6) || path[0] == '@' || stat(path, &st) < 0 || !S_ISSOCK(st.st_mode) ||
	    strlen(path) >= sizeof(a.sun_path) ||
	    (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return 0;
	/*
	 * One connect, closed at once: refused, nothing listens (a crash left
	 * the file); made, or EAGAIN (its queue is full), something does, and
	 * a connection made gives the listener's pid (its listen()'s
	 * credentials), to name the process to stop.
	 */
	memcpy(a.sun_path, path, strlen(path) + 1);
	int made = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, e = errno;
	if (made && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0)
		*pid = (long)cred.pid;
	close(fd);
	return made || e == EAGAIN;
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
