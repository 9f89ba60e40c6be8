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
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "zmtp_probe.h"

#define GREETING 64
#define MECH_AT 12
#define MECH_LEN 20

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline; 1 when they came. */
static int wait_fd(int fd, short events, long deadline)
{
	struct pollfd p = { fd, events, 0 };
	long left = deadline - now_ms();
	return left > 0 && poll(&p, 1, (int)left) == 1;
}

/* A non-blocking stream socket connecting to endpoint (ipc:// or tcp://), or -1. */
static int open_endpoint(const char *endpoint, long deadline)
{
	int fd = -1;

	if (!strncmp(endpoint, "ipc://", 6)) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		const char *path = endpoint + 6;
		size_t n = strlen(path);
		if (n >= sizeof(a.sun_path))
			return -1;
		memcpy(a.sun_path, path, n);
		if (path[0] == '@')	/* Linux's abstract namespace */
			a.sun_path[0] = 0;
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&a,
				       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0 &&
		    errno != EINPROGRESS && errno != EAGAIN) {
			close(fd);
			return -1;
		}
	} else if (!strncmp(endpoint, "tcp://", 6)) {
		char host[256], *port;
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
		snprintf(host, sizeof(host), "%s", endpoint + 6);
		if (!(port = strrchr(host, ':')))
			return -1;
		*port++ = 0;
		char *h = host;
		if (h[0] == '[' && h[strlen(h) - 1] == ']') {	/* [::1] */
			h[strlen(h) - 1] = 0;
			h++;
		}
		if (getaddrinfo(h, port, &hints, &res))
			return -1;
		fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0 && errno != EINPROGRESS) {
			close(fd);
			fd = -1;
		}
		freeaddrinfo(res);
	}
	if (fd < 0)
		return -1;
	int e = 0;
	socklen_t el = sizeof(e);
	if (!wait_fd(fd, POLLOUT, deadline) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e) {
		close(fd);
		return -1;
	}
	return fd;
}

int zmtp_peer_mechanism(const char *endpoint, int timeout_ms, char *mech, size_t len)
{
	static const unsigned char hello[11] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3 };
	unsigned char g[GREETING];
	long deadline = now_ms() + timeout_ms;
	size_t got = 0;
	int fd = open_endpoint(endpoint, deadline);

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
