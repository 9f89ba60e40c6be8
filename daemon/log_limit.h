/*
 * log_limit.h: a few log lines of one kind per window, then a count of the
 * rest, so that a flood of bad peers cannot fill the journal while the
 * first of them are still said (auth's refusals, ingest's refusals, peers
 * that disconnected mid-message).
 */
#ifndef WD_LOG_LIMIT_H
#define WD_LOG_LIMIT_H

#include <stdint.h>

#define LOG_LIMIT_BURST 10	/* lines per kind per window */
#define LOG_LIMIT_WINDOW 60.0	/* seconds */

struct log_limit {
	const char *who, *what;	/* "auth", "refusals of unknown client keys": the count's line */
	const char *note;	/* after it, or NULL: " (status counts them all)" */
	double start;		/* monotonic s: the window's */
	unsigned logged;
	uint64_t suppressed;
};

/* True when a line may be logged at t; else counts it held back. */
int log_limit_may(struct log_limit *l, double t);
/* Ends the window when it is over at t, saying how many were held back. */
void log_limit_roll(struct log_limit *l, double t);

#endif
