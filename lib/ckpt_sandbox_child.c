/*
 * ckpt_sandbox_child.c: the reader child of ckpt_sandbox.c (ckpt_sandbox.h,
 * docs/checkpoints.md#sandbox), from its confinement to its last reply,
 * and the frames it builds (ckpt_sandbox_wire.h). It runs checkpoint.h's
 * reader on the user's file; the parent never does.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "ckpt_sandbox_wire.h"
#include "sanitizer.h"

#define CHILD_FILES 16		/* RLIMIT_NOFILE: stdio, the socket, a memfd, HDF5's file */

/* --- frames --- */

/* Room for n more bytes at the end of m, counted in m->len; NULL (and oom) when there is none. */
unsigned char *ckpt_msg_grow(struct msg *m, size_t n)
{
	if (m->oom)
		return NULL;
	if (m->len + n > m->cap) {
		size_t cap = m->cap ? m->cap : 4096;
		while (cap < m->len + n)
			cap *= 2;
		void *p = realloc(m->p, cap);
		if (!p) {
			m->oom = 1;
			return NULL;
		}
		m->p = p;
		m->cap = cap;
	}
	m->len += n;
	return m->p + m->len - n;
}

void ckpt_msg_put(struct msg *m, const void *data, size_t n)
{
	unsigned char *to = ckpt_msg_grow(m, n);

	if (to && n)
		memcpy(to, data, n);
}

void ckpt_msg_u64(struct msg *m, uint64_t v)
{
	ckpt_msg_put(m, &v, sizeof(v));
}

void ckpt_msg_str(struct msg *m, const char *s)
{
	ckpt_msg_u64(m, strlen(s));
	ckpt_msg_put(m, s, strlen(s));
}


/* Sets a limit, within the hard limit the child already has. */
static void set_limit(int resource, rlim_t soft, rlim_t hard)
{
	struct rlimit now, want;

	if (getrlimit(resource, &now) < 0)
		return;
	want.rlim_max = hard < now.rlim_max ? hard : now.rlim_max;
	want.rlim_cur = soft < want.rlim_max ? soft : want.rlim_max;
	setrlimit(resource, &want);
}

/*
 * Lets the next step use seconds of CPU beyond what the child used so
 * far: SIGXCPU after that. Only the soft limit moves, so that each step
 * can have its own.
 */
static void cpu_budget(double seconds)
{
	struct rusage ru;
	double used = 0;

	if (getrusage(RUSAGE_SELF, &ru) == 0)
		used = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	set_limit(RLIMIT_CPU, (rlim_t)ceil(used + seconds) + 1, RLIM_INFINITY);
}

/* Bytes of address space mapped now (/proc/self/statm); 0 if unknown. */
static uint64_t address_space_used(void)
{
	char buf[128];
	ssize_t n;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return strtoull(buf, NULL, 10) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Closes every fd from 3 up but keep: the caller's sockets and files. */
static void close_fds_except(int keep)
{
	unsigned lo[2] = { 3, (unsigned)keep + 1 }, hi[2] = { (unsigned)keep - 1, ~0u };

	for (int k = 0; k < 2; k++) {
		if (lo[k] > hi[k] || close_range(lo[k], hi[k], 0) == 0)
			continue;
		for (long fd = lo[k], max = sysconf(_SC_OPEN_MAX); fd <= (long)hi[k] && fd < max; fd++)
			close((int)fd);
	}
}

/*
 * The child's confinement, before it touches the file; returns the socket,
 * moved above stdio if the parent ran with 0, 1 or 2 closed. Signals that
 * the parent may catch or block (a daemon's SIGTERM, the CLI's SIGPIPE)
 * and the limits' own get their default action; stdin and stdout become
 * /dev/null (stderr stays, for a sanitizer's report); every other fd the
 * parent had is closed; then the limits.
 */
static int child_confine(int sock, const struct wd_sandbox_limits *lim)
{
	static const int sigs[] = { SIGXCPU, SIGXFSZ, SIGPIPE, SIGINT, SIGTERM, SIGHUP };
	sigset_t none;
	uint64_t mapped;
	int null;

	if (sock <= 2)
		sock = fcntl(sock, F_DUPFD, 3);
	for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++)
		signal(sigs[k], SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if ((null = open("/dev/null", O_RDWR)) >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		if (null > 2)
			close(null);
	}
	mapped = address_space_used();
	close_fds_except(sock);
	prctl(PR_SET_DUMPABLE, 0);
	set_limit(RLIMIT_CORE, 0, 0);
	set_limit(RLIMIT_NOFILE, CHILD_FILES, CHILD_FILES);
	cpu_budget(lim->seconds);
	/*
	 * AddressSanitizer reserves terabytes of shadow address space, so no
	 * RLIMIT_AS can apply under it, and it writes its reports to files,
	 * which RLIMIT_FSIZE = 0 would kill: both are left off in such builds
	 * (the tests of the memory limit skip there).
	 */
	if (!WD_UNDER_ASAN) {
		set_limit(RLIMIT_FSIZE, 0, 0);
		set_limit(RLIMIT_AS, mapped + lim->memory, mapped + lim->memory);
	}
	return sock;
}

static int write_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p = (const char *)p + w;
		n -= (size_t)w;
	}
	return 0;
}

ssize_t ckpt_send_fd(int sock, const void *buf, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (fd >= 0) {
		struct cmsghdr *c;
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n;
}

ssize_t ckpt_recv_fd(int sock, void *buf, size_t len, int *fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	ssize_t n;

	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
			int got;
			memcpy(&got, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
			if (fd && *fd < 0)
				*fd = got;
			else
				close(got);
		}
	}
	return n;
}

/*
 * Sends one frame and empties m; exits when that fails or m could not be
 * built. fd, when not -1, goes with the frame's first bytes (SCM_RIGHTS).
 */
static void child_send(int sock, struct msg *m, int fd)
{
	uint64_t len = m->len;
	ssize_t n;

	if (m->oom)
		_exit(CHILD_EXIT_OOM);
	n = ckpt_send_fd(sock, &len, sizeof(len), fd);
	if (n < 0 || write_all(sock, (char *)&len + n, sizeof(len) - (size_t)n) < 0 ||
	    write_all(sock, m->p, m->len) < 0)
		_exit(1);
	free(m->p);
	*m = (struct msg){ 0 };
}

/* A failed step's reply: the reader's status and message. */
static void reply_error(struct msg *reply, int status, const char *err)
{
	ckpt_msg_u64(reply, (uint64_t)(int64_t)status);
	ckpt_msg_str(reply, err);
}

static void put_listing(struct msg *reply, const struct wd_ckpt *c)
{
	ckpt_msg_u64(reply, 0);
	ckpt_msg_u64(reply, wd_ckpt_count(c));
	for (size_t i = 0; i < wd_ckpt_count(c); i++) {
		const struct wd_ckpt_entry *e = wd_ckpt_entry(c, i);
		ckpt_msg_str(reply, e->name);
		ckpt_msg_str(reply, e->problem);
		ckpt_msg_u64(reply, (uint64_t)e->skippable);
		ckpt_msg_u64(reply, e->dtype);
		ckpt_msg_u64(reply, e->numel);
		ckpt_msg_u64(reply, (uint64_t)e->rank);
		for (int d = 0; d < e->rank; d++)
			ckpt_msg_u64(reply, e->dims[d]);
	}
}

/* The next request and its memfd; -1 when the parent is gone or sent nonsense. */
static int recv_request(int sock, struct request *rq, int *fd)
{
	*fd = -1;
	if (ckpt_recv_fd(sock, rq, sizeof(*rq), fd) == (ssize_t)sizeof(*rq) && *fd >= 0)
		return 0;
	if (*fd >= 0)
		close(*fd);
	return -1;
}

/*
 * Serves one read; the reply says how it went, and where the bytes are.
 * A contiguous dataset that needs no conversion is not read at all: the
 * reply gives its offset, and the file's descriptor goes with it
 * (*file_fd), for the parent to map the file's own pages, which the
 * page cache already holds: no copy, and no memfd pages to zero, fill
 * and free (docs/checkpoints.md#sandbox). Anything else is read into the
 * memfd (H5Dread, which converts).
 */
static void child_read(struct wd_ckpt *c, const struct request *rq, int fd, struct msg *reply,
		       int *file_fd)
{
	struct wd_ckpt_place at;
	char err[WD_CKPT_ERR_MAX];
	size_t bytes;
	void *dst;
	int r;

	*file_fd = -1;
	cpu_budget(rq->seconds);
	if ((r = wd_ckpt_locate(c, rq->index, &at, err)) != 0) {
		if (r < 0) {
			reply_error(reply, r, err);
			return;
		}
		ckpt_msg_u64(reply, 0);
		ckpt_msg_u64(reply, READ_IN_FILE);
		ckpt_msg_u64(reply, at.offset);
		*file_fd = at.fd;
		return;
	}
	if ((r = wd_ckpt_check(c, rq->index, &bytes, err)) < 0) {
		reply_error(reply, r, err);
		return;
	}
	dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (dst == MAP_FAILED) {
		r = errno == ENOMEM ? -ENOMEM : -1;
		snprintf(err, sizeof(err), "'%s': dataset '%s': cannot map %zu bytes: %s",
			 wd_ckpt_path(c), wd_ckpt_entry(c, rq->index)->name, bytes, strerror(errno));
		reply_error(reply, r, err);
		return;
	}
	r = wd_ckpt_read_into(c, rq->index, dst, err);
	munmap(dst, bytes);
	if (r < 0) {
		reply_error(reply, r, err);
	} else {
		ckpt_msg_u64(reply, 0);
		ckpt_msg_u64(reply, READ_IN_MEMFD);
	}
}

void ckpt_child_main(const char *path, const struct wd_sandbox_limits *lim, int sock, pid_t parent)
{
	char err[WD_CKPT_ERR_MAX];
	struct msg reply = { 0 };
	struct wd_ckpt *c;
	struct request rq;
	int fd, file_fd, r;

	/* dies with the parent, also one that died before this line */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(1);
	sock = child_confine(sock, lim);
	if ((r = wd_ckpt_open(path, &c, err)) < 0) {
		reply_error(&reply, r, err);
		child_send(sock, &reply, -1);
		_exit(0);
	}
	put_listing(&reply, c);
	child_send(sock, &reply, -1);
	while (recv_request(sock, &rq, &fd) == 0) {
		child_read(c, &rq, fd, &reply, &file_fd);
		close(fd);
		child_send(sock, &reply, file_fd);
	}
	_exit(0);	/* the parent closed the socket: the file needs no closing */
}
