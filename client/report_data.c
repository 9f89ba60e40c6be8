/* report_data.c: what the report is drawn from, gathered once from the log (see report.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "config.h"
#include "report.h"

/*
 * Okabe and Ito's colours, safe for the common colour-vision deficiencies
 * (their yellow left out: too pale for a line on white), then Paul Tol's
 * muted ones, darker or of other hues: twelve runs apart. A run's colour
 * is its place in the study, so beyond twelve the colours come round
 * again; candidates' lines stay solid and proxies' dashed.
 */
static const char *const palette[] = { "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
	"#332288", "#882255", "#999933", "#44aa99", "#aa4499", "#117733" };
#define N_PALETTE (sizeof(palette) / sizeof(palette[0]))

static size_t run_index(const struct driftlog *d, const char *name)
{
	for (size_t i = 0; name && i < d->n_runs; i++)
		if (!strcmp(d->runs[i], name))
			return i;
	return SIZE_MAX;
}

/*
 * A run the config names takes its place p; one with no row is noted as
 * not compared yet. A run both candidate and proxy (docs/demo.md's) is
 * noted once, with both roles, in the colour of its later place, as a
 * logged one takes it: its colour stays when it arrives (a review's).
 */
static void place_config_run(struct report *r, size_t *place, const char *name, int role, size_t p)
{
	size_t run = run_index(r->d, name);

	if (run != SIZE_MAX)
		place[run] = p;
	if (run != SIZE_MAX && r->role[run])
		return;
	for (size_t i = 0; i < r->n_unlogged; i++)
		if (!strcmp(r->unlogged[i].name, name)) {
			r->unlogged[i].colour = palette[(p - 1) % N_PALETTE];
			r->unlogged[i].role |= role;
			return;
		}
	r->unlogged[r->n_unlogged++] = (struct report_unlogged){ name, palette[(p - 1) % N_PALETTE], role };
}

/*
 * The runs of the study, in the study's order: the config's candidates,
 * proxy runs and synthetic proxy (whose rows carry its label as run), then
 * any run of the log the config does not name (it changed since), the
 * candidates first. Every name of the config takes a place, logged or not,
 * so that a run's colour does not change when another one arrives.
 */
static void place_runs(struct report *r, size_t *place)
{
	const struct driftlog *d = r->d;
	const struct wd_config_study *st = r->sd->study;
	size_t next = 1, i;	/* 0: the baseline's */

	for (i = 0; i < d->n_runs; i++)
		place[i] = SIZE_MAX;
	for (i = 0; st && i < st->candidates.n; i++)
		place_config_run(r, place, st->candidates.names[i], ROLE_CANDIDATE, next++);
	for (i = 0; st && i < st->proxies.n; i++)
		place_config_run(r, place, st->proxies.v[i].run, ROLE_PROXY, next++);
	const char *synthetic = st ? wd_config_synthetic_label(st->synthetic_proxy) : NULL;
	if (synthetic)
		place_config_run(r, place, synthetic, ROLE_PROXY, next++);
	for (int role = 1; role <= 2; role++)
		for (i = 0; i < d->n_runs; i++)
			if (r->role[i] == role && place[i] == SIZE_MAX)
				place[i] = next++;
	r->n_order = 0;
	for (size_t p = 1; p < next; p++)	/* places are distinct: order by them */
		for (i = 0; i < d->n_runs; i++)
			if (place[i] == p && r->role[i]) {
				r->order[r->n_order++] = i;
				r->colour[i] = palette[(p - 1) % N_PALETTE];
			}
	for (i = 0; i < d->n_runs; i++)
		if (!r->colour[i])
			r->colour[i] = "#777777";	/* no role: no rows, never drawn */
}

/* Appends name to r->missing, while it has room. */
static void add_missing(struct report *r, const char *name)
{
	size_t n = strlen(r->missing);
	if (n + strlen(name) + 3 < sizeof(r->missing))
		snprintf(r->missing + n, sizeof(r->missing) - n, "%s%s", n ? ", " : "", name);
}

/*
 * The latest step where every run of the study has its rows (the one
 * definition: wd_study_step_runs, common/config.h), read from the log.
 * Without the study's config, the runs are the log's.
 */
static void complete_step(struct report *r)
{
	const struct driftlog *d = r->d;
	const struct wd_config_study *st = r->sd->study;
	const char *names[WD_STUDY_STEP_RUNS_MAX];
	size_t n = 0;

	r->complete = -1;
	r->missing[0] = 0;
	if (st) {
		n = wd_study_step_runs(st, names, WD_STUDY_STEP_RUNS_MAX);
	} else {
		for (size_t i = 0; i < d->n_runs && n < sizeof(names) / sizeof(names[0]); i++)
			if (r->role[i])
				names[n++] = d->runs[i];
	}
	for (size_t s = r->n_steps; s-- > 0;) {
		size_t have = 0;
		for (size_t i = 0; i < n; i++) {
			size_t run = run_index(d, names[i]);
			have += run != SIZE_MAX && r->mean[s * d->n_runs + run];
		}
		if (have == n) {
			r->complete = r->steps[s];
			break;
		}
	}
	if (!r->n_steps)
		return;
	/* who is not there at the latest step (when it is not the complete one) */
	size_t last = r->n_steps - 1;
	for (size_t i = 0; i < n; i++) {
		size_t run = run_index(d, names[i]);
		if (run == SIZE_MAX || !r->mean[last * d->n_runs + run])
			add_missing(r, names[i]);
	}
}

int report_gather(struct report *r, const struct study_data *sd)
{
	const struct driftlog *d = &sd->log;

	memset(r, 0, sizeof(*r));
	r->sd = sd;
	r->d = d;
	r->steps = malloc((d->n_rows + 1) * sizeof(*r->steps));
	r->role = calloc(d->n_runs + 1, sizeof(*r->role));
	r->colour = calloc(d->n_runs + 1, sizeof(*r->colour));
	r->order = calloc(d->n_runs + 1, sizeof(*r->order));
	r->proxy_run = calloc(d->n_proxies + 1, sizeof(*r->proxy_run));
	size_t *place = calloc(d->n_runs + 1, sizeof(*place));
	const struct wd_config_study *st = sd->study;
	r->unlogged = calloc((st ? st->candidates.n + st->proxies.n : 0) + 2, sizeof(*r->unlogged));
	if (!r->steps || !r->role || !r->colour || !r->order || !r->proxy_run || !place || !r->unlogged) {
		free(place);
		return -1;
	}
	for (size_t i = 0; i < d->n_rows; i++) {
		const struct driftlog_disk_row *w = dl_row(d, i);
		if (!r->n_steps || r->steps[r->n_steps - 1] != w->step)
			r->steps[r->n_steps++] = w->step;
		r->role[w->run] = w->role;
		if (isfinite(w->wall) && w->wall > r->last_wall)
			r->last_wall = w->wall;
	}
	r->mean = calloc(r->n_steps * d->n_runs + 1, sizeof(*r->mean));
	if (!r->mean) {
		free(place);
		return -1;
	}
	for (size_t i = 0, s = 0; i < d->n_rows; i++) {	/* rows are sorted by step */
		const struct driftlog_disk_row *w = dl_row(d, i);
		while (r->steps[s] != w->step)
			s++;
		if (w->kind == ROW_MEAN)
			r->mean[s * d->n_runs + w->run] = w;
	}
	/* a proxy label's run: the config's, else a run of that name (the
	 * synthetic proxy's rows carry its label as run) */
	for (size_t k = 0; k < d->n_proxies; k++) {
		const char *run = st ? wd_study_proxy_run(st, d->proxies[k]) : NULL;
		r->proxy_run[k] = run_index(d, run ? run : d->proxies[k]);
	}
	/* a trained proxy: what a run trained another way drifts, the
	 * yardstick a reader trusts most; the synthetic one only when alone */
	for (size_t k = d->n_proxies; k-- > 0;)
		if (strcmp(d->proxies[k], wd_config_synthetic_label(WD_SYNTHETIC_BF16)) &&
		    strcmp(d->proxies[k], wd_config_synthetic_label(WD_SYNTHETIC_FP16)))
			r->rank_proxy = k;	/* the last found is the first */
	place_runs(r, place);
	free(place);
	complete_step(r);
	return 0;
}

void report_release(struct report *r)
{
	free(r->steps);
	free(r->role);
	free(r->colour);
	free(r->order);
	free(r->proxy_run);
	free(r->mean);
	free(r->unlogged);
}

size_t report_step_index(const struct report *r, int64_t step)
{
	size_t lo = 0, hi = r->n_steps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->steps[mid] < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->n_steps && r->steps[lo] == step ? lo : SIZE_MAX;
}

const struct driftlog_disk_row *report_row(const struct report *r, size_t run, int kind, int64_t step)
{
	size_t s = report_step_index(r, step);
	if (s == SIZE_MAX || run >= r->d->n_runs)
		return NULL;
	if (kind == ROW_MEAN)
		return r->mean[s * r->d->n_runs + run];
	for (size_t i = 0; i < r->d->n_rows; i++) {
		const struct driftlog_disk_row *w = dl_row(r->d, i);
		if (w->step == step && w->run == run && w->kind == kind)
			return w;
	}
	return NULL;
}

const struct driftlog_disk_row *report_latest(const struct report *r, size_t run, int kind)
{
	const struct driftlog_disk_row *found = NULL;
	for (size_t i = 0; i < r->d->n_rows; i++) {
		const struct driftlog_disk_row *w = dl_row(r->d, i);
		if (w->run == run && w->kind == kind)
			found = w;	/* sorted by step: the last is the latest */
	}
	return found;
}

static void swatch(FILE *f, const char *run, const char *colour)
{
	fputs("<i class=\"sw\" data-run=\"", f);
	xml_text(f, run);
	fprintf(f, "\" style=\"background:%s\"></i>", colour);
}

void report_swatch(FILE *f, const struct report *r, size_t run)
{
	swatch(f, r->d->runs[run], r->colour[run]);
}

void report_swatch_unlogged(FILE *f, const struct report_unlogged *u)
{
	swatch(f, u->name, u->colour);
}

size_t report_n_logged(const struct report *r, int role)
{
	size_t n = 0;
	for (size_t i = 0; i < r->n_order; i++)
		n += r->role[r->order[i]] == role;
	return n;
}
