/*
 * config_print.c: a configuration written back as YAML (wd_config_print),
 * every scalar key under a comment that says what it is and its default,
 * studies and alerts with their defaults filled in. What it writes loads
 * back to the same configuration (test_config and fuzz_config check).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_table.h"

/* True when s reads back as the same string written plain in YAML. */
static int plain_ok(const char *s)
{
	static const char *const special[] = {
		"null", "true", "false", "yes", "no", "on", "off", "y", "n", ".inf", ".nan", NULL
	};
	size_t len = strlen(s);

	if (!len || !(is_alnum(s[0]) || s[0] == '.' || s[0] == '/' || s[0] == '_'))
		return 0;
	/* numbers, and what YAML 1.1 would read as one, stay strings */
	if (is_digit(s[0]) || (strchr("+-.", s[0]) && is_digit(s[1])))
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!is_alnum(s[i]) && !strchr("._/-:+@=%", s[i]))
			return 0;
	if (s[len - 1] == ':')
		return 0;
	for (int i = 0; special[i]; i++)
		if (!strcasecmp(s, special[i]))
			return 0;
	return 1;
}

static void print_string(FILE *f, const char *s)
{
	if (plain_ok(s)) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = s[0], c1 = c ? s[1] : 0, c2 = c1 ? s[2] : 0;

		if (c == '"' || c == '\\') {
			fprintf(f, "\\%c", c);
		} else if (c == '\n') {
			fputs("\\n", f);
		} else if (c == '\t') {
			fputs("\\t", f);
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(f, "\\x%02X", c);
		} else if (c == 0xc2 && c1 == 0x85) {
			fputs("\\N", f);	/* NEL, LS and PS are line breaks to YAML */
			s++;
		} else if (c == 0xe2 && c1 == 0x80 && (c2 == 0xa8 || c2 == 0xa9)) {
			fputs(c2 == 0xa8 ? "\\L" : "\\P", f);
			s += 2;
		} else {
			fputc(c, f);
		}
	}
	fputc('"', f);
}

static void print_value(FILE *f, const struct field *fd, const void *base)
{
	char buf[64];
	const char *t = config_value_text(fd, base, buf, sizeof(buf));

	if (fd->type == T_STRING || fd->type == T_ENDPOINT || fd->type == T_NAME ||
	    fd->type == T_RUN)
		print_string(f, t);
	else
		fputs(t, f);
}

/* One item of a list; field i is left out when misfit(base, i) says why. */
static void print_item(FILE *f, const struct field *tab, size_t n, const void *base,
		       const char *(*misfit)(const void *base, size_t i))
{
	const char *lead = "  - ";

	for (size_t i = 0; i < n; i++) {
		const struct field *fd = &tab[i];
		const void *p = (const char *)base + fd->off;
		char buf[64];

		if (misfit && misfit(base, i))
			continue;
		if (fd->type == T_RUNS) {
			const struct wd_config_runs *r = p;
			fprintf(f, "%s%s:\n", lead, fd->name);
			for (size_t j = 0; j < r->n; j++) {
				fputs("      - ", f);
				print_string(f, r->names[j]);
				fputc('\n', f);
			}
		} else if (fd->type == T_PROXIES) {
			const struct wd_config_proxies *px = p;
			if (!px->n)
				continue;
			fprintf(f, "%s%s:\n", lead, fd->name);
			for (size_t j = 0; j < px->n; j++) {
				fputs("      ", f);
				print_string(f, px->v[j].label);
				fputs(": ", f);
				print_string(f, px->v[j].run);
				fputc('\n', f);
			}
		} else {
			if (!config_value_text(fd, base, buf, sizeof(buf)))
				continue;
			fprintf(f, "%s%s: ", lead, fd->name);
			print_value(f, fd, base);
			fputc('\n', f);
		}
		lead = "    ";
	}
}

static const char *alert_misfit_v(const void *base, size_t i)
{
	return config_alert_misfit(base, i);
}

void wd_config_print(FILE *f, const struct wd_config *c)
{
	const char *prev = "";
	char buf[64];

	for (size_t i = 0; i < N_CFG; i++) {
		const struct field *fd = &cfg_fields[i];
		const char *name = fd->name, *seg = name, *pseg = prev;
		int depth = 0;

		/* Skip the sections this key shares with the previous one... */
		for (;;) {
			const char *d1 = strchr(seg, '.'), *d2 = strchr(pseg, '.');
			if (!d1 || !d2 || d1 - seg != d2 - pseg || strncmp(seg, pseg, d1 - seg))
				break;
			seg = d1 + 1;
			pseg = d2 + 1;
			depth++;
		}
		/* ...and open the ones it does not. */
		for (const char *d; (d = strchr(seg, '.')); seg = d + 1, depth++)
			fprintf(f, "%s%*s%.*s:\n", depth == 0 && i ? "\n" : "", 2 * depth, "",
				(int)(d - seg), seg);
		fprintf(f, "%*s# %s (default %s)\n", 2 * depth, "", fd->doc,
			fd->def ? fd->def : "none");
		if (fd->type == T_CLIENTS) {
			const struct wd_config_clients *cl = &c->auth.clients;
			fprintf(f, "%*s%s:%s\n", 2 * depth, "", seg, cl->n ? "" : " {}");
			for (size_t j = 0; j < cl->n; j++) {
				fprintf(f, "%*s", 2 * depth + 2, "");
				print_string(f, cl->v[j].name);
				fputs(": ", f);
				print_string(f, cl->v[j].key);
				fputc('\n', f);
			}
		} else if (!config_value_text(fd, c, buf, sizeof(buf))) {
			fprintf(f, "%*s# %s: (unset)\n", 2 * depth, "", seg);
		} else {
			fprintf(f, "%*s%s: ", 2 * depth, "", seg);
			print_value(f, fd, c);
			fputc('\n', f);
		}
		prev = name;
	}
	fputs(c->n_studies ? "\nstudies:\n" : "\nstudies: []\n", f);
	for (size_t i = 0; i < c->n_studies; i++)
		print_item(f, study_fields, N_STUDY, &c->studies[i], NULL);
	fputs(c->n_alerts ? "\nalerts:\n" : "\nalerts: []\n", f);
	for (size_t i = 0; i < c->n_alerts; i++)
		print_item(f, alert_fields, N_ALERT, &c->alerts[i], alert_misfit_v);
}

char *wd_config_print_string(const struct wd_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	wd_config_print(f, c);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
