/*
 * alert_instances.c: a rule's instances and their (run, tensor) index
 * (alert_instances.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alert_instances.h"

static uint64_t instance_hash(const char *run, const char *tensor)
{
	uint64_t h = 1469598103934665603ull;	/* FNV-1a over run, a 0, tensor */
	for (const char *p = run; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	h = (h ^ 0xff) * 1099511628211ull;
	for (const char *p = tensor; p && *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

static int instance_is(const struct instance *i, const char *run, const char *tensor)
{
	return !strcmp(i->run, run) && ((!i->tensor && !tensor) ||
					 (i->tensor && tensor && !strcmp(i->tensor, tensor)));
}

/* Indexes every instance from head in v, of cap slots, all empty. */
static void fill(struct instance **v, size_t cap, struct instance *head)
{
	for (struct instance *x = head; x; x = x->next) {
		size_t k = instance_hash(x->run, x->tensor) & (cap - 1);
		while (v[k])
			k = (k + 1) & (cap - 1);
		v[k] = x;
	}
}

struct instance *instances_get(struct instances *s, const char *run, const char *tensor)
{
	struct instance *i;

	for (size_t k = s->cap ? instance_hash(run, tensor) & (s->cap - 1) : 0;
	     s->cap && (i = s->slots[k]); k = (k + 1) & (s->cap - 1))
		if (instance_is(i, run, tensor))
			return i;
	if (2 * (s->n + 1) > s->cap) {	/* grown before i is made: nothing to undo */
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct instance **v = calloc(cap, sizeof(*v));
		if (!v)
			return NULL;
		fill(v, cap, s->head);
		free(s->slots);
		s->slots = v;
		s->cap = cap;
	}
	/*
	 * One block, the names after the struct: a per-tensor rule makes 20,000
	 * at a model's first batch, on the main loop, and three allocations each
	 * were most of that batch's time under ASan (t73).
	 */
	size_t run_len = strlen(run) + 1, tensor_len = tensor ? strlen(tensor) + 1 : 0;
	if (!(i = calloc(1, sizeof(*i) + run_len + tensor_len)))
		return NULL;
	i->run = memcpy((char *)(i + 1), run, run_len);
	i->value = NAN;	/* no value until evaluated: a ratio waits for its proxy */
	i->step = -1;
	if (tensor)
		i->tensor = memcpy(i->run + run_len, tensor, tensor_len);
	size_t k = instance_hash(run, tensor) & (s->cap - 1);
	while (s->slots[k])
		k = (k + 1) & (s->cap - 1);
	s->slots[k] = i;
	s->n++;
	i->next = s->head;
	s->head = i;
	return i;
}

size_t instances_count(const struct instances *s, int state)
{
	size_t n = 0;
	for (const struct instance *i = s->head; i; i = i->next)
		n += i->state == state;
	return n;
}

size_t instances_drop(struct instances *s, const char *run, size_t *firing)
{
	size_t n = 0, f = 0;

	for (struct instance **p = &s->head; *p;) {
		struct instance *i = *p;
		if (run && strcmp(i->run, run)) {
			p = &i->next;
			continue;
		}
		*p = i->next;
		n++;
		f += i->state == FIRING;
		free(i);	/* its names with it */
	}
	s->n -= n;
	if (!s->head) {
		free(s->slots);
		*s = (struct instances){ 0 };
	} else if (n) {	/* the same slots, fewer in them */
		memset(s->slots, 0, s->cap * sizeof(*s->slots));
		fill(s->slots, s->cap, s->head);
	}
	if (firing)
		*firing = f;
	return n;
}
