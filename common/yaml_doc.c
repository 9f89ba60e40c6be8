/*
 * yaml_doc.c: libyaml's event parser turned into a tree of positioned
 * nodes (yaml_doc.h). The only file that includes yaml.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

#include "error.h"
#include "yaml_doc.h"

#define MAX_DEPTH 32		/* the config's schema needs 4 levels */
#define MAX_NODES (1u << 20)	/* the largest legal config has about 430000 */

/* One parse: the text, where its nodes go, and where its error goes. */
struct parser {
	const char *name;		/* for messages */
	const unsigned char *text;
	size_t len;
	char *err;
	size_t errlen;
	struct wd_arena **nodes;
	size_t count;			/* nodes so far, against MAX_NODES */
};

int ydoc_verror(char *err, size_t errlen, const char *name, int line, int col, const char *path,
		const char *fmt, va_list ap)
{
	char why[768], pos[32] = "";

	vsnprintf(why, sizeof(why), fmt, ap);
	if (line)
		snprintf(pos, sizeof(pos), ":%d:%d", line, col);
	if (!path)
		path = "";
	return wd_error(err, errlen, "%s%s: %s%s%s", name, pos, path, *path ? ": " : "", why);
}

/* Fails at line:col (0: no position); returns -1. */
__attribute__((format(printf, 4, 5)))
static int fail_pos(struct parser *P, int line, int col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ydoc_verror(P->err, P->errlen, P->name, line, col, "", fmt, ap);
	va_end(ap);
	return -1;
}

static int oom(struct parser *P)
{
	return fail_pos(P, 0, 0, "out of memory");
}

/* Line and column of a byte offset, as libyaml counts them (characters). */
static void offset_pos(const struct parser *P, size_t off, int *line, int *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < off && i < P->len; i++) {
		unsigned char c = P->text[i];
		if (c == '\n' || (c == '\r' && (i + 1 >= P->len || P->text[i + 1] != '\n'))) {
			++*line;
			*col = 1;
		} else if ((c & 0xc0) != 0x80 && c != '\r') {
			++*col;
		}
	}
}

/* Whether line (from 1) of the text is indented with a tab: libyaml says only "cannot start any token". */
static int tab_indent(const struct parser *P, int line)
{
	size_t i = 0;

	for (int l = 1; l < line && i < P->len; i++)
		l += P->text[i] == '\n';
	for (; i < P->len && (P->text[i] == ' ' || P->text[i] == '\t'); i++)
		if (P->text[i] == '\t')
			return 1;
	return 0;
}

static int yaml_fail(struct parser *P, const yaml_parser_t *p)
{
	const char *problem = p->problem ? p->problem : "unknown error";
	int line, col;

	switch (p->error) {
	case YAML_MEMORY_ERROR:
		return oom(P);
	case YAML_READER_ERROR:
		/* Reader errors carry a byte offset, not a mark. */
		offset_pos(P, p->problem_offset, &line, &col);
		if (p->problem_value != -1)
			return fail_pos(P, line, col, "bad text: %s (0x%02X)", problem, p->problem_value);
		return fail_pos(P, line, col, "bad text: %s", problem);
	default:
		line = (int)p->problem_mark.line + 1;
		col = (int)p->problem_mark.column + 1;
		if (tab_indent(P, line))
			return fail_pos(P, line, col, "syntax error: %s (line %d is indented with a tab: YAML "
					"indents with spaces only)", problem, line);
		/*
		 * A plain value that starts with a character YAML reads as
		 * syntax: most often a CURVE key (1 in 9 starts with one), and
		 * the words above do not say to quote it (a trial's).
		 */
		const char *quote = (p->context && (strstr(p->context, "alias") || strstr(p->context, "anchor") ||
						    strstr(p->context, "tag"))) ||
				    strstr(problem, "cannot start any token")
				    ? "; a value that starts with ! & * @ ` % | > [ { is read as YAML syntax: "
				      "quote it (a CURVE key: name: \"KEY\")" : "";
		if (p->context)
			return fail_pos(P, line, col, "syntax error: %s (%s at line %d column %d)%s",
					problem, p->context, (int)p->context_mark.line + 1,
					(int)p->context_mark.column + 1, quote);
		return fail_pos(P, line, col, "syntax error: %s%s", problem, quote);
	}
}

/*
 * Builds the node that event ev starts, reading the events of its children.
 * Consumes ev. Returns 0, or -1 with the error set.
 */
static int tree_build(struct parser *P, yaml_parser_t *p, yaml_event_t *ev, int depth,
		      struct ynode **out)
{
	struct ynode *n = wd_arena_alloc(P->nodes, sizeof(*n));
	yaml_event_type_t end;
	int r = 0;

	if (!n) {
		yaml_event_delete(ev);
		return oom(P);
	}
	n->line = (int)ev->start_mark.line + 1;
	n->col = (int)ev->start_mark.column + 1;
	*out = n;
	if (++P->count > MAX_NODES) {
		yaml_event_delete(ev);
		return fail_pos(P, n->line, n->col, "more than %u values: not a configuration", MAX_NODES);
	}
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		n->kind = Y_SCALAR;
		n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		n->len = ev->data.scalar.length;
		n->text = wd_arena_strndup(P->nodes, (const char *)ev->data.scalar.value, n->len);
		yaml_event_delete(ev);
		return n->text ? 0 : oom(P);
	case YAML_ALIAS_EVENT:
		n->kind = Y_ALIAS;
		n->text = wd_arena_strndup(P->nodes, (const char *)ev->data.alias.anchor,
					   strlen((const char *)ev->data.alias.anchor));
		yaml_event_delete(ev);
		return n->text ? 0 : oom(P);
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT:
		break;
	default: {	/* the parser gives nothing else here */
		int type = ev->type;
		yaml_event_delete(ev);
		return fail_pos(P, n->line, n->col, "syntax error: unexpected YAML event %d", type);
	}
	}
	n->kind = ev->type == YAML_SEQUENCE_START_EVENT ? Y_SEQ : Y_MAP;
	end = n->kind == Y_SEQ ? YAML_SEQUENCE_END_EVENT : YAML_MAPPING_END_EVENT;
	yaml_event_delete(ev);
	if (depth >= MAX_DEPTH)
		return fail_pos(P, n->line, n->col, "nested more than %d levels deep", MAX_DEPTH);
	while (r == 0) {
		yaml_event_t c;
		struct ynode *child = NULL;

		if (!yaml_parser_parse(p, &c))
			return yaml_fail(P, p);
		if (c.type == end) {
			yaml_event_delete(&c);
			break;
		}
		r = tree_build(P, p, &c, depth + 1, &child);
		if (r == 0) {
			if (n->last)
				n->last->next = child;
			else
				n->child = child;
			n->last = child;
			n->n++;
		}
	}
	return r;
}

int ydoc_parse(const char *name, const char *text, size_t len, struct wd_arena **nodes,
	       struct ynode **root, char *err, size_t errlen)
{
	struct parser parser = {
		.name = name, .text = (const unsigned char *)text, .len = len,
		.err = err, .errlen = errlen, .nodes = nodes,
	}, *P = &parser;
	yaml_parser_t p;
	yaml_event_t ev;
	int r = -1;

	*root = NULL;
	if (!yaml_parser_initialize(&p))
		return oom(P);
	yaml_parser_set_input_string(&p, P->text, P->len);
	if (!yaml_parser_parse(&p, &ev))	/* stream start */
		goto yerr;
	yaml_event_delete(&ev);
	if (!yaml_parser_parse(&p, &ev))
		goto yerr;
	if (ev.type == YAML_STREAM_END_EVENT) {
		yaml_event_delete(&ev);
		r = 0;
		goto out;
	}
	yaml_event_delete(&ev);			/* document start */
	if (!yaml_parser_parse(&p, &ev))
		goto yerr;
	if (tree_build(P, &p, &ev, 0, root))
		goto out;
	if (!yaml_parser_parse(&p, &ev))	/* document end */
		goto yerr;
	yaml_event_delete(&ev);
	if (!yaml_parser_parse(&p, &ev))
		goto yerr;
	if (ev.type == YAML_DOCUMENT_START_EVENT)
		fail_pos(P, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1,
			 "a second document: a configuration is one document");
	else
		r = 0;
	yaml_event_delete(&ev);
	goto out;
yerr:
	yaml_fail(P, &p);
out:
	yaml_parser_delete(&p);
	return r;
}

int ydoc_is_null(const struct ynode *n)
{
	return n->kind == Y_SCALAR && n->plain &&
	       (!n->len || !strcmp(n->text, "~") || !strcmp(n->text, "null") ||
		!strcmp(n->text, "Null") || !strcmp(n->text, "NULL"));
}

const char *ydoc_kind_desc(const struct ynode *n)
{
	switch (n->kind) {
	case Y_SEQ: return "a list";
	case Y_MAP: return "a mapping";
	case Y_ALIAS: return "an alias";
	case Y_SCALAR: break;
	}
	return ydoc_is_null(n) ? "an empty value" : "a scalar";
}
