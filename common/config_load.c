/*
 * config_load.c: loading a configuration. The file's text becomes a YAML
 * document (yaml_doc.h), which is walked against the tables
 * (config_table.h): the scalar keys first, then studies (run names depend
 * on limits.max_name), then alerts; each study and alert is checked as it
 * is read, and what one key alone cannot check comes last
 * (config_check.c). The result is built in a scratch struct with its own
 * arena, and copied to the caller only when every step passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_load.h"
#include "error.h"
#include "keys.h"	/* wd_key_is_z85 */
#include "near_name.h"

#define MAX_FILE (16u << 20)	/* a bigger file is surely a mistake */

/* What a value of each type is, for "expected X, not Y". */
static const char *const type_desc[] = {
	[T_STRING] = "a string", [T_ENDPOINT] = "a ZeroMQ endpoint", [T_NAME] = "a name",
	[T_RUN] = "a run name",
	[T_SIZE] = "a size such as 4G", [T_INT] = "an integer", [T_DOUBLE] = "a number",
	[T_ENUM] = "a scalar", [T_BOOL] = "true or false",
	[T_RUNS] = "a list of run names", [T_PROXIES] = "a mapping of proxy labels to run names",
	[T_CLIENTS] = "a mapping of client names to public keys",
};

int loader_vfail(struct loader *L, int line, int col, const char *fmt, va_list ap)
{
	return ydoc_verror(L->err, L->errlen, L->name, line, col, L->path, fmt, ap);
}

int loader_fail_at(struct loader *L, const struct ynode *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	loader_vfail(L, n ? n->line : 0, n ? n->col : 0, fmt, ap);
	va_end(ap);
	return -1;
}

static int oom(struct loader *L)
{
	return loader_fail_at(L, NULL, "out of memory");
}

size_t loader_path_key(struct loader *L, const char *key)
{
	size_t old = L->pathlen;
	char q[96];

	snprintf(L->path + old, sizeof(L->path) - old, "%s%s", old ? "." : "",
		 config_clip(q, sizeof(q), key, 60));
	L->pathlen = strlen(L->path);
	return old;
}

size_t loader_path_index(struct loader *L, size_t i)
{
	size_t old = L->pathlen;

	snprintf(L->path + old, sizeof(L->path) - old, "[%zu]", i);
	L->pathlen = strlen(L->path);
	return old;
}

void loader_path_pop(struct loader *L, size_t old)
{
	L->path[old] = 0;
	L->pathlen = old;
}

void loader_set_path(struct loader *L, const char *path)
{
	snprintf(L->path, sizeof(L->path), "%s", path);
	L->pathlen = strlen(L->path);
}

static int alias_fail(struct loader *L, const struct ynode *n)
{
	return loader_fail_at(L, n, "aliases are not supported (*%s): write the value out",
			      CLIP(n->text));
}

/* Checks that n is of the kind wanted; what names it in the message. */
static int expect(struct loader *L, const struct ynode *n, enum ykind kind, const char *what)
{
	if (n->kind == Y_ALIAS)
		return alias_fail(L, n);
	if (n->kind != kind || (kind == Y_SCALAR && ydoc_is_null(n)))
		return loader_fail_at(L, n, "expected %s, not %s", what, ydoc_kind_desc(n));
	return 0;
}

/* Checks a scalar for a NUL that C strings would cut off at. */
static int check_nul(struct loader *L, const struct ynode *n)
{
	if (strlen(n->text) != n->len)
		return loader_fail_at(L, n, "contains a NUL character");
	return 0;
}

/*
 * Checks key k of mapping map and pushes it on the path (*old says where to
 * pop back to). Keys are scalars, without NUL, not "<<", not repeated.
 */
static int map_key(struct loader *L, const struct ynode *map, const struct ynode *k, size_t *old)
{
	if (k->kind == Y_ALIAS)
		return alias_fail(L, k);
	if (k->kind != Y_SCALAR)
		return loader_fail_at(L, k, "a key must be a scalar, not %s", ydoc_kind_desc(k));
	*old = loader_path_key(L, k->text);
	if (check_nul(L, k))
		return -1;
	if (!strcmp(k->text, "<<"))
		return loader_fail_at(L, k, "merge keys ('<<') are not supported");
	for (const struct ynode *p = map->child; p != k; p = p->next->next)
		if (p->kind == Y_SCALAR && !strcmp(p->text, k->text))
			return loader_fail_at(L, k, "duplicate key '%s' (first at line %d)", CLIP(k->text), p->line);
	return 0;
}


/* The keys directly under section, "every, disk_budget", into buf. */
static const char *section_keys(const char *section, char *buf, size_t size)
{
	size_t sl = strlen(section), o = 0;

	buf[0] = 0;
	for (size_t i = 0; i < N_CFG; i++) {
		const char *name = cfg_fields[i].name, *sub, *dot;
		size_t len;
		if (strncmp(name, section, sl) || name[sl] != '.')
			continue;
		sub = name + sl + 1;
		dot = strchr(sub, '.');
		len = dot ? (size_t)(dot - sub) : strlen(sub);
		/* sections are contiguous in the table: skip a repeat of the last */
		if (o >= len && !strncmp(buf + o - len, sub, len) && (o == len || buf[o - len - 1] == ' '))
			continue;
		o += snprintf(buf + o, size - o, "%s%.*s", o ? ", " : "", (int)len, sub);
		if (o >= size)
			break;
	}
	return buf;
}

static int is_section(const char *full)
{
	size_t len = strlen(full);

	for (size_t i = 0; i < N_CFG; i++)
		if (!strncmp(cfg_fields[i].name, full, len) && cfg_fields[i].name[len] == '.')
			return 1;
	return 0;
}


static int load_scalar(struct loader *L, const struct field *f, const struct ynode *v, void *base)
{
	char why[512];
	const char *text;

	if (v->kind == Y_SCALAR && ydoc_is_null(v)) {
		if (f->def)
			return loader_fail_at(L, v, "has no value (leave the key out for the default, %s)", f->def);
		return loader_fail_at(L, v, "has no value");
	}
	if (expect(L, v, Y_SCALAR, type_desc[f->type]) || check_nul(L, v))
		return -1;
	text = v->text;
	if (f->type == T_STRING || f->type == T_ENDPOINT || f->type == T_NAME) {
		text = wd_arena_strndup(&L->keep, v->text, v->len);
		if (!text)
			return oom(L);
	}
	if (config_value_parse(f, text, base, why, sizeof(why)))
		return loader_fail_at(L, v, "%s", why);
	return 0;
}

/* A run name: a scalar that passes check_run, copied into the config. */
static int load_run(struct loader *L, const struct ynode *v, const char **out)
{
	char why[512];

	if (v->kind == Y_SCALAR && ydoc_is_null(v))
		return loader_fail_at(L, v, "has no value");
	if (expect(L, v, Y_SCALAR, "a run name") || check_nul(L, v))
		return -1;
	if (config_check_run(v->text, L->max_run, why, sizeof(why)))
		return loader_fail_at(L, v, "%s", why);
	*out = wd_arena_strndup(&L->keep, v->text, v->len);
	return *out ? 0 : oom(L);
}

static int load_runs(struct loader *L, const struct ynode *v, struct wd_config_runs *runs)
{
	const struct ynode *it;
	size_t i = 0;

	if (v->kind == Y_SCALAR && !ydoc_is_null(v))
		return loader_fail_at(L, v, "expected a list of run names, not a scalar (write [%s] for one run)",
				      CLIP(v->text));
	if (ydoc_is_null(v) || (v->kind == Y_SEQ && v->n == 0))
		return loader_fail_at(L, v, "must name at least one run");
	if (expect(L, v, Y_SEQ, "a list of run names"))
		return -1;
	if (v->n > MAX_CANDIDATES)
		return loader_fail_at(L, v, "%zu runs: at most %d", v->n, MAX_CANDIDATES);
	runs->names = wd_arena_alloc(&L->keep, v->n * sizeof(*runs->names));
	if (!runs->names)
		return oom(L);
	for (it = v->child; it; it = it->next, i++) {
		size_t old = loader_path_index(L, i);
		if (load_run(L, it, &runs->names[i]))
			return -1;
		for (const struct ynode *p = v->child; p != it; p = p->next)
			if (!strcmp(p->text, it->text))
				return loader_fail_at(L, it, "run '%s' is listed twice (first at line %d)",
						      runs->names[i], p->line);
		loader_path_pop(L, old);
	}
	runs->n = v->n;
	return 0;
}

/* Reads pair i of a mapping whose keys are names: key k (checked), its value k->next. */
typedef int read_pair_fn(struct loader *L, const struct ynode *k, void *items, size_t i);

/* A proxy: its label, and the run name it maps to. */
static int read_proxy(struct loader *L, const struct ynode *k, void *items, size_t i)
{
	struct wd_config_proxy *px = (struct wd_config_proxy *)items + i;

	px->label = wd_arena_strndup(&L->keep, k->text, k->len);
	if (!px->label)
		return oom(L);
	return load_run(L, k->next, &px->run);
}

/* A client of auth.clients: its name, and a public key no other client has. */
static int read_client(struct loader *L, const struct ynode *k, void *items, size_t i)
{
	struct wd_config_client *cl = items;
	const struct ynode *kv = k->next;

	if (expect(L, kv, Y_SCALAR, "a public key (40 characters of Z85, from wdrift keygen)") ||
	    check_nul(L, kv))
		return -1;
	const char *key = kv->text;
	size_t len = kv->len;
	if (!strncmp(key, WD_KEY_PREFIX, strlen(WD_KEY_PREFIX))) {	/* as --server-key takes it */
		key += strlen(WD_KEY_PREFIX);
		len -= strlen(WD_KEY_PREFIX);
	}
	if (!wd_key_is_z85(key)) {
		/* what is wrong with it, as a trial read "got 40 characters" for a bad one of 40 */
		size_t n = strlen(key), bad = strspn(key, WD_Z85_CHARS);
		struct stat st;
		if (stat(key, &st) == 0)
			return loader_fail_at(L, kv, "bad public key: '%.60s' is a file: auth.clients takes the "
					      "key itself, the 40 characters of its public-key line", key);
		if (n == WD_KEY_Z85)
			return loader_fail_at(L, kv, "bad public key: character %zu ('%c') is not Z85: expected "
					      "the 40 characters wdrift keygen prints", bad + 1, key[bad]);
		return loader_fail_at(L, kv, "bad public key: expected 40 characters of Z85, as "
				      "wdrift keygen prints (got %zu characters)", n);
	}
	for (size_t j = 0; j < i; j++)
		if (!strcmp(cl[j].key, key))
			return loader_fail_at(L, kv, "the same key as client '%s'", cl[j].name);
	cl[i].name = wd_arena_strndup(&L->keep, k->text, k->len);
	cl[i].key = wd_arena_strndup(&L->keep, key, len);
	return cl[i].name && cl[i].key ? 0 : oom(L);
}

/* The mappings keyed by names: proxies, then auth.clients (load_named_map's T_CLIENTS). */
static const struct named_map {
	const char *what;
	size_t max, size;
	read_pair_fn *read;
} named_maps[] = {
	{ "proxies", MAX_PROXIES, sizeof(struct wd_config_proxy), read_proxy },
	{ "clients", MAX_CLIENTS, sizeof(struct wd_config_client), read_client },
};

/*
 * A mapping whose keys are names (proxies, auth.clients): returns its
 * items (n of them, size bytes each, allocated in the config; NULL for no
 * pairs), each pair read by read. On an error *failed is set, and the
 * items read so far are returned all the same.
 */
static void *load_named_map(struct loader *L, const struct ynode *v, enum ftype type, size_t *n,
			    int *failed)
{
	const struct named_map *m = &named_maps[type == T_CLIENTS];
	const char *what = m->what;
	size_t max = m->max, size = m->size, i = 0;
	read_pair_fn *read = m->read;
	char why[512];
	void *items;

	*failed = 1;
	if (ydoc_is_null(v)) {
		*failed = 0;
		return NULL;
	}
	if (expect(L, v, Y_MAP, type_desc[type]))
		return NULL;
	if (v->n / 2 > max) {
		loader_fail_at(L, v, "%zu %s: at most %zu", v->n / 2, what, max);
		return NULL;
	}
	if (!(items = wd_arena_alloc(&L->keep, (v->n / 2 + 1) * size))) {
		oom(L);
		return NULL;
	}
	for (const struct ynode *k = v->child; k; k = k->next->next, i++) {
		size_t old;
		if (map_key(L, v, k, &old))
			return items;
		if (config_check_name(k->text, why, sizeof(why))) {
			loader_fail_at(L, k, "%s", why);
			return items;
		}
		if (read(L, k, items, i))
			return items;
		loader_path_pop(L, old);
	}
	*n = i;
	*failed = 0;
	return items;
}

static int load_field(struct loader *L, const struct field *f, const struct ynode *v, void *base)
{
	int failed;

	switch (f->type) {
	case T_RUN:
		return load_run(L, v, (const char **)((char *)base + f->off));
	case T_RUNS:
		return load_runs(L, v, (struct wd_config_runs *)((char *)base + f->off));
	case T_PROXIES:
	case T_CLIENTS: {
		size_t n = 0;
		void *items = load_named_map(L, v, f->type, &n, &failed), *at = (char *)base + f->off;
		if (f->type == T_PROXIES)
			*(struct wd_config_proxies *)at = (struct wd_config_proxies){ .n = n, .v = items };
		else
			*(struct wd_config_clients *)at = (struct wd_config_clients){ .n = n, .v = items };
		return failed ? -1 : 0;
	}
	default:
		return load_scalar(L, f, v, base);
	}
}

/*
 * Reads mapping map as one item of a list (a study, an alert) against the
 * table tab: where[i] is set to the key node of field i when present;
 * fields left out take their defaults, or fail when required.
 */
static int walk_item(struct loader *L, const struct ynode *map, const struct field *tab,
		     size_t ntab, void *base, const struct ynode **where)
{
	for (const struct ynode *k = map->child; k; k = k->next->next) {
		const struct field *f;
		size_t old;

		if (map_key(L, map, k, &old))
			return -1;
		f = config_field_find(tab, ntab, k->text);
		if (!f) {
			struct suggest s = { .typed = k->text, .bestd = SIZE_MAX };
			for (size_t i = 0; i < ntab; i++)
				config_suggest_try(&s, tab[i].name, strlen(tab[i].name));
			return config_unknown(L, k, "key", CLIP(k->text), &s);
		}
		where[f - tab] = k;
		if (load_field(L, f, k->next, base))
			return -1;
		loader_path_pop(L, old);
	}
	for (size_t i = 0; i < ntab; i++) {
		if (where[i])
			continue;
		if (tab[i].flags & F_REQUIRED)
			return loader_fail_at(L, map, "missing required key '%s'", tab[i].name);
		config_set_default(&tab[i], base);
	}
	return 0;
}


/* One of the top-level lists: its items are mappings read against a table. */
struct list_spec {
	const char *what;		/* "studies": for messages */
	const char *item;		/* "a mapping (one study)" */
	int max;
	const struct field *tab;
	size_t ntab, size;		/* fields; bytes of one item */
	int (*check)(struct loader *L, const void *items, size_t idx, const struct ynode *map,
		     const struct ynode **where);
};

static const struct list_spec study_list = {
	"studies", "a mapping (one study)", MAX_STUDIES, study_fields, N_STUDY,
	sizeof(struct wd_config_study), config_check_study,
};
static const struct list_spec alert_list = {
	"alerts", "a mapping (one alert)", MAX_ALERTS, alert_fields, N_ALERT,
	sizeof(struct wd_config_alert), config_check_alert,
};

/*
 * Reads v, a list as spec says, into *items (n of them, allocated in the
 * config), each checked as it is read; *where gets spec->ntab key nodes
 * per item. Absent or null: no items. 0 or -1.
 */
static int walk_list(struct loader *L, const struct ynode *v, const struct list_spec *spec,
		     void **items, size_t *n, const struct ynode ***where)
{
	const struct ynode *it;
	char want[32];
	size_t i = 0;

	loader_set_path(L, spec->what);	/* its errors name "studies[2].baseline" */
	if (ydoc_is_null(v))
		return 0;
	snprintf(want, sizeof(want), "a list of %s", spec->what);
	if (expect(L, v, Y_SEQ, want))
		return -1;
	if (v->n > (size_t)spec->max)
		return loader_fail_at(L, v, "%zu %s: at most %d", v->n, spec->what, spec->max);
	*items = wd_arena_alloc(&L->keep, (v->n + 1) * spec->size);
	*where = wd_arena_alloc(&L->tree, (v->n + 1) * spec->ntab * sizeof(**where));
	if (!*items || !*where)
		return oom(L);
	for (it = v->child; it; it = it->next, i++) {
		const struct ynode **w = *where + i * spec->ntab;
		size_t old = loader_path_index(L, i);

		if (expect(L, it, Y_MAP, spec->item) ||
		    walk_item(L, it, spec->tab, spec->ntab, (char *)*items + i * spec->size, w) ||
		    spec->check(L, *items, i, it, w))
			return -1;
		loader_path_pop(L, old);
	}
	*n = v->n;
	return 0;
}

/*
 * Reads the mapping of a section of the top level: section is its dotted
 * name ("" for the top itself, "spool.retention"). where[i] gets the key
 * node of cfg_fields[i] when the file sets it.
 */
static int walk_section(struct loader *L, const struct ynode *map, const char *section,
			struct wd_config *c, const struct ynode **where)
{
	for (const struct ynode *k = map->child; k; k = k->next->next) {
		const struct ynode *v = k->next;
		const struct field *f;
		char full[160], keys[160];
		size_t old;
		int r;

		if (map_key(L, map, k, &old))
			return -1;
		/* A dotted key is not a path: "memory.budget: 4G" would dodge
		 * the duplicate check against "memory: {budget: 8G}". */
		if (strchr(k->text, '.') ||
		    snprintf(full, sizeof(full), "%s%s%s", section, *section ? "." : "", k->text) >=
		    (int)sizeof(full))
			full[0] = 0;
		if (!*section && !strcmp(k->text, "studies")) {
			L->studies = k;	/* read once limits.max_name is known */
			r = 0;
		} else if (!*section && !strcmp(k->text, "alerts")) {
			L->alerts = k;
			r = 0;
		} else if ((f = config_field_find(cfg_fields, N_CFG, full))) {
			where[f - cfg_fields] = k;
			r = load_field(L, f, v, c);
		} else if (*full && is_section(full)) {
			if (ydoc_is_null(v))
				r = 0;	/* "memory:" with nothing under it: the defaults */
			else if (v->kind == Y_MAP)
				r = walk_section(L, v, full, c, where);
			else if (v->kind == Y_ALIAS)
				r = alias_fail(L, v);
			else
				r = loader_fail_at(L, v, "expected a mapping (of %s), not %s",
						   section_keys(full, keys, sizeof(keys)), ydoc_kind_desc(v));
		} else if (!*section && strchr(k->text, '.') &&
			   config_field_find(cfg_fields, N_CFG, k->text)) {
			const char *dot = strrchr(k->text, '.');
			r = loader_fail_at(L, k, "unknown key '%s' (keys nest: write '%s' under '%.*s')",
					   CLIP(k->text), dot + 1, (int)(dot - k->text), k->text);
		} else {
			struct suggest s = { 0 };
			config_suggest_top(&s, *full ? full : k->text);
			r = config_unknown(L, k, "key", CLIP(*full ? full : k->text), &s);
		}
		if (r)
			return -1;
		loader_path_pop(L, old);
	}
	return 0;
}

/* Loads text[0..len) under name into *out, all or nothing. */
static int load_buffer(const char *name, const char *text, size_t len, struct wd_config *out,
		       char *err, size_t errlen)
{
	struct loader L = { .name = name, .err = err, .errlen = errlen };
	const struct ynode *where[N_CFG] = { 0 };
	struct ynode *root;
	struct wd_config c;
	void *items = NULL;	/* the studies, when any */
	int r = -1;

	if (err && errlen)
		err[0] = 0;
	wd_config_defaults(&c);
	if (ydoc_parse(name, text, len, &L.tree, &root, err, errlen))
		goto out;
	if (root && !ydoc_is_null(root)) {
		if (root->kind == Y_ALIAS) {
			alias_fail(&L, root);
			goto out;
		}
		if (root->kind != Y_MAP) {
			loader_fail_at(&L, root, "expected a mapping of keys at the top, not %s",
				       ydoc_kind_desc(root));
			goto out;
		}
		if (walk_section(&L, root, "", &c, where))
			goto out;
		L.max_run = c.limits.max_name;
		void *alerts = NULL;
		if ((L.studies && walk_list(&L, L.studies->next, &study_list, &items, &c.n_studies,
					    &L.study_where)) ||
		    (L.alerts && walk_list(&L, L.alerts->next, &alert_list, &alerts, &c.n_alerts,
					   &L.alert_where)))
			goto out;
		c.studies = items;
		c.alerts = alerts;
		loader_set_path(&L, "");
	}
	if (config_check_top(&L, &c, where) || config_resolve_alerts(&L, &c))
		goto out;
	for (size_t i = 0; i < N_CFG; i++)
		if (where[i]) {
			c.at[i].line = where[i]->line;
			c.at[i].col = where[i]->col;
		}
	c.source = wd_arena_strndup(&L.keep, name, strlen(name));
	if (!c.source) {
		oom(&L);
		goto out;
	}
	c.arena = L.keep;
	L.keep = NULL;
	*out = c;
	r = 0;
out:
	wd_arena_free(L.tree);
	wd_arena_free(L.keep);
	return r;
}

int wd_config_load_string(const char *name, const char *yaml, struct wd_config *out,
			  char *err, size_t errlen)
{
	if (!name)
		name = "(string)";
	if (!yaml)
		yaml = "";
	return load_buffer(name, yaml, strlen(yaml), out, err, errlen);
}

int wd_config_load(const char *path, struct wd_config *out, char *err, size_t errlen)
{
	size_t len = 0, cap = 65536;
	char *buf = NULL;
	struct stat st;
	int fd, r = -1;

	/*
	 * O_NONBLOCK, then back to blocking reads: a named FIFO with no writer
	 * would otherwise hang the open (wdriftd -c, and every wdrift -c) for
	 * good. A pipe that has a writer, as -c <(generate) gives, still reads
	 * to its end; one with none reads nothing, refused below.
	 */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		char near[PATH_MAX + 32] = "";
		if (e == ENOENT)	/* -c wdrift.yml beside wdrift.yaml */
			wd_suggest_file(path, near, sizeof(near));
		return wd_error(err, errlen, "%s: cannot open: %s%s", path, strerror(e), near);
	}
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		wd_error(err, errlen, "%s: is a directory, not a configuration file", path);
		goto out;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	for (;;) {
		ssize_t n;
		if (!buf || len == cap) {
			char *nb;
			if (buf)
				cap *= 2;
			nb = realloc(buf, cap);
			if (!nb) {
				wd_error(err, errlen, "%s: out of memory", path);
				goto out;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			wd_error(err, errlen, "%s: cannot read: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0 && !len && S_ISFIFO(st.st_mode)) {
			wd_error(err, errlen, "%s: a FIFO with no writer: nothing to read, not a "
				 "configuration file", path);
			goto out;
		}
		if (n == 0)
			break;
		len += n;
		if (len > MAX_FILE) {
			wd_error(err, errlen, "%s: larger than %uM: not a configuration file",
				 path, MAX_FILE >> 20);
			goto out;
		}
	}
	r = load_buffer(path, buf, len, out, err, errlen);
out:
	free(buf);
	close(fd);
	return r;
}

