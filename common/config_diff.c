/* config_diff.c: a reload's changes, as JSON (see config_diff.h). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "config_diff.h"
#include "config_table.h"

/* Text of field f at base for comparing: "" for an unset optional one. */
static const char *text_of(const struct field *f, const void *base, char *buf, size_t size)
{
	const char *t = config_value_text(f, base, buf, size);
	return t ? t : "";
}

static int same_runs(const struct wd_config_runs *a, const struct wd_config_runs *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->names[i], b->names[i]))
			return 0;
	return 1;
}

static int same_proxies(const struct wd_config_proxies *a, const struct wd_config_proxies *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->v[i].label, b->v[i].label) || strcmp(a->v[i].run, b->v[i].run))
			return 0;
	return 1;
}

/* The keys of table tab that differ between items a and b, as a JSON array. */
static json_t *item_keys(const struct field *tab, size_t n, const void *a, const void *b)
{
	json_t *keys = json_array();

	for (size_t i = 0; keys && i < n; i++) {
		const struct field *f = &tab[i];
		const void *pa = (const char *)a + f->off, *pb = (const char *)b + f->off;
		char x[96], y[96];
		int same;

		switch (f->type) {
		case T_RUNS: same = same_runs(pa, pb); break;
		case T_PROXIES: same = same_proxies(pa, pb); break;
		case T_CLIENTS: same = 1; break;	/* not in an item */
		default:
			same = !strcmp(text_of(f, a, x, sizeof(x)), text_of(f, b, y, sizeof(y)));
		}
		if (!same)
			json_array_append_new(keys, json_string(f->name));
	}
	return keys;
}

/* A list of named items: its n items of size bytes, each starting with its name. */
struct items {
	const void *v;
	size_t n, size;
};

static const char *item_name(const struct items *l, size_t i)
{
	return *(const char *const *)((const char *)l->v + i * l->size);
}

static const void *find(const struct items *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(item_name(l, i), name))
			return (const char *)l->v + i * l->size;
	return NULL;
}

/* CHANGES of config_diff.h, items compared through tab (NULL: by value of key). */
static json_t *changes(const struct items *old, const struct items *next, const struct field *tab,
		       size_t ntab, int (*same)(const void *a, const void *b))
{
	json_t *added = json_array(), *removed = json_array(), *changed = json_array();

	for (size_t i = 0; i < next->n; i++) {
		const void *b = (const char *)next->v + i * next->size, *a = find(old, item_name(next, i));
		if (!a) {
			json_array_append_new(added, json_string(item_name(next, i)));
			continue;
		}
		json_t *keys = tab ? item_keys(tab, ntab, a, b) : NULL;
		if (tab ? json_array_size(keys) > 0 : !same(a, b))
			json_array_append_new(changed, json_pack("{s:s,s:o}", "name", item_name(next, i),
								 "keys", keys ? keys : json_array()));
		else
			json_decref(keys);
	}
	for (size_t i = 0; i < old->n; i++)
		if (!find(next, item_name(old, i)))
			json_array_append_new(removed, json_string(item_name(old, i)));
	return json_pack("{s:o,s:o,s:o}", "added", added, "removed", removed, "changed", changed);
}

static int same_client(const void *a, const void *b)
{
	return !strcmp(((const struct wd_config_client *)a)->key, ((const struct wd_config_client *)b)->key);
}

json_t *wd_config_diff(const struct wd_config *old, const struct wd_config *next)
{
	struct items os = { old->studies, old->n_studies, sizeof(*old->studies) };
	struct items ns = { next->studies, next->n_studies, sizeof(*next->studies) };
	struct items oa = { old->alerts, old->n_alerts, sizeof(*old->alerts) };
	struct items na = { next->alerts, next->n_alerts, sizeof(*next->alerts) };
	struct items oc = { old->auth.clients.v, old->auth.clients.n, sizeof(*old->auth.clients.v) };
	struct items nc = { next->auth.clients.v, next->auth.clients.n, sizeof(*next->auth.clients.v) };
	json_t *keys = json_array();

	for (size_t i = 0; keys && i < N_CFG; i++) {
		const struct field *f = &cfg_fields[i];
		char x[96], y[96];
		const char *a, *b;

		if (f->type == T_CLIENTS)
			continue;	/* "clients", by name */
		a = text_of(f, old, x, sizeof(x));
		b = text_of(f, next, y, sizeof(y));
		if (strcmp(a, b))
			json_array_append_new(keys, json_pack("{s:s,s:s,s:s}", "key", f->name, "from", a, "to", b));
	}
	return json_pack("{s:o,s:o,s:o,s:o}",
			 "studies", changes(&os, &ns, study_fields, N_STUDY, NULL),
			 "alerts", changes(&oa, &na, alert_fields, N_ALERT, NULL),
			 "clients", changes(&oc, &nc, NULL, 0, same_client),
			 "keys", keys);
}

void wd_config_diff_summary(const json_t *d, char *buf, size_t size)
{
	static const char *const lists[3] = { "studies", "alerts", "clients" };
	const json_t *keys = json_object_get(d, "keys");
	size_t o = 0, total = json_array_size(keys);

	if (!d) {
		snprintf(buf, size, "changes unknown (out of memory)");
		return;
	}
	buf[0] = 0;
	for (int i = 0; i < 3; i++) {
		const json_t *c = json_object_get(d, lists[i]);
		size_t a = json_array_size(json_object_get(c, "added"));
		size_t r = json_array_size(json_object_get(c, "removed"));
		size_t m = json_array_size(json_object_get(c, "changed"));
		total += a + r + m;
		if (o < size)
			o += snprintf(buf + o, size - o, "%s%s +%zu -%zu ~%zu", i ? ", " : "", lists[i], a, r, m);
	}
	/* from and to, as the reply gives them ('' for an unset optional key) */
	for (size_t i = 0; i < json_array_size(keys) && o < size; i++) {
		const json_t *k = json_array_get(keys, i);
		const char *from = json_string_value(json_object_get(k, "from"));
		const char *to = json_string_value(json_object_get(k, "to"));
		o += snprintf(buf + o, size - o, "%s%s: %s -> %s", i ? ", " : ", keys: ",
			      json_string_value(json_object_get(k, "key")),
			      from && *from ? from : "''", to && *to ? to : "''");
	}
	if (o >= size && size > 4)	/* cut short: say so rather than end mid-word */
		memcpy(buf + size - 4, "...", 4);
	if (!total)
		snprintf(buf, size, "nothing changed");
}
