/*
 * compare_out.c: prints a compare_result, as an aligned table for people or
 * as one JSON object (docs/compare.md) for programs. The only client file
 * that includes jansson.h. Undefined numbers (NaN) print as "-" in the
 * table and null in JSON.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "compare_result.h"
#include "drift.h"
#include "table.h"

/* Aggregates over the layers, for the summary row and object. */
struct summary {
	uint64_t numel;
	double w1_weighted, w1_median, w1_max, max_abs_diff;
	struct wd_nonfinite nf_base, nf_cand;
	double *proxy_w1_weighted, *ratio_median, *ratio_max, *ratio_weighted;
};

static void add_nf(struct wd_nonfinite *to, const struct wd_nonfinite *from)
{
	to->nan += from->nan;
	to->posinf += from->posinf;
	to->neginf += from->neginf;
}

/* The summary rows (lib/drift.h), and the totals beside them. */
static void summarize(const struct compare_result *r, struct summary *s)
{
	size_t n = r->n_layers, np = r->n_proxies;
	double *vals = calloc(n + 1, sizeof(double));
	uint64_t *numel = calloc(n + 1, sizeof(uint64_t));
	struct wd_drift_summary d;

	memset(s, 0, sizeof(*s));
	s->proxy_w1_weighted = calloc(np + 1, sizeof(double));
	s->ratio_median = calloc(np + 1, sizeof(double));
	s->ratio_max = calloc(np + 1, sizeof(double));
	s->ratio_weighted = calloc(np + 1, sizeof(double));
	s->max_abs_diff = NAN;
	for (size_t i = 0; vals && numel && i < n; i++) {
		const struct layer_result *l = &r->layers[i];
		s->numel += l->numel;
		numel[i] = l->numel;
		vals[i] = l->drift.w1;
		if (l->drift.have_pair && !isnan(l->drift.pair.max_abs_diff) &&
		    !(l->drift.pair.max_abs_diff <= s->max_abs_diff))
			s->max_abs_diff = l->drift.pair.max_abs_diff;
		add_nf(&s->nf_base, &l->base.nonfinite);
		add_nf(&s->nf_cand, &l->drift.nonfinite);
	}
	/* out of memory: every summary is NaN (wd_drift_summarize says so too) */
	wd_drift_summarize(vals, numel, vals && numel ? n : 0, &d);
	s->w1_weighted = d.weighted;
	s->w1_median = d.median;
	s->w1_max = d.max;
	int have = s->ratio_max && s->ratio_median && s->ratio_weighted && s->proxy_w1_weighted;
	for (size_t k = 0; have && k < np; k++) {
		for (size_t i = 0; vals && numel && i < n; i++)
			vals[i] = r->layers[i].ratio[k];
		wd_drift_summarize(vals, numel, vals && numel ? n : 0, &d);
		s->ratio_weighted[k] = d.weighted;
		s->ratio_median[k] = d.median;
		s->ratio_max[k] = d.max;
		for (size_t i = 0; vals && numel && i < n; i++)
			vals[i] = r->layers[i].proxy_w1[k];
		wd_drift_summarize(vals, numel, vals && numel ? n : 0, &d);
		s->proxy_w1_weighted[k] = d.weighted;
	}
	free(vals);
	free(numel);
}

static void summary_release(struct summary *s)
{
	free(s->proxy_w1_weighted);
	free(s->ratio_median);
	free(s->ratio_max);
	free(s->ratio_weighted);
}

/* --- table --- */

static void fmt_num(char *buf, size_t size, double x)
{
	if (isnan(x))
		snprintf(buf, size, "-");
	else
		snprintf(buf, size, "%.4g", x);
}

static void fmt_nf(char *buf, size_t size, const struct wd_nonfinite *b,
		   const struct wd_nonfinite *c)
{
	uint64_t nb = b->nan + b->posinf + b->neginf, nc = c->nan + c->posinf + c->neginf;
	if (!nb && !nc)
		snprintf(buf, size, "-");
	else
		snprintf(buf, size, "%llu/%llu", (unsigned long long)nb, (unsigned long long)nc);
}

void compare_print_table(const struct compare_result *r)
{
	size_t np = r->n_proxies;
	struct table t;
	struct summary s;
	char b[64], hdr[256];
	size_t row = 0;

	table_init(&t, r->n_layers + 4, 7 + 2 * np);
	summarize(r, &s);
	printf("baseline   %s\ncandidate  %s\n", r->baseline, r->candidate);
	for (size_t k = 0; k < r->n_proxies; k++)
		printf("proxy      %s: %s\n", r->proxies[k].label,
		       r->proxies[k].path ? r->proxies[k].path : "the baseline, rounded");
	printf("engine     %s\n\n", r->engine);

	const char *head[] = { "tensor", "dtype", "elements", "W1", "max|d|", "rel L2", "nonfinite" };
	for (size_t c = 0; c < 7; c++)
		table_set(&t, row, c, head[c]);
	for (size_t k = 0; k < np; k++) {
		snprintf(hdr, sizeof(hdr), "W1[%s]", r->proxies[k].label);
		table_set(&t, row, 7 + 2 * k, hdr);
		snprintf(hdr, sizeof(hdr), "ratio[%s]", r->proxies[k].label);
		table_set(&t, row, 8 + 2 * k, hdr);
	}
	for (size_t i = 0; i < r->n_layers; i++) {
		const struct layer_result *l = &r->layers[i];
		row++;
		table_set(&t, row, 0, l->name);
		if (l->dtype == l->dtype_cand)
			snprintf(b, sizeof(b), "%s", wd_dtype_name(l->dtype));
		else
			snprintf(b, sizeof(b), "%s/%s", wd_dtype_name(l->dtype), wd_dtype_name(l->dtype_cand));
		table_set(&t, row, 1, b);
		if (l->numel == l->drift.numel)
			snprintf(b, sizeof(b), "%llu", (unsigned long long)l->numel);
		else
			snprintf(b, sizeof(b), "%llu/%llu", (unsigned long long)l->numel,
				 (unsigned long long)l->drift.numel);
		table_set(&t, row, 2, b);
		fmt_num(b, sizeof(b), l->drift.w1);
		table_set(&t, row, 3, b);
		fmt_num(b, sizeof(b), l->drift.have_pair ? l->drift.pair.max_abs_diff : NAN);
		table_set(&t, row, 4, b);
		fmt_num(b, sizeof(b), l->drift.have_pair ? l->drift.pair.rel_l2 : NAN);
		table_set(&t, row, 5, b);
		fmt_nf(b, sizeof(b), &l->base.nonfinite, &l->drift.nonfinite);
		table_set(&t, row, 6, b);
		for (size_t k = 0; k < np; k++) {
			fmt_num(b, sizeof(b), l->proxy_w1[k]);
			table_set(&t, row, 7 + 2 * k, b);
			fmt_num(b, sizeof(b), l->ratio[k]);
			table_set(&t, row, 8 + 2 * k, b);
		}
	}
	/* Summary rows: weighted by elements, median over tensors, max. */
	const char *label[] = { "[all] weighted", "[all] median", "[all] max" };
	for (int j = 0; j < 3; j++) {
		row++;
		table_set(&t, row, 0, label[j]);
		snprintf(b, sizeof(b), "%llu", (unsigned long long)s.numel);
		table_set(&t, row, 2, j == 0 ? b : "");
		fmt_num(b, sizeof(b), j == 0 ? s.w1_weighted : j == 1 ? s.w1_median : s.w1_max);
		table_set(&t, row, 3, b);
		if (j == 2) {
			fmt_num(b, sizeof(b), s.max_abs_diff);
			table_set(&t, row, 4, b);
		}
		if (j == 0) {
			fmt_nf(b, sizeof(b), &s.nf_base, &s.nf_cand);
			table_set(&t, row, 6, b);
		}
		for (size_t k = 0; k < np; k++) {
			if (j == 0) {
				fmt_num(b, sizeof(b), s.proxy_w1_weighted[k]);
				table_set(&t, row, 7 + 2 * k, b);
			}
			fmt_num(b, sizeof(b), j == 0 ? s.ratio_weighted[k]
					      : j == 1 ? s.ratio_median[k] : s.ratio_max[k]);
			table_set(&t, row, 8 + 2 * k, b);
		}
	}
	table_print(&t, row + 1, 2);
	if (r->n_layers == 0)
		printf("(no tensor matched)\n");
	if (s.nf_base.nan + s.nf_base.posinf + s.nf_base.neginf +
	    s.nf_cand.nan + s.nf_cand.posinf + s.nf_cand.neginf)
		printf("\nnonfinite: NaN/Inf counts, baseline/candidate; left out of W1, and their pairs out of max|d| and rel L2\n");
	if (r->n_only_base || r->n_only_cand)
		printf("\n");
	for (size_t i = 0; i < r->n_only_base; i++)
		printf("unmatched  %s (only in the baseline)\n", r->only_base[i]);
	for (size_t i = 0; i < r->n_only_cand; i++)
		printf("unmatched  %s (only in the candidate)\n", r->only_cand[i]);
	if (r->unmatched_hint)
		printf("note       %s\n", r->unmatched_hint);
	for (size_t i = 0, first = 1; i < r->n_layers; i++)
		if (r->layers[i].shape_note) {
			if (first && !(r->n_only_base || r->n_only_cand))
				printf("\n");
			first = 0;
			printf("note       %s: %s\n", r->layers[i].name, r->layers[i].shape_note);
		}
	if (r->n_skipped)	/* --skip-other: not floats, left out of every row above */
		printf("\n");
	for (size_t i = 0; i < r->n_skipped; i++)
		printf("skipped    %s: %s\n", r->skipped[i].name, r->skipped[i].why ? r->skipped[i].why : "");
	summary_release(&s);
	table_release(&t);
}

/* --- JSON --- */

static json_t *jnum(double x)
{
	return isnan(x) || isinf(x) ? json_null() : json_real(x);
}

static json_t *jnonfinite(const struct wd_nonfinite *nf)
{
	return json_pack("{s:I,s:I,s:I}", "nan", (json_int_t)nf->nan,
			 "posinf", (json_int_t)nf->posinf, "neginf", (json_int_t)nf->neginf);
}

static json_t *jsummary(const struct wd_summary *s)
{
	return json_pack("{s:I,s:I,s:o,s:o,s:o,s:o,s:o}",
			 "numel", (json_int_t)s->numel, "n_finite", (json_int_t)s->n_finite,
			 "mean", jnum(s->mean), "std", jnum(s->std), "min", jnum(s->min),
			 "max", jnum(s->max), "l2", jnum(s->l2));
}

static json_t *jlayer(const struct compare_result *r, const struct layer_result *l)
{
	const struct wd_drift_tensor *d = &l->drift;
	json_t *proxies = json_object();
	for (size_t k = 0; k < r->n_proxies; k++)
		json_object_set_new(proxies, r->proxies[k].label,
				    json_pack("{s:o,s:o}", "w1", jnum(l->proxy_w1[k]),
					      "ratio", jnum(l->ratio[k])));
	json_t *o = json_pack("{s:s,s:I,s:I,s:s,s:s,s:o,s:o,s:o,s:o,s:{s:o,s:o},s:{s:o,s:o},s:o}",
		"name", l->name,
		"numel", (json_int_t)l->numel,
		"numel_candidate", (json_int_t)d->numel,
		"dtype", wd_dtype_name(l->dtype),
		"dtype_candidate", wd_dtype_name(l->dtype_cand),
		"w1", jnum(d->w1),
		"max_abs_diff", d->have_pair ? jnum(d->pair.max_abs_diff) : json_null(),
		"rel_l2", d->have_pair ? jnum(d->pair.rel_l2) : json_null(),
		"n_diff", d->have_pair ? json_integer((json_int_t)d->pair.n_diff) : json_null(),
		"nonfinite", "baseline", jnonfinite(&l->base.nonfinite),
			     "candidate", jnonfinite(&d->nonfinite),
		"stats", "baseline", jsummary(&l->base), "candidate", jsummary(&l->cand),
		"proxies", proxies);
	if (o && l->shape_note)	/* only then: the element-wise values pair elements of other shapes */
		json_object_set_new(o, "shape_note", json_string(l->shape_note));
	return o;
}

static json_t *jnames(char **names, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(names[i]));
	return a;
}

void compare_print_timings(const struct compare_timings *t)
{
	double rest = t->total - t->open - t->read_wait - t->engine;

	printf("\ntimings: total %.3f s = engine %.3f s + waiting for the readers %.3f s"
	       " + starting them and listing %.3f s + the rest %.3f s\n",
	       t->total, t->engine, t->read_wait, t->open, rest > 0 ? rest : 0);
}

int compare_print_json(const struct compare_result *r)
{
	json_t *layers = json_array(), *proxies = json_object(), *psum = json_object();
	json_t *unmatched = jnames(r->only_base, r->n_only_base);
	struct summary s;

	summarize(r, &s);
	for (size_t i = 0; i < r->n_layers; i++)
		json_array_append_new(layers, jlayer(r, &r->layers[i]));
	json_t *only_cand = jnames(r->only_cand, r->n_only_cand);
	json_array_extend(unmatched, only_cand);	/* copies; does not take it */
	json_decref(only_cand);
	for (size_t k = 0; k < r->n_proxies; k++) {
		const struct compare_proxy *p = &r->proxies[k];
		json_object_set_new(proxies, p->label,
				    p->path ? json_string(p->path) : json_string("synthetic"));
		json_object_set_new(psum, p->label,
			json_pack("{s:o,s:o,s:o,s:o}",
				  "w1_weighted", jnum(s.proxy_w1_weighted[k]),
				  "ratio_median", jnum(s.ratio_median[k]),
				  "ratio_max", jnum(s.ratio_max[k]),
				  "ratio_weighted", jnum(s.ratio_weighted[k])));
	}
	json_t *skipped = json_array();
	for (size_t i = 0; i < r->n_skipped; i++)
		json_array_append_new(skipped, json_pack("{s:s,s:s}", "name", r->skipped[i].name,
							 "why", r->skipped[i].why ? r->skipped[i].why : ""));
	json_t *root = json_pack(
		"{s:s,s:s,s:o,s:s,s:o,s:o,s:o,s:{s:o,s:o},s:{s:I,s:I,s:o,s:o,s:o,s:o,s:{s:o,s:o},s:o}}",
		"baseline", r->baseline, "candidate", r->candidate,
		"proxies", proxies, "engine", r->engine, "layers", layers,
		"unmatched", unmatched,
		"unmatched_hint", r->unmatched_hint ? json_string(r->unmatched_hint) : json_null(),
		"unmatched_detail", "baseline_only", jnames(r->only_base, r->n_only_base),
				    "candidate_only", jnames(r->only_cand, r->n_only_cand),
		"summary", "tensors", (json_int_t)r->n_layers, "numel", (json_int_t)s.numel,
			   "w1_weighted", jnum(s.w1_weighted), "w1_median", jnum(s.w1_median),
			   "w1_max", jnum(s.w1_max), "max_abs_diff", jnum(s.max_abs_diff),
			   "nonfinite", "baseline", jnonfinite(&s.nf_base),
					"candidate", jnonfinite(&s.nf_cand),
			   "proxies", psum);
	summary_release(&s);
	if (root)	/* --skip-other's: [] without it */
		json_object_set_new(root, "skipped", skipped);
	else
		json_decref(skipped);
	if (root && r->timings.on)
		json_object_set_new(root, "timings",
			json_pack("{s:f,s:f,s:f,s:f}", "total_s", r->timings.total,
				  "engine_s", r->timings.engine, "read_wait_s", r->timings.read_wait,
				  "open_s", r->timings.open));
	if (!root) {
		fprintf(stderr, "wdrift compare: error: cannot build the JSON output\n");
		return 1;
	}
	json_dumpf(root, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
	putchar('\n');
	json_decref(root);
	return 0;
}
