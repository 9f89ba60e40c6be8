/*
 * config_check.c: what one key alone cannot check. A study against itself
 * (its runs), an alert against itself (which keys apply to its metric),
 * both as the loader reads them; once the file is read, the top-level keys
 * against each other (endpoints, authentication, sizes) and the alerts
 * against the studies and proxies they name. Each error points at the key
 * to blame: the value that the file sets last.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config_load.h"
#include "units.h"

int config_check_study(struct loader *L, const void *items, size_t idx,
		       const struct ynode *map, const struct ynode **w)
{
	const struct wd_config_study *studies = items, *s = &studies[idx];
	const struct ynode *it;
	size_t old, i;

	(void)map;	/* errors point at keys of the study, not at it */
	for (i = 0; i < idx; i++)
		if (!strcmp(studies[i].name, s->name)) {
			loader_path_key(L, "name");
			return loader_fail_at(L, value_of(w[S_NAME]), "duplicate study name '%s'",
					      s->name);
		}
	old = loader_path_key(L, "candidates");
	for (i = 0, it = value_of(w[S_CANDIDATES])->child; it; it = it->next, i++)
		if (!strcmp(s->candidates.names[i], s->baseline)) {
			loader_path_index(L, i);
			return loader_fail_at(L, it, "run '%s' is both the baseline and a candidate",
					      s->baseline);
		}
	loader_path_pop(L, old);
	if (!w[S_PROXIES])
		return 0;
	if (s->synthetic_proxy != WD_SYNTHETIC_NONE && s->proxies.n + 1 > MAX_PROXIES) {
		/* the synthetic proxy takes a proxy's place in every drift row */
		loader_path_key(L, "proxies");
		return loader_fail_at(L, value_of(w[S_PROXIES]),
				      "%zu proxies and a synthetic_proxy: at most %d proxies in all",
				      s->proxies.n, MAX_PROXIES);
	}
	old = loader_path_key(L, "proxies");
	for (i = 0, it = value_of(w[S_PROXIES])->child; i < s->proxies.n; it = it->next->next, i++) {
		const char *run = s->proxies.v[i].run;
		if (!strcmp(run, s->baseline)) {
			loader_path_key(L, s->proxies.v[i].label);
			return loader_fail_at(L, it->next, "proxy run '%s' is the study's baseline: it would drift by 0",
					      s->baseline);
		}
		/*
		 * A proxy's run may also be a candidate: docs/demo.md's CPU smoke
		 * test lists fp32 and seed2 as both, for their own rows.
		 */
		const struct ynode *p = value_of(w[S_PROXIES])->child;
		for (size_t k = 0; k < i; k++, p = p->next->next)
			if (!strcmp(run, s->proxies.v[k].run)) {
				loader_path_key(L, s->proxies.v[i].label);
				return loader_fail_at(L, it->next, "run '%s' is already proxy '%s' (line %d)", run,
						      s->proxies.v[k].label, p->next->line);
			}
	}
	loader_path_pop(L, old);
	return 0;
}

/* Why key i of alert a does not apply to it, or NULL when it does. */
const char *config_alert_misfit(const struct wd_config_alert *a, size_t i)
{
	switch (i) {
	case A_PROXY:
		return a->metric == WD_METRIC_RATIO ? NULL : "applies only to metric ratio";
	case A_SCOPE:
	case A_FOR:
		return a->metric != WD_METRIC_STALLED ? NULL :
			"does not apply to metric stalled (it watches time, not snapshots)";
	case A_TENSORS:
		return a->metric != WD_METRIC_STALLED && a->scope == WD_SCOPE_TENSORS ? NULL :
			"applies only with scope: tensors";
	case A_INTERVAL:
	case A_TIMEOUT:
		return a->command ? NULL : "applies only with a command";
	}
	return NULL;
}

int config_check_alert(struct loader *L, const void *items, size_t idx,
		       const struct ynode *map, const struct ynode **w)
{
	const struct wd_config_alert *alerts = items, *a = &alerts[idx];

	for (size_t i = 0; i < N_ALERT; i++) {
		const char *why = w[i] ? config_alert_misfit(a, i) : NULL;
		if (why) {
			loader_path_key(L, alert_fields[i].name);
			return loader_fail_at(L, w[i], "key '%s' %s", alert_fields[i].name, why);
		}
	}
	if (a->metric == WD_METRIC_RATIO && !a->proxy)
		return loader_fail_at(L, map, "missing required key 'proxy' (metric ratio divides by a proxy's W1)");
	if (a->metric != WD_METRIC_STALLED && a->scope == WD_SCOPE_TENSORS && !a->tensors)
		return loader_fail_at(L, map, "missing required key 'tensors' (scope tensors needs a glob)");
	if (a->metric == WD_METRIC_STALLED && a->threshold <= 0) {
		loader_path_key(L, "threshold");
		return loader_fail_at(L, value_of(w[A_THRESHOLD]), "must be more than 0 seconds for metric stalled");
	}
	for (size_t i = 0; i < idx; i++)
		if (!strcmp(alerts[i].name, a->name)) {
			loader_path_key(L, "name");
			return loader_fail_at(L, value_of(w[A_NAME]), "duplicate alert name '%s'", a->name);
		}
	return 0;
}

/* An error at the top-level key i, at its value when the file sets it. */
__attribute__((format(printf, 4, 5)))
static int fail_key(struct loader *L, const struct ynode **where, size_t i, const char *fmt, ...)
{
	va_list ap;
	int r;

	loader_set_path(L, cfg_fields[i].name);
	va_start(ap, fmt);
	r = loader_vfail(L, where[i] ? where[i]->next->line : 0, where[i] ? where[i]->next->col : 0,
			 fmt, ap);
	va_end(ap);
	return r;
}

/* Of two keys in conflict, the one the file sets last (the one to blame). */
static size_t later(const struct ynode **where, size_t a, size_t b)
{
	if (!where[a])
		return b;
	if (!where[b])
		return a;
	return where[a]->line > where[b]->line ||
	       (where[a]->line == where[b]->line && where[a]->col > where[b]->col) ? a : b;
}

/* What one key alone cannot check, on the top level. */
int config_check_top(struct loader *L, const struct wd_config *c, const struct ynode **where)
{
	const char *names[3] = { "listen.ingest", "listen.control", "listen.events" };
	const char *eps[3] = { c->listen.ingest, c->listen.control, c->listen.events };
	char a[32], b[32];

	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (!strcmp(eps[i], eps[j])) {
				size_t x = config_key_index(names[i]), y = config_key_index(names[j]);
				size_t blame = later(where, x, y);
				return fail_key(L, where, blame, "same endpoint as %s ('%s')",
						cfg_fields[blame == x ? y : x].name, CLIP(eps[i]));
			}
	const char *key, *ep = wd_config_network_endpoint(c, &key);
	if (ep && !c->auth.server_key && !c->auth.allow_insecure)
		return fail_key(L, where, config_key_index(key), "'%s' takes connections from the network, "
				"and nothing authenticates them: set auth.server_key and auth.clients "
				"(docs/security.md), or auth.allow_insecure: true", CLIP(ep));
	if (c->auth.clients.n && !c->auth.server_key)
		return fail_key(L, where, config_key_index("auth.clients"), "needs auth.server_key: "
				"without the daemon's key pair nothing is authenticated");
	if (c->limits.max_message > c->memory.budget) {
		size_t x = config_key_index("limits.max_message"), y = config_key_index("memory.budget");
		wd_format_size(a, sizeof(a), c->limits.max_message);
		wd_format_size(b, sizeof(b), c->memory.budget);
		/* a message is held whole in memory while it is received: the budget must fit one */
		if (later(where, x, y) == x)
			return fail_key(L, where, x, "%s is more than memory.budget (%s%s): limits.max_message "
					"must be at most memory.budget", a, b, where[y] ? "" : ", its default");
		/* the usual case: a budget set lower, and the message limit left at its default */
		return fail_key(L, where, y, "%s is less than limits.max_message (%s%s): memory.budget "
				"must be at least limits.max_message%s%s", b, a,
				where[x] ? "" : ", its default", where[x] ? "" : "; set limits.max_message: ",
				where[x] ? "" : b);
	}
	return 0;
}

/* The path of key key of alert i, for an error there. */
static void alert_path(struct loader *L, size_t i, const char *key)
{
	loader_set_path(L, "alerts");
	loader_path_index(L, i);
	loader_path_key(L, key);
}

/* Alerts name studies and proxies: checked once both lists are read. */
int config_resolve_alerts(struct loader *L, struct wd_config *c)
{
	for (size_t i = 0; i < c->n_alerts; i++) {
		struct wd_config_alert *a = &c->alerts[i];
		const struct ynode **w = &L->alert_where[i * N_ALERT];
		const struct wd_config_study *s = NULL;
		const char *synth;
		char have[400];
		size_t o = 0, j;

		for (j = 0; j < c->n_studies && !s; j++)
			if (!strcmp(c->studies[j].name, a->study))
				s = &c->studies[a->study_index = j];
		if (!s) {
			struct suggest sg = { .typed = a->study, .bestd = SIZE_MAX };
			for (j = 0; j < c->n_studies; j++)
				config_suggest_try(&sg, c->studies[j].name, strlen(c->studies[j].name));
			alert_path(L, i, "study");
			return config_unknown(L, value_of(w[A_STUDY]), "study", a->study, &sg);
		}
		if (a->metric != WD_METRIC_RATIO)
			continue;
		synth = wd_config_synthetic_label(s->synthetic_proxy);
		if (synth && !strcmp(a->proxy, synth))
			continue;
		for (j = 0; j < s->proxies.n; j++)
			if (!strcmp(s->proxies.v[j].label, a->proxy))
				break;
		if (j < s->proxies.n)
			continue;
		struct suggest sg = { .typed = a->proxy, .bestd = SIZE_MAX };	/* as a study's typo gets */
		for (j = 0; j < s->proxies.n; j++)
			config_suggest_try(&sg, s->proxies.v[j].label, strlen(s->proxies.v[j].label));
		if (synth)
			config_suggest_try(&sg, synth, strlen(synth));
		have[0] = 0;
		for (j = 0; j < s->proxies.n && o < sizeof(have); j++)
			o += snprintf(have + o, sizeof(have) - o, "%s%s", o ? ", " : "", s->proxies.v[j].label);
		if (synth && o < sizeof(have))
			snprintf(have + o, sizeof(have) - o, "%s%s", o ? ", " : "", synth);
		alert_path(L, i, "proxy");
		if (!have[0])
			return loader_fail_at(L, value_of(w[A_PROXY]), "study '%s' has no proxy: give it proxies or a synthetic_proxy",
					      s->name);
		if (sg.best)
			return loader_fail_at(L, value_of(w[A_PROXY]), "study '%s' has no proxy '%s' (did you "
					      "mean '%.*s'? it has: %s)", s->name, CLIP(a->proxy), (int)sg.blen,
					      sg.best, have);
		return loader_fail_at(L, value_of(w[A_PROXY]), "study '%s' has no proxy '%s' (it has: %s)",
				      s->name, CLIP(a->proxy), have);
	}
	return 0;
}
