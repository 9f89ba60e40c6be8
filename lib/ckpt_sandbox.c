/*
 * ckpt_sandbox.c: checkpoint files read in a resource-limited child process
 * (ckpt_sandbox.h, docs/checkpoints.md#sandbox). Linux only: memfd, prctl,
 * SCM_RIGHTS, close_range. Must not include hdf5.h: the parent never runs
 * libhdf5 on these files, and the child reaches it only through
 * checkpoint.h.
 *
 * This file is the parent's side; the child's is ckpt_sandbox_child.c,
 * and what they exchange, ckpt_sandbox_wire.h. One request is in flight
 * per child at a time, and the parent waits for each frame against a
 * deadline; a child that misses one, dies, or sends nonsense is killed and
 * reaped, and the box is dead from then on.
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ckpt_sandbox_wire.h"
#include "error.h"
#include "mapguard.h"
#include "units.h"

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

/* --- the reply, as the parent parses it --- */

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
	int listed;			/* wd_ckpt_box_listed has taken the listing */
	pid_t pid;			/* 0 once reaped */
	int sock;			/* -1 once closed */
	char dead[WD_CKPT_ERR_MAX];	/* why the child ended, for every later read */
	/* the read in flight (wd_ckpt_box_request): its memfd, -1 when none */
	int pending_fd;
	size_t pending_index, pending_bytes;
	double pending_seconds;
	struct timespec pending_since;
};


/* --- the parent --- */

static double seconds_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

enum outcome { CHILD_TIMED_OUT, CHILD_ENDED, CHILD_SENT_TOO_MUCH };

/*
 * Ends the child (SIGKILL: it holds nothing to flush; sent to one that has
 * already exited, it changes nothing of its status) and reaps it. Its wait
 * status.
 */
static int child_reap(struct wd_ckpt_box *b)
{
	int status = 0;

	kill(b->pid, SIGKILL);
	while (waitpid(b->pid, &status, 0) < 0 && errno == EINTR)
		;
	b->pid = 0;
	return status;
}

/*
 * Ends the child and reaps it, and says in err (and b->dead) what became
 * of it during what. Returns -1.
 */
static int box_end(struct wd_ckpt_box *b, const char *what, enum outcome o, double seconds,
		   char *err)
{
	const char *path = wd_ckpt_path(b->listing);
	char lim[32];
	int status = child_reap(b);

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
 * Reads the child's next frame into reply, due seconds after t0, and the
 * descriptor that came with it into *fd (-1 when none; fd NULL: none
 * wanted). 0, or -1 with the child ended (box_end) when it misses the
 * deadline, closes the socket, or announces more than cap bytes; *fd is
 * then closed and -1.
 */
static int await_frame(struct wd_ckpt_box *b, const char *what, const struct timespec *t0,
		       double seconds, size_t cap, struct msg *reply, int *fd, char *err)
{
	uint64_t need = 0;
	size_t have_len = 0;

	reply->len = 0;
	if (fd)
		*fd = -1;
	for (;;) {
		double left = seconds - seconds_since(t0);
		struct pollfd p = { b->sock, POLLIN, 0 };
		ssize_t n;

		/* past the deadline, what the child already sent still counts */
		if (poll(&p, 1, left <= 0 ? 0 : left > 60 ? 60000 : (int)ceil(left * 1000)) <= 0) {
			if (left <= 0) {
				box_end(b, what, CHILD_TIMED_OUT, seconds, err);
				break;
			}
			continue;	/* a signal, or the time: checked above */
		}
		if (have_len < sizeof(need)) {
			n = ckpt_recv_fd(b->sock, (char *)&need + have_len, sizeof(need) - have_len, fd);
			if (n > 0 && (have_len += (size_t)n) == sizeof(need) && need > cap) {
				box_end(b, what, CHILD_SENT_TOO_MUCH, seconds, err);
				break;
			}
		} else {
			size_t chunk = need - reply->len < (1 << 16) ? need - reply->len : 1 << 16;
			unsigned char *to = ckpt_msg_grow(reply, chunk);
			if (!to) {
				box_end(b, what, CHILD_SENT_TOO_MUCH, seconds, err);
				break;
			}
			n = ckpt_recv_fd(b->sock, to, chunk, fd);
			reply->len -= chunk - (n > 0 ? (size_t)n : 0);
		}
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			box_end(b, what, CHILD_ENDED, seconds, err);
			break;
		}
		if (have_len == sizeof(need) && reply->len == need)
			return 0;
	}
	if (fd && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return -1;
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
	e->skippable = get_u64(cur) != 0;
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

int wd_ckpt_box_start(const char *path, const struct wd_sandbox_limits *lim,
		      struct wd_ckpt_box **out, char *err)
{
	struct wd_ckpt_box *b = calloc(1, sizeof(*b));
	pid_t parent = getpid();
	int sv[2];

	*out = NULL;
	/* until the listing comes: an empty one that holds the path, for messages */
	if (!b || wd_ckpt_adopt(path, NULL, 0, &b->listing) < 0) {
		free(b);
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': out of memory", path);
	}
	b->lim = *lim;
	b->sock = -1;
	b->pending_fd = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		wd_error(err, WD_CKPT_ERR_MAX, "'%s': cannot start the reader: %s", path, strerror(errno));
		wd_ckpt_box_close(&b);
		return -1;
	}
	b->pid = fork();
	if (b->pid == 0) {
		close(sv[0]);
		ckpt_child_main(path, lim, sv[1], parent);
	}
	close(sv[1]);
	if (b->pid < 0) {
		b->pid = 0;
		close(sv[0]);
		wd_error(err, WD_CKPT_ERR_MAX, "'%s': cannot start the reader: %s", path, strerror(errno));
		wd_ckpt_box_close(&b);
		return -1;
	}
	b->sock = sv[0];
	fcntl(b->sock, F_SETFL, O_NONBLOCK);
	clock_gettime(CLOCK_MONOTONIC, &b->pending_since);	/* the listing's deadline runs from here */
	*out = b;
	return 0;
}

int wd_ckpt_box_listed(struct wd_ckpt_box *b, char *err)
{
	struct msg reply = { 0 };
	int r;

	if (b->listed)
		return 0;
	if (!b->pid)
		return wd_error(err, WD_CKPT_ERR_MAX, "%s", b->dead);
	r = await_frame(b, "listing datasets", &b->pending_since, b->lim.seconds, (size_t)b->lim.memory,
			&reply, NULL, err);
	/* parse_listing replaces the listing that holds the path only after its last use of it */
	if (r == 0)
		r = parse_listing(b, wd_ckpt_path(b->listing), &reply, err);
	free(reply.p);
	if (r < 0 && b->pid) {	/* a listing that came and was refused: the child is of no use */
		child_reap(b);
		snprintf(b->dead, sizeof(b->dead), "%s", err);
	}
	b->listed = r == 0;
	return r;
}

int wd_ckpt_box_open(const char *path, const struct wd_sandbox_limits *lim,
		     struct wd_ckpt_box **out, char *err)
{
	if (wd_ckpt_box_start(path, lim, out, err) < 0)
		return -1;
	if (wd_ckpt_box_listed(*out, err) < 0) {
		wd_ckpt_box_close(out);
		return -1;
	}
	return 0;
}

const struct wd_ckpt *wd_ckpt_box_listing(const struct wd_ckpt_box *b)
{
	return b->listing;
}

/* Sends a request with its memfd; -1 when the child is gone. */
static int send_request(int sock, const struct request *rq, int fd)
{
	return ckpt_send_fd(sock, rq, sizeof(*rq), fd) == (ssize_t)sizeof(*rq) ? 0 : -1;
}

/* "dataset 'NAME'", tensor i's subject in messages. */
static const char *dataset_what(const struct wd_ckpt_box *b, size_t i, char *buf, size_t size)
{
	snprintf(buf, size, "dataset '%s'", wd_ckpt_entry(b->listing, i)->name);
	return buf;
}

int wd_ckpt_box_request(struct wd_ckpt_box *b, size_t i, char *err)
{
	const char *path = wd_ckpt_path(b->listing);
	struct request rq = { i, 0 };
	char what[256], need[32], have[32];
	size_t bytes;
	int fd;

	if (!b->pid)
		return wd_error(err, WD_CKPT_ERR_MAX, "%s", b->dead);
	if (!b->listed)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': its listing has not been taken "
				"(wd_ckpt_box_listed)", path);
	if (b->pending_fd >= 0)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': a read of dataset '%s' is still in flight",
				path, wd_ckpt_entry(b->listing, b->pending_index)->name);
	if (wd_ckpt_check(b->listing, i, &bytes, err) < 0)
		return -1;
	dataset_what(b, i, what, sizeof(what));
	if (bytes > b->lim.memory)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: its %s exceed the memory limit of %s (%s)",
				path, what, format_bytes(need, sizeof(need), bytes),
				format_bytes(have, sizeof(have), b->lim.memory), WD_SANDBOX_ENV_MEMORY);
	rq.seconds = b->lim.seconds + (double)bytes / (double)WD_SANDBOX_BYTES_PER_S;
	/* sealed at its size: the child can fill it, not shrink it under our mapping (SIGBUS) */
	fd = memfd_create("wdrift-tensor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)bytes) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: cannot make room for %s: %s", path, what,
			 format_bytes(need, sizeof(need), bytes), strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (send_request(b->sock, &rq, fd) < 0) {
		close(fd);
		return box_end(b, what, CHILD_ENDED, rq.seconds, err);
	}
	b->pending_fd = fd;
	b->pending_index = i;
	b->pending_bytes = bytes;
	b->pending_seconds = rq.seconds;
	clock_gettime(CLOCK_MONOTONIC, &b->pending_since);
	return 0;
}

/*
 * Maps the bytes of a tensor that lie in the user's file itself, as the
 * child says (READ_IN_FILE): file is the descriptor it sent. What the
 * child says is checked, not trusted: a regular file, holding the whole
 * range now. The mapping is guarded (mapguard.h): should the file be cut
 * short under it, its pages read as zeros and wd_tensor_map_intact says
 * so, instead of a SIGBUS. 0, or -1 with err.
 */
static int map_in_file(struct wd_ckpt_box *b, const char *what, int file, uint64_t offset,
		       size_t bytes, struct wd_tensor_map *m, char *err)
{
	const char *path = wd_ckpt_path(b->listing);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = offset & ~(page - 1);
	size_t len = bytes + (size_t)(offset - start);
	struct stat st;
	char need[32];
	void *base;
	int slot;

	size_t elem = wd_dtype_size(wd_ckpt_entry(b->listing, b->pending_index)->dtype);

	/* the engine reads through float and double pointers: aligned elements only */
	if (file < 0 || fstat(file, &st) < 0 || !S_ISREG(st.st_mode) || !bytes || !elem ||
	    offset % elem)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: the reader's reply is malformed",
				path, what);
	if (offset > (uint64_t)st.st_size || bytes > (uint64_t)st.st_size - offset)
		return wd_error(err, WD_CKPT_ERR_MAX,
				"'%s': %s: the file ends before the dataset (%lld bytes now, the "
				"dataset's end at %llu); it is being written, or damaged", path, what,
				(long long)st.st_size, (unsigned long long)(offset + bytes));
	base = mmap(NULL, len, PROT_READ, MAP_SHARED, file, (off_t)start);
	if (base == MAP_FAILED)
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: cannot map %s: %s", path, what,
				format_bytes(need, sizeof(need), bytes), strerror(errno));
	if (!(slot = mapguard_add(base, len))) {
		munmap(base, len);
		return wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: too many tensors mapped at once",
				path, what);
	}
	/* from a disk, start reading ahead now: the engine's first pass reads it in order */
	madvise(base, len, MADV_WILLNEED);
	*m = (struct wd_tensor_map){ (const char *)base + (offset - start), bytes, base, len, slot,
				     path, wd_ckpt_entry(b->listing, b->pending_index)->name };
	return 0;
}

int wd_ckpt_box_collect(struct wd_ckpt_box *b, struct wd_tensor_map *m, char *err)
{
	const char *path = wd_ckpt_path(b->listing);
	struct msg reply = { 0 };
	struct cursor cur;
	char what[256], need[32];
	size_t bytes = b->pending_bytes;
	int fd = b->pending_fd, file = -1, r;
	uint64_t where, offset = 0;
	void *data;

	*m = (struct wd_tensor_map){ 0 };
	if (fd < 0)
		return wd_error(err, WD_CKPT_ERR_MAX, b->pid ? "'%s': no read in flight" : "%s",
				b->pid ? path : b->dead);
	b->pending_fd = -1;
	dataset_what(b, b->pending_index, what, sizeof(what));
	r = await_frame(b, what, &b->pending_since, b->pending_seconds, READ_REPLY_MAX, &reply,
			&file, err);
	cur = (struct cursor){ reply.p, reply.len, 0 };
	if (r < 0 || (r = reply_status(b, what, &cur, err)) < 0)
		goto out;
	where = get_u64(&cur);
	if (where == READ_IN_FILE)
		offset = get_u64(&cur);
	if (cur.bad || cur.left || (where != READ_IN_FILE && where != READ_IN_MEMFD)) {
		r = wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: the reader's reply is malformed", path,
			     what);
		goto out;
	}
	if (where == READ_IN_FILE) {
		r = map_in_file(b, what, file, offset, bytes, m, err);
		goto out;
	}
	data = mmap(NULL, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (data == MAP_FAILED) {
		r = wd_error(err, WD_CKPT_ERR_MAX, "'%s': %s: cannot map %s: %s", path, what,
			     format_bytes(need, sizeof(need), bytes), strerror(errno));
		goto out;
	}
	*m = (struct wd_tensor_map){ data, bytes, data, bytes, 0, path,
				     wd_ckpt_entry(b->listing, b->pending_index)->name };
out:
	close(fd);
	if (file >= 0)
		close(file);
	free(reply.p);
	return r;
}

int wd_ckpt_box_read(struct wd_ckpt_box *b, size_t i, struct wd_tensor_map *m, char *err)
{
	*m = (struct wd_tensor_map){ 0 };
	if (wd_ckpt_box_request(b, i, err) < 0)
		return -1;
	return wd_ckpt_box_collect(b, m, err);
}

int wd_tensor_map_intact(const struct wd_tensor_map *m, char *err)
{
	if (!mapguard_cut(m->guard))
		return 0;
	return wd_error(err, WD_CKPT_ERR_MAX,
			"'%s': dataset '%s': the file was cut short while it was read (the "
			"tensor read as zeros from then on); it is being written, or damaged", m->path, m->dataset);
}

void wd_tensor_map_release(struct wd_tensor_map *m)
{
	mapguard_remove(m->guard);
	if (m->map_base)
		munmap(m->map_base, m->map_len);
	*m = (struct wd_tensor_map){ 0 };
}

void wd_ckpt_box_close(struct wd_ckpt_box **pb)
{
	struct wd_ckpt_box *b = *pb;

	if (!b)
		return;
	if (b->pid)
		child_reap(b);
	if (b->sock >= 0)
		close(b->sock);
	if (b->pending_fd >= 0)
		close(b->pending_fd);
	wd_ckpt_close(&b->listing);
	free(b);
	*pb = NULL;
}
