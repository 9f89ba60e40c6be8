/*
 * config_suggest.c: "did you mean": the near misses among the names the
 * file could have used (the tables' keys, the studies), for the messages
 * of the loader (config_load.c) and of the checks (config_check.c), and
 * for a study name typed to a command (wd_config_no_study).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config_load.h"
#include "near_name.h"

/* Considers candidate cand[0..len) for the key typed. */
void config_suggest_try(struct suggest *s, const char *cand, size_t len)
{
	size_t d = wd_name_near(s->typed, cand, len);

	if (d != SIZE_MAX && d < s->bestd) {
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

void wd_config_no_study(const struct wd_config *cfg, const char *study, char *out, size_t len)
{
	struct suggest near = { study, NULL, 0, SIZE_MAX };
	size_t at;

	for (size_t i = 0; i < cfg->n_studies; i++)
		config_suggest_try(&near, cfg->studies[i].name, strlen(cfg->studies[i].name));
	at = (size_t)snprintf(out, len, "no study '%.128s'%s%.*s%s (%s", study,
			      near.best ? "; did you mean '" : "", near.best ? (int)near.blen : 0,
			      near.best ? near.best : "", near.best ? "'?" : "",
			      cfg->n_studies ? "studies: " : "the config has no study");
	for (size_t i = 0; i < cfg->n_studies && at < len; i++)
		at += (size_t)snprintf(out + at, len - at, "%s%s", i ? ", " : "", cfg->studies[i].name);
	if (at < len)
		snprintf(out + at, len - at, ")");
}
