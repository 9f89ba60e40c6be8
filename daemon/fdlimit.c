/*
 * fdlimit.c: the daemon's descriptor limit (fdlimit.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "fdlimit.h"
#include "logging.h"

/* fs.nr_open, the most a process may raise its limit to; -1 when unreadable. */
static long nr_open(void)
{
	FILE *f = fopen("/proc/sys/fs/nr_open", "re");
	long n = -1;

	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

long fdlimit_raise(void)
{
	struct rlimit rl;
	rlim_t want, was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		log_warning("open files: cannot read the limit (getrlimit: %s)", strerror(errno));
		return -1;
	}
	was = rl.rlim_cur;
	want = rl.rlim_max;
	if (want == RLIM_INFINITY) {	/* the kernel refuses more than fs.nr_open */
		long n = nr_open();
		want = n > 0 ? (rlim_t)n : was;
	}
	if (was != RLIM_INFINITY && want > was) {
		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
			log_warning("open files: cannot raise the limit from %llu to %llu (setrlimit: %s)",
				    (unsigned long long)was, (unsigned long long)want, strerror(errno));
			rl.rlim_cur = was;
		}
	}
	if (rl.rlim_cur == RLIM_INFINITY) {
		log_notice("open files: unlimited");
		return -1;
	}
	if (rl.rlim_cur != was)
		log_notice("open files: %llu, raised from %llu (the most connections ZeroMQ can accept "
			   "before it aborts; LimitNOFILE in the unit)", (unsigned long long)rl.rlim_cur,
			   (unsigned long long)was);
	else
		log_notice("open files: %llu (the most connections ZeroMQ can accept before it "
			   "aborts; LimitNOFILE in the unit)", (unsigned long long)rl.rlim_cur);
	return (long)rl.rlim_cur;
}

long fdlimit_get(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return -1;
	return (long)rl.rlim_cur;
}

long fdlimit_in_use(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;	/* the directory's own descriptor */
}
