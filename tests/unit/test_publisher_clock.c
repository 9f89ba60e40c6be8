/*
 * test_publisher_clock.c: the publisher's waits (flush, the backoff between
 * tries) keep their length when the time of day steps (NTP, a VM resumed).
 * A step is made here without root: this program's clock_gettime, which
 * libwdrift's calls reach, returns the time of day shifted by step_s, as if
 * the clock had stepped just after each read; CLOCK_MONOTONIC is the
 * kernel's. A flush whose deadline was on the time of day ended at once
 * after such a step, its snapshot not yet tried: "0 tries, 0 resent", as
 * test_publisher's case of nobody listening once failed in CI.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "harness.h"
#include "wdrift.h"

static long step_s;	/* seconds the time of day stepped forward since each read */

int clock_gettime(clockid_t id, struct timespec *ts)
{
	int r = (int)syscall(SYS_clock_gettime, id, ts);

	if (r == 0 && id == CLOCK_REALTIME)
		ts->tv_sec -= step_s;
	return r;
}

/*
 * A publisher to an ipc path nobody listens on, 2 tries of 0.2 s: about
 * 2.5 s to give its one snapshot up, with the time of day stepped by step.
 */
static void nobody(const char *dir, long step)
{
	struct wd_publisher *p = NULL;
	struct wd_publisher_opts quick = { .ack_timeout_ms = 200, .stall_warn_ms = -1 };
	struct wd_publisher_outcome out = { 0 };
	struct wd_publisher_stats st;
	float m[4] = { 1, 2, 3, 4 };
	char ep[160], said[1024] = "";

	snprintf(ep, sizeof(ep), "ipc://%s/nobody.sock", dir);
	step_s = step;
	CHECK(wd_publisher_open(ep, "gone", &quick, &p) == 0 && wd_publisher_set_tries(p, 2) == 0,
	      "a publisher to an endpoint nobody listens on, 2 tries, the clock stepped %+ld s", step);
	wd_publisher_begin(p, 3);
	wd_publisher_tensor(p, "w", WD_F32, m, NULL, 0, 0, 4, 4);
	double t0 = wd_now();
	int fr = wd_publisher_commit(p) == 0 ? wd_publisher_flush(p, 10000) : 1;
	double took = wd_now() - t0;
	if (fr)
		snprintf(said, sizeof(said), "%s", wd_last_error());
	wd_publisher_get_stats(p, &st);
	wd_publisher_last_outcome(p, &out);
	CHECK(fr == 0 && took < 9.0 && out.kind == WD_OUTCOME_GIVEN_UP && out.tries == 2 && st.resent == 1,
	      "stepped %+ld s: flush waits for the 2 tries, and no longer (%d after %.1f s%s%s; %d tries, "
	      "%llu resent)", step, fr, took, fr ? ": " : "", said, out.tries, (unsigned long long)st.resent);
	wd_publisher_close(&p, 0);
	step_s = 0;
}

int main(void)
{
	char dir[] = "/tmp/wdrift-test-pubclock-XXXXXX";

	wd_log_set(WD_LOG_ERR, NULL);
	if (!mkdtemp(dir))
		return 1;
	/* forward: a flush's deadline on the time of day had passed at once */
	nobody(dir, 60);
	/* back: the backoff between the tries had waited the step out, 60 s */
	nobody(dir, -60);
	rmdir(dir);
	return tap_done();
}
