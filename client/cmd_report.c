/*
 * cmd_report.c: `wdrift report STUDY -o report.html`: one self-contained
 * HTML page (inline CSS and SVG, no script, nothing fetched) drawn from the
 * study's drift log: the summary at the latest complete step, the charts
 * (report_charts.c), the tensors furthest above their proxy, the study, its
 * runs and its alert rules. Layout in docs/report.md.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chart.h"
#include "cli.h"
#include "daemon_client.h"
#include "report.h"
#include "study_data.h"
#include "wdrift.h"

static const char usage[] =
"usage: wdrift report STUDY -o FILE [-c FILE] [--log FILE]\n"
"\n"
"Draws STUDY's drift log as one self-contained HTML page: a summary at the\n"
"latest complete step (every run of the study compared), W1 against step for\n"
"each compared run, one panel of the ratio per candidate and proxy with the\n"
"line ratio = 1 and the alert thresholds, per-tensor heatmaps of the ratio\n"
"on one colour scale, and the study's runs and rules; each run has one\n"
"colour throughout. The page has no script and loads nothing: it opens\n"
"offline, and can be mailed.\n"
"Reads the log from disk: the daemon may be running or stopped. When it\n"
"answers (-c's), the page also says why runs have no rows, as drift does.\n"
"\n"
"  -o, --output FILE  the page to write, whole or not at all (- for standard output)\n"
"                     (a symlink: into its target; a device or FIFO: written\n"
"                     through, never replaced; docs/cli.md, \"Output files\")\n"
"  -c, --config FILE  the daemon's config: the study, its alerts, and storage.dir\n"
WD_CONFIG_SEARCH_HELP
"      --log FILE     the drift log itself, instead of the config's (with -c:\n"
"                     the config still gives the baseline's name and thresholds)\n"
DC_HELP_HELP
"\n"
"exit status: 0 ok; 1 no such study, or the log cannot be read; 2 usage error.\n";

static const char css[] =
"body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;margin:24px auto;"
"max-width:960px;padding:0 16px}\n"
"h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}"
"h3{font-size:15px;margin:18px 0 4px}\n"
"table.says th{text-align:left;vertical-align:top;font-weight:600;padding-right:12px}"
"table.says td{font-size:13px}\n"
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
".legend i{display:inline-block;width:22px;margin-right:5px;vertical-align:middle}\n"
".el{font-size:11px;font-weight:600}.lead{stroke-width:1}.ref{stroke-width:1.2}.refl{text-anchor:start;font-size:10px}\n"
"i.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:-1px}\n"
".panels{display:grid;grid-template-columns:1fr 1fr;gap:4px 16px}.panels.one{grid-template-columns:1fr}"
"h4{font-size:13px;margin:10px 0 2px;font-weight:600}.panel .legend{margin-left:40px}\n";

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

/* The mean row a candidate's summary reads: at the latest complete step, else its latest. */
static const struct driftlog_disk_row *summary_row(const struct report *r, size_t run)
{
	return r->complete >= 0 ? report_row(r, run, ROW_MEAN, r->complete) : report_latest(r, run, ROW_MEAN);
}

/* A row for a run the config names that has no row in the log: its name, then what it waits for. */
static void unlogged_row(FILE *f, const struct report_unlogged *u, size_t span, const char *role)
{
	fputs("<tr class=\"unlogged\"><td>", f);
	report_swatch_unlogged(f, u);
	xml_text(f, u->name);
	fputs("</td>", f);
	if (role) {
		fprintf(f, "<td class=\"l\">%s</td>", role);
		span--;
	}
	fprintf(f, "<td colspan=\"%zu\" class=\"l note\">not compared yet: the section \"What wdriftd says "
		   "of the study now\" says why, when wdriftd answers</td></tr>\n", span - 1);
}

/*
 * At the latest complete step, not the latest: at a step some run has not
 * reached yet, a candidate's ratio to that proxy is missing and the table
 * would compare the candidate with fewer proxies than the study has.
 */
static void summary(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;
	long long latest = r->n_steps ? (long long)r->steps[r->n_steps - 1] : 0;

	if (r->complete >= 0) {
		fprintf(f, "<h2>Summary at step %lld, the latest complete step</h2>\n<p class=\"note\" "
			   "id=\"summary-step\" data-step=\"%lld\">Every run of the study has been compared at "
			   "step %lld.", (long long)r->complete, (long long)r->complete, (long long)r->complete);
		if (r->complete < latest) {
			fprintf(f, " Step %lld is later but incomplete (", latest);
			xml_text(f, r->missing);
			fputs(" not compared there; the section below says why, when wdriftd answers): the charts "
			      "below show it, this table does not.", f);
		}
		fputs("</p>\n", f);
	} else {
		fputs("<h2>Summary at each candidate's latest step</h2>\n", f);
		if (r->n_steps) {
			fprintf(f, "<p class=\"note\" id=\"summary-step\" data-step=\"none\">No step is complete "
				   "yet: at none has every run of the study been compared (at the latest, step "
				   "%lld: ", latest);
			xml_text(f, r->missing);
			fputs(report_n_logged(r, ROLE_CANDIDATE) ? " not compared). Each candidate at its latest step.</p>\n"
			      : " not compared). No candidate has been compared yet: the section below says why, "
			        "when wdriftd answers.</p>\n", f);
		}
	}
	fputs("<table><tr><th>candidate</th><th>step</th><th>mean W1</th>", f);
	for (size_t k = 0; k < d->n_proxies; k++) {
		fputs("<th>mean ratio [", f);
		xml_text(f, d->proxies[k]);
		fputs("]</th><th>max ratio [", f);
		xml_text(f, d->proxies[k]);
		fputs("]</th>", f);
	}
	fputs("</tr>\n", f);
	for (size_t i = 0; i < r->n_order; i++) {
		size_t run = r->order[i];
		const struct driftlog_disk_row *m = summary_row(r, run), *x;
		if (r->role[run] != ROLE_CANDIDATE || !m)
			continue;
		x = report_row(r, run, ROW_MAX, m->step);
		fputs("<tr><td>", f);
		report_swatch(f, r, run);
		xml_text(f, d->runs[run]);
		fprintf(f, "</td><td>%lld</td><td>", (long long)m->step);
		num(f, m->w1);
		fputs("</td>", f);
		for (size_t k = 0; k < d->n_proxies; k++) {
			ratio_cell(f, dl_ratio(m)[k]);
			ratio_cell(f, x ? dl_ratio(x)[k] : NAN);
		}
		fputs("</tr>\n", f);
	}
	for (size_t i = 0; i < r->n_unlogged; i++)
		if (r->unlogged[i].role & ROLE_CANDIDATE)
			unlogged_row(f, &r->unlogged[i], 3 + 2 * d->n_proxies, NULL);
	fputs("</table>\n", f);
	if (!d->n_proxies) {	/* no ratio to explain (a trial's page explained one) */
		fputs("<p class=\"note\">The study has no proxy, so no ratio: W1 alone has no scale to be "
		      "read against (a proxy, or synthetic_proxy: round:bf16, gives one).</p>\n", f);
		return;
	}
	fputs("<p class=\"note\">ratio = the candidate's W1 from the baseline / the proxy's "
	      "W1 from the baseline, per tensor; below 1 (green) the candidate drifts less than the "
	      "proxy. Mean: weighted by element count; max: over tensors.</p>\n", f);
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

/* The tensors furthest above their proxy at the summary's step. */
static int worst(FILE *f, const struct report *r)
{
	const struct driftlog *d = r->d;
	if (!d->n_proxies)
		return 0;
	struct ranked *v = malloc((d->n_tensors + 1) * sizeof(*v));
	if (!v)
		return -1;
	for (size_t o = 0; o < r->n_order; o++) {
		size_t run = r->order[o];
		const struct driftlog_disk_row *m = summary_row(r, run);
		if (r->role[run] != ROLE_CANDIDATE || !m)
			continue;
		size_t n = 0;
		for (size_t i = 0; i < d->n_rows; i++) {
			const struct driftlog_disk_row *w = dl_row(d, i);
			if (w->run == run && !w->kind && w->step == m->step && n < d->n_tensors) {
				double key = dl_ratio(w)[r->rank_proxy];	/* one proxy's, named in the heading */
				v[n++] = (struct ranked){ w, isnan(key) ? -INFINITY : key };
			}
		}
		qsort(v, n, sizeof(*v), by_key_desc);
		fputs("<h3>", f);
		report_swatch(f, r, run);
		xml_text(f, d->runs[run]);
		fprintf(f, ": the %zu tensors with the largest ratio [", n < 15 ? n : 15);
		xml_text(f, d->proxies[r->rank_proxy]);
		fprintf(f, "] at step %lld</h3>\n<table><tr><th>tensor</th><th>elements</th>", (long long)m->step);
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

	/* from the drift log: steps compared, not every snapshot the daemon holds (a trial read it so) */
	fputs("<h3>Runs</h3>\n<table><tr><th>run</th><th>role</th><th>steps compared</th><th>last compared</th>"
	      "<th>elements</th><th>mean W1</th><th>max W1</th><th>NaN/Inf</th></tr>\n", f);
	for (size_t o = 0; o < r->n_order; o++) {
		size_t run = r->order[o], n = 0;
		const struct driftlog_disk_row *m = report_latest(r, run, ROW_MEAN), *x = report_latest(r, run, ROW_MAX);
		for (size_t i = 0; i < d->n_rows; i++)
			n += dl_row(d, i)->run == run && dl_row(d, i)->kind == ROW_MEAN;
		if (!m)
			continue;
		fputs("<tr><td>", f);
		report_swatch(f, r, run);
		xml_text(f, d->runs[run]);
		fprintf(f, "</td><td class=\"l\">%s</td><td>%zu</td><td>%lld</td><td>%llu</td><td>",
			study_role_name(r->role[run]), n, (long long)m->step, (unsigned long long)m->numel);
		num(f, m->w1);
		fputs("</td><td>", f);
		num(f, x ? x->w1 : NAN);
		fprintf(f, "</td><td>%llu</td></tr>\n", (unsigned long long)(m->nan + m->posinf + m->neginf));
	}
	for (size_t i = 0; i < r->n_unlogged; i++)
		unlogged_row(f, &r->unlogged[i], 8, r->unlogged[i].role == (ROLE_CANDIDATE | ROLE_PROXY) ?
			     "candidate, proxy" : study_role_name(r->unlogged[i].role));
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
		/* stalled has neither (the config refuses them): "-", as wdrift alerts shows it */
		int stalled = al->metric == WD_METRIC_STALLED;
		xml_text(f, stalled ? "-" : al->scope == WD_SCOPE_TENSORS && al->tensors ? al->tensors
			 : wd_config_scope_name(al->scope));
		fprintf(f, "</td><td>%g</td><td>", al->threshold);
		if (stalled)
			fputs("-", f);
		else
			fprintf(f, "%lld", (long long)al->for_count);
		fprintf(f, "</td><td class=\"l\">%s</td></tr>\n", wd_config_severity_name(al->severity));
	}
	fputs("</table>\n", f);
}

/* One line of what the daemon says: its label, as `drift` prints it, and the sentence. */
static void says_item(FILE *f, const char *label, const char *text, size_t *n)
{
	if (!text)
		return;
	fputs(*n ? "" : "<table class=\"says\">\n", f);
	fputs("<tr><th>", f);
	xml_text(f, label);
	fputs("</th><td>", f);
	xml_text(f, text);
	fputs("</td></tr>\n", f);
	(*n)++;
}

/*
 * Why runs have no rows, which the drift log does not hold: the daemon's
 * `drift` at its latest step, as that command says it (a trial's page left
 * out a run whose step expired, and showed "–" for one whose names carried
 * a "module." prefix, with no reason). said: NULL when not asked (why).
 */
static void daemon_says(FILE *f, const struct report *r, json_t *said, const char *why)
{
	static const char *const keys[] = { "later", "stale", "silent", "refused", "mixed", "expired", "stuck",
					    "unmatched", "ahead", "unaligned" };
	const char *run;
	json_t *v;
	size_t n = 0;
	char line[700];

	fputs("<h2>What wdriftd says of the study now</h2>\n<p class=\"note\" id=\"daemon-says\">", f);
	if (!said) {
		xml_text(f, why);
		fputs(": the drift log holds the results, not why a run has none (a step that expired "
		      "incomplete, names unlike the baseline's, a re-run refused); <code>wdrift drift ", f);
		xml_text(f, r->sd->name);
		fputs("</code> says it while wdriftd runs.</p>\n", f);
		return;
	}
	fprintf(f, "At step %lld, the latest it compared%s, as <code>wdrift drift ",
		(long long)json_integer_value(json_object_get(said, "step")),
		json_object_get(said, "later") ? " a candidate at" : "");
	xml_text(f, r->sd->name);
	fputs("</code> says it.</p>\n", f);
	json_object_foreach(json_object_get(said, "never"), run, v)
		says_item(f, "never", json_string_value(v), &n);
	json_object_foreach(json_object_get(said, "missing_latest"), run, v) {
		dc_lagging(said, run, line, sizeof(line));
		says_item(f, "lagging", line, &n);
	}
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		says_item(f, keys[k], json_string_value(json_object_get(said, keys[k])), &n);
	if (n)
		fputs("</table>\n", f);
	else if (json_is_true(json_object_get(said, "complete")))
		fputs("<p class=\"note\">Every run of the study is compared there: nothing to say.</p>\n", f);
	else
		fputs("<p class=\"note\">Nothing more than the summary says.</p>\n", f);
}

static int page(FILE *f, const struct report *r, json_t *said, const char *why)
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
	daemon_says(f, r, said, why);
	if (report_w1_chart(f, r) < 0 || report_ratio_panels(f, r) < 0 || report_heatmaps(f, r) < 0 ||
	    worst(f, r) < 0)
		return -1;
	metadata(f, r);
	fputs("</body></html>\n", f);
	return 0;
}

static int write_report(FILE *f, const struct study_data *sd, const struct study_args *o)
{
	struct report rep;
	char why[1024];
	json_t *said = study_data_daemon_drift(sd, why, sizeof(why));
	int rc = report_gather(&rep, sd);

	/* on stderr too, where a run that writes the page is read (a trial's daemon was stopped) */
	if (!said && !sd->log_given)
		cli_note("%s: the page leaves out why runs have no rows (`wdrift drift %s` says it while wdriftd "
			 "runs)", why, sd->name);

	(void)o;
	if (rc == 0)
		rc = page(f, &rep, said, why);
	report_release(&rep);
	json_decref(said);
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
