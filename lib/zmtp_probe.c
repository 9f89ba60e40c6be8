/*
 * zmtp_probe.c: which security mechanism the ZeroMQ peer at an endpoint
 * speaks, read from its ZMTP 3 greeting (rfc.zeromq.org/spec/23: a 10-byte
 * signature, the version, then the mechanism's name in 20 bytes).
 *
 * Why: a peer that refuses a handshake often just closes the connection,
 * and then this side's monitor tells no reason. A NULL client meeting a
 * CURVE daemon usually reads the daemon's greeting first and reports a
 * mechanism mismatch; but when the daemon is slow to read, the client's
 * whole greeting arrives at once, the daemon refuses it before its own
 * greeting is written, and the close looks like a socket-type mismatch.
 * Sending only the signature and the major version makes the peer write
 * its whole greeting and then wait for ours, so the mechanism is always
 * read. Nothing else of ZMTP is spoken here: the probe closes after 64
 * bytes.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "zmtp_probe.h"

#define GREETING 64
#define MECH_AT 12
#define MECH_LEN 20

/* Waits for events on fd until deadline; 1 when they came. */
static int wait_fd(int fd, short events, double deadline)
{
	struct pollfd p = { fd, events, 0 };
	int left, r;

	while ((left = (int)((deadline - wd_now()) * 1000)) > 0)
		if ((r = poll(&p, 1, left)) >= 0 || errno != EINTR)
			return r == 1;	/* an error or a hang-up too: the read or SO_ERROR says which */
	return 0;
}

/*
 * A non-blocking stream socket connected to addr by deadline, or -1 with
 * *e the reason (ETIMEDOUT: no answer by then). A unix socket whose listen
 * queue is full answers EAGAIN, unconnected: a busy daemon, the very case
 * the probe is for, so it is asked again.
 */
static int connect_by(int family, const struct sockaddr *addr, socklen_t len, double deadline, int *e)
{
	int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	socklen_t el = sizeof(*e);

	if (fd < 0) {
		*e = errno;
		return -1;
	}
	for (;;) {
		if (connect(fd, addr, len) == 0)
			return fd;
		*e = errno;
		if (errno == EINPROGRESS) {	/* TCP: done when writable */
			*e = ETIMEDOUT;
			if (wait_fd(fd, POLLOUT, deadline) &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, e, &el) == 0 && !*e)
				return fd;
			break;
		}
		if ((errno != EAGAIN && errno != EINTR) || wd_now() + 0.005 > deadline)
			break;
		poll(NULL, 0, 5);
	}
	close(fd);
	return -1;
}

int wd_unix_connect_peer(const char *path, long *pid)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct ucred cred = { 0 };
	socklen_t len = sizeof(cred);
	int fd, e = 0;

	if (pid)
		*pid = 0;
	if (strlen(path) >= sizeof(a.sun_path))
		return ENAMETOOLONG;
	memcpy(a.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return errno;
	if (connect(fd, (const struct sockaddr *)&a, sizeof(a)) < 0)
		e = errno;
	/* connected: the listener's credentials, as its listen() left them */
	else if (pid && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0)
		*pid = (long)cred.pid;
	close(fd);
	return e;
}

int wd_unix_connect_errno(const char *path)
{
	return wd_unix_connect_peer(path, NULL);
}

const char *wd_ipc_not_socket(const char *endpoint, int follow)
{
	struct stat st;

	if (strncmp(endpoint, "ipc://", 6) || endpoint[6] == '@' || !endpoint[6])
		return NULL;
	if ((follow ? stat(endpoint + 6, &st) : lstat(endpoint + 6, &st)) < 0 || S_ISSOCK(st.st_mode))
		return NULL;
	return wd_file_kind(st.st_mode);
}

/*
 * A stream socket connected to endpoint (ipc:// or tcp://) by deadline, or
 * -1 with *e the reason: ENXIO for a host name that does not resolve,
 * EINVAL for an endpoint of neither form.
 */
static int open_endpoint(const char *endpoint, double deadline, int *e)
{
	int fd = -1;

	*e = EINVAL;
	if (!strncmp(endpoint, "ipc://", 6)) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		const char *path = endpoint + 6;
		size_t n = strlen(path);
		if (n >= sizeof(a.sun_path)) {
			*e = ENAMETOOLONG;
			return -1;
		}
		memcpy(a.sun_path, path, n);
		if (path[0] == '@')	/* Linux's abstract namespace */
			a.sun_path[0] = 0;
		return connect_by(AF_UNIX, (struct sockaddr *)&a,
				  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n), deadline, e);
	}
	if (!strncmp(endpoint, "tcp://", 6)) {
		char host[256], *port;
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
		const char *at = strchr(endpoint + 6, ';');	/* tcp://SOURCE;HOST:PORT */
		snprintf(host, sizeof(host), "%s", at ? at + 1 : endpoint + 6);
		if (!(port = strrchr(host, ':')))
			return -1;
		*port++ = 0;
		char *h = host;
		if (h[0] == '[' && h[strlen(h) - 1] == ']') {	/* [::1] */
			h[strlen(h) - 1] = 0;
			h++;
		}
		/* a name is looked up without the deadline: the caller's own connect just did the same */
		int g = getaddrinfo(h, port, &hints, &res);
		if (g) {	/* no such name: ENXIO; a lookup that failed this time: no verdict */
			*e = g == EAI_NONAME || g == EAI_NODATA ? ENXIO : EAGAIN;
			return -1;
		}
		for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)	/* ::1, then 127.0.0.1 */
			fd = connect_by(ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline, e);
		freeaddrinfo(res);
	}
	return fd;
}

int wd_endpoint_connect_errno(const char *endpoint, int timeout_ms)
{
	int e, fd = open_endpoint(endpoint, wd_now() + timeout_ms / 1000.0, &e);

	if (fd < 0)
		return e ? e : EIO;
	close(fd);
	return 0;
}

int wd_endpoint_http(const char *endpoint, int timeout_ms)
{
	static const char head[] = "HEAD / HTTP/1.0\r\n\r\n";
	char got[5];
	double deadline = wd_now() + timeout_ms / 1000.0;
	size_t n = 0;
	int e, fd = open_endpoint(endpoint, deadline, &e);

	if (fd < 0)
		return 0;
	if (send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(head) - 1))
		while (n < sizeof(got) && wait_fd(fd, POLLIN, deadline)) {
			ssize_t r = recv(fd, got + n, sizeof(got) - n, 0);
			if (r <= 0 && !(r < 0 && (errno == EINTR || errno == EAGAIN)))
				break;
			if (r > 0)
				n += (size_t)r;
		}
	close(fd);
	return n == sizeof(got) && !memcmp(got, "HTTP/", 5);
}

int wd_zmtp_peer_mechanism(const char *endpoint, int timeout_ms, char *mech, size_t len)
{
	static const unsigned char hello[11] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3 };
	unsigned char g[GREETING];
	double deadline = wd_now() + timeout_ms / 1000.0;
	size_t got = 0;
	int e, fd = open_endpoint(endpoint, deadline, &e);

	if (fd < 0)
		return -1;
	if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello)) {
		close(fd);
		return -1;
	}
	while (got < GREETING && wait_fd(fd, POLLIN, deadline)) {
		ssize_t r = recv(fd, g + got, GREETING - got, 0);
		if (r <= 0 && !(r < 0 && (errno == EINTR || errno == EAGAIN)))
			break;
		if (r > 0)
			got += (size_t)r;
	}
	close(fd);
	if (got < GREETING || g[0] != 0xff || g[9] != 0x7f || g[10] < 3)
		return -1;
	size_t n = 0;
	while (n < MECH_LEN && g[MECH_AT + n] > 0x20 && g[MECH_AT + n] < 0x7f)
		n++;
	if (!n || n >= len)
		return -1;
	memcpy(mech, g + MECH_AT, n);
	mech[n] = 0;
	return 0;
}
