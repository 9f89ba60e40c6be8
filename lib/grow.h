/*
 * grow.h: the one way an array grows by doubling. Internal; libc only.
 *
 *	struct entry *v = wd_grow(ix->v, ix->n, &ix->cap, sizeof(*v), 64);
 *	if (!v)
 *		return -ENOMEM;
 *	ix->v = v;
 *	ix->v[ix->n++] = e;
 */
#ifndef WD_GROW_H
#define WD_GROW_H

#include <stdint.h>
#include <stdlib.h>

/*
 * v itself when it has room for element n (n < *cap); else v reallocated
 * to twice *cap elements (first, for an empty array) and *cap updated.
 * NULL when out of memory or past SIZE_MAX bytes: v and *cap unchanged,
 * v still the caller's to free.
 */
static inline void *wd_grow(void *v, size_t n, size_t *cap, size_t elem, size_t first)
{
	if (n < *cap)
		return v;
	size_t want = *cap ? 2 * *cap : first;
	if (want < *cap || (elem && want > SIZE_MAX / elem))
		return NULL;
	void *grown = realloc(v, want * elem);
	if (grown)
		*cap = want;
	return grown;
}

#endif
