/*
 * wal.c: the write-ahead log (see wal.h and docs/storage.md).
 *
 * Replay reads each segment in order. The only damage a crash can do is to
 * the end of the last segment (a record in mid-append), so damage anywhere
 * else means the disk or a person changed the file: that is refused, not
 * repaired silently.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32.h"
#include "error.h"
#include "logging.h"
#include "wal.h"
#include "wire.h"

struct wal {
	pthread_mutex_t lock;	/* the spool and store threads both append */
	char *dir;
	int fd;			/* the open (last) segment */
	unsigned seg;		/* its number */
	uint64_t seg_bytes;	/* its size */
	uint64_t max_seg;
	uint64_t records;
	int broken;		/* a failed append could not be undone: append no more */
};

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	int r = fd < 0 ? -errno : fsync(fd) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	return r;
}

/*
 * Cuts path to len and fsyncs it. Unsynced, a cut can come undone on power
 * loss: the torn bytes would be back, or (--force) records the copy aside
 * also holds. 0 or -errno.
 */
static int truncate_synced(const char *path, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int r = fd < 0 || ftruncate(fd, (off_t)len) < 0 || fsync(fd) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	return r;
}

/* Reads a whole file into memory; NULL with errno on failure. */
static unsigned char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	unsigned char *buf = NULL;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && (buf = malloc((size_t)st.st_size + 1))) {
		size_t got = 0;
		while (got < (size_t)st.st_size) {
			ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		*len = got;
	}
	close(fd);
	return buf;
}

/* Copies path's bytes from off on to PATH.corrupt (--force: kept, not replayed). */
static int save_tail(const char *path, size_t off)
{
	char to[4200];
	size_t len = 0;
	unsigned char *b = slurp(path, &len);
	int fd, r = -1;

	if (!b)
		return -1;
	snprintf(to, sizeof(to), "%s.corrupt", path);
	fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	if (fd >= 0) {
		size_t done = off < len ? off : len;
		while (done < len) {
			ssize_t n = write(fd, b + done, len - done);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			done += (size_t)n;
		}
		r = done == len && fsync(fd) == 0 ? 0 : -1;
		close(fd);
	}
	free(b);
	return r;
}

/* Is there a good record at off? Sets *next past it. */
static int good_record(const unsigned char *b, size_t len, size_t off, size_t *next)
{
	if (len - off < 12 || get32(b + off) != WAL_MAGIC)
		return 0;
	uint32_t n = get32(b + off + 4);
	if (n > WAL_MAX_RECORD || len - off - 12 < n)
		return 0;
	if (wd_crc32(0, b + off + 12, n) != get32(b + off + 8))
		return 0;
	*next = off + 12 + n;
	return 1;
}

/* Any good record at or after off, by scanning for the magic? */
static int good_record_after(const unsigned char *b, size_t len, size_t off)
{
	size_t next;
	for (size_t i = off; i + 12 <= len; i++)
		if (b[i] == 0x57 && good_record(b, len, i, &next))
			return 1;
	return 0;
}

static int cmp_uint(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
	return (x > y) - (x < y);
}

/* The segment numbers in dir, ascending. */
static int list_segments(const char *dir, unsigned **segs, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t cap = 0;

	*segs = NULL;
	*n = 0;
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		unsigned num;
		char tail[8];
		if (sscanf(de->d_name, "%6u.%7s", &num, tail) != 2 || strcmp(tail, "log") ||
		    strlen(de->d_name) != 10)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			unsigned *s = realloc(*segs, cap * sizeof(*s));
			if (!s) {
				closedir(d);
				free(*segs);
				*segs = NULL;
				*n = 0;
				return -ENOMEM;
			}
			*segs = s;
		}
		(*segs)[(*n)++] = num;
	}
	closedir(d);
	if (*n)
		qsort(*segs, *n, sizeof(**segs), cmp_uint);
	return 0;
}

static void seg_path(char *buf, size_t size, const char *dir, unsigned seg)
{
	snprintf(buf, size, "%s/%06u.log", dir, seg);
}

uint64_t wal_bytes(const char *dir)
{
	char path[PATH_MAX + 16];
	unsigned *segs;
	size_t n;
	uint64_t total = 0;
	struct stat st;

	if (list_segments(dir, &segs, &n) < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		seg_path(path, sizeof(path), dir, segs[i]);
		if (!stat(path, &st) && S_ISREG(st.st_mode))
			total += (uint64_t)st.st_size;
	}
	free(segs);
	return total;
}

/*
 * Replays one segment. Returns 0 when it ended cleanly, 1 when it ended in
 * damage at *bad (the caller decides torn tail or corruption), -1 on error.
 */
static int replay_segment(const char *path, wal_replay_fn fn, void *ctx, uint64_t *records,
			  size_t *bad, int *later_good, size_t *size, char *err, size_t errlen)
{
	size_t len = 0, off = 0, next;
	unsigned char *b = slurp(path, &len);

	if (!b)
		return wd_error(err, errlen, "'%s': cannot read: %s", path, strerror(errno));
	*size = len;
	while (off < len && good_record(b, len, off, &next)) {
		if (fn && fn(ctx, (const char *)b + off + 12, get32(b + off + 4))) {
			free(b);
			return wd_error(err, errlen, "'%s': offset %zu: replay stopped", path, off);
		}
		(*records)++;
		off = next;
	}
	if (off == len) {
		free(b);
		return 0;
	}
	*bad = off;
	*later_good = good_record_after(b, len, off + 1);
	free(b);
	return 1;
}

int wal_open(const char *dir, int force, wal_replay_fn fn, void *ctx,
	     struct wal **out, char *err, size_t errlen)
{
	struct wal *w;
	unsigned *segs = NULL;
	size_t n = 0;
	char path[4096];
	int r;

	*out = NULL;
	if (mkdir(dir, 0750) < 0 && errno != EEXIST)
		return wd_error(err, errlen, "'%s': cannot create: %s", dir, strerror(errno));
	if ((r = list_segments(dir, &segs, &n)) < 0)
		return wd_error(err, errlen, "'%s': cannot list: %s", dir, strerror(-r));
	w = calloc(1, sizeof(*w));
	if (!w || !(w->dir = strdup(dir))) {
		free(w);
		free(segs);
		return wd_error(err, errlen, "out of memory");
	}
	w->fd = -1;
	w->max_seg = WAL_SEGMENT_BYTES;
	pthread_mutex_init(&w->lock, NULL);
	for (size_t i = 0; i < n; i++) {
		size_t bad = 0, size = 0;
		int later = 0;
		seg_path(path, sizeof(path), dir, segs[i]);
		r = replay_segment(path, fn, ctx, &w->records, &bad, &later, &size, err, errlen);
		if (r < 0)
			goto fail;
		if (r == 0)
			continue;
		int last = i + 1 == n;
		if (last && !later) {	/* a torn tail: the crash we design for */
			log_warning("'%s': torn record at offset %zu of %zu (a crash mid-append); "
				    "truncating it", path, bad, size);
		} else if (!force) {
			wd_error(err, errlen, "'%s': offset %zu: damaged record with %s after it; refusing "
			     "to start (corruption, not a crash; --force keeps the records before it)",
			     path, bad, later ? "good records" : "more segments");
			goto fail;
		} else {
			log_warning("'%s': offset %zu: damaged record; --force: keeping the %llu records "
				    "before it, moving the rest aside", path, bad,
				    (unsigned long long)w->records);
			for (size_t j = i + 1; j < n; j++) {
				char from[4096], to[4200];
				seg_path(from, sizeof(from), dir, segs[j]);
				snprintf(to, sizeof(to), "%s.corrupt", from);
				if (rename(from, to) < 0)
					log_warning("'%s': cannot move aside: %s", from, strerror(errno));
			}
			n = i + 1;
			/* and what follows the damage in this segment, before it is cut */
			if (save_tail(path, bad) < 0)
				log_warning("'%s': cannot keep its records after offset %zu aside: %s", path,
					    bad, strerror(errno));
			/* the copy's name and the renames, durable before the cut is */
			if ((r = fsync_dir(dir)) < 0)
				log_warning("'%s': fsync of the directory failed: %s", dir, strerror(-r));
		}
		if ((r = truncate_synced(path, bad)) < 0) {
			wd_error(err, errlen, "'%s': cannot truncate: %s", path, strerror(-r));
			goto fail;
		}
		break;	/* nothing good comes after: later segments were moved aside */
	}
	w->seg = n ? segs[n - 1] : 1;
	seg_path(path, sizeof(path), dir, w->seg);
	w->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
	if (w->fd < 0) {
		wd_error(err, errlen, "'%s': cannot open: %s", path, strerror(errno));
		goto fail;
	}
	struct stat st;
	w->seg_bytes = fstat(w->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	if ((r = fsync_dir(dir)) < 0)
		log_warning("'%s': fsync of the directory failed: %s", dir, strerror(-r));
	free(segs);
	*out = w;
	return 0;
fail:
	free(segs);
	wal_close(&w);
	return -1;
}

/* Starts the next segment: the old one is fsync'd first. */
static int wal_sync_locked(struct wal *w);

static int wal_rotate(struct wal *w)
{
	char path[4096];
	int r = wal_sync_locked(w), fd;

	if (r < 0)
		return r;
	/*
	 * The new segment is opened before the old one is let go: where it
	 * cannot be made (a full disk), appends go on to the old one, and work
	 * again once there is room.
	 */
	seg_path(path, sizeof(path), w->dir, w->seg + 1);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
	if (fd < 0)
		return -errno;
	if ((r = fsync_dir(w->dir)) < 0) {
		close(fd);
		unlink(path);	/* empty: nothing is lost */
		return r;
	}
	close(w->fd);
	w->fd = fd;
	w->seg++;
	w->seg_bytes = 0;
	return 0;
}

static int wal_append_locked(struct wal *w, const void *payload, size_t len);

int wal_append(struct wal *w, const void *payload, size_t len)
{
	pthread_mutex_lock(&w->lock);
	int r = wal_append_locked(w, payload, len);
	pthread_mutex_unlock(&w->lock);
	return r;
}

static int wal_append_locked(struct wal *w, const void *payload, size_t len)
{
	unsigned char head[12];
	int r;

	if (len > WAL_MAX_RECORD)
		return -EMSGSIZE;
	if (w->broken)
		return -EIO;
	if (w->seg_bytes && w->seg_bytes + 12 + len > w->max_seg && (r = wal_rotate(w)) < 0)
		return r;
	put32(head, WAL_MAGIC);
	put32(head + 4, (uint32_t)len);
	put32(head + 8, wd_crc32(0, payload, len));
	/* One write per record, header and payload together: O_APPEND keeps it whole. */
	unsigned char *rec = malloc(12 + len);
	if (!rec)
		return -ENOMEM;
	memcpy(rec, head, 12);
	memcpy(rec + 12, payload, len);
	size_t done = 0;
	while (done < 12 + len) {
		ssize_t n = write(w->fd, rec + done, 12 + len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			free(rec);
			/*
			 * Part of the record may be in the file (disk full). Cut it
			 * off: a record appended after half of one would read as
			 * corruption, and the log would refuse to open. If it cannot
			 * be cut, no more appends: nothing more can be acked.
			 */
			if (done && ftruncate(w->fd, (off_t)w->seg_bytes) < 0) {
				log_err("write-ahead log: cannot undo a partial record: %s; no more appends "
					"until a restart", strerror(errno));
				w->broken = 1;
			}
			return r;
		}
		done += (size_t)n;
	}
	free(rec);
	w->seg_bytes += 12 + len;
	w->records++;
	return 0;
}

static int wal_sync_locked(struct wal *w)
{
	return fdatasync(w->fd) < 0 ? -errno : 0;
}

int wal_sync(struct wal *w)
{
	pthread_mutex_lock(&w->lock);
	int r = wal_sync_locked(w);
	pthread_mutex_unlock(&w->lock);
	return r;
}

int wal_append_sync(struct wal *w, const void *payload, size_t len, int *stands)
{
	int r;

	*stands = 0;
	pthread_mutex_lock(&w->lock);
	uint64_t before = w->seg_bytes;
	unsigned seg = w->seg;
	r = wal_append_locked(w, payload, len);
	if (r == 0 && (r = wal_sync_locked(w)) < 0) {
		/* not known to be durable: cut it, so that it is surely not there */
		if (w->seg != seg)
			before = 0;	/* it opened a new segment */
		if (ftruncate(w->fd, (off_t)before) < 0 || fdatasync(w->fd) < 0) {
			log_err("write-ahead log: cannot undo a record whose fsync failed: %s; no more "
				"appends until a restart", strerror(errno));
			w->broken = 1;
			*stands = 1;
		} else {
			w->seg_bytes = before;
			w->records--;
		}
	}
	pthread_mutex_unlock(&w->lock);
	return r;
}

uint64_t wal_records(const struct wal *w)
{
	return w->records;
}

void wal_set_segment_bytes(struct wal *w, uint64_t bytes)
{
	w->max_seg = bytes;
}

void wal_close(struct wal **pw)
{
	struct wal *w = *pw;
	if (!w)
		return;
	if (w->fd >= 0) {
		fdatasync(w->fd);
		close(w->fd);
	}
	pthread_mutex_destroy(&w->lock);
	free(w->dir);
	free(w);
	*pw = NULL;
}
