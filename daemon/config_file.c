/* config_file.c: does the config file still say what runs (see config_file.h)? */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config_file.h"
#include "crc32.h"

int config_file_hash(const char *path, uint64_t *h)
{
	unsigned char buf[65536];
	uint32_t x = 0;	/* the CRC-32 the WAL and the wire use: enough to see a file edited */
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			close(fd);
			return -e;
		}
		x = wd_crc32(x, buf, (size_t)n);
	}
	close(fd);
	*h = x;
	return 0;
}

void config_file_ran(struct config_file *f, uint64_t h)
{
	f->running = h;
	f->why[0] = 0;
}

void config_file_refused(struct config_file *f, uint64_t h, const char *why)
{
	f->refused = h;
	snprintf(f->why, sizeof(f->why), "%s", why);
}

const char *config_file_pending(struct config_file *f, char *buf, size_t len)
{
	uint64_t now;
	int r;

	if (!f->path)
		return NULL;
	if ((r = config_file_hash(f->path, &now)) < 0) {
		snprintf(buf, len, "the file cannot be read now (%s): the config read from it before runs",
			 strerror(-r));
		return buf;
	}
	if (now == f->running)
		return NULL;
	if (f->why[0] && now == f->refused) {
		snprintf(buf, len, "the file differs from the config that runs: its reload was refused: %s",
			 f->why);
		return buf;
	}
	/* a refusal is checked again each time: its cause may lie outside the file (a key file's mode) */
	if (f->check && (now != f->checked || f->check_failed)) {
		uint64_t seen = now;
		f->check_failed = f->check(f->check_ctx, &seen, f->check_why, sizeof(f->check_why)) < 0;
		f->checked = seen;	/* the bytes it read: edited since, checked again next time */
	}
	if (f->check && f->check_failed && now == f->checked)
		snprintf(buf, len, "the file changed since the config that runs was read from it, and a reload "
			 "would refuse it: %s (the config that runs stays until the file is fixed and reloaded)",
			 f->check_why);
	else
		snprintf(buf, len, "the file changed since the config that runs was read from it: `wdrift "
			 "reload` applies it (a key that needs a restart is refused)");
	return buf;
}
