/*
 * config_suggest.c: "did you mean": the near misses among the names the
 * file could have used (the tables' keys, the studies), for the messages
 * of the loader (config_load.c) and of the checks (config_check.c).
 */
#include <stdint.h>
#include <string.h>

#include "config_load.h"

/* Optimal string alignment distance (a swap of neighbours costs 1). */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[3][65], *pp = d[0], *p = d[1], *c = d[2];

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		p[j] = j;
	for (size_t i = 1; i <= la; i++) {
		c[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t v = p[j - 1] + (a[i - 1] != b[j - 1]);
			if (p[j] + 1 < v) v = p[j] + 1;
			if (c[j - 1] + 1 < v) v = c[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			c[j] = v;
		}
		size_t *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[lb];
}

/* Considers candidate cand[0..len) for the key typed. */
void config_suggest_try(struct suggest *s, const char *cand, size_t len)
{
	size_t d = edit_distance(s->typed, strlen(s->typed), cand, len);
	size_t limit = len <= 4 ? 1 : len <= 10 ? 2 : 3;

	if (d && d <= limit && d < s->bestd) {
		s->best = cand;
		s->blen = len;
		s->bestd = d;
	}
}

int config_unknown(struct loader *L, const struct ynode *n, const char *what, const char *typed,
		   const struct suggest *s)
{
	if (s->best)
		return loader_fail_at(L, n, "unknown %s '%s' (did you mean '%.*s'?)", what, typed,
				      (int)s->blen, s->best);
	return loader_fail_at(L, n, "unknown %s '%s'", what, typed);
}

/* A suggestion among the dotted names of the top level, for full. */
void config_suggest_top(struct suggest *s, const char *full)
{
	const char *leaf = strrchr(full, '.');

	s->typed = full;
	s->bestd = SIZE_MAX;
	config_suggest_try(s, "studies", 7);
	config_suggest_try(s, "alerts", 6);
	for (size_t i = 0; i < N_CFG; i++) {
		const char *name = cfg_fields[i].name;
		for (const char *dot = strchr(name, '.'); dot; dot = strchr(dot + 1, '.'))
			config_suggest_try(s, name, dot - name);
		config_suggest_try(s, name, strlen(name));
	}
	/* No near miss: maybe the right key in the wrong section. */
	leaf = leaf ? leaf + 1 : full;
	for (size_t i = 0; !s->best && i < N_CFG; i++) {
		const char *name = cfg_fields[i].name;
		if (!strcmp(strrchr(name, '.') + 1, leaf)) {
			s->best = name;
			s->blen = strlen(name);
		}
	}
}
