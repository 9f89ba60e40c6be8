/*
 * report.h: what `wdrift report` draws its page from (report_data.c), and
 * the page's charts (report_charts.c); cmd_report.c writes the rest.
 *
 * Each run has one colour everywhere on the page: a fixed palette indexed
 * by the run's place in the study (baseline, candidates, proxies, as the
 * config lists them), so that a run keeps its colour as other runs arrive
 * and in every chart, legend and table.
 */
#ifndef WD_REPORT_H
#define WD_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "study_data.h"

#define REPORT_BASELINE_COLOUR "#000000"

struct report {
	const struct study_data *sd;
	const struct driftlog *d;
	size_t n_steps;
	int64_t *steps;		/* distinct, ascending */
	int *role;		/* per run index: 0 none, 1 candidate, 2 proxy */
	const char **colour;	/* per run index */
	size_t *order;		/* run indices with a role, by place in the study */
	size_t n_order;
	size_t *proxy_run;	/* per proxy label: its run's index, or SIZE_MAX when unknown */
	/* the proxy whose ratio ranks the top tensors: the first trained
	 * proxy of the log, else the first (the synthetic one); docs/report.md */
	size_t rank_proxy;
	/* the mean row of each run at each step: mean[step index * n_runs + run], or NULL */
	const struct driftlog_disk_row **mean;
	double last_wall;
	/*
	 * The step the summary reads: the latest complete step, where every
	 * run of the study (the config's, else the log's) has been compared.
	 * complete < 0: none is; then missing names a run that never was.
	 * When a later step is incomplete, missing names who is not there.
	 */
	int64_t complete;
	char missing[512];
	/*
	 * The config's candidates and proxy runs with no row in the log (not
	 * compared yet), in the study's order and the colour their place
	 * gives them: the summary and the runs table name them, so that a
	 * study none of whose candidates came still shows what it waits for
	 * (an ops trial's page was empty).
	 */
	struct report_unlogged {
		const char *name, *colour;
		int role;	/* ROLE_CANDIDATE, ROLE_PROXY, or both (or'ed) */
	} *unlogged;
	size_t n_unlogged;
};

/* 0, or -1 out of memory (then report_release). */
int report_gather(struct report *r, const struct study_data *sd);
void report_release(struct report *r);

/* The step's index in r->steps, or SIZE_MAX. */
size_t report_step_index(const struct report *r, int64_t step);
/* run's row of kind at step (any kind), or NULL. */
const struct driftlog_disk_row *report_row(const struct report *r, size_t run, int kind, int64_t step);
/* run's latest row of kind, or NULL. */
const struct driftlog_disk_row *report_latest(const struct report *r, size_t run, int kind);

/* A run's colour swatch, with its name in data-run (for a reader of the HTML, and the test). */
void report_swatch(FILE *f, const struct report *r, size_t run);
/* The same of a run with no row (r->unlogged[i]). */
void report_swatch_unlogged(FILE *f, const struct report_unlogged *u);
/* How many of r's candidates (role 1) or proxies (2) are in the log, with rows. */
size_t report_n_logged(const struct report *r, int role);

/* The page's charts; each 0, or -1 out of memory. */
int report_w1_chart(FILE *f, const struct report *r);
int report_ratio_panels(FILE *f, const struct report *r);
int report_heatmaps(FILE *f, const struct report *r);

#endif
