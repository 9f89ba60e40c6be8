/*
 * kept_bufs.c: ingest's freed tensor buffers kept for reuse (kept_bufs.h).
 * A list, oldest first, searched from its newest end (a few thousand at
 * most): shedding frees the buffers longest unused.
 */
#include <stdlib.h>
#include <string.h>

#include "kept_bufs.h"

void *kept_take(struct kept_bufs *k, uint64_t size, double now)
{
	for (size_t i = k->n; i-- > 0;) {
		if (k->v[i].size != size)
			continue;
		void *p = k->v[i].p;
		memmove(&k->v[i], &k->v[i + 1], (k->n - i - 1) * sizeof(*k->v));
		k->n--;
		k->bytes -= size;
		k->last_use = now;
		return p;
	}
	return NULL;
}

void kept_put(struct kept_bufs *k, void *p, uint64_t size, uint64_t room, double now)
{
	if (!p)
		return;
	if (size < KEPT_MIN_BYTES || size > room || k->n == KEPT_MAX) {
		free(p);
		return;
	}
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 64;
		struct kept_buf *v = realloc(k->v, cap * sizeof(*v));
		if (!v) {
			free(p);
			return;
		}
		k->v = v;
		k->cap = cap;
	}
	k->v[k->n++] = (struct kept_buf){ p, size };
	k->last_use = now;
	k->bytes += size;
}

void kept_shed(struct kept_bufs *k, uint64_t keep)
{
	size_t i = 0;

	for (; i < k->n && k->bytes > keep; i++) {
		free(k->v[i].p);
		k->bytes -= k->v[i].size;
		k->freed++;
	}
	if (i && i < k->n)
		memmove(k->v, k->v + i, (k->n - i) * sizeof(*k->v));
	k->n -= i;
}

int kept_idle(struct kept_bufs *k, double now)
{
	if (!k->n || now - k->last_use < KEPT_IDLE_S)
		return 0;
	kept_shed(k, 0);
	return 1;
}

void kept_release(struct kept_bufs *k)
{
	kept_shed(k, 0);
	free(k->v);
	memset(k, 0, sizeof(*k));
}
