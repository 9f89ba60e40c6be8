/* cmd_export.c: `wdrift export STUDY --csv`: a study's drift log as CSV or JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "daemon_client.h"
#include "study_data.h"

static const char usage[] =
"usage: wdrift export STUDY [--csv | --json] [-o FILE] [-c FILE] [--log FILE]\n"
"\n"
"Every current row of STUDY's drift log (docs/storage.md), one per step,\n"
"compared run and tensor, and the per-snapshot mean, median and max rows.\n"
"Reads the log from disk: the daemon may be running or stopped.\n"
"\n"
"      --csv          comma-separated values with a header line (the default);\n"
"                     an undefined number (NaN) is an empty field\n"
"      --json         {\"study\", \"file\", \"proxies\": [...], \"rows\": [{...}]}, undefined as null\n"
"  -o, --output FILE  write FILE, whole or not at all (default: standard output)\n"
"                     (a symlink: into its target; a device or FIFO: written\n"
"                     through, never replaced; docs/cli.md, \"Output files\")\n"
"  -c, --config FILE  the daemon's config: storage.dir locates the log\n"
WD_CONFIG_SEARCH_HELP
"      --log FILE     the drift log itself, instead of the config's\n"
DC_HELP_HELP
"\n"
"columns: step, run, role (candidate, proxy), kind (tensor, mean, median, max),\n"
"tensor, numel, w1, max_abs_diff, rel_l2, nan, posinf, neginf, ratio_LABEL per\n"
"proxy, wall (Unix time computed). Sorted by step, run name, kind and tensor\n"
"(in the log's order: the snapshot's). The mean row is weighted by element\n"
"count: `wdrift drift` calls it [all] weighted.\n"
"\n"
"exit status: 0 ok; 1 no such study, or the log cannot be read; 2 usage error.\n";

/* RFC 4180: quoted when it holds a comma, quote, CR or LF; quotes doubled. */
static void csv_str(FILE *f, const char *s)
{
	if (!strpbrk(s, ",\"\r\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static void csv_num(FILE *f, double x)
{
	if (!isnan(x))
		fprintf(f, "%.17g", x);
}

/* The length of the UTF-8 sequence at s, or 0 where s holds none (RFC 3629). */
static size_t utf8_seq(const unsigned char *s)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t n;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/*
 * A JSON string. A name in the log need not be UTF-8: the log keeps 1024
 * bytes of a longer name, which may cut a character in two. Each byte
 * that starts no character becomes U+FFFD, so the name stays a string
 * (not null, which means an aggregate row) and the JSON stays valid.
 */
static void json_str(FILE *f, const char *s)
{
	json_t *j = json_string(s);
	char *fixed = NULL;

	if (!j) {
		const unsigned char *p = (const unsigned char *)s;
		size_t n = 0, len;
		fixed = malloc(3 * strlen(s) + 1);
		for (; fixed && *p; p += len ? len : 1) {
			len = utf8_seq(p);
			if (len) {
				memcpy(fixed + n, p, len);
				n += len;
			} else {
				memcpy(fixed + n, "\xef\xbf\xbd", 3);
				n += 3;
			}
		}
		j = fixed ? json_stringn(fixed, n) : NULL;
	}
	char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
	fputs(t ? t : "null", f);	/* out of memory: null rather than bad JSON */
	free(t);
	free(fixed);
	json_decref(j);
}

static void json_num(FILE *f, double x)
{
	if (isfinite(x))
		fprintf(f, "%.17g", x);
	else
		fputs("null", f);
}

static void write_csv(FILE *f, const struct driftlog *d)
{
	fputs("step,run,role,kind,tensor,numel", f);
	for (size_t m = 0; m < STUDY_N_METRICS; m++)
		fprintf(f, ",%s", study_metrics[m].key);
	fputs(",nan,posinf,neginf", f);
	for (size_t k = 0; k < d->n_proxies; k++) {
		fputs(",", f);
		char col[1100];
		snprintf(col, sizeof(col), "ratio_%s", d->proxies[k]);
		csv_str(f, col);
	}
	fputs(",wall\n", f);
	for (size_t i = 0; i < d->n_rows; i++) {
		const struct driftlog_disk_row *r = dl_row(d, i);
		fprintf(f, "%lld,", (long long)r->step);
		csv_str(f, d->runs[r->run]);
		fprintf(f, ",%s,%s,", study_role_name(r->role), study_kind_name(r->kind));
		if (!r->kind)
			csv_str(f, d->tensors[r->tensor]);
		fprintf(f, ",%llu", (unsigned long long)r->numel);
		for (size_t m = 0; m < STUDY_N_METRICS; m++) {
			fputc(',', f);
			csv_num(f, study_metric_of(r, &study_metrics[m]));
		}
		fprintf(f, ",%llu,%llu,%llu", (unsigned long long)r->nan, (unsigned long long)r->posinf,
			(unsigned long long)r->neginf);
		for (size_t k = 0; k < d->n_proxies; k++) {
			fputc(',', f);
			csv_num(f, dl_ratio(r)[k]);
		}
		fputc(',', f);
		csv_num(f, r->wall);
		fputc('\n', f);
	}
}

/* Written by hand, row by row: a large study is millions of numbers. */
static void write_json(FILE *f, const struct study_data *sd)
{
	const struct driftlog *d = &sd->log;

	fputs("{\"study\": ", f);
	json_str(f, sd->name);
	fputs(", \"file\": ", f);
	json_str(f, sd->log_path);
	fputs(", \"proxies\": [", f);
	for (size_t k = 0; k < d->n_proxies; k++) {
		fputs(k ? ", " : "", f);
		json_str(f, d->proxies[k]);
	}
	fputs("], \"rows\": [", f);
	for (size_t i = 0; i < d->n_rows; i++) {
		const struct driftlog_disk_row *r = dl_row(d, i);
		fprintf(f, "%s\n {\"step\": %lld, \"run\": ", i ? "," : "", (long long)r->step);
		json_str(f, d->runs[r->run]);
		fprintf(f, ", \"role\": \"%s\", \"kind\": \"%s\", \"tensor\": ", study_role_name(r->role),
			study_kind_name(r->kind));
		if (r->kind)
			fputs("null", f);
		else
			json_str(f, d->tensors[r->tensor]);
		fprintf(f, ", \"numel\": %llu", (unsigned long long)r->numel);
		for (size_t m = 0; m < STUDY_N_METRICS; m++) {
			fprintf(f, ", \"%s\": ", study_metrics[m].key);
			json_num(f, study_metric_of(r, &study_metrics[m]));
		}
		fprintf(f, ", \"nonfinite\": {\"nan\": %llu, \"posinf\": %llu, \"neginf\": %llu}, \"ratio\": {",
			(unsigned long long)r->nan, (unsigned long long)r->posinf,
			(unsigned long long)r->neginf);
		for (size_t k = 0; k < d->n_proxies; k++) {
			fputs(k ? ", " : "", f);
			json_str(f, d->proxies[k]);
			fputs(": ", f);
			json_num(f, dl_ratio(r)[k]);
		}
		fputs("}, \"wall\": ", f);
		json_num(f, r->wall);
		fputc('}', f);
	}
	fputs("\n]}\n", f);
}

static int write_export(FILE *f, const struct study_data *sd, const struct study_args *o)
{
	if (o->json)
		write_json(f, sd);
	else
		write_csv(f, &sd->log);
	return 0;
}

int cmd_export(int argc, char **argv)
{
	struct study_args o;
	int rc = study_args_parse(argc, argv, usage, 1, &o);

	if (rc >= 0)
		return rc;
	if (o.csv && o.json)
		return cli_usage_error("--csv and --json: choose one");
	return study_data_output(&o, write_export);
}
