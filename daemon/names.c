/*
 * names.c: see names.h. Open addressing with linear probing over
 * (string, length) keys that point into the tensors' own names: a group is
 * a prefix of a name, so it needs no copy.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"

struct name_slot {
	const char *s;		/* NULL: empty */
	size_t len;
	uint64_t hash;
	long tensor;		/* >= 0: a name, its index; < 0: a group, -1 - the index of a name in it */
};

static uint64_t hash_of(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ull;	/* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static const struct name_slot *lookup(const struct names *x, const char *s, size_t len)
{
	if (!x->cap)
		return NULL;
	uint64_t h = hash_of(s, len);
	for (size_t i = h & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
		const struct name_slot *e = &x->slots[i];
		if (!e->s)
			return NULL;
		if (e->hash == h && e->len == len && !memcmp(e->s, s, len))
			return e;
	}
}

/* Inserts a key that is not there; room must exist. */
static void put(struct name_slot *slots, size_t cap, const struct name_slot *e)
{
	size_t i = e->hash & (cap - 1);
	while (slots[i].s)
		i = (i + 1) & (cap - 1);
	slots[i] = *e;
}

/* Room for more keys at a load of at most 1/2; 0 or -ENOMEM. */
static int reserve(struct names *x, size_t more)
{
	if (2 * (x->used + more) <= x->cap)
		return 0;
	size_t cap = x->cap ? x->cap : 64;
	while (2 * (x->used + more) > cap)
		cap *= 2;
	struct name_slot *v = calloc(cap, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < x->cap; i++)
		if (x->slots[i].s)
			put(v, cap, &x->slots[i]);
	free(x->slots);
	x->slots = v;
	x->cap = cap;
	return 0;
}

long names_find(const struct names *x, const char *name)
{
	const struct name_slot *e = lookup(x, name, strlen(name));
	return e && e->tensor >= 0 ? e->tensor : -1;
}

int names_check(const struct names *x, const char *name, char *why, size_t len)
{
	const struct name_slot *e = lookup(x, name, strlen(name));

	if (e && e->tensor < 0) {
		/* a group's key points into the name that made it: print it whole */
		snprintf(why, len, "it is also a group in this snapshot: tensor '%.100s' is in it", e->s);
		return -1;
	}
	for (const char *p = strchr(name, '/'); p; p = strchr(p + 1, '/'))
		if ((e = lookup(x, name, (size_t)(p - name))) && e->tensor >= 0) {
			snprintf(why, len, "it would be in group '%.*s', which is a tensor of this snapshot",
				 (int)(p - name) > 100 ? 100 : (int)(p - name), name);
			return -1;
		}
	return 0;
}

int names_add(struct names *x, const char *name, size_t i)
{
	size_t parts = 1;

	for (const char *p = strchr(name, '/'); p; p = strchr(p + 1, '/'))
		parts++;
	if (reserve(x, parts) < 0)
		return -ENOMEM;
	for (const char *p = strchr(name, '/'); p; p = strchr(p + 1, '/')) {
		size_t len = (size_t)(p - name);
		if (lookup(x, name, len))
			continue;	/* a group already */
		struct name_slot g = { name, len, hash_of(name, len), -1 - (long)i };
		put(x->slots, x->cap, &g);
		x->used++;
	}
	size_t len = strlen(name);
	struct name_slot e = { name, len, hash_of(name, len), (long)i };
	put(x->slots, x->cap, &e);
	x->used++;
	return 0;
}

void names_free(struct names *x)
{
	free(x->slots);
	memset(x, 0, sizeof(*x));
}
