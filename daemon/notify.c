/* notify.c: sd_notify, one function per state (see notify.h). */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "logging.h"
#include "notify.h"

uint64_t notify_init(void)
{
	uint64_t usec = 0;
	int r = sd_watchdog_enabled(0, &usec);	/* keep the env: children are ours */
	if (r < 0)
		log_warning("watchdog: bad WATCHDOG_USEC or WATCHDOG_PID; not pinging");
	return r > 0 ? usec / 2 : 0;
}

void notify_ready(const char *status)
{
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void notify_status(const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	sd_notifyf(0, "STATUS=%s", msg);
}

void notify_reloading(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
		   (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
}

void notify_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}

void notify_watchdog(void)
{
	sd_notify(0, "WATCHDOG=1");
}
