/*
 * config_load.h: the loader's state while it walks a YAML document against
 * the tables, shared by config_load.c (the walk) and config_check.c (the
 * checks across keys, which point their errors at the nodes the walk kept).
 * Not for users of config.h.
 *
 * Errors are written once, by the first failure, as config.h describes:
 * "FILE:LINE:COL: KEY: REASON", KEY being the dotted path of the node being
 * read (studies[1].proxies.fp16), kept in path as the walk goes down.
 */
#ifndef WD_CONFIG_LOAD_H
#define WD_CONFIG_LOAD_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "config_table.h"
#include "yaml_doc.h"

struct loader {
	const char *name;		/* for messages */
	char *err;
	size_t errlen;
	struct wd_arena *tree;		/* the document: freed after loading */
	struct wd_arena *keep;		/* what the config keeps */
	int64_t max_run;		/* limits.max_name, for run names */
	const struct ynode *studies, *alerts;	/* their keys, read last */
	char path[256];			/* dotted path of the node being read */
	size_t pathlen;
	const struct ynode **study_where;	/* N_STUDY key nodes per study */
	const struct ynode **alert_where;	/* N_ALERT key nodes per alert */
};

/* Fails at line:col (0: no position) with the current path; returns -1. */
int loader_vfail(struct loader *L, int line, int col, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));
/* Fails at node n (NULL: no position) with the current path; returns -1. */
int loader_fail_at(struct loader *L, const struct ynode *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Pushes .key or [i] on the path; each returns what loader_path_pop takes back to. */
size_t loader_path_key(struct loader *L, const char *key);
size_t loader_path_index(struct loader *L, size_t i);
void loader_path_pop(struct loader *L, size_t old);
void loader_set_path(struct loader *L, const char *path);

/* The value of key node k (where[] holds keys, errors point at values). */
static inline const struct ynode *value_of(const struct ynode *k) { return k->next; }

/* "Did you mean" (config_suggest.c): the best near miss of typed so far. */
struct suggest {
	const char *typed;
	const char *best;	/* points into a table: not NUL-terminated at blen */
	size_t blen, bestd;	/* bestd: SIZE_MAX before the first try */
};

/* Considers candidate cand[0..len) for typed. */
void config_suggest_try(struct suggest *s, const char *cand, size_t len);
/* Fills s for full, a dotted key of the top level: the best among cfg_fields' names. */
void config_suggest_top(struct suggest *s, const char *full);
/* "unknown WHAT 'TYPED' (did you mean 'BEST'?)" at node n; returns -1. */
int config_unknown(struct loader *L, const struct ynode *n, const char *what, const char *typed,
		   const struct suggest *s);

/*
 * The checks of config_check.c, each 0 or -1 with the error. The item
 * checks run as each study or alert is read (items holds those read so
 * far, index idx the one just read, map its node, where its key nodes);
 * check_top and resolve_alerts once the whole file is read.
 */
int config_check_study(struct loader *L, const void *items, size_t idx,
		       const struct ynode *map, const struct ynode **where);
int config_check_alert(struct loader *L, const void *items, size_t idx,
		       const struct ynode *map, const struct ynode **where);
int config_check_top(struct loader *L, const struct wd_config *c, const struct ynode **where);
int config_resolve_alerts(struct loader *L, struct wd_config *c);

#endif
