/*
 * metrics_http.h: the /metrics HTTP endpoint (listen.metrics,
 * docs/metrics.md), served by libmicrohttpd with no thread of its own: the
 * main loop polls its epoll descriptor beside the ZeroMQ sockets and calls
 * metrics_http_run, so that each body is built on the main thread
 * (metrics.h) with no locks. Only this file pair includes microhttpd.h.
 */
#ifndef WD_METRICS_HTTP_H
#define WD_METRICS_HTTP_H

#include <stddef.h>

struct control;
struct metrics_http;

/*
 * Binds HOST:PORT (listen.metrics) and serves GET /metrics from c, which
 * must outlive the server. Returns 0, or -1 with err (the address named).
 */
int metrics_http_start(const char *hostport, const struct control *c, struct metrics_http **out,
		       char *err, size_t errlen);
/* The descriptor to poll for reading; -1 without a server (m NULL). */
int metrics_http_fd(const struct metrics_http *m);
/*
 * Caps *timeout_ms (the loop's poll timeout) at when the server must run
 * next (its connections' timeouts); nothing without a server.
 */
void metrics_http_timeout(struct metrics_http *m, long *timeout_ms);
/*
 * After each poll: accepts, reads, answers and times out connections when
 * readable (its fd polled readable) or when its timeout said so. Never
 * blocks.
 */
void metrics_http_run(struct metrics_http *m, int readable);
/* Closes every connection and the socket; *m becomes NULL. */
void metrics_http_stop(struct metrics_http **m);

#endif
