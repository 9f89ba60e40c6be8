/*
 * zctx.h: the ZeroMQ context every part of wdrift opens its sockets in.
 */
#ifndef WD_ZCTX_H
#define WD_ZCTX_H

/*
 * zmq_ctx_new, with IPv6 on for the sockets made in it: a tcp:// endpoint
 * may then name an IPv6 host ("tcp://[::1]:5555"), which ZeroMQ otherwise
 * refuses with "No such device" (a trial's config passed the check and
 * the daemon could not bind it); IPv4 hosts work as before (a dual-stack
 * socket). NULL with errno on failure, as zmq_ctx_new.
 */
void *wd_zmq_ctx_new(void);

#endif
