/*
 * ckpt_sandbox.c: checkpoint files read in a resource-limited child process
 * (ckpt_sandbox.h, docs/checkpoints.md#sandbox). Linux only: memfd, prctl,
 * SCM_RIGHTS, close_range. Must not include hdf5.h: the parent never runs
 * libhdf5 on these files, and the child reaches it only through
 * checkpoint.h.
 *
 * The parent and its child share a stream socket. The child sends frames
 * (a length, then that many bytes): first the listing, then one reply per
 * request. A request is a tensor's index and its CPU budget, with a memfd
 * of the tensor's size passed along (SCM_RIGHTS); the child reads the
 * tensor straight into it. A reply is a status (0 or a negative errno) and,
 * on failure, the reader's message. One request is in flight at a time,
 * and the parent waits for each frame against a deadline; a child that
 * misses one, dies, or sends nonsense is killed and reaped, and the box is
 * dead from then on.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "ckpt_sandbox.h"
#include "error.h"
#include "units.h"

/*
 * AddressSanitizer reserves terabytes of shadow address space, so no
 * RLIMIT_AS can apply under it, and it writes its reports to files, which
 * RLIMIT_FSIZE = 0 would kill: both are left off in such builds (the tests
 * of the memory limit skip there).
 */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define CHILD_FILES 16		/* RLIMIT_NOFILE: stdio, the socket, a memfd, HDF5's file */
#define CHILD_EXIT_OOM 3	/* the child could not build a reply */
#define READ_REPLY_MAX (1 << 20)	/* a read's reply: a status and a message */
#define MIN_MEMORY (16ull << 20)

/* "64 MiB", "11.5 GiB": for messages. */
static const char *format_bytes(char *buf, size_t size, uint64_t v)
{
	if (v >= 1ull << 30)
		snprintf(buf, size, "%.4g GiB", (double)v / (1ull << 30));
	else
		snprintf(buf, size, "%.4g MiB", (double)v / (1ull << 20));
	return buf;
}

int wd_sandbox_limits_env(struct wd_sandbox_limits *lim, char *err, size_t errlen)
{
	const char *t = getenv(WD_SANDBOX_ENV_TIMEOUT), *m = getenv(WD_SANDBOX_ENV_MEMORY);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	char *end;

	lim->seconds = WD_SANDBOX_TIMEOUT_DEFAULT;
	lim->memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : 0;
	if (lim->memory < 1ull << 30)
		lim->memory = 1ull << 30;
	if (t && *t) {
		lim->seconds = strtod(t, &end);
		if (*end || !isfinite(lim->seconds) || lim->seconds <= 0) {
			snprintf(err, errlen, "%s '%s': expected seconds, more than 0", WD_SANDBOX_ENV_TIMEOUT, t);
			return -EINVAL;
		}
	}
	if (m && *m && (wd_parse_size(m, &lim->memory) < 0 || lim->memory < MIN_MEMORY)) {
		snprintf(err, errlen, "%s '%s': expected bytes, at least 16M, with an optional suffix K, M, G or T",
			 WD_SANDBOX_ENV_MEMORY, m);
		return -EINVAL;
	}
	return 0;
}

/* --- the reply: built by the child, parsed by the parent --- */

struct msg {
	unsigned char *p;
	size_t len, cap;
	int oom;
};

/* Room for n more bytes at the end of m, counted in m->len; NULL (and oom) when there is none. */
static unsigned char *msg_grow(struct msg *m, size_t n)
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

static void msg_put(struct msg *m, const void *data, size_t n)
{
	unsigned char *to = msg_grow(m, n);

	if (to && n)
		memcpy(to, data, n);
}

static void msg_u64(struct msg *m, uint64_t v)
{
	msg_put(m, &v, sizeof(v));
}

static void msg_str(struct msg *m, const char *s)
{
	msg_u64(m, strlen(s));
	msg_put(m, s, strlen(s));
}

/* Reading a reply: any short or out-of-bounds field sets bad. */
struct cursor {
	const unsigned char *p;
	size_t left;
	int bad;
};

static uint64_t get_u64(struct cursor *c)
{
	uint64_t v = 0;

	if (c->left < sizeof(v)) {
		c->bad = 1;
		return 0;
	}
	memcpy(&v, c->p, sizeof(v));
	c->p += sizeof(v);
	c->left -= sizeof(v);
	return v;
}

/* A string of fewer than max bytes, with no NUL in it, copied into buf. */
static void get_str(struct cursor *c, char *buf, size_t max)
{
	uint64_t n = get_u64(c);

	if (c->bad || n >= max || n > c->left || memchr(c->p, 0, n)) {
		c->bad = 1;
		buf[0] = 0;
		return;
	}
	memcpy(buf, c->p, n);
	buf[n] = 0;
	c->p += n;
	c->left -= n;
}

/* --- the box, as the parent holds it --- */

struct wd_ckpt_box {
	struct wd_ckpt *listing;	/* adopted: no HDF5 file open in this process */
	struct wd_sandbox_limits lim;
	pid_t pid;			/* 0 once reaped */
	int sock;			/* -1 once closed */
	char dead[WD_CKPT_ERR_MAX];	/* why the child ended, for every later read */
};

/* What a request asks of the child; a memfd of the tensor's size comes with it. */
struct request {
	uint64_t index;
	double seconds;		/* the CPU the read may take */
};

/* --- the child --- */

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
	if (!UNDER_ASAN) {
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

/* Sends one frame and empties m; exits when that fails or m could not be built. */
static void child_send(int sock, struct msg *m)
{
	uint64_t len = m->len;

	if (m->oom)
		_exit(CHILD_EXIT_OOM);
	if (write_all(sock, &len, sizeof(len)) < 0 || write_all(sock, m->p, m->len) < 0)
		_exit(1);
	free(m->p);
	*m = (struct msg){ 0 };
}

/* A failed step's reply: the reader's status and message. */
static void reply_error(struct msg *reply, int status, const char *err)
{
	msg_u64(reply, (uint64_t)(int64_t)status);
	msg_str(reply, err);
}

static void put_listing(struct msg *reply, const struct wd_ckpt *c)
{
	msg_u64(reply, 0);
	msg_u64(reply, wd_ckpt_count(c));
	for (size_t i = 0; i < wd_ckpt_count(c); i++) {
		const struct wd_ckpt_entry *e = wd_ckpt_entry(c, i);
		msg_str(reply, e->name);
		msg_str(reply, e->problem);
		msg_u64(reply, e->dtype);
		msg_u64(reply, e->numel);
		msg_u64(reply, (uint64_t)e->rank);
		for (int d = 0; d < e->rank; d++)
			msg_u64(reply, e->dims[d]);
	}
}

/* The next request and its memfd; -1 when the parent is gone or sent nonsense. */
static int recv_request(int sock, struct request *rq, int *fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { rq, sizeof(*rq) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *c;
	ssize_t n;

	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	c = n == (ssize_t)sizeof(*rq) ? CMSG_FIRSTHDR(&mh) : NULL;
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof(int)))
		return -1;
	memcpy(fd, CMSG_DATA(c), sizeof(int));
	return 0;
}

/* Reads the requested tensor into the memfd; the reply says how it went. */
static void child_read(struct wd_ckpt *c, const struct request *rq, int fd, struct msg *reply)
{
	char err[WD_CKPT_ERR_MAX];
	size_t bytes;
	void *dst;
	int r;

	cpu_budget(rq->seconds);
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
	if (r < 0)
		reply_error(reply, r, err);
	else
		msg_u64(reply, 0);
}

static void __attribute__((noreturn)) child_main(const char *path, const struct wd_sandbox_limits *lim,
						 int sock, pid_t parent)
{
	char err[WD_CKPT_ERR_MAX];
	struct msg reply = { 0 };
	struct wd_ckpt *c;
	struct request rq;
	int fd, r;

	/* dies with the parent, also one that died before this line */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(1);
	sock = child_confine(sock, lim);
	if ((r = wd_ckpt_open(path, &c, err)) < 0) {
		reply_error(&reply, r, err);
		child_send(sock, &reply);
		_exit(0);
	}
	put_listing(&reply, c);
	child_send(sock, &reply);
	while (recv_request(sock, &rq, &fd) == 0) {
		child_read(c, &rq, fd, &reply);
		close(fd);
		child_send(sock, &reply);
	}
	_exit(0);	/* the parent closed the socket: the file needs no closing */
}

/* --- the parent --- */

static double seconds_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

enum outcome { CHILD_TIMED_OUT, CHILD_ENDED, CHILD_SENT_TOO_MUCH };

/*
 * Ends the child and reaps it, and says in err (and b->dead) what became
 * of it during what. SIGKILL goes to a child that has already exited too:
 * that changes nothing of its status. Returns -1.
 */
static int box_end(struct wd_ckpt_box *b, const char *what, enum outcome o, double seconds,
		   char *err)
{
	const char *path = wd_ckpt_path(b->listing);
	char lim[32];
	int status = 0;

	kill(b->pid, SIGKILL);
	while (waitpid(b->pid, &status, 0) < 0 && errno == EINTR)
		;
	b->pid = 0;
	close(b->sock);
	b->sock = -1;
	if (o == CHILD_TIMED_OUT)
		wd_error(err, WD_CKPT_ERR_MAX,
			 "'%s': %s: timed out after %.3g s (%s); the file may be damaged or hostile",
			 path, what, seconds, WD_SANDBOX_ENV_TIMEOUT);
	else if (o == CHILD_SENT_TOO_MUCH)
		wd_error(err, WD_CKPT_ERR_MAX,
			 "'%s': %s: the reader's reply is larger than the memory limit (%s)", path,
			 what, WD_SANDBOX_ENV_MEMORY);
	else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
		wd_error(err, WD_CKPT_ERR_MAX,
			 "'%s': %s: timed out after %.3g s of CPU time (%s); the file may be damaged or hostile",
			 path, what, ceil(seconds) + 1, WD_SANDBOX_ENV_TIMEOUT);
	else if (WIFSIGNALED(status))
		wd_error(err, WD_CKPT_ERR_MAX,
			 "'%s': %s: the reader crashed with signal %d (SIG%s); the file may be damaged or hostile",
			 path, what, WTERMSIG(status),
			 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
	else if (WIFEXITED(status) && WEXITSTATUS(status) == CHILD_EXIT_OOM)
		wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: exceeded the memory limit of %s (%s)", path,
			 what, format_bytes(lim, sizeof(lim), b->lim.memory), WD_SANDBOX_ENV_MEMORY);
	else
		wd_error(err, WD_CKPT_ERR_MAX,
			 "'%s': %s: the reader ended with status %d before its reply", path, what,
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	snprintf(b->dead, sizeof(b->dead), "%s", err);
	return -1;
}

/*
 * Reads the child's next frame into reply within seconds. 0, or -1 with
 * the child ended (box_end) when it misses the deadline, closes the
 * socket, or announces more than cap bytes.
 */
static int await_frame(struct wd_ckpt_box *b, const char *what, double seconds, size_t cap,
		       struct msg *reply, char *err)
{
	struct timespec t0;
	uint64_t need = 0;
	size_t have_len = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	reply->len = 0;
	for (;;) {
		double left = seconds - seconds_since(&t0);
		struct pollfd p = { b->sock, POLLIN, 0 };
		ssize_t n;

		if (left <= 0)
			return box_end(b, what, CHILD_TIMED_OUT, seconds, err);
		if (poll(&p, 1, left > 60 ? 60000 : (int)ceil(left * 1000)) <= 0)
			continue;	/* a signal, or the time: checked above */
		if (have_len < sizeof(need)) {
			n = read(b->sock, (char *)&need + have_len, sizeof(need) - have_len);
			if (n > 0 && (have_len += (size_t)n) == sizeof(need) && need > cap)
				return box_end(b, what, CHILD_SENT_TOO_MUCH, seconds, err);
		} else {
			size_t chunk = need - reply->len < (1 << 16) ? need - reply->len : 1 << 16;
			unsigned char *to = msg_grow(reply, chunk);
			if (!to)
				return box_end(b, what, CHILD_SENT_TOO_MUCH, seconds, err);
			n = read(b->sock, to, chunk);
			reply->len -= chunk - (n > 0 ? (size_t)n : 0);
		}
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return box_end(b, what, CHILD_ENDED, seconds, err);
		if (have_len == sizeof(need) && reply->len == need)
			return 0;
	}
}

/*
 * The status at the head of a reply; on a failure, err: the reader's own
 * message (it names the file), or the memory limit's when it ran out.
 */
static int reply_status(const struct wd_ckpt_box *b, const char *what, struct cursor *cur,
			char *err)
{
	int64_t status = (int64_t)get_u64(cur);
	char lim[32];

	if (cur->bad)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: the reader's reply is malformed",
				wd_ckpt_path(b->listing), what);
	if (status == 0)
		return 0;
	if (status == -ENOMEM)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: exceeded the memory limit of %s (%s)",
				wd_ckpt_path(b->listing), what, format_bytes(lim, sizeof(lim), b->lim.memory),
				WD_SANDBOX_ENV_MEMORY);
	get_str(cur, err, WD_CKPT_ERR_MAX);
	if (cur->bad)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: the reader's reply is malformed",
				wd_ckpt_path(b->listing), what);
	return -1;
}

/* Decodes one listed entry, checking what the parent will rely on. */
static void get_entry(struct cursor *cur, struct wd_ckpt_entry *e, char *name, size_t name_max)
{
	get_str(cur, name, name_max);
	get_str(cur, e->problem, sizeof(e->problem));
	uint64_t dtype = get_u64(cur), rank;
	e->numel = get_u64(cur);
	rank = get_u64(cur);
	if (dtype >= WD_DTYPE_COUNT || rank > WD_CKPT_MAX_RANK) {
		cur->bad = 1;
		return;
	}
	e->dtype = (enum wd_dtype)dtype;
	e->rank = (int)rank;
	for (int d = 0; d < e->rank; d++)
		e->dims[d] = get_u64(cur);
}

static void entries_free(struct wd_ckpt_entry *e, size_t n)
{
	for (size_t i = 0; e && i < n; i++)
		free(e[i].name);
	free(e);
}

/* The listing frame, into b->listing (a placeholder path-only listing holds the path until then). */
static int parse_listing(struct wd_ckpt_box *b, const char *path, const struct msg *reply, char *err)
{
	static const char what[] = "listing datasets";
	struct cursor cur = { reply->p, reply->len, 0 };
	struct wd_ckpt_entry *e = NULL;
	struct wd_ckpt *listing;
	char *name = NULL;
	uint64_t n;

	if (reply_status(b, what, &cur, err) < 0)
		return -1;
	n = get_u64(&cur);
	/* an entry takes at least 5 fields of 8 bytes: a count beyond that is a lie */
	if (cur.bad || n > cur.left / 40)
		goto bad;
	e = calloc(n + 1, sizeof(*e));
	name = malloc(cur.left + 1);
	if (!e || !name)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		get_entry(&cur, &e[i], name, cur.left + 1);
		if (cur.bad)
			goto bad;
		if (!(e[i].name = strdup(name)))
			goto oom;
	}
	if (cur.left)
		goto bad;
	if (wd_ckpt_adopt(path, e, n, &listing) < 0)
		goto oom;
	wd_ckpt_close(&b->listing);
	b->listing = listing;
	free(name);
	return 0;
oom:
	entries_free(e, n);
	free(name);
	return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: out of memory", path, what);
bad:
	entries_free(e, n);
	free(name);
	return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: the reader's reply is malformed", path, what);
}

int wd_ckpt_box_open(const char *path, const struct wd_sandbox_limits *lim,
		     struct wd_ckpt_box **out, char *err)
{
	struct wd_ckpt_box *b = calloc(1, sizeof(*b));
	struct msg reply = { 0 };
	pid_t parent = getpid();
	int sv[2], r = -1;

	*out = NULL;
	/* until the listing comes: an empty one that holds the path, for messages */
	if (!b || wd_ckpt_adopt(path, NULL, 0, &b->listing) < 0) {
		free(b);
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': out of memory", path);
	}
	b->lim = *lim;
	b->sock = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		wd_error(err, WD_CKPT_ERR_MAX, "'%s': cannot start the reader: %s", path, strerror(errno));
		goto out;
	}
	b->pid = fork();
	if (b->pid == 0) {
		close(sv[0]);
		child_main(path, lim, sv[1], parent);
	}
	close(sv[1]);
	if (b->pid < 0) {
		b->pid = 0;
		close(sv[0]);
		wd_error(err, WD_CKPT_ERR_MAX, "'%s': cannot start the reader: %s", path, strerror(errno));
		goto out;
	}
	b->sock = sv[0];
	fcntl(b->sock, F_SETFL, O_NONBLOCK);
	r = await_frame(b, "listing datasets", lim->seconds, (size_t)lim->memory, &reply, err);
	if (r == 0)
		r = parse_listing(b, path, &reply, err);
out:
	free(reply.p);
	if (r < 0)
		wd_ckpt_box_close(&b);
	*out = b;
	return r;
}

const struct wd_ckpt *wd_ckpt_box_listing(const struct wd_ckpt_box *b)
{
	return b->listing;
}

/* Sends a request with its memfd; -1 when the child is gone. */
static int send_request(int sock, const struct request *rq, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { (void *)rq, sizeof(*rq) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	ssize_t n;

	memset(&ctl, 0, sizeof(ctl));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(*rq) ? 0 : -1;
}

int wd_ckpt_box_read(struct wd_ckpt_box *b, size_t i, struct wd_tensor_map *m, char *err)
{
	const char *path = wd_ckpt_path(b->listing);
	struct request rq = { i, 0 };
	struct msg reply = { 0 };
	struct cursor cur;
	char what[256], need[32], have[32];
	size_t bytes;
	void *data;
	int fd = -1, r;

	*m = (struct wd_tensor_map){ 0 };
	if (!b->pid)
		return wd_error(err, WD_CKPT_ERR_MAX, "%s", b->dead);
	if (wd_ckpt_check(b->listing, i, &bytes, err) < 0)
		return -1;
	snprintf(what, sizeof(what), "dataset '%s'", wd_ckpt_entry(b->listing, i)->name);
	if (bytes > b->lim.memory)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: its %s exceed the memory limit of %s (%s)",
				path, what, format_bytes(need, sizeof(need), bytes),
				format_bytes(have, sizeof(have), b->lim.memory), WD_SANDBOX_ENV_MEMORY);
	rq.seconds = b->lim.seconds + (double)bytes / (double)WD_SANDBOX_BYTES_PER_S;
	fd = memfd_create("wdrift-tensor", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0) {
		r = wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: cannot make room for %s: %s", path, what,
			     format_bytes(need, sizeof(need), bytes), strerror(errno));
		goto out;
	}
	if (send_request(b->sock, &rq, fd) < 0)
		r = box_end(b, what, CHILD_ENDED, rq.seconds, err);
	else
		r = await_frame(b, what, rq.seconds, READ_REPLY_MAX, &reply, err);
	cur = (struct cursor){ reply.p, reply.len, 0 };
	if (r < 0 || (r = reply_status(b, what, &cur, err)) < 0)
		goto out;
	data = mmap(NULL, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (data == MAP_FAILED) {
		r = wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: cannot map %s: %s", path, what,
			     format_bytes(need, sizeof(need), bytes), strerror(errno));
		goto out;
	}
	*m = (struct wd_tensor_map){ data, bytes };
out:
	if (fd >= 0)
		close(fd);
	free(reply.p);
	return r;
}

void wd_tensor_map_release(struct wd_tensor_map *m)
{
	if (m->data)
		munmap((void *)m->data, m->bytes);
	*m = (struct wd_tensor_map){ 0 };
}

void wd_ckpt_box_close(struct wd_ckpt_box **pb)
{
	struct wd_ckpt_box *b = *pb;

	if (!b)
		return;
	if (b->pid) {
		kill(b->pid, SIGKILL);
		while (waitpid(b->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (b->sock >= 0)
		close(b->sock);
	wd_ckpt_close(&b->listing);
	free(b);
	*pb = NULL;
}
