/* state.c: runs, durable steps and snapshot memory (see state.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "state.h"

double now_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct run *state_run(struct state *s, const char *name, int create)
{
	struct run *r;

	for (r = s->runs; r; r = r->next)
		if (!strcmp(r->name, name))
			return r;
	if (!create || !(r = calloc(1, sizeof(*r))) || !(r->name = strdup(name))) {
		free(r);
		return NULL;
	}
	r->next = s->runs;
	s->runs = r;
	s->n_runs++;
	return r;
}

/* Binary search: durable steps are kept sorted. */
static size_t lower_bound(const struct run *r, int64_t step)
{
	size_t lo = 0, hi = r->n_durable;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (r->durable[mid] < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int run_is_durable(const struct run *r, int64_t step)
{
	size_t i = lower_bound(r, step);
	return i < r->n_durable && r->durable[i] == step;
}

void run_add_durable(struct run *r, int64_t step)
{
	size_t i = lower_bound(r, step);
	if (i < r->n_durable && r->durable[i] == step)
		return;
	if (r->n_durable == r->cap_durable) {
		size_t cap = r->cap_durable ? 2 * r->cap_durable : 64;
		int64_t *d = realloc(r->durable, cap * sizeof(*d));
		if (!d)
			return;	/* the WAL still has it; only the welcome list is short */
		r->durable = d;
		r->cap_durable = cap;
	}
	memmove(r->durable + i + 1, r->durable + i, (r->n_durable - i) * sizeof(*r->durable));
	r->durable[i] = step;
	r->n_durable++;
}

void snapshot_free(struct state *s, struct snapshot *snap)
{
	for (size_t i = 0; i < snap->n_tensors; i++) {
		free(snap->tensors[i].name);
		free(snap->tensors[i].ranges);
		free(snap->tensors[i].data);
	}
	free(snap->tensors);
	s->reserved -= snap->bytes;
	if (snap->run)
		snap->run->bytes_pending -= snap->bytes;
	free(snap);
}

void state_release(struct state *s)
{
	struct snapshot *snap, *sn;
	struct run *r, *rn;

	for (snap = s->pending; snap; snap = sn) {
		sn = snap->next;
		snapshot_free(s, snap);
	}
	for (r = s->runs; r; r = rn) {
		rn = r->next;
		free(r->name);
		free(r->durable);
		free(r);
	}
	memset(s, 0, sizeof(*s));
}
