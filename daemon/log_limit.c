/* log_limit.c: a few lines of a kind per window (log_limit.h). */
#include "log_limit.h"
#include "logging.h"

void log_limit_roll(struct log_limit *l, double t)
{
	if (t - l->start < LOG_LIMIT_WINDOW)
		return;
	if (l->suppressed)
		log_warning("%s: %llu more %s in the last %.0f s, not logged one by one%s", l->who,
			    (unsigned long long)l->suppressed, l->what, t - l->start, l->note ? l->note : "");
	l->start = t;
	l->logged = 0;
	l->suppressed = 0;
}

int log_limit_may(struct log_limit *l, double t)
{
	log_limit_roll(l, t);
	if (l->logged < LOG_LIMIT_BURST) {
		l->logged++;
		return 1;
	}
	l->suppressed++;
	return 0;
}
