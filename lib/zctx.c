/*
 * zctx.c: the ZeroMQ context every part of wdrift opens its sockets in
 * (zctx.h).
 */
#include <zmq.h>

#include "zctx.h"

void *wd_zmq_ctx_new(void)
{
	void *ctx = zmq_ctx_new();

	if (ctx)
		zmq_ctx_set(ctx, ZMQ_IPV6, 1);	/* a default of the sockets made after it */
	return ctx;
}
