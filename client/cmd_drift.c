/* cmd_drift.c: `wdrift drift STUDY`: a study's drift at a step, per tensor. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cli.h"
#include "daemon_client.h"
#include "table.h"

static const char usage[] =
"usage: wdrift drift STUDY [--step N | --latest] [--layer GLOB]\n"
"                    " DC_USAGE_TARGET " [--json]\n"
"\n"
"The drift of each candidate of STUDY from its baseline at one step, per\n"
"tensor: W1, max|a-b|, relative L2, the candidate's count of NaN and Inf\n"
"values (nonfinite: left out of the others; a line under the candidate says\n"
"when there are any), and each proxy's W1 and the ratio, as wdrift compare\n"
"computes them.\n"
"\n"
"Below each candidate's tensors, the summary rows of wdrift compare over them:\n"
"weighted by elements, median over tensors, and max. The second line (the\n"
"third after a 'later' line) says whether the step is complete: every run\n"
"of the study compared at it; or stale: its rows compared another baseline\n"
"than the study's now (a reload).\n"
"With no results at all, the error says why: the baseline has no snapshot,\n"
"or a run's steps are none within alignment.tolerance of the baseline's.\n"
"Lines under it say when the rows may not be what they seem (--json below\n"
"names each field): \"lagging\", a run compared last at an earlier step (and the\n"
"command that shows it); \"never\", a run with no row at this step and none on\n"
"its way: its snapshot there expired incomplete (until its job sends the step\n"
"again), or it sent none there and later steps of it came, or its step near\n"
"it is compared at a nearer baseline step, or it sends at other steps than\n"
"the baseline's (unaligned); \"aligned\", a run whose row is of a step near this\n"
"one (alignment.tolerance); \"silent\", a run of the study that sent nothing;\n"
"\"former\", a candidate the study no longer names; \"refused\", a run's\n"
"snapshots refused as conflicts (a re-run under its name); \"mixed\", a run\n"
"two jobs published at once; \"expired\", a run's steps refused incomplete,\n"
"never durable (a rank that died), while no later step of it is durable;\n"
"\"stuck\", a run's step held up now: it waits for a rank the daemon's log\n"
"says died or lags, or had no new element for a minute (or half of\n"
"limits.pending_timeout, if shorter; no message, before any commit);\n"
"\"unmatched\", a run with tensors the baseline lacks (no row holds them) or\n"
"in another shape than the baseline's (max|d| and rel L2 mean nothing there;\n"
"a note under the candidate's table names them); \"ahead\", a run with\n"
"snapshots past the baseline's latest step; \"unaligned\", a run none of\n"
"whose steps aligns to a baseline step.\n"
"\n"
"      --step N       that step (the baseline's step); when it has no results,\n"
"                     the error names the nearest steps that have some\n"
"      --latest       the latest step with results (the default; not with --step)\n"
"                     that has a candidate's: a later one with the proxies' rows\n"
"                     alone (the baseline ahead) is said on a 'later' line\n"
"      --layer GLOB   only tensors whose name matches GLOB; none matching is an error\n"
"                     (--layers too, as compare spells it); given once\n"
DC_HELP_TARGET
"      --json         {\"study\", \"step\", \"baseline\", \"compared_at\" (Unix s),\n"
"                     \"complete\", \"missing\": [RUN...], and only when they apply\n"
"                     \"missing_latest\": {RUN: STEP}, \"never\": {RUN: WHY},\n"
"                     \"later\", \"later_step\", \"stale\", \"silent\", \"refused\",\n"
"                     \"mixed\", \"expired\", \"stuck\", \"unmatched\", \"ahead\",\n"
"                     \"unaligned\", \"run_steps\": {RUN: STEP} with\n"
"                     \"alignment_tolerance\";\n"
"                     \"candidates\": {RUN: {\"layers\": [...] (\"other_shape\": true on\n"
"                     a layer in another shape), \"absent\": N,\n"
"                     \"summary\": {...}, \"former\": true (only then)}}}, absent: its\n"
"                     tensors with no element compared (not in its snapshot, empty\n"
"                     or unreadable), layers and summary as in wdrift compare --json\n"
"                     (docs/compare.md); docs/cli.md says each field\n"
DC_HELP_HELP
"\n"
"A study of tens of thousands of tensors takes the daemon a moment: while it\n"
"answers status, this waits for the reply (up to WDRIFT_QUERY_TIMEOUT_MS,\n"
"default 120000) and never sends the query twice.\n"
"\n"
"exit status: 0 ok; 1 the daemon is down, or has no such study or step, or no\n"
"tensor matches GLOB; 2 usage error.\n";

struct drift_opts {
	long long step;
	int have_step, latest;
	const char *glob;
};

static int on_opt(int c, const char *arg, void *ctx)
{
	struct drift_opts *o = ctx;
	switch (c) {
	case 's':
		if (cli_step_arg("--step", arg, &o->step))
			return 1;
		o->have_step = 1;
		return 0;
	case 'L': o->latest = 1; return 0;
	case 'g':	/* one GLOB: a second was dropped in silence (a trial's, used to compare's repeats) */
		if (o->glob) {
			cli_usage_error("--layer is given once in drift, with one GLOB (got '%s', then '%s'); "
					"compare takes several", o->glob, arg);
			return 1;
		}
		o->glob = arg;
		return 0;
	}
	return 1;
}

static void fmt(char *b, size_t n, json_t *v)
{
	if (json_is_number(v))
		snprintf(b, n, "%.4g", json_number_value(v));
	else
		snprintf(b, n, "-");
}

/* Sets table cell (row, col) to member key of o, as fmt prints it. */
static void set_num(struct table *t, size_t row, size_t col, json_t *o, const char *key)
{
	char b[64];

	fmt(b, sizeof(b), json_object_get(o, key));
	table_set(t, row, col, b);
}

/* The candidate's NaN + Inf + -Inf count of o's "nonfinite", or -1 when it has none. */
static long long nonfinite_total(json_t *o, long long *nan, long long *posinf, long long *neginf)
{
	json_t *c = json_object_get(json_object_get(o, "nonfinite"), "candidate");

	if (!json_is_object(c))
		return -1;
	*nan = dc_int(c, "nan");
	*posinf = dc_int(c, "posinf");
	*neginf = dc_int(c, "neginf");
	return *nan + *posinf + *neginf;
}

/* The nonfinite cell: the candidate's count of NaN and Inf, '-' for none, as compare's. */
static void set_nonfinite(struct table *t, size_t row, json_t *o)
{
	long long nan, posinf, neginf, n = nonfinite_total(o, &nan, &posinf, &neginf);
	char b[32];

	snprintf(b, sizeof(b), "%lld", n);
	table_set(t, row, 5, n > 0 ? b : "-");
}

/*
 * The summary rows under a candidate's tensors, from the reply's summary
 * (the daemon's wd_drift_summarize), laid out as wdrift compare's: elements
 * and each proxy's W1 on the weighted row, max|d| on the max row.
 */
static void summary_rows(struct table *t, size_t row, json_t *sum, json_t *first_layer)
{
	static const char *const label[] = { "[all] weighted", "[all] median", "[all] max" };
	static const char *const w1[] = { "w1_weighted", "w1_median", "w1_max" };
	static const char *const ratio[] = { "ratio_weighted", "ratio_median", "ratio_max" };
	json_t *proxies = json_object_get(sum, "proxies");
	char b[64];

	for (size_t j = 0; j < 3; j++, row++) {
		table_set(t, row, 0, label[j]);
		snprintf(b, sizeof(b), "%lld", dc_int(sum, "numel"));
		table_set(t, row, 1, j == 0 ? b : "");
		set_num(t, row, 2, sum, w1[j]);
		if (j == 2)
			set_num(t, row, 3, sum, "max_abs_diff");
		if (j == 0)
			set_nonfinite(t, row, sum);
		const char *name;
		json_t *px;
		size_t k = 0;
		/* the layers' proxy order, which the header has */
		json_object_foreach(json_object_get(first_layer, "proxies"), name, px) {
			json_t *p = json_object_get(proxies, name);
			if (j == 0)
				set_num(t, row, 6 + 2 * k, p, "w1_weighted");
			set_num(t, row, 7 + 2 * k, p, ratio[j]);
			k++;
		}
	}
}

/*
 * "complete", or which runs are not compared at this step yet. Complete
 * with no number for a candidate's tensors (a run named otherwise: "absent")
 * must not read as all well: it says where to look.
 */
static void print_completeness(json_t *res, const char *again)
{
	json_t *missing = json_object_get(res, "missing"), *v, *cand;
	const char *run;
	size_t i, runs_absent = 0, runs_none = 0, runs = 0;

	json_object_foreach(json_object_get(res, "candidates"), run, cand) {
		long long absent = dc_int(cand, "absent");
		runs++;
		runs_absent += absent > 0;
		/*
		 * no layer with a W1: a wrapped model's names (a trial read "complete"
		 * as all well); by the layers, not the count, which also has tensors
		 * no layer shows (names not UTF-8)
		 */
		json_t *layers = json_object_get(cand, "layers"), *l;
		size_t k, with = 0;
		json_array_foreach(layers, k, l)
			with += json_is_number(json_object_get(l, "w1"));
		runs_none += absent > 0 && !with;
	}
	if (json_string_value(json_object_get(res, "stale"))) {	/* the baseline changed since */
		printf("stale      %s: nothing is compared against the new one at this step\n",
		       json_string_value(json_object_get(res, "stale")));
		return;
	}
	if (json_is_true(json_object_get(res, "complete"))) {
		/* every run compared, yet two jobs' steps in one run: the rows may be of either (a trial's) */
		int mixed = json_string_value(json_object_get(res, "mixed")) != NULL;
		printf("complete   every run of the study is compared at this step%s%s\n",
		       runs && runs_none == runs ? ", but no tensor of any candidate has drift: see 'absent' below" :
		       runs_absent ? ", but some tensors have no drift: see 'absent' below" : "",
		       !mixed ? "" : runs_absent ? "; and two jobs published a run at once: see 'mixed' below" :
		       ", but two jobs published a run at once, so its rows may be of either: see 'mixed' below");
		return;
	}
	/* the runs still to come, then those that never will (expired, or sent none): "yet" would mislead */
	json_t *never = json_object_get(res, "never");
	size_t n = 0;
	json_array_foreach(missing, i, v)
		if (!json_object_get(never, json_string_value(v)))
			printf("%s %s", n++ ? "," : "incomplete not compared at this step yet:", json_string_value(v));
	if (n)
		putchar('\n');
	n = 0;
	json_array_foreach(missing, i, v)
		if (json_object_get(never, json_string_value(v)))
			printf("%s %s", n++ ? "," : "incomplete not compared at this step, and not on its way:",
			       json_string_value(v));
	if (n)
		putchar('\n');
	json_object_foreach(never, run, v)
		printf("never      %s\n", json_string_value(v));
	/* a run that lags, and its role (the never line names one: an ops trial's): where it was compared last */
	json_object_foreach(json_object_get(res, "missing_latest"), run, v) {
		char line[300];
		dc_lagging(res, run, line, sizeof(line));
		printf("lagging    %s (wdrift drift %s --step %lld%s)\n", line,
		       json_string_value(json_object_get(res, "study")), (long long)json_integer_value(v), again);
	}
}

/* The study's runs that sent nothing (a reload's typo?), and the candidates it no longer names. */
static void print_silent(json_t *res)
{
	const char *run;
	json_t *cand;
	size_t n = 0;

	dc_said(res, "silent");
	/* alignment.tolerance: a run whose row compared another of its steps than this one */
	json_t *steps = json_object_get(res, "run_steps"), *at;
	const char *name;
	size_t k = 0;
	json_object_foreach(steps, name, at)
		printf("%s%s at its step %lld", k++ ? ", " : "aligned    ", name, (long long)json_integer_value(at));
	if (k)
		printf(" (alignment.tolerance %lld)\n", dc_int(res, "alignment_tolerance"));
	/*
	 * A re-run under the same name was refused (the rows are not its job's
	 * now); two jobs published a run at once (its rows may be of either); a
	 * rank died (steps that expired incomplete have no rows, and will not)
	 */
	dc_said(res, "refused");
	dc_said(res, "mixed");
	dc_said(res, "expired");
	dc_said(res, "stuck");
	dc_said(res, "unmatched");
	dc_said(res, "ahead");
	dc_said(res, "unaligned");
	json_object_foreach(json_object_get(res, "candidates"), run, cand)
		if (json_is_true(json_object_get(cand, "former")))
			printf("%s%s", n++ ? ", " : "former     ", run);
	if (n)
		printf(": %s no candidate of the study now (a reload); %s rows are from before it\n",
		       n == 1 ? "is" : "are", n == 1 ? "its" : "their");
}

#define OTHER_SHAPE_SAID_MAX 3	/* tensors named by the other-shape note; the rest counted */

/*
 * Under a candidate's table, its tensors in another shape than the
 * baseline's (a transposed weight), as compare's note does: their max|d|
 * and rel L2 pair elements in storage order. The unmatched line counted
 * them; which ones was in the daemon's log alone (a trial).
 */
static void print_other_shapes(json_t *layers)
{
	size_t i, n = 0;
	json_t *l;

	json_array_foreach(layers, i, l)
		if (json_is_true(json_object_get(l, "other_shape")) && ++n <= OTHER_SHAPE_SAID_MAX)
			printf("%s%s", n == 1 ? "note       " : ", ", json_string_value(json_object_get(l, "name")));
	if (n > OTHER_SHAPE_SAID_MAX)
		printf(" and %zu more", n - OTHER_SHAPE_SAID_MAX);
	if (n)
		printf(": in another shape than the baseline's; W1 compares the values, but max|d| and rel "
		       "L2 pair the elements in storage order: meaningless for a transpose (the [all] max row "
		       "takes %s in), empty for another count\n", n == 1 ? "it" : "them");
}

int cmd_drift(int argc, char **argv)
{
	static const struct option extra[] = {
		{ "step", required_argument, NULL, 's' },
		{ "latest", no_argument, NULL, 'L' },
		{ "layer", required_argument, NULL, 'g' },
		{ "layers", required_argument, NULL, 'g' },	/* compare's spelling */
		{ 0 },
	};
	struct dc_args a = { 0 };
	struct drift_opts o = { 0 };
	int r = dc_args(argc, argv, &a, usage, extra, on_opt, &o);

	if (r < 0)
		return cli_opts_exit(r);
	if (argc - r != 1)
		return cli_usage_error("expected one STUDY, got %d arguments", argc - r);
	if (o.latest && o.have_step)
		return cli_usage_error("--latest and --step are exclusive: give one");
	json_t *req = json_pack("{s:i,s:s,s:s}", "v", 1, "cmd", "drift", "study", argv[r]);
	if (o.have_step)
		json_object_set_new(req, "step", json_integer(o.step));
	if (o.glob)
		json_object_set_new(req, "tensors", json_string(o.glob));
	json_t *res = dc_call(&a, req);
	if (!res)
		return EXIT_FAIL;
	if (a.json) {
		dc_print_json(res);
		json_decref(res);
		return EXIT_OK;
	}
	printf("study      %s, step %lld, baseline %s", json_string_value(json_object_get(res, "study")),
	       dc_int(res, "step"),
	       json_string_value(json_object_get(res, "baseline")));
	/*
	 * When the rows shown were computed: an old result must not pass for a
	 * fresh one. With no candidate row (none yet, or removed by runs rm)
	 * nothing is shown to date: the proxies' time would read as the step's
	 * (two trials). --json keeps it.
	 */
	json_t *at = json_object_get(res, "compared_at");
	if (json_is_number(at) && json_object_size(json_object_get(res, "candidates"))) {
		time_t t = (time_t)json_number_value(at);
		struct tm tm;
		char when[40] = "";
		double ago = difftime(time(NULL), t);
		if (gmtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
		printf(", compared %s (%.0f s ago)", when, ago > 0 ? ago : 0);
	}
	putchar('\n');
	/* the latest step is the proxies' alone: this is an earlier one; the hint runs as typed, with the same -c */
	const char *again = dc_again(&a.t);
	if (json_string_value(json_object_get(res, "later")))
		printf("later      %s (wdrift drift %s --step %lld%s)\n", json_string_value(json_object_get(res, "later")),
		       json_string_value(json_object_get(res, "study")), dc_int(res, "later_step"), again);
	print_completeness(res, again);	/* its hint runs as typed: with the same -c */
	print_silent(res);
	const char *run;
	json_t *cand;
	json_object_foreach(json_object_get(res, "candidates"), run, cand) {
		json_t *layers = json_object_get(cand, "layers"), *l, *px;
		json_t *first = json_array_get(layers, 0);
		size_t np = json_object_size(json_object_get(first, "proxies")), i;
		struct table t;
		char b[64], hdr[256];
		static const char *const head[] = { "tensor", "elements", "W1", "max|d|", "rel L2", "nonfinite" };
		table_init(&t, json_array_size(layers) + 4, 6 + 2 * np);
		table_set_row(&t, 0, head, 6);
		const char *label;
		size_t k = 0;
		json_object_foreach(json_object_get(first, "proxies"), label, px) {
			snprintf(hdr, sizeof(hdr), "W1[%s]", label);
			table_set(&t, 0, 6 + 2 * k, hdr);
			snprintf(hdr, sizeof(hdr), "ratio[%s]", label);
			table_set(&t, 0, 7 + 2 * k, hdr);
			k++;
		}
		json_array_foreach(layers, i, l) {
			table_set(&t, i + 1, 0, json_string_value(json_object_get(l, "name")));
			snprintf(b, sizeof(b), "%lld", dc_int(l, "numel"));
			table_set(&t, i + 1, 1, b);
			fmt(b, sizeof(b), json_object_get(l, "w1"));
			table_set(&t, i + 1, 2, b);
			fmt(b, sizeof(b), json_object_get(l, "max_abs_diff"));
			table_set(&t, i + 1, 3, b);
			fmt(b, sizeof(b), json_object_get(l, "rel_l2"));
			table_set(&t, i + 1, 4, b);
			set_nonfinite(&t, i + 1, l);
			k = 0;
			json_object_foreach(json_object_get(l, "proxies"), label, px) {
				fmt(b, sizeof(b), json_object_get(px, "w1"));
				table_set(&t, i + 1, 6 + 2 * k, b);
				fmt(b, sizeof(b), json_object_get(px, "ratio"));
				table_set(&t, i + 1, 7 + 2 * k, b);
				k++;
			}
		}
		summary_rows(&t, json_array_size(layers) + 1, json_object_get(cand, "summary"), first);
		printf("\ncandidate  %s%s\n", run, json_is_true(json_object_get(cand, "former")) ?
		       " (former: no candidate of the study now)" : "");
		long long absent = dc_int(cand, "absent");
		if (absent > 0)
			printf("absent     %lld of its %zu tensors here %s no element compared: not in its "
			       "snapshot (named otherwise?), empty or unreadable; their drift is '-', and the "
			       "daemon's log says which\n", absent, json_array_size(layers),
			       absent == 1 ? "has" : "have");
		long long nan, posinf, neginf;
		long long nf = nonfinite_total(json_object_get(cand, "summary"), &nan, &posinf, &neginf);
		if (nf > 0)	/* said, not only counted: W1 and the rest leave them out (a trial) */
			printf("nonfinite  %lld value%s of the candidate %s NaN or Inf (%lld NaN, %lld +Inf, %lld "
			       "-Inf), left out of W1, max|d| and rel L2: see the nonfinite column\n", nf,
			       nf == 1 ? "" : "s", nf == 1 ? "is" : "are", nan, posinf, neginf);
		table_print(&t, json_array_size(layers) + 4, 1);
		table_release(&t);
		print_other_shapes(layers);
	}
	/*
	 * "yet" only where a candidate may still come (the never line says the
	 * others; a lagging proxy is not one: a trial's); an older daemon says
	 * no candidates apart: then of every missing run
	 */
	json_t *mc = json_object_get(res, "missing_candidates"), *never = json_object_get(res, "never"), *v;
	size_t coming = 0, i;
	json_array_foreach(mc ? mc : json_object_get(res, "missing"), i, v)
		coming += !json_object_get(never, json_string_value(v));
	if (!json_object_size(json_object_get(res, "candidates")))
		printf("(no candidate compared at this step%s)\n", coming ? " yet" : "");
	json_decref(res);
	return EXIT_OK;
}
