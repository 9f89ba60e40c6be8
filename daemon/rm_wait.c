/* rm_wait.c: runs rm requests waiting for the run's publishers to disconnect (see rm_wait.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "query.h"
#include "rm_wait.h"

int rm_wait_add(struct rm_waiting *l, const char *run, unsigned how, double wait, double now,
		const struct query_envelope *env)
{
	struct rm_wait *w, **end;

	if (l->n >= RM_WAITING_MAX)
		return -EBUSY;
	if (!(w = calloc(1, sizeof(*w))) || !(w->run = strdup(run)) || !(w->client = query_waiter_new(env))) {
		rm_wait_free(&w);
		return -ENOMEM;
	}
	w->how = how;
	w->wait = wait;
	w->deadline = now + wait;
	for (end = &l->head; *end; end = &(*end)->next)
		;
	*end = w;	/* oldest first: answered in the order asked when all are due */
	l->n++;
	return 0;
}

void rm_wait_remove(struct rm_waiting *l, struct rm_wait *w)
{
	for (struct rm_wait **p = &l->head; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			w->next = NULL;
			l->n--;
			return;
		}
}

double rm_wait_next_deadline(const struct rm_waiting *l)
{
	double t = 0;

	for (const struct rm_wait *w = l->head; w; w = w->next)
		if (!t || w->deadline < t)
			t = w->deadline;
	return t;
}

void rm_wait_free(struct rm_wait **pw)
{
	struct rm_wait *w = *pw;

	if (!w)
		return;
	free(w->run);
	query_waiter_free(w->client);
	free(w);
	*pw = NULL;
}
