/*
 * yaml_doc.h: a YAML document as a small tree of scalars, lists and
 * mappings, each node with the line and column it starts at, so that what
 * reads the tree can point at the offending text ("FILE:LINE:COL: ...").
 * The configuration loader (config_load.c) is its reader.
 *
 * Only yaml_doc.c includes yaml.h. Aliases are kept as nodes, not resolved,
 * so that the reader can refuse them with the key they sit under; anchors,
 * tags and styles other than plain-or-quoted are dropped. Depends on libc,
 * libyaml, arena.h and lib/error.h.
 */
#ifndef WD_YAML_DOC_H
#define WD_YAML_DOC_H

#include <stdarg.h>
#include <stddef.h>

#include "arena.h"

enum ykind { Y_SCALAR, Y_SEQ, Y_MAP, Y_ALIAS };

struct ynode {
	enum ykind kind;
	int line, col;		/* 1-based */
	int plain;		/* a scalar written without quotes */
	size_t len;		/* bytes of text, which may hold a NUL */
	char *text;		/* scalar; alias: the anchor's name */
	size_t n;		/* children: items, or keys and values in turn */
	struct ynode *child, *last, *next;
};

/*
 * Parses text[0..len), one document, into *root (NULL for an empty
 * stream), its nodes allocated in *nodes. Refuses a second document, more
 * than a million nodes and nesting deeper than 32. Returns 0, or -1 with
 * err "NAME:LINE:COL: REASON" (a syntax error, bad UTF-8) or "NAME: REASON"
 * (out of memory); what *nodes holds is then the caller's to free all the same.
 */
int ydoc_parse(const char *name, const char *text, size_t len, struct wd_arena **nodes,
	       struct ynode **root, char *err, size_t errlen);

/* A plain scalar that YAML reads as null: empty, ~, null, Null or NULL. */
int ydoc_is_null(const struct ynode *n);

/* "a list", "a mapping", "an alias", "an empty value", "a scalar": for "expected X, not Y". */
const char *ydoc_kind_desc(const struct ynode *n);

/*
 * The one writer of positioned errors: "NAME:LINE:COL: PATH: REASON",
 * without ":LINE:COL" when line is 0 and without "PATH: " when path is
 * empty. Returns -1 (wd_error's convention).
 */
int ydoc_verror(char *err, size_t errlen, const char *name, int line, int col, const char *path,
		const char *fmt, va_list ap) __attribute__((format(printf, 7, 0)));

#endif
