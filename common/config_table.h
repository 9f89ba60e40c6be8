/*
 * config_table.h: the configuration's field tables and the codec of their
 * values, shared by the files of the configuration (config.c: the tables
 * and values; config_load.c: the loader; config_check.c: the checks across
 * keys; config_print.c: the printer). Not for users of config.h.
 *
 * Every key is one struct field: name, type, bounds, default, place in its
 * struct and one line of doc. Parsing, defaults, printing and the reload
 * check are written once over these tables.
 */
#ifndef WD_CONFIG_TABLE_H
#define WD_CONFIG_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define MAX_NAME 128		/* study, alert, run names and proxy labels */
#define MAX_STUDIES 1024
#define MAX_ALERTS 1024
#define MAX_CANDIDATES CONFIG_MAX_CANDIDATES
#define MAX_PROXIES CONFIG_MAX_PROXIES
#define MAX_CLIENTS 65536

struct enum_val {
	const char *name;
	int value;
};

enum ftype {
	T_STRING,	/* const char *, non-empty, at most max bytes when max > 0 */
	T_ENDPOINT,	/* const char *: ipc://, tcp:// or inproc:// */
	T_NAME,		/* const char *: [A-Za-z0-9_][A-Za-z0-9_.-]*, MAX_NAME bytes */
	T_RUN,		/* const char *: a run name, as the protocol defines it */
	T_SIZE,		/* uint64_t bytes: digits and K, M, G or T */
	T_INT,		/* int64_t in [min, max] */
	T_DOUBLE,	/* double, finite, in [dmin, dmax] */
	T_ENUM,		/* int, one of vals */
	T_BOOL,		/* bool: true or false */
	T_RUNS,		/* struct wd_config_runs: a list of run names */
	T_PROXIES,	/* struct wd_config_proxies: a mapping label -> run */
	T_CLIENTS,	/* struct wd_config_clients: a mapping name -> public key */
};

#define F_REQUIRED 1u	/* no default: the key must be there */
#define F_RESTART 2u	/* a reload may not change it */
#define F_SECONDS 4u	/* T_INT: a duration, whole seconds (a bad value's error says so) */
#define F_COUNT 8u	/* T_INT: a count of results in a row, not a duration (ditto: "3s") */

struct field {
	const char *name;	/* dotted, for the top-level table */
	enum ftype type;
	unsigned flags;
	size_t off;		/* into the struct the table describes */
	const char *def;	/* default, as written in the file; NULL: zero */
	int64_t min, max;	/* T_INT, T_SIZE; max length for T_STRING */
	double dmin, dmax;	/* T_DOUBLE */
	const struct enum_val *vals;	/* T_ENUM */
	const char *doc;	/* one line, printed above the key */
	/* T_STRING: a further check of the text (0, or -1 with why), or NULL */
	int (*check)(const char *text, char *why, size_t size);
};

/*
 * The tables (config.c). cfg_fields: every scalar key of the top level,
 * grouped by section, in the order the printer writes them. The sizes are
 * checked by the compiler against the definitions.
 */
#define N_CFG 25
extern const struct field cfg_fields[N_CFG];

enum { S_NAME, S_BASELINE, S_CANDIDATES, S_PROXIES, S_SYNTHETIC, N_STUDY };
extern const struct field study_fields[N_STUDY];

enum { A_NAME, A_STUDY, A_METRIC, A_PROXY, A_SCOPE, A_TENSORS, A_THRESHOLD, A_FOR,
       A_SEVERITY, A_COMMAND, A_INTERVAL, A_TIMEOUT, N_ALERT };
extern const struct field alert_fields[N_ALERT];

static inline int is_digit(int c) { return c >= '0' && c <= '9'; }
static inline int is_alnum(int c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* The field of tab[0..n) named name, or NULL. */
const struct field *config_field_find(const struct field *tab, size_t n, const char *name);

/* The index of top-level key name in cfg_fields, which must hold it. */
size_t config_key_index(const char *name);

/* "round:bf16" for WD_SYNTHETIC_BF16, ...; NULL for WD_SYNTHETIC_NONE. */

/*
 * Copies s for a message: at most max bytes of it, control characters
 * escaped, "..." when cut. User text never reaches a log unescaped.
 */
const char *config_clip(char *buf, size_t size, const char *s, size_t max);
#define CLIP(s) config_clip((char[96]){ 0 }, 96, (s), 60)

/*
 * Parses text as field f into the struct at base, checking bounds. String
 * types keep the pointer: text must live as long as the struct. Returns 0,
 * or -1 with the reason in why. Not for T_RUN, T_RUNS, T_PROXIES and
 * T_CLIENTS, which need the loader (config_load.c).
 */
int config_value_parse(const struct field *f, const char *text, void *base, char *why, size_t size);

/*
 * The value of field f at base as the file would write it, in buf or a
 * string of the config; NULL when the field is unset (an optional string,
 * an enum out of its table such as WD_SYNTHETIC_NONE). Not for lists.
 */
const char *config_value_text(const struct field *f, const void *base, char *buf, size_t size);

/* Sets field f at base to its default, when it has one. */
void config_set_default(const struct field *f, void *base);

/*
 * Names of studies, alerts, proxy labels and clients: they become file
 * names (drift/STUDY.h5), HDF5 strings and CLI arguments, so no '/', no
 * leading '.' or '-'. 0, or -1 with the reason in why.
 */
int config_check_name(const char *s, char *why, size_t size);

/*
 * Run names as docs/protocol.md has them: 1 to max (limits.max_name)
 * bytes of [A-Za-z0-9_.:-], not "." or "..". 0, or -1 with the reason in why.
 */
int config_check_run(const char *s, int64_t max, char *why, size_t size);

/*
 * Why key i of alert a does not apply to it (config_check.c), or NULL when
 * it does: the loader refuses such a key, the printer leaves it out.
 */
const char *config_alert_misfit(const struct wd_config_alert *a, size_t i);

#endif
