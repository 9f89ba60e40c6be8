/*
 * spares.c: freed buffers kept for reuse (see spares.h).
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "bigbuf.h"
#include "sanitizer.h"
#include "spares.h"

/* Counts got bytes as handed out, when the list keeps such; under the lock. */
static void handed(struct spares *s, size_t got)
{
	if (got < s->min)
		return;
	s->out += got;
	if (s->out > s->peak)
		s->peak = s->out;
}

/*
 * How much larger than size a kept buffer may be: a quarter, and the up
 * to 2 MiB that bigbuf's alignment adds to a large one's usable size (an
 * untouched tail, never faulted in): with the quarter alone, a freed 2^20
 * fp32 tensor's keys were refused for the next one now and then.
 */
static size_t slack(size_t size)
{
	return size / 4 + (size >= 2 * BIGBUF_HUGE ? BIGBUF_HUGE : 0);
}

void *spares_get(struct spares *s, size_t size, int zero)
{
	void *p = NULL;
	int best = -1;

	if (!WD_UNDER_ASAN) {
		pthread_mutex_lock(&s->lock);
		for (int k = 0; k < s->n; k++) {
			if (s->size[k] < size || s->size[k] - size > slack(size))
				continue;
			if (best < 0 || s->size[k] < s->size[best])
				best = k;
			if (s->size[k] - size < 4096)	/* within a page: none fits better enough to look on */
				break;
		}
		if (best >= 0) {
			p = s->buf[best];
			handed(s, s->size[best]);
			s->bytes -= s->size[best];
			s->n--;
			s->buf[best] = s->buf[s->n];
			s->size[best] = s->size[s->n];
		}
		pthread_mutex_unlock(&s->lock);
	}
	if (p) {
		if (zero)
			memset(p, 0, size);
		return p;
	}
	/*
	 * Zeroed by writing, not by calloc: a fresh mapping read first (a
	 * count's ++) maps the shared zero page, and the write after it then
	 * faults again to copy it, with a TLB flush sent to every thread's
	 * CPU: 12% of a bf16 `wdrift compare` (docs/performance.md). Written
	 * first, each page faults once.
	 */
	if (zero) {
		if ((p = malloc(size ? size : 1)))
			memset(p, 0, size);
	} else {
		p = bigbuf_alloc(size);
	}
	if (!p || WD_UNDER_ASAN)
		return p;
	size_t got = malloc_usable_size(p);
	pthread_mutex_lock(&s->lock);
	handed(s, got);
	pthread_mutex_unlock(&s->lock);
	return p;
}

void spares_put(struct spares *s, void *p)
{
	size_t size;

	if (!p)
		return;
	if (WD_UNDER_ASAN) {
		free(p);
		return;
	}
	size = malloc_usable_size(p);
	if (size < s->min) {
		free(p);
		return;
	}
	pthread_mutex_lock(&s->lock);
	s->out -= size < s->out ? size : s->out;
	/* base, and as much again as the peak out exceeds what is out now */
	if (s->n < SPARES_CAP && s->bytes + size <= s->base + (s->peak - s->out)) {
		s->buf[s->n] = p;
		s->size[s->n++] = size;
		s->bytes += size;
		p = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	free(p);
}

void spares_trim(struct spares *s)
{
	void *drop[SPARES_CAP];
	int n = 0;

	pthread_mutex_lock(&s->lock);
	for (int k = 0; k < s->n;) {	/* the large ones, all */
		if (s->size[k] < s->max) {
			k++;
			continue;
		}
		drop[n++] = s->buf[k];
		s->bytes -= s->size[k];
		s->n--;
		s->buf[k] = s->buf[s->n];
		s->size[k] = s->size[s->n];
	}
	while (s->n && s->bytes > s->base) {
		s->n--;
		drop[n++] = s->buf[s->n];
		s->bytes -= s->size[s->n];
	}
	s->peak = s->out;
	pthread_mutex_unlock(&s->lock);
	while (n)
		free(drop[--n]);
}

size_t spares_kept(struct spares *s)
{
	size_t bytes;

	pthread_mutex_lock(&s->lock);
	bytes = s->bytes;
	pthread_mutex_unlock(&s->lock);
	return bytes;
}
