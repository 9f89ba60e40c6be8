/*
 * test_handshake.c: what the CLI makes of connections that never get
 * through (lib/handshake.c, docs/cli.md): ZeroMQ's connect-retried events
 * start a clock that a connection stops; after WD_HS_REFUSED_S of them,
 * wd_hs_stale_socket's own connect says why, on real unix socket files: a
 * file nothing listens on, one a listener holds, one that is gone, a TCP
 * port and an abstract name nothing listens on. Then the
 * connect that `wdrift send` makes of its own (wd_endpoint_connect_errno)
 * on real sockets, unix and TCP, and what wd_hs_unreachable says of each.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <zmq.h>

#include "clock.h"
#include "handshake.h"
#include "harness.h"
#include "zmtp_probe.h"

/* A unix socket bound at path: listening, or closed at once (the file stays, as after SIGKILL). */
static int unix_socket(const char *path, int listening)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || (listening && listen(fd, 4) < 0)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!listening) {
		close(fd);
		return 0;
	}
	return fd;
}

/* A state whose connects have failed since seconds ago. */
static struct wd_hs refused_for(double seconds)
{
	struct wd_hs h = { 0 };

	wd_hs_event(&h, ZMQ_EVENT_CONNECT_RETRIED, 0, "ipc:///x", NULL, NULL, NULL, 0);
	h.refused_since = wd_now() - seconds;
	return h;
}

/* A TCP socket on 127.0.0.1, listening or only bound (so that its port refuses); its port in *port. */
static int tcp_socket(int listening, int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0 || (listening && listen(fd, 4) < 0)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

/* wd_endpoint_connect_errno and wd_hs_unreachable on each kind of endpoint. */
static void own_connects(const char *stale, const char *live, const char *gone)
{
	char ep[300], err[1024];
	int port, fd, e;

	snprintf(ep, sizeof(ep), "ipc://%s", stale);
	e = wd_endpoint_connect_errno(ep, 1000);
	CHECK(e == ECONNREFUSED && wd_hs_unreachable(ep, "ingest", e, 5, err, sizeof(err)) == 1 &&
	      strstr(err, "nothing listens on the socket file") && strstr(err, stale),
	      "ipc, a file nothing listens on: refused (%d), said (%s)", e, err);
	snprintf(ep, sizeof(ep), "ipc://%s", gone);
	e = wd_endpoint_connect_errno(ep, 1000);
	CHECK(e == ENOENT && wd_hs_unreachable(ep, "ingest", e, 5, err, sizeof(err)) == 1 &&
	      strstr(err, "no socket at"), "ipc, no file: ENOENT (%d), said (%s)", e, err);
	unlink(live);	/* main's listener left its file */
	fd = unix_socket(live, 1);
	snprintf(ep, sizeof(ep), "ipc://%s", live);
	e = wd_endpoint_connect_errno(ep, 1000);
	CHECK(fd >= 0 && e == 0 && wd_hs_unreachable(ep, "ingest", e, 5, err, sizeof(err)) == 0,
	      "ipc, a listener: connected, no verdict (%d)", e);
	if (fd >= 0)
		close(fd);

	fd = tcp_socket(0, &port);	/* bound, not listening: its port refuses */
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
	e = wd_endpoint_connect_errno(ep, 1000);
	err[0] = 0;
	CHECK(fd >= 0 && e == ECONNREFUSED && wd_hs_unreachable(ep, "ingest", e, 5, err, sizeof(err)) == 1 &&
	      strstr(err, "nothing listens at tcp://127.0.0.1:") && strstr(err, "listen.ingest") &&
	      strstr(err, "for 5 s"), "tcp, a port with no listener: refused (%d), said (%s)", e, err);
	if (fd >= 0)
		close(fd);
	fd = tcp_socket(1, &port);
	snprintf(ep, sizeof(ep), "tcp://localhost:%d", port);
	e = wd_endpoint_connect_errno(ep, 1000);
	CHECK(fd >= 0 && e == 0 && wd_hs_unreachable(ep, "ingest", e, 5, err, sizeof(err)) == 0,
	      "tcp, a listener, by name: connected, no verdict (%d)", e);
	if (fd >= 0)
		close(fd);
	e = wd_endpoint_connect_errno("tcp://no-such-host.invalid:5555", 1000);
	err[0] = 0;
	CHECK(e == ENXIO && wd_hs_unreachable("tcp://no-such-host.invalid:5555", "ingest", e, 5, err,
					      sizeof(err)) == 1 && strstr(err, "(no-such-host.invalid) does not resolve"),
	      "tcp, a name that does not resolve: ENXIO (%d), said (%s)", e, err);
	e = wd_endpoint_connect_errno("tcp://127.0.0.1;no-such-host.invalid:5555", 1000);
	err[0] = 0;
	CHECK(e == ENXIO && wd_hs_unreachable("tcp://127.0.0.1;no-such-host.invalid:5555", "ingest", e, 5, err,
					      sizeof(err)) == 1 && strstr(err, "(no-such-host.invalid) does not"),
	      "tcp, with ZeroMQ's SOURCE; before the host: the host named (%d, %s)", e, err);
	snprintf(ep, sizeof(ep), "ipc://@wdrift-test-nobody-%d", (int)getpid());
	e = wd_endpoint_connect_errno(ep, 1000);
	err[0] = 0;
	CHECK(e == ECONNREFUSED && wd_hs_unreachable(ep, "ingest", e, 5, err, sizeof(err)) == 1 &&
	      strstr(err, "nothing listens on the abstract socket @wdrift-test-nobody-") &&
	      !strstr(err, "socket file"), "ipc, an abstract name nothing listens on: said as such (%s)", err);
	CHECK(wd_endpoint_connect_errno("tcp://127.0.0.1", 1000) == EINVAL &&
	      wd_endpoint_connect_errno("inproc://x", 1000) == EINVAL, "no port, or inproc://: EINVAL");
	CHECK(wd_hs_unreachable("tcp://10.0.0.1:5555", NULL, ETIMEDOUT, 5, err, sizeof(err)) == 0 &&
	      wd_hs_unreachable("tcp://10.0.0.1:5555", NULL, EAGAIN, 5, err, sizeof(err)) == 0,
	      "no answer yet, or busy: no verdict");
}

int main(void)
{
	char dir[] = "/tmp/wdrift-test-hs-XXXXXX", stale[256], live[256], gone[256], ep[300], err[1024];
	struct wd_hs h = { 0 };
	int fd;

	if (!mkdtemp(dir)) {
		CHECK(0, "make a temporary directory");
		return tap_done();
	}
	snprintf(stale, sizeof(stale), "%s/stale.sock", dir);
	snprintf(live, sizeof(live), "%s/live.sock", dir);
	snprintf(gone, sizeof(gone), "%s/gone.sock", dir);

	/* the clock: started by a failed connect, stopped by a connection */
	wd_hs_event(&h, ZMQ_EVENT_CONNECT_RETRIED, 0, "ipc:///x", NULL, NULL, NULL, 0);
	CHECK(h.refused_since > 0 && !h.connected, "a failed connect starts the clock");
	double first = h.refused_since;
	wd_hs_event(&h, ZMQ_EVENT_CONNECT_RETRIED, 0, "ipc:///x", NULL, NULL, NULL, 0);
	CHECK(h.refused_since == first, "the next failed connect keeps its start");
	wd_hs_event(&h, ZMQ_EVENT_CONNECTED, 0, "ipc:///x", NULL, NULL, NULL, 0);
	CHECK(h.connected && h.refused_since == 0, "a connection stops it");
	wd_hs_event(&h, ZMQ_EVENT_CONNECT_RETRIED, 0, "ipc:///x", NULL, NULL, NULL, 0);
	CHECK(h.refused_since == 0, "after a connection, a failed reconnect does not start it again");

	/* a file nothing listens on: after WD_HS_REFUSED_S, not before */
	CHECK(unix_socket(stale, 0) == 0, "a socket file left with nothing listening");
	snprintf(ep, sizeof(ep), "ipc://%s", stale);
	h = refused_for(WD_HS_REFUSED_S / 2);
	CHECK(wd_hs_stale_socket(&h, ep, "control", err, sizeof(err)) == 0, "refused for half the time: no verdict yet");
	h = refused_for(WD_HS_REFUSED_S + 0.1);
	err[0] = 0;
	CHECK(wd_hs_stale_socket(&h, ep, "control", err, sizeof(err)) == 1 && strstr(err, "nothing listens on the socket file") &&
	      strstr(err, stale) && strstr(err, "SIGKILL"), "refused for longer: stale, named (%s)", err);

	/* one a listener holds: the wait goes on, its clock restarted */
	fd = unix_socket(live, 1);
	CHECK(fd >= 0, "a listening socket file");
	snprintf(ep, sizeof(ep), "ipc://%s", live);
	h = refused_for(WD_HS_REFUSED_S + 0.1);
	double before = h.refused_since;
	CHECK(wd_hs_stale_socket(&h, ep, "control", err, sizeof(err)) == 0 && h.refused_since > before,
	      "something listens: no verdict, the clock restarted");
	if (fd >= 0)
		close(fd);

	/* a file gone meanwhile */
	snprintf(ep, sizeof(ep), "ipc://%s", gone);
	h = refused_for(WD_HS_REFUSED_S + 0.1);
	err[0] = 0;
	CHECK(wd_hs_stale_socket(&h, ep, "control", err, sizeof(err)) == 1 && strstr(err, "no socket at") &&
	      strstr(err, "is wdriftd running?"), "the file gone: said as no socket (%s)", err);

	/*
	 * Endpoints with no file: judged by a connect of their own too (a
	 * trial's `status --endpoint tcp://` typo waited 4.5 s for "not
	 * answering", where the publisher said "nothing listens").
	 */
	int port, tfd = tcp_socket(0, &port);	/* bound, not listening: its port refuses */
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
	h = refused_for(WD_HS_REFUSED_S / 2);
	CHECK(wd_hs_stale_socket(&h, ep, "control", err, sizeof(err)) == 0, "tcp, refused for half the time: no verdict yet");
	h = refused_for(WD_HS_REFUSED_S + 0.1);
	err[0] = 0;
	CHECK(wd_hs_stale_socket(&h, ep, "control", err, sizeof(err)) == 1 && strstr(err, "nothing listens at tcp://127.0.0.1:") &&
	      strstr(err, "listen.control?"), "tcp, a port with no listener: said, naming the socket's key (%s)", err);
	if (tfd >= 0)
		close(tfd);
	tfd = tcp_socket(1, &port);
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
	h = refused_for(WD_HS_REFUSED_S + 0.1);
	before = h.refused_since;
	CHECK(wd_hs_stale_socket(&h, ep, "control", err, sizeof(err)) == 0 && h.refused_since > before,
	      "tcp, a listener: no verdict, the clock restarted");
	if (tfd >= 0)
		close(tfd);
	h = refused_for(WD_HS_REFUSED_S + 0.1);
	err[0] = 0;
	CHECK(wd_hs_stale_socket(&h, "ipc://@wdrift-test-nothing-here", "control", err, sizeof(err)) == 1 &&
	      strstr(err, "nothing listens on the abstract socket"), "the abstract namespace, nothing bound: said (%s)",
	      err);
	/* a state that connected: never a verdict */
	snprintf(ep, sizeof(ep), "ipc://%s", stale);
	h = refused_for(WD_HS_REFUSED_S + 0.1);
	h.connected = 1;
	CHECK(wd_hs_stale_socket(&h, ep, "control", err, sizeof(err)) == 0, "once connected: not judged");

	own_connects(stale, live, gone);

	/*
	 * A relative endpoint naming a directory (the daemon's run/): said as
	 * the whole path, as the publisher's open says it (a review: "./run"
	 * here, "/cwd/run" there)
	 */
	char sub[300], cwd[4096] = "", want[4400], back[4096];
	snprintf(sub, sizeof(sub), "%s/run", dir);
	CHECK(getcwd(back, sizeof(back)) && mkdir(sub, 0700) == 0 && chdir(dir) == 0 && getcwd(cwd, sizeof(cwd)),
	      "a run/ directory, and its parent the working directory");
	snprintf(want, sizeof(want), "%s/run is a directory, not a socket: the endpoint ipc://./run must", cwd);
	err[0] = 0;
	CHECK(wd_hs_unreachable("ipc://./run", "ingest", ECONNREFUSED, 5, err, sizeof(err)) == 1 &&
	      !strncmp(err, want, strlen(want)), "a relative directory: said whole (%s)", err);
	CHECK(chdir(back) == 0, "back to the first working directory");
	rmdir(sub);

	unlink(stale);
	unlink(live);
	rmdir(dir);
	return tap_done();
}
