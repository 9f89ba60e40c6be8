/*
 * notify.c: the sd_notify protocol, one function per state (see notify.h).
 *
 * The datagrams are sent here, not with sd_notify(): libsystemd's send
 * blocks when the receiver's queue is full (10 datagrams), so a supervisor
 * that stops reading would freeze the main loop, and with it status and
 * SIGTERM. Ours never blocks: a state that does not fit is dropped and
 * counted. systemd always reads, so under it nothing is dropped.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "logging.h"
#include "notify.h"

static int notify_fd = -1;		/* -2: no NOTIFY_SOCKET, or a bad one */
static struct sockaddr_un notify_addr;
static socklen_t notify_len;
static unsigned long notify_dropped;

static int notify_open(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	size_t n = path ? strlen(path) : 0;

	if (notify_fd != -1)
		return notify_fd;
	notify_fd = -2;
	if (!n || (path[0] != '/' && path[0] != '@') || n >= sizeof(notify_addr.sun_path))
		return notify_fd;
	memset(&notify_addr, 0, sizeof(notify_addr));
	notify_addr.sun_family = AF_UNIX;
	memcpy(notify_addr.sun_path, path, n);
	if (path[0] == '@')
		notify_addr.sun_path[0] = 0;	/* the abstract namespace */
	notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
	notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (notify_fd < 0)
		notify_fd = -2;
	return notify_fd;
}

/* Sends one state; must_arrive waits up to 1 s for room (READY, STOPPING). */
static void send_state(const char *msg, int must_arrive)
{
	int fd = notify_open();
	if (fd < 0)
		return;
	for (int tries = 0; tries < 2; tries++) {
		if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
			   (struct sockaddr *)&notify_addr, notify_len) >= 0)
			return;
		if (errno != EAGAIN || !must_arrive || tries)
			break;
		struct pollfd p = { fd, POLLOUT, 0 };
		poll(&p, 1, 1000);
	}
	if (notify_dropped++ % 100 == 0)
		log_warning("notify: the supervisor is not reading its socket: %lu states dropped (%s)",
			    notify_dropped, strerror(errno));
}

uint64_t notify_init(void)
{
	uint64_t usec = 0;
	int r = sd_watchdog_enabled(0, &usec);	/* keep the env: children are ours */
	if (r < 0)
		log_warning("watchdog: bad WATCHDOG_USEC or WATCHDOG_PID; not pinging");
	return r > 0 ? usec / 2 : 0;
}

void notify_ready(const char *status)
{
	char msg[320];
	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status);
	send_state(msg, 1);
}

void notify_status(const char *fmt, ...)
{
	char msg[264];
	va_list ap;

	memcpy(msg, "STATUS=", 7);
	va_start(ap, fmt);
	vsnprintf(msg + 7, sizeof(msg) - 7, fmt, ap);
	va_end(ap);
	send_state(msg, 0);
}

void notify_reloading(void)
{
	struct timespec ts;
	char msg[64];
	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
		 (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
	send_state(msg, 1);
}

void notify_stopping(void)
{
	send_state("STOPPING=1", 1);
}

void notify_watchdog(void)
{
	send_state("WATCHDOG=1", 0);
}
