/* arena.c: memory freed all at once (arena.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

struct wd_arena {
	struct wd_arena *next;
	size_t used, cap;
	max_align_t mem[];
};

#define ARENA_BLOCK 16384

void *wd_arena_alloc(struct wd_arena **a, size_t size)
{
	const size_t align = _Alignof(max_align_t);
	struct wd_arena *b = *a;
	void *p;

	if (size > SIZE_MAX / 4)
		return NULL;
	size = size ? (size + align - 1) & ~(align - 1) : align;
	if (!b || b->cap - b->used < size) {
		size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->cap = cap;
		b->used = 0;
		b->next = *a;
		*a = b;
	}
	p = (char *)b->mem + b->used;
	b->used += size;
	memset(p, 0, size);
	return p;
}

char *wd_arena_strndup(struct wd_arena **a, const char *s, size_t len)
{
	char *d = wd_arena_alloc(a, len + 1);

	if (d)
		memcpy(d, s, len);
	return d;
}

void wd_arena_free(struct wd_arena *a)
{
	while (a) {
		struct wd_arena *next = a->next;
		free(a);
		a = next;
	}
}
