/*
 * ckpt_sandbox_wire.h: what the two sides of ckpt_sandbox.c share, the
 * parent (ckpt_sandbox.c) and its reader child (ckpt_sandbox_child.c):
 * the frames the child sends and the requests the parent sends. Internal
 * to the checkpoint reader (libwdrift-ckpt.a). The child sends frames (a
 * length, then that many bytes): first the listing, then one reply per
 * request. A request is a tensor's
 * index and its CPU budget, with a memfd of the tensor's size passed along
 * (SCM_RIGHTS). A reply is a status (0 or a negative errno) and, on
 * failure, the reader's message; on success, where the bytes are: in the
 * memfd, which the child filled (READ_IN_MEMFD), or in the file itself
 * (READ_IN_FILE, then the offset), whose descriptor comes with the frame
 * (SCM_RIGHTS), for the parent to map (docs/checkpoints.md#sandbox).
 */
#ifndef WD_CKPT_SANDBOX_WIRE_H
#define WD_CKPT_SANDBOX_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt_sandbox.h"

#define CHILD_EXIT_OOM 3	/* the child could not build a reply */

/* A frame being built (child) or received (parent). */
struct msg {
	unsigned char *p;
	size_t len, cap;
	int oom;
};

/* Room for n more bytes at the end of m, counted in m->len; NULL (and oom) when there is none. */
unsigned char *ckpt_msg_grow(struct msg *m, size_t n);
void ckpt_msg_put(struct msg *m, const void *data, size_t n);
void ckpt_msg_u64(struct msg *m, uint64_t v);
void ckpt_msg_str(struct msg *m, const char *s);

/* Where a read's bytes are, after its status 0. */
enum read_where { READ_IN_MEMFD = 0, READ_IN_FILE = 1 };

/*
 * One sendmsg of len bytes of buf on sock, with fd along (SCM_RIGHTS)
 * unless it is -1; EINTR retried, SIGPIPE never raised. sendmsg's result.
 */
ssize_t ckpt_send_fd(int sock, const void *buf, size_t len, int fd);
/*
 * One recvmsg of at most len bytes into buf on sock, EINTR retried; a
 * descriptor that comes with them (SCM_RIGHTS) goes to *fd when fd is
 * given and *fd is -1, any other is closed. recvmsg's result.
 */
ssize_t ckpt_recv_fd(int sock, void *buf, size_t len, int *fd);

/* What a request asks of the child; a memfd of the tensor's size comes with it. */
struct request {
	uint64_t index;
	double seconds;		/* the CPU the read may take */
};

/*
 * The child's life, right after fork: confines itself, lists path, sends
 * the listing and serves read requests on sock until the parent closes it.
 * parent: the parent's pid, to die with it.
 */
void __attribute__((noreturn)) ckpt_child_main(const char *path, const struct wd_sandbox_limits *lim,
					       int sock, pid_t parent);

#endif
