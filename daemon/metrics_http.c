/*
 * metrics_http.c: the /metrics endpoint over libmicrohttpd (see
 * metrics_http.h and docs/metrics.md). MHD runs in "external epoll" mode:
 * no thread of its own; its epoll descriptor sits in the main loop's
 * zmq_poll, and MHD_run, called from the loop, accepts, parses, answers
 * and times out connections. The request handler therefore runs on the
 * main thread, where metrics_render may read the daemon's state unlocked.
 *
 * HTTP parsing is MHD's; what is ours is the policy: GET and HEAD of
 * /metrics only, a bounded number of connections, a bounded request size
 * and an idle timeout, so that no client can hold the daemon.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "config.h"
#include "error.h"
#include "logging.h"
#include "metrics.h"
#include "metrics_http.h"
#include "state.h"

#define METRICS_CONNECTIONS 16		/* at once; more wait in the listen backlog */
#define METRICS_IDLE_SECONDS 10		/* a connection silent that long is closed */
#define METRICS_REQUEST_MEMORY (32 << 10)	/* bytes per connection: the request line and
						   headers must fit, else 414 or 431 */
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct metrics_http {
	struct MHD_Daemon *mhd;
	const struct control *c;
	int fd;			/* MHD's epoll descriptor */
	double due;		/* monotonic: when MHD_get_timeout asked MHD_run to run; 0: not asked */
	char where[80];		/* HOST:PORT, for log lines */
};

/* MHD's messages (a malformed request, a failed accept): not ours to shout. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = 0;
	log_info("metrics: %s", line);
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *text,
				  const char *allow)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
								 MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ok;

	if (!r)
		return MHD_NO;	/* MHD closes the connection */
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	ok = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ok;
}

/*
 * MHD's access handler, called once the request line and headers are in.
 * Answers at once, on the first call: a request body (a POST's) is never
 * read, and MHD closes such a connection after the reply.
 */
static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct metrics_http *m = cls;
	struct MHD_Response *r;
	enum MHD_Result ok;
	size_t len;
	char *body;

	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)con_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
				  "method not allowed: GET /metrics\n", "GET, HEAD");
	if (strcmp(url, "/metrics"))
		return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n",
				  NULL);
	if (!(body = metrics_render(m->c, &len))) {
		log_err("metrics: out of memory building the /metrics body");
		return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
	}
	if (!(r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE))) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
	ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ok;
}

int metrics_http_start(const char *hostport, const struct control *c, struct metrics_http **out,
		       char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	char host[64], why[256];
	struct metrics_http *m;
	int port;

	*out = NULL;
	if (wd_config_hostport(hostport, host, sizeof(host), &port, why, sizeof(why)) < 0)
		return wd_error(err, errlen, "listen.metrics: %s", why);
	memset(&ss, 0, sizeof(ss));
	if (strchr(host, ':')) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		inet_pton(AF_INET6, host, &a->sin6_addr);	/* checked by wd_config_hostport */
		flags |= MHD_USE_IPv6;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		inet_pton(AF_INET, host, &a->sin_addr);
	}
	if (!(m = calloc(1, sizeof(*m))))
		return wd_error(err, errlen, "listen.metrics: out of memory");
	m->c = c;
	m->fd = -1;
	snprintf(m->where, sizeof(m->where), "%s", hostport);
	errno = 0;
	m->mhd = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, answer, m,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_CONNECTIONS,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IDLE_SECONDS,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)METRICS_REQUEST_MEMORY,
				  MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,	/* main() ignores SIGPIPE */
				  MHD_OPTION_END);
	if (!m->mhd) {
		int e = errno;
		free(m);
		return wd_error(err, errlen, "listen.metrics: cannot serve HTTP on '%s': %s", hostport,
				e ? strerror(e) : "libmicrohttpd refused (the line above says why)");
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info || info->epoll_fd < 0) {
		MHD_stop_daemon(m->mhd);
		free(m);
		return wd_error(err, errlen, "listen.metrics: libmicrohttpd has no epoll descriptor");
	}
	m->fd = info->epoll_fd;
	log_notice("metrics: listening on http://%s/metrics", hostport);	/* off loopback: main.c warns */
	*out = m;
	return 0;
}

int metrics_http_fd(const struct metrics_http *m)
{
	return m ? m->fd : -1;
}

void metrics_http_timeout(struct metrics_http *m, long *timeout_ms)
{
	MHD_UNSIGNED_LONG_LONG t;

	if (!m)
		return;
	/* a kept-alive connection's timeout is seconds away: not a reason to run each pass */
	m->due = MHD_get_timeout(m->mhd, &t) == MHD_YES ? now_mono() + (double)t / 1000.0 : 0;
	if (m->due && (MHD_UNSIGNED_LONG_LONG)*timeout_ms > t)
		*timeout_ms = (long)t;
}

void metrics_http_run(struct metrics_http *m, int readable)
{
	if (!m || !(readable || (m->due && now_mono() >= m->due)))
		return;
	/*
	 * MHD's sockets are edge-triggered in its epoll set: one MHD_run
	 * handles what each is ready for, and a connection left with work
	 * asks for a zero timeout, which the next round's poll honours.
	 */
	if (MHD_run(m->mhd) != MHD_YES)
		log_debug("metrics: MHD_run failed on %s", m->where);
	m->due = 0;
}

void metrics_http_stop(struct metrics_http **pm)
{
	struct metrics_http *m = *pm;

	if (!m)
		return;
	MHD_stop_daemon(m->mhd);
	free(m);
	*pm = NULL;
}
