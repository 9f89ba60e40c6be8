/*
 * report_charts.c: the report's charts (see report.h): W1 against step,
 * one small panel of the ratio per candidate and proxy, and the per-tensor
 * heatmaps under one colour scale. Layout in docs/report.md.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "config.h"
#include "report.h"

/* The aggregate rows of kind for run: x = step, y = w1 or ratio[proxy] (proxy < 0: w1). */
static size_t series_of(const struct driftlog *d, size_t run, int kind, int proxy, double *x, double *y)
{
	size_t n = 0;
	for (size_t i = 0; i < d->n_rows; i++) {
		const struct driftlog_disk_row *w = dl_row(d, i);
		if (w->run != run || w->kind != kind)
			continue;
		x[n] = (double)w->step;
		y[n++] = proxy < 0 ? w->w1 : dl_ratio(w)[proxy];
	}
	return n;
}

/*
 * A line chart being filled: its series and lines with their labels, and
 * the points of every series in one buffer (x then y halves), each series
 * taking the next stretch of it.
 */
struct plot {
	struct chart_series *s;
	struct chart_hline *h;
	char (*labels)[300];	/* max_series for the series, then the lines' */
	double *buf, *x, *y;	/* x, y: where the next series' points go */
	size_t ns, nh, max_series;
};

static void plot_release(struct plot *p)
{
	free(p->s), free(p->h), free(p->buf), free(p->labels);
	memset(p, 0, sizeof(*p));
}

/* 0, or -1 (out of memory, p released). */
static int plot_init(struct plot *p, size_t max_series, size_t max_points, size_t max_lines)
{
	memset(p, 0, sizeof(*p));
	p->max_series = max_series;
	p->s = calloc(max_series + 1, sizeof(*p->s));
	p->h = calloc(max_lines + 1, sizeof(*p->h));
	p->buf = malloc((2 * max_points + 1) * sizeof(double));
	p->labels = calloc(max_series + max_lines + 1, sizeof(*p->labels));
	if (!p->s || !p->h || !p->buf || !p->labels) {
		plot_release(p);
		return -1;
	}
	p->x = p->buf;
	p->y = p->buf + max_points;
	return 0;
}

/* Adds run's aggregate rows of kind as a series (series_of's x and y), in the run's colour. */
__attribute__((format(printf, 7, 8)))
static void plot_series(struct plot *p, const struct report *r, size_t run, int kind, int proxy, int dashed,
			const char *fmt, ...)
{
	char *label = p->labels[p->ns];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(label, sizeof(p->labels[0]), fmt, ap);
	va_end(ap);
	size_t n = series_of(r->d, run, kind, proxy, p->x, p->y);
	p->s[p->ns++] = (struct chart_series){ label, r->colour[run], dashed, n, p->x, p->y, r->d->runs[run] };
	p->x += n;
	p->y += n;
}

__attribute__((format(printf, 5, 6)))
static void plot_line(struct plot *p, double y, const char *color, int ref, const char *fmt, ...)
{
	char *label = p->labels[p->max_series + p->nh];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(label, sizeof(p->labels[0]), fmt, ap);
	va_end(ap);
	p->h[p->nh++] = (struct chart_hline){ label, y, color, ref };
}

static struct line_chart plot_chart(const struct plot *p, const char *ylabel, int log_y)
{
	return (struct line_chart){ .xlabel = "step", .ylabel = ylabel, .log_y = log_y, .n_series = p->ns,
				    .n_hlines = p->nh, .series = p->s, .hlines = p->h };
}

/*
 * A W1 rule's threshold beyond this many times the highest W1 drawn is
 * named under the chart, not drawn: an ops trial's 0.5 beside runs near
 * 1e-3 pressed every line flat against the axis.
 */
#define W1_THRESHOLD_FAR 10.0

/* Why the W1 chart does not draw rule al's threshold (hi: the highest W1 drawn), or NULL: it does. */
static const char *w1_not_drawn(const struct wd_config_alert *al, double hi, char *b, size_t n)
{
	if (al->scope != WD_SCOPE_MEAN) {	/* the chart is of the mean: another quantity's line would mislead */
		snprintf(b, n, "a threshold on the %s, not the mean this chart draws", al->scope == WD_SCOPE_TENSORS ?
			 "W1 of each tensor matching its glob" : al->scope == WD_SCOPE_MAX ? "max W1 over tensors" :
			 "median W1 over tensors");
		return b;
	}
	if (hi > 0 && al->threshold > hi * W1_THRESHOLD_FAR) {
		snprintf(b, n, "%.3g times the highest W1 drawn (%.3g): the runs would lie flat under it",
			 al->threshold / hi, hi);
		return b;
	}
	return NULL;
}

int report_w1_chart(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;
	struct plot p;
	char why[160];

	if (plot_init(&p, d->n_runs, d->n_rows, r->sd->cfg.n_alerts) < 0)
		return -1;
	for (size_t i = 0; i < r->n_order; i++) {
		size_t run = r->order[i];
		plot_series(&p, r, run, ROW_MEAN, -1, r->role[run] == ROLE_PROXY, "%s (%s)", d->runs[run],
			    study_role_name(r->role[run]));
	}
	/* runs that drift by orders of magnitude apart (an exact-arithmetic
	 * change beside another seed) would flatten on a linear axis */
	double lo = INFINITY, hi = 0;
	for (size_t k = 0; k < p.ns; k++)
		for (size_t i = 0; i < p.s[k].n; i++)
			if (isfinite(p.s[k].y[i]) && p.s[k].y[i] > 0) {
				lo = fmin(lo, p.s[k].y[i]);
				hi = fmax(hi, p.s[k].y[i]);
			}
	int log_y = hi > 0 && hi / lo > 100;
	size_t not_drawn = 0;
	for (size_t i = 0; i < r->sd->cfg.n_alerts; i++) {
		const struct wd_config_alert *al = &r->sd->cfg.alerts[i];
		if (strcmp(al->study, r->sd->name) || al->metric != WD_METRIC_W1)
			continue;
		if (w1_not_drawn(al, hi, why, sizeof(why)))
			not_drawn++;
		else
			plot_line(&p, al->threshold, "#b3261e", 0, "alert %s: %s W1 > %g", al->name,
				  wd_config_scope_name(al->scope), al->threshold);
	}
	fprintf(f, "<h2>Weight drift against step</h2>\n<p class=\"note\">W1 of each compared run from "
	        "the baseline, the mean over tensors weighted by element count. Candidates solid, "
	        "proxies dashed; each run named at its line's end, in its colour on every chart.%s%s</p>\n",
		log_y ? " Log scale: the runs are orders of magnitude apart (a W1 of 0 is not drawn)." : "",
		p.nh ? " Dotted: the thresholds of the study's mean W1 alerts." : "");
	if (not_drawn) {
		fputs("<p class=\"note\" id=\"w1-not-drawn\">Not drawn (the alert rules at the page's end list them):", f);
		for (size_t i = 0, k = 0; i < r->sd->cfg.n_alerts; i++) {
			const struct wd_config_alert *al = &r->sd->cfg.alerts[i];
			if (strcmp(al->study, r->sd->name) || al->metric != WD_METRIC_W1 ||
			    !w1_not_drawn(al, hi, why, sizeof(why)))
				continue;
			fputs(k++ ? "; " : " ", f);
			fputs("alert ", f);
			xml_text(f, al->name);
			fprintf(f, " (%s W1 &gt; %g), ", wd_config_scope_name(al->scope), al->threshold);
			xml_text(f, why);
		}
		fputs(".</p>\n", f);
	}
	struct line_chart c = plot_chart(&p, log_y ? "W1 from the baseline (log scale)" : "W1 from the baseline",
					 log_y);
	c.end_labels = 1;
	chart_line(f, &c);
	plot_release(&p);
	return 0;
}

/* The proxy's label, with its run when the name differs, and the run's swatch. */
static void proxy_name(FILE *f, const struct report *r, size_t k)
{
	size_t run = r->proxy_run[k];
	if (run != SIZE_MAX)
		report_swatch(f, r, run);
	xml_text(f, r->d->proxies[k]);
	if (run != SIZE_MAX && strcmp(r->d->runs[run], r->d->proxies[k])) {
		fputs(" <span class=\"note\">(run ", f);
		xml_text(f, r->d->runs[run]);
		fputs(")</span>", f);
	}
}

/* The study's ratio alerts on proxy k, as threshold lines. */
static void ratio_thresholds(struct plot *p, const struct report *r, size_t k)
{
	for (size_t i = 0; i < r->sd->cfg.n_alerts; i++) {
		const struct wd_config_alert *al = &r->sd->cfg.alerts[i];
		const char *color = al->severity == WD_SEVERITY_CRITICAL ? "#b3261e" : "#c77700";
		if (strcmp(al->study, r->sd->name) || al->metric != WD_METRIC_RATIO || !al->proxy ||
		    strcmp(al->proxy, r->d->proxies[k]))
			continue;
		if (al->scope == WD_SCOPE_TENSORS)
			plot_line(p, al->threshold, color, 0, "alert %s: ratio[%s] of %s > %g", al->name, al->proxy,
				  al->tensors, al->threshold);
		else
			plot_line(p, al->threshold, color, 0, "alert %s: %s ratio[%s] > %g", al->name,
				  wd_config_scope_name(al->scope), al->proxy, al->threshold);
	}
}

/*
 * One small panel per candidate and proxy (small multiples): each pair's
 * mean and max ratio in the candidate's colour, the line ratio = 1, and the
 * thresholds of the alerts on that proxy; every panel on the same axes.
 */
int report_ratio_panels(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;
	size_t n_cand = 0, n = 0;

	n_cand = report_n_logged(r, ROLE_CANDIDATE);
	if (!d->n_proxies)
		return 0;
	if (!n_cand) {	/* a study waiting for its candidates: said, not an empty page (an ops trial's) */
		fputs("<h2>Ratio to the proxies against step</h2>\n<p class=\"note\" id=\"no-candidate\">No "
		      "candidate has been compared yet, so there is no ratio to draw: the summary names the "
		      "study's candidates, and the section \"What wdriftd says of the study now\" says why, "
		      "when wdriftd answers.</p>\n", f);
		return 0;
	}
	struct plot *p = calloc(n_cand * d->n_proxies, sizeof(*p));
	if (!p)
		return -1;
	int rc = 0;
	double lo = INFINITY, hi = -INFINITY;
	for (size_t i = 0; i < r->n_order && !rc; i++) {
		size_t run = r->order[i];
		for (size_t k = 0; r->role[run] == ROLE_CANDIDATE && k < d->n_proxies && !rc; k++, n++) {
			if (plot_init(&p[n], 2, 2 * r->n_steps, r->sd->cfg.n_alerts + 1) < 0) {
				rc = -1;
				break;
			}
			plot_series(&p[n], r, run, ROW_MEAN, (int)k, 0, "mean over tensors");
			plot_series(&p[n], r, run, ROW_MAX, (int)k, 1, "max over tensors");
			plot_line(&p[n], 1, "#444444", 1, "ratio = 1");
			ratio_thresholds(&p[n], r, k);
			struct line_chart c = plot_chart(&p[n], "ratio", 1);
			double a, b;
			if (chart_y_range(&c, &a, &b) == 0) {
				lo = fmin(lo, a);
				hi = fmax(hi, b);
			}
		}
	}
	if (!rc) {
		fprintf(f, "<h2>Ratio to the proxies against step</h2>\n<p class=\"note\">Each candidate's W1 over "
		        "each proxy's, tensor by tensor: the mean over tensors (solid, weighted by element count) "
		        "and the max (dashed), one panel per candidate and proxy, every panel on the same log "
		        "scale. Below the grey line ratio = 1, the candidate drifts less than the proxy; dotted "
		        "lines are the alert thresholds on that proxy.</p>\n<div class=\"panels%s\">\n",
			n > 1 ? "" : " one");
		n = 0;
		for (size_t i = 0; i < r->n_order; i++) {
			size_t run = r->order[i];
			for (size_t k = 0; r->role[run] == ROLE_CANDIDATE && k < d->n_proxies; k++, n++) {
				fputs("<div class=\"panel\" data-pair=\"", f);
				xml_text(f, d->runs[run]);
				fputs(" / ", f);
				xml_text(f, d->proxies[k]);
				fputs("\"><h4>", f);
				report_swatch(f, r, run);
				xml_text(f, d->runs[run]);
				fputs(" / ", f);
				proxy_name(f, r, k);
				fputs("</h4>\n", f);
				struct line_chart c = plot_chart(&p[n], "ratio (log scale)", 1);
				c.y_lo = lo;
				c.y_hi = hi;
				if (r->n_steps > 1) {
					c.x_lo = (double)r->steps[0];
					c.x_hi = (double)r->steps[r->n_steps - 1];
				}
				if (n_cand * d->n_proxies > 1) {
					c.width = 440;
					c.height = 240;
				}
				chart_line(f, &c);
				fputs("</div>\n", f);
			}
		}
		fputs("</div>\n", f);
	}
	for (size_t i = 0; i < n_cand * d->n_proxies; i++)
		plot_release(&p[i]);
	free(p);
	return rc;
}

/* One heatmap's values: candidate run against proxy k, tensors down, shown steps across. */
struct map {
	size_t nr, nc;
	double *v;		/* nr * nc */
	int64_t *cols;		/* the step of each column */
	const char **labels;	/* nr tensor names */
	size_t *row_of, *col_of;	/* per tensor, per step index: its row, its column, or SIZE_MAX */
	/* the steps left out: where the proxy's W1 is 0 (its ratio undefined),
	 * or the candidate's (it equals the baseline: ratio 0), as at step 0
	 * when the runs start from one initialisation */
	int64_t *left_proxy, *left_cand;
	size_t n_left_proxy, n_left_cand;
};

static void map_release(struct map *m)
{
	free(m->v), free(m->cols), free(m->labels), free(m->row_of), free(m->col_of);
	free(m->left_proxy), free(m->left_cand);
	memset(m, 0, sizeof(*m));
}

/* 0, or -1 out of memory (m released). */
static int map_build(const struct report *r, size_t run, size_t k, struct map *m)
{
	const struct driftlog *d = r->d;
	size_t nr = 0, nc = 0, si = 0, pr = r->proxy_run[k];

	memset(m, 0, sizeof(*m));
	m->row_of = malloc((d->n_tensors + 1) * sizeof(size_t));
	m->col_of = malloc((r->n_steps + 1) * sizeof(size_t));
	m->cols = malloc((r->n_steps + 1) * sizeof(int64_t));
	m->labels = malloc((d->n_tensors + 1) * sizeof(char *));
	m->left_proxy = malloc((r->n_steps + 1) * sizeof(int64_t));
	m->left_cand = malloc((r->n_steps + 1) * sizeof(int64_t));
	if (!m->row_of || !m->col_of || !m->cols || !m->labels || !m->left_proxy || !m->left_cand) {
		map_release(m);
		return -1;
	}
	for (size_t t = 0; t < d->n_tensors; t++)
		m->row_of[t] = SIZE_MAX;
	for (size_t s = 0; s < r->n_steps; s++) {
		const struct driftlog_disk_row *cm = r->mean[s * d->n_runs + run];
		const struct driftlog_disk_row *pm = pr == SIZE_MAX ? NULL : r->mean[s * d->n_runs + pr];
		m->col_of[s] = SIZE_MAX;
		if (pm && pm->w1 == 0)
			m->left_proxy[m->n_left_proxy++] = r->steps[s];
		else if (cm && cm->w1 == 0)
			m->left_cand[m->n_left_cand++] = r->steps[s];
		else
			m->col_of[s] = 0;	/* shown, if the candidate has rows there */
	}
	for (size_t i = 0; i < d->n_rows; i++) {	/* which tensors and steps it has */
		const struct driftlog_disk_row *w = dl_row(d, i);
		while (r->steps[si] != w->step)
			si++;
		if (w->run != run || w->kind != ROW_TENSOR || m->col_of[si] == SIZE_MAX)
			continue;
		m->row_of[w->tensor] = 0;
		if (m->col_of[si] == 0 && (!nc || m->cols[nc - 1] != w->step))
			m->cols[nc++] = w->step;
	}
	for (size_t s = 0, c = 0; s < r->n_steps; s++)	/* shown steps to columns */
		if (m->col_of[s] != SIZE_MAX)
			m->col_of[s] = c < nc && m->cols[c] == r->steps[s] ? c++ : SIZE_MAX;
	for (size_t t = 0; t < d->n_tensors; t++)
		if (m->row_of[t] == 0) {
			m->row_of[t] = nr;
			m->labels[nr++] = d->tensors[t];
		}
	m->v = malloc((nr * nc + 1) * sizeof(double));
	if (!m->v) {
		map_release(m);
		return -1;
	}
	for (size_t i = 0; i < nr * nc; i++)
		m->v[i] = NAN;
	si = 0;
	for (size_t i = 0; i < d->n_rows; i++) {
		const struct driftlog_disk_row *w = dl_row(d, i);
		while (r->steps[si] != w->step)
			si++;
		if (w->run == run && w->kind == ROW_TENSOR && m->col_of[si] != SIZE_MAX)
			m->v[m->row_of[w->tensor] * nc + m->col_of[si]] = dl_ratio(w)[k];
	}
	m->nr = nr;
	m->nc = nc;
	return 0;
}

/* "step 0", "steps 0, 10 and 20", "steps 0, 10, ... and 7 more" */
static void step_list(FILE *f, const int64_t *s, size_t n)
{
	fprintf(f, "step%s ", n > 1 ? "s" : "");
	for (size_t i = 0; i < n && i < 6; i++)
		fprintf(f, "%s%lld", i == 0 ? "" : i + 1 == n ? " and " : ", ", (long long)s[i]);
	if (n > 6)
		fprintf(f, " and %zu more", n - 6);
}

#define CAP_BINS 1024	/* |log2 ratio| in 1/16ths, up to 64 */

/*
 * A side's cap, one for every map: the 98th percentile of the ratios above
 * 1 (for the red side), or of 1/ratio over the ratios below 1 (the blue
 * side), over the cells shown, rounded up to 2, 4, 10 or a power of ten,
 * and 2 when that side has no cell. Each side has its own so that the
 * question a reader asks, "is this pair above 1, and by how much", is
 * answered in red on a scale set by the ratios above 1 alone: a pair far
 * below 1 (0.01) once made a shared cap of 1e3, and a firing pair at 1.6
 * near white. At least 2 so that 1.01 is not full red. Ratios of 0 (off
 * the scale anyway), of exactly 1 and undefined ones do not count.
 */
static double heat_cap(const uint64_t *hist, uint64_t total)
{
	static const double caps[] = { 2, 4, 10, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e12, 1e15 };
	uint64_t want = total - total / 50, seen = 0;
	double need = 1;
	for (size_t b = 0; b <= CAP_BINS && total; b++) {
		seen += hist[b];
		if (seen >= want) {
			need = (double)(b + 1) / 16;	/* the bin's upper edge, in log2 */
			break;
		}
	}
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
		if (log2(caps[i]) >= need - 1e-9)
			return caps[i];
	return caps[sizeof(caps) / sizeof(caps[0]) - 1];
}

/*
 * Builds each candidate x proxy map; with out, writes it on the scale of
 * scale; else adds its cells to hist (above 1 from hist[0], below 1 from
 * hist[CAP_BINS + 1]) and total (above, below).
 */
static int each_map(FILE *out, const struct report *r, uint64_t *hist, uint64_t *total, const struct heatmap *scale)
{
	const struct driftlog *d = r->d;
	for (size_t i = 0; i < r->n_order; i++) {
		size_t run = r->order[i];
		for (size_t k = 0; r->role[run] == ROLE_CANDIDATE && k < d->n_proxies; k++) {
			struct map m;
			if (map_build(r, run, k, &m) < 0)
				return -1;
			if (!out) {
				for (size_t c = 0; c < m.nr * m.nc; c++)
					if (isfinite(m.v[c]) && m.v[c] > 0 && m.v[c] != 1) {
						double a = fabs(log2(m.v[c])) * 16;
						int below = m.v[c] < 1;
						hist[below * (CAP_BINS + 1) + (a < CAP_BINS ? (size_t)a : CAP_BINS)]++;
						total[below]++;
					}
				map_release(&m);
				continue;
			}
			fputs("<h3>", out);
			report_swatch(out, r, run);
			xml_text(out, d->runs[run]);
			fputs(" / ", out);
			proxy_name(out, r, k);
			fprintf(out, "</h3><p class=\"note\">%zu tensors × %zu snapshots</p>\n", m.nr, m.nc);
			struct heatmap hm = { m.nr, m.nc, m.v, m.labels, m.cols, scale->cap_hi, scale->cap_lo };
			int rc = chart_heatmap(out, &hm);
			if (m.n_left_proxy) {
				fputs("<p class=\"note left\">Left out: ", out);
				step_list(out, m.left_proxy, m.n_left_proxy);
				fputs(", where ", out);
				xml_text(out, r->d->runs[r->proxy_run[k]]);
				fputs("'s W1 is 0 (it equals the baseline, as from one initialisation): "
				      "the ratio is undefined there.</p>\n", out);
			}
			if (m.n_left_cand) {
				fputs("<p class=\"note left\">Left out: ", out);
				step_list(out, m.left_cand, m.n_left_cand);
				fputs(", where ", out);
				xml_text(out, d->runs[run]);
				fputs("'s W1 is 0 (it equals the baseline, as from one initialisation): a ratio "
				      "of 0 that says nothing yet.</p>\n", out);
			}
			map_release(&m);
			if (rc < 0)
				return -1;
		}
	}
	return 0;
}

int report_heatmaps(FILE *f, const struct report *r)
{
	uint64_t *hist, total[2] = { 0, 0 };
	char cap_text[32], inv_text[32];

	if (!r->d->n_proxies || !report_n_logged(r, ROLE_CANDIDATE))
		return 0;	/* no map to draw: the ratio section (or, with no proxy, the summary) said why */
	if (!(hist = calloc(2 * (CAP_BINS + 1), sizeof(*hist))))
		return -1;
	int rc = each_map(NULL, r, hist, total, NULL);
	struct heatmap scale = { .cap_hi = heat_cap(hist, total[0]), .cap_lo = heat_cap(hist + CAP_BINS + 1, total[1]) };
	free(hist);
	if (rc < 0)
		return -1;
	chart_cap_text(cap_text, sizeof(cap_text), scale.cap_hi, 0);
	chart_cap_text(inv_text, sizeof(inv_text), scale.cap_lo, 1);
	fprintf(f, "<h2>Per tensor: the ratio at each step</h2>\n<p class=\"note\">Rows are tensors in the "
		"order they were first computed, columns the compared snapshots in step order. One colour "
		"scale for every map: white at ratio 1, red above (the candidate drifts more than the "
		"proxy), full at %s (the 98th percentile of the ratios above 1, rounded up, at least 2), "
		"blue below, full at %s (the same of the ratios below 1), darker beyond. Hover a row for its "
		"full name.</p>\n", cap_text, inv_text);
	return each_map(f, r, NULL, NULL, &scale);
}
