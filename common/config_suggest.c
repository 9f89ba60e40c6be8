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

/*
 * A run's name typed where a study's goes (`wdrift drift lowprec`): "that
 * is a run, proxy fp16 in study 'fa'", for the first study naming it and a
 * count of the others. Returns how many bytes went into out, 0 when no study
 * names it.
 */
static size_t said_run(const struct wd_config *cfg, const char *run, char *out, size_t len)
{
	const struct wd_config_study *st = wd_config_study_naming(cfg, run);
	const char *label = NULL, *role;
	size_t more = 0;
	int n;

	if (!st || !len)
		return 0;
	role = wd_study_role(st, run, &label);
	for (const struct wd_config_study *o = st + 1; o < cfg->studies + cfg->n_studies; o++)
		more += wd_study_role(o, run, NULL) != NULL;
	n = more ? snprintf(out, len, ": that is a run, %s%s%s in study '%s' and %zu more", role,
			    label ? " " : "", label ? label : "", st->name, more)
		 : snprintf(out, len, ": that is a run, %s%s%s in study '%s'", role, label ? " " : "",
			    label ? label : "", st->name);
	return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

void wd_config_no_study(const struct wd_config *cfg, const char *study, char *out, size_t len)
{
	struct suggest near = { study, NULL, 0, SIZE_MAX };
	char run[400] = "";
	size_t at;

	/* a run's name: say whose, not a study near it by spelling */
	if (!said_run(cfg, study, run, sizeof(run)))
		for (size_t i = 0; i < cfg->n_studies; i++)
			config_suggest_try(&near, cfg->studies[i].name, strlen(cfg->studies[i].name));
	at = (size_t)snprintf(out, len, "no study '%.128s'%s%s%.*s%s (%s", study, run,
			      near.best ? "; did you mean '" : "", near.best ? (int)near.blen : 0,
			      near.best ? near.best : "", near.best ? "'?" : "",
			      cfg->n_studies ? "studies: " : "the config has no study");
	for (size_t i = 0; i < cfg->n_studies && at < len; i++)
		at += (size_t)snprintf(out + at, len - at, "%s%s", i ? ", " : "", cfg->studies[i].name);
	if (at < len)
		snprintf(out + at, len - at, ")");
}
