/*
 * cmd_report.c: `wdrift report STUDY -o report.html`: one self-contained
 * HTML page (inline CSS and SVG, no script, nothing fetched) drawn from the
 * study's drift log: W1 and the ratio to each proxy against step, with the
 * alert thresholds; a tensor x step heatmap of the ratio; the study, its
 * runs and its alert rules. Layout in docs/report.md.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chart.h"
#include "cli.h"
#include "daemon_client.h"
#include "study_data.h"
#include "wdrift.h"

static const char usage[] =
"usage: wdrift report STUDY -o FILE [-c FILE | --log FILE]\n"
"\n"
"Draws STUDY's drift log as one self-contained HTML page: W1 against step\n"
"for each compared run, the ratio to each proxy with the alert thresholds,\n"
"a per-tensor heatmap of the ratio, and the study's runs and rules. The\n"
"page has no script and loads nothing: it opens offline, and can be mailed.\n"
"Reads the log from disk: the daemon may be running or stopped.\n"
"\n"
"  -o, --output FILE  the page to write, whole or not at all (- for standard output)\n"
"  -c, --config FILE  the daemon's config: the study, its alerts, and storage.dir\n"
"                     (default: ./config/wdrift.yaml when present, else\n"
"                     /etc/wdrift/wdrift.yaml)\n"
"      --log FILE     the drift log itself, instead of the config's\n"
DC_HELP_HELP
"\n"
"exit status: 0 ok; 1 no such study, or the log cannot be read; 2 usage error.\n";

static const char *const palette[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
	"#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22" };
#define PALETTE(i) palette[(i) % (sizeof(palette) / sizeof(palette[0]))]

static const char css[] =
"body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;margin:24px auto;"
"max-width:960px;padding:0 16px}\n"
"h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}"
"h3{font-size:15px;margin:18px 0 4px}\n"
".sub{color:#666;margin:0 0 16px}.note{color:#555;font-size:13px;margin:4px 0}\n"
"table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums}"
"td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}"
"td:first-child,th:first-child,td.l{text-align:left}th{background:#f6f6f6}\n"
".good{color:#1a7f37}.bad{color:#b3261e;font-weight:600}\n"
"svg{display:block;max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#333}\n"
".grid{stroke:#eee}.axis{stroke:#888}.tick{stroke:#888}.yt{text-anchor:end}.xt{text-anchor:middle}"
".xl{text-anchor:middle;font-size:12px}.rl{text-anchor:end;font-size:10px}.kl{text-anchor:start}\n"
".line{fill:none;stroke-width:1.8}.dash{stroke-dasharray:6 4}.thr{stroke-width:1.2;stroke-dasharray:2 3}"
".thrl{text-anchor:end;font-size:10px}.hover{fill:transparent}.hover:hover{fill:rgba(0,0,0,.08)}"
".empty{text-anchor:middle;fill:#999;color:#999}\n"
".legend{margin:2px 0 8px 72px;font-size:12px}.legend span{margin-right:16px;white-space:nowrap}"
".legend i{display:inline-block;width:22px;margin-right:5px;vertical-align:middle}\n";

/* What the page is drawn from, gathered once from the log. */
struct report {
	const struct study_data *sd;
	const struct driftlog *d;
	size_t n_steps;
	int64_t *steps;		/* distinct, ascending */
	int *role;		/* per run index: 0 none, 1 candidate, 2 proxy */
	double last_wall;
};

static int gather(struct report *r, const struct study_data *sd)
{
	const struct driftlog *d = &sd->log;

	memset(r, 0, sizeof(*r));
	r->sd = sd;
	r->d = d;
	r->steps = malloc((d->n_rows + 1) * sizeof(*r->steps));
	r->role = calloc(d->n_runs + 1, sizeof(*r->role));
	if (!r->steps || !r->role)
		return -1;
	for (size_t i = 0; i < d->n_rows; i++) {
		const struct driftlog_disk_row *w = dl_row(d, i);
		if (!r->n_steps || r->steps[r->n_steps - 1] != w->step)
			r->steps[r->n_steps++] = w->step;
		r->role[w->run] = w->role;
		if (isfinite(w->wall) && w->wall > r->last_wall)
			r->last_wall = w->wall;
	}
	return 0;
}

static void release(struct report *r)
{
	free(r->steps);
	free(r->role);
}

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

static const struct driftlog_disk_row *latest_agg(const struct driftlog *d, size_t run, int kind)
{
	const struct driftlog_disk_row *found = NULL;
	for (size_t i = 0; i < d->n_rows; i++) {
		const struct driftlog_disk_row *w = dl_row(d, i);
		if (w->run == run && w->kind == kind)
			found = w;	/* sorted by step: the last is the latest */
	}
	return found;
}

static void num(FILE *f, double x)
{
	if (isnan(x))
		fputs("–", f);
	else
		fprintf(f, "%.4g", x);
}

/* A ratio's cell: green below 1 (the candidate drifts less than the proxy), red above. */
static void ratio_cell(FILE *f, double x)
{
	fprintf(f, "<td class=\"%s\">", isnan(x) ? "" : x < 1 ? "good" : "bad");
	num(f, x);
	fputs("</td>", f);
}

static void summary(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;

	fputs("<h2>Summary at each candidate's latest step</h2>\n<table><tr><th>candidate</th><th>step</th>"
	      "<th>mean W1</th>", f);
	for (size_t k = 0; k < d->n_proxies; k++) {
		fputs("<th>mean ratio [", f);
		xml_text(f, d->proxies[k]);
		fputs("]</th><th>max ratio [", f);
		xml_text(f, d->proxies[k]);
		fputs("]</th>", f);
	}
	fputs("</tr>\n", f);
	for (size_t run = 0; run < d->n_runs; run++) {
		const struct driftlog_disk_row *m = latest_agg(d, run, 1), *x = latest_agg(d, run, 3);
		if (r->role[run] != 1 || !m)
			continue;
		fputs("<tr><td>", f);
		xml_text(f, d->runs[run]);
		fprintf(f, "</td><td>%lld</td><td>", (long long)m->step);
		num(f, m->w1);
		fputs("</td>", f);
		for (size_t k = 0; k < d->n_proxies; k++) {
			ratio_cell(f, dl_ratio(m)[k]);
			ratio_cell(f, x && x->step == m->step ? dl_ratio(x)[k] : NAN);
		}
		fputs("</tr>\n", f);
	}
	fputs("</table>\n<p class=\"note\">ratio = the candidate's W1 from the baseline / the proxy's "
	      "W1 from the baseline, per tensor; below 1 (green) the candidate drifts less than the "
	      "proxy. Mean: weighted by element count; max: over tensors.</p>\n", f);
}

/*
 * A line chart being filled: its series and threshold lines with their
 * labels, and the points of every series in one buffer (x then y halves),
 * each series taking the next stretch of it.
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

/* Adds run's aggregate rows of kind as a series (series_of's x and y). */
__attribute__((format(printf, 8, 9)))
static void plot_series(struct plot *p, const struct driftlog *d, size_t run, int kind, int proxy,
			const char *color, int dashed, const char *fmt, ...)
{
	char *label = p->labels[p->ns];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(label, sizeof(p->labels[0]), fmt, ap);
	va_end(ap);
	size_t n = series_of(d, run, kind, proxy, p->x, p->y);
	p->s[p->ns++] = (struct chart_series){ label, color, dashed, n, p->x, p->y };
	p->x += n;
	p->y += n;
}

__attribute__((format(printf, 4, 5)))
static void plot_threshold(struct plot *p, double y, const char *color, const char *fmt, ...)
{
	char *label = p->labels[p->max_series + p->nh];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(label, sizeof(p->labels[0]), fmt, ap);
	va_end(ap);
	p->h[p->nh++] = (struct chart_hline){ label, y, color };
}

static void plot_draw(FILE *f, const struct plot *p, const char *ylabel, int log_y)
{
	struct line_chart c = { "step", ylabel, log_y, p->ns, p->nh, p->s, p->h };
	chart_line(f, &c);
}

static int w1_chart(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;
	struct plot p;

	if (plot_init(&p, d->n_runs, d->n_rows, r->sd->cfg.n_alerts) < 0)
		return -1;
	for (size_t run = 0; run < d->n_runs; run++)
		if (r->role[run])
			plot_series(&p, d, run, 1, -1, PALETTE(run), r->role[run] == 2, "%s (%s)", d->runs[run],
				    study_role_name(r->role[run]));
	for (size_t i = 0; i < r->sd->cfg.n_alerts; i++) {
		const struct wd_config_alert *al = &r->sd->cfg.alerts[i];
		if (!strcmp(al->study, r->sd->name) && al->metric == WD_METRIC_W1)
			plot_threshold(&p, al->threshold, "#b3261e", "alert %s: %s W1 > %g", al->name,
				       wd_config_scope_name(al->scope), al->threshold);
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
	fprintf(f, "<h2>Weight drift against step</h2>\n<p class=\"note\">W1 of each compared run from "
	        "the baseline, the mean over tensors weighted by element count. Candidates solid, "
	        "proxies dashed.%s</p>\n", log_y ? " Log scale: the runs are orders of magnitude "
	        "apart (a W1 of 0 is not drawn)." : "");
	plot_draw(f, &p, log_y ? "W1 from the baseline (log scale)" : "W1 from the baseline", log_y);
	plot_release(&p);
	return 0;
}

static int ratio_chart(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;
	struct plot p;
	size_t colour = 0;

	if (!d->n_proxies)
		return 0;
	/* each candidate's mean and max rows, once per proxy */
	if (plot_init(&p, 2 * d->n_runs * d->n_proxies, d->n_rows * d->n_proxies, r->sd->cfg.n_alerts) < 0)
		return -1;
	for (size_t run = 0; run < d->n_runs; run++)
		for (size_t k = 0; r->role[run] == 1 && k < d->n_proxies; k++, colour++)
			for (int kind = 1; kind <= 3; kind += 2)	/* mean, max */
				plot_series(&p, d, run, kind, (int)k, PALETTE(colour), kind == 3,
					    "%s / %s, %s over tensors", d->runs[run], d->proxies[k],
					    kind == 1 ? "mean" : "max");
	for (size_t i = 0; i < r->sd->cfg.n_alerts; i++) {
		const struct wd_config_alert *al = &r->sd->cfg.alerts[i];
		const char *color = al->severity == WD_SEVERITY_CRITICAL ? "#b3261e" : "#c77700";
		if (strcmp(al->study, r->sd->name) || al->metric != WD_METRIC_RATIO)
			continue;
		if (al->scope == WD_SCOPE_TENSORS)
			plot_threshold(&p, al->threshold, color, "alert %s: ratio[%s] of %s > %g", al->name,
				       al->proxy, al->tensors, al->threshold);
		else
			plot_threshold(&p, al->threshold, color, "alert %s: %s ratio[%s] > %g", al->name,
				       wd_config_scope_name(al->scope), al->proxy, al->threshold);
	}
	fputs("<h2>Ratio to the proxies against step</h2>\n<p class=\"note\">Each candidate's W1 over "
	      "each proxy's, tensor by tensor: the mean over tensors (solid, weighted by element count) "
	      "and the max (dashed), on a log scale; dotted lines are the alert thresholds. Below 1, "
	      "the candidate drifts less than the proxy.</p>\n", f);
	plot_draw(f, &p, "ratio (log scale)", 1);
	plot_release(&p);
	return 0;
}

/* One heatmap per candidate and proxy: the tensors the candidate has, x its steps. */
static int heatmaps(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;
	int rc = 0;

	if (!d->n_proxies)
		return 0;
	fputs("<h2>Per tensor: the ratio at each step</h2>\n<p class=\"note\">Rows are tensors in the "
	      "order they were first computed, columns the compared snapshots in step order. Blue: the "
	      "candidate drifts less than the proxy; red: more. Hover a row for its full name.</p>\n", f);
	size_t *row_of = malloc((d->n_tensors + 1) * sizeof(size_t));
	size_t *col_of = malloc((r->n_steps + 1) * sizeof(size_t));
	int64_t *cols = malloc((r->n_steps + 1) * sizeof(int64_t));
	const char **labels = malloc((d->n_tensors + 1) * sizeof(char *));
	if (!row_of || !col_of || !cols || !labels) {
		rc = -1;
		goto out;
	}
	for (size_t run = 0; run < d->n_runs && !rc; run++) {
		if (r->role[run] != 1)
			continue;
		size_t nr = 0, nc = 0, si = 0;
		for (size_t t = 0; t < d->n_tensors; t++)
			row_of[t] = SIZE_MAX;
		for (size_t s = 0; s < r->n_steps; s++)
			col_of[s] = SIZE_MAX;
		for (size_t i = 0; i < d->n_rows; i++) {	/* which tensors and steps it has */
			const struct driftlog_disk_row *w = dl_row(d, i);
			while (r->steps[si] != w->step)
				si++;
			if (w->run != run || w->kind)
				continue;
			row_of[w->tensor] = 0;
			if (col_of[si] == SIZE_MAX) {
				col_of[si] = nc;
				cols[nc++] = w->step;
			}
		}
		for (size_t t = 0; t < d->n_tensors; t++)
			if (row_of[t] == 0) {
				row_of[t] = nr;
				labels[nr++] = d->tensors[t];
			} else {
				row_of[t] = SIZE_MAX;
			}
		double *v = malloc((nr * nc + 1) * sizeof(double));
		if (!v) {
			rc = -1;
			break;
		}
		for (size_t k = 0; k < d->n_proxies && !rc; k++) {
			for (size_t i = 0; i < nr * nc; i++)
				v[i] = NAN;
			si = 0;
			for (size_t i = 0; i < d->n_rows; i++) {
				const struct driftlog_disk_row *w = dl_row(d, i);
				while (r->steps[si] != w->step)
					si++;
				if (w->run == run && !w->kind)
					v[row_of[w->tensor] * nc + col_of[si]] = dl_ratio(w)[k];
			}
			fputs("<h3>", f);
			xml_text(f, d->runs[run]);
			fputs(" / ", f);
			xml_text(f, d->proxies[k]);
			fprintf(f, "</h3><p class=\"note\">%zu tensors × %zu snapshots</p>\n", nr, nc);
			/* colours saturate at 2^±span: 3 (1/8 to 8) unless the
			 * ratios reach further, so that the map never turns one flat colour */
			double span = 3;
			for (size_t i = 0; i < nr * nc; i++)
				if (isfinite(v[i]) && v[i] > 0)
					span = fmax(span, fabs(log2(v[i])));
			span = fmin(ceil(span), 20);
			struct heatmap hm = { nr, nc, v, labels, cols, span };
			rc = chart_heatmap(f, &hm);
		}
		free(v);
	}
out:
	free(row_of), free(col_of), free(cols), free(labels);
	return rc;
}

struct ranked {
	const struct driftlog_disk_row *row;
	double key;
};

static int by_key_desc(const void *a, const void *b)
{
	double x = ((const struct ranked *)a)->key, y = ((const struct ranked *)b)->key;
	return (y > x) - (y < x);
}

/* The tensors furthest above their proxy at each candidate's latest step. */
static int worst(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;
	if (!d->n_proxies)
		return 0;
	struct ranked *v = malloc((d->n_tensors + 1) * sizeof(*v));
	if (!v)
		return -1;
	for (size_t run = 0; run < d->n_runs; run++) {
		const struct driftlog_disk_row *m = latest_agg(d, run, 1);
		if (r->role[run] != 1 || !m)
			continue;
		size_t n = 0;
		for (size_t i = 0; i < d->n_rows; i++) {
			const struct driftlog_disk_row *w = dl_row(d, i);
			if (w->run == run && !w->kind && w->step == m->step && n < d->n_tensors) {
				double key = -INFINITY;	/* the largest ratio over the proxies */
				for (size_t k = 0; k < d->n_proxies; k++)
					if (!isnan(dl_ratio(w)[k]) && dl_ratio(w)[k] > key)
						key = dl_ratio(w)[k];
				v[n++] = (struct ranked){ w, key };
			}
		}
		qsort(v, n, sizeof(*v), by_key_desc);
		fputs("<h3>", f);
		xml_text(f, d->runs[run]);
		fprintf(f, ": the %zu tensors with the largest ratio at step %lld</h3>\n<table><tr>"
			   "<th>tensor</th><th>elements</th>", n < 15 ? n : 15, (long long)m->step);
		for (size_t k = 0; k < STUDY_N_METRICS; k++)
			fprintf(f, "<th>%s</th>", study_metrics[k].title);
		for (size_t k = 0; k < d->n_proxies; k++) {
			fputs("<th>ratio [", f);
			xml_text(f, d->proxies[k]);
			fputs("]</th>", f);
		}
		fputs("</tr>\n", f);
		for (size_t i = 0; i < n && i < 15; i++) {
			const struct driftlog_disk_row *w = v[i].row;
			fputs("<tr><td class=\"l\">", f);
			xml_text(f, d->tensors[w->tensor]);
			fprintf(f, "</td><td>%llu</td>", (unsigned long long)w->numel);
			for (size_t k = 0; k < STUDY_N_METRICS; k++) {
				fputs("<td>", f);
				num(f, study_metric_of(w, &study_metrics[k]));
				fputs("</td>", f);
			}
			for (size_t k = 0; k < d->n_proxies; k++)
				ratio_cell(f, dl_ratio(w)[k]);
			fputs("</tr>\n", f);
		}
		fputs("</table>\n", f);
	}
	free(v);
	return 0;
}

static void kv(FILE *f, const char *k, const char *v)
{
	fprintf(f, "<tr><td>%s</td><td class=\"l\">", k);
	xml_text(f, v);
	fputs("</td></tr>\n", f);
}

static void metadata(FILE *f, const struct report *r)
{
	const struct study_data *sd = r->sd;
	const struct driftlog *d = r->d;
	const struct wd_config_study *st = sd->study;
	char b[4200];

	fputs("<h2>Study</h2>\n<table>\n", f);
	kv(f, "study", sd->name);
	kv(f, "baseline", st ? st->baseline : "(the study is not in the config)");
	if (st) {
		size_t n = 0;
		b[0] = 0;
		for (size_t i = 0; i < st->candidates.n && n < sizeof(b); i++)
			n += (size_t)snprintf(b + n, sizeof(b) - n, "%s%s", i ? ", " : "", st->candidates.names[i]);
		kv(f, "candidates", b);
		n = 0;
		b[0] = 0;
		for (size_t i = 0; i < st->proxies.n && n < sizeof(b); i++)
			n += (size_t)snprintf(b + n, sizeof(b) - n, "%s%s = run %s", i ? "; " : "",
					      st->proxies.v[i].label, st->proxies.v[i].run);
		if (st->synthetic_proxy && n < sizeof(b))
			snprintf(b + n, sizeof(b) - n, "%sthe baseline rounded to %s", n ? "; " : "",
				 st->synthetic_proxy == WD_SYNTHETIC_BF16 ? "bf16" : "fp16");
		kv(f, "proxies", b[0] ? b : "none");
	}
	kv(f, "drift log", sd->log_path);
	kv(f, "config", sd->config_path ? sd->config_path : "(none read)");
	snprintf(b, sizeof(b), "%zu (%lld to %lld)", r->n_steps, r->n_steps ? (long long)r->steps[0] : 0LL,
		 r->n_steps ? (long long)r->steps[r->n_steps - 1] : 0LL);
	kv(f, "compared steps", b);
	snprintf(b, sizeof(b), "%zu tensors; %zu current rows of %zu written", d->n_tensors, d->n_rows,
		 d->n_written);
	kv(f, "log contents", b);
	/* wall is whatever the file holds: a time beyond what time_t and
	 * localtime() can take (a damaged row) is left out, not converted */
	struct tm tm;
	time_t t = (time_t)(r->last_wall < 1e12 ? r->last_wall : 0);
	if (r->last_wall > 0 && r->last_wall < 1e12 && localtime_r(&t, &tm)) {
		strftime(b, sizeof(b), "%Y-%m-%d %H:%M:%S %Z", &tm);
		kv(f, "last computed", b);
	}
	fputs("</table>\n", f);

	fputs("<h3>Runs</h3>\n<table><tr><th>run</th><th>role</th><th>snapshots</th><th>last step</th>"
	      "<th>elements</th><th>mean W1</th><th>max W1</th><th>NaN/Inf</th></tr>\n", f);
	for (size_t run = 0; run < d->n_runs; run++) {
		const struct driftlog_disk_row *m = latest_agg(d, run, 1), *x = latest_agg(d, run, 3);
		size_t n = 0;
		for (size_t i = 0; i < d->n_rows; i++)
			n += dl_row(d, i)->run == run && dl_row(d, i)->kind == 1;
		if (!m)
			continue;
		fputs("<tr><td>", f);
		xml_text(f, d->runs[run]);
		fprintf(f, "</td><td class=\"l\">%s</td><td>%zu</td><td>%lld</td><td>%llu</td><td>",
			study_role_name(r->role[run]), n, (long long)m->step, (unsigned long long)m->numel);
		num(f, m->w1);
		fputs("</td><td>", f);
		num(f, x ? x->w1 : NAN);
		fprintf(f, "</td><td>%llu</td></tr>\n", (unsigned long long)(m->nan + m->posinf + m->neginf));
	}
	fputs("</table>\n", f);

	size_t na = 0;
	for (size_t i = 0; i < sd->cfg.n_alerts; i++)
		na += !strcmp(sd->cfg.alerts[i].study, sd->name);
	fprintf(f, "<h3>Alert rules</h3>\n");
	if (!na) {
		fputs("<p class=\"note\">none for this study in the config.</p>\n", f);
		return;
	}
	fputs("<table><tr><th>alert</th><th>metric</th><th>proxy</th><th>scope</th><th>threshold</th>"
	      "<th>for</th><th>severity</th></tr>\n", f);
	for (size_t i = 0; i < sd->cfg.n_alerts; i++) {
		const struct wd_config_alert *al = &sd->cfg.alerts[i];
		if (strcmp(al->study, sd->name))
			continue;
		fputs("<tr><td>", f);
		xml_text(f, al->name);
		fprintf(f, "</td><td class=\"l\">%s</td><td class=\"l\">", wd_config_metric_name(al->metric));
		xml_text(f, al->proxy ? al->proxy : "");
		fputs("</td><td class=\"l\">", f);
		xml_text(f, al->scope == WD_SCOPE_TENSORS && al->tensors ? al->tensors
			 : wd_config_scope_name(al->scope));
		fprintf(f, "</td><td>%g</td><td>%lld</td><td class=\"l\">%s</td></tr>\n", al->threshold,
			(long long)al->for_count, wd_config_severity_name(al->severity));
	}
	fputs("</table>\n", f);
}

static int page(FILE *f, const struct report *r)
{
	char when[64];
	time_t now = time(NULL);

	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
	      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>wdrift: ", f);
	xml_text(f, r->sd->name);
	fprintf(f, "</title>\n<style>\n%s</style></head><body>\n<h1>wdrift report: study ", css);
	xml_text(f, r->sd->name);
	fprintf(f, "</h1>\n<p class=\"sub\">%zu compared steps, %zu tensors, generated %s by wdrift %s "
		   "from ", r->n_steps, r->d->n_tensors, when, WDRIFT_VERSION);
	xml_text(f, r->sd->log_path);
	fputs("</p>\n", f);
	if (!r->d->n_rows)
		fputs("<p class=\"note\">The drift log has no rows yet: no comparison has been computed.</p>\n", f);
	summary(f, r);
	if (w1_chart(f, r) < 0 || ratio_chart(f, r) < 0 || heatmaps(f, r) < 0 || worst(f, r) < 0)
		return -1;
	metadata(f, r);
	fputs("</body></html>\n", f);
	return 0;
}

static int write_report(FILE *f, const struct study_data *sd, const struct study_args *o)
{
	struct report rep;
	int rc = gather(&rep, sd);

	(void)o;
	if (rc == 0)
		rc = page(f, &rep);
	release(&rep);
	return rc;
}

int cmd_report(int argc, char **argv)
{
	struct study_args o;
	int rc = study_args_parse(argc, argv, usage, 0, &o);

	if (rc >= 0)
		return rc;
	if (o.json)
		return cli_usage_error("the report is HTML; for the data, use wdrift export --json");
	if (!o.out)
		return cli_usage_error("-o FILE is required (- for standard output)");
	return study_data_output(&o, write_report);
}
