/*
 * query.c: drift replies, and the thread that builds them (see query.h).
 *
 * Must not depend on the main thread's state (config, runs, kept results):
 * a query carries all it reads, and its batch does not change once shared.
 * The thread is a workq (workq.h): queries waiting, the one being built,
 * and those done; the reply itself is built without its lock.
 */
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "drift.h"
#include "identity.h"
#include "logging.h"
#include "query.h"
#include "result_batch.h"

/* --- the request --- */

struct result_batch *drift_query_find(struct result_batch *const *results, size_t n, const char *study,
				      const char *baseline, const int64_t *step, char *why, size_t whylen)
{
	struct result_batch *b = NULL, *current = NULL;	/* current: the latest against baseline */
	int64_t below = -1, above = -1, first = -1, last = -1;	/* steps are never negative */
	size_t have = 0;

	for (size_t i = 0; i < n; i++) {
		struct result_batch *r = results[i];
		if (strcmp(r->study, study))
			continue;
		have++;
		first = first < 0 || r->step < first ? r->step : first;
		last = r->step > last ? r->step : last;
		if (step ? r->step == *step : (!b || r->step > b->step))
			b = r;
		if (!step && baseline && !strcmp(r->baseline, baseline) && (!current || r->step > current->step))
			current = r;
		if (step && r->step < *step && r->step > below)
			below = r->step;
		if (step && r->step > *step && (above < 0 || r->step < above))
			above = r->step;
	}
	if (current)
		return current;
	if (b)
		return b;
	if (!have) {
		snprintf(why, whylen, "no results for study '%.128s' yet", study);
		return NULL;
	}
	int w = snprintf(why, whylen, "no results for study '%.128s' at step %lld: ", study, (long long)*step);
	size_t at = w < 0 ? 0 : (size_t)w < whylen ? (size_t)w : whylen - 1;
	if (have == 1)
		snprintf(why + at, whylen - at, "the only step with results is %lld", (long long)first);
	else if (below >= 0 && above >= 0)
		snprintf(why + at, whylen - at, "the nearest are %lld and %lld (%zu steps with results, "
			 "from %lld to %lld)", (long long)below, (long long)above, have, (long long)first,
			 (long long)last);
	else
		snprintf(why + at, whylen - at, "the nearest is %lld (%zu steps with results, from %lld to %lld)",
			 (long long)(below >= 0 ? below : above), have, (long long)first, (long long)last);
	return NULL;
}

int drift_query_init(struct drift_query *q, struct result_batch *b, const struct wd_config_study *st,
		     const char *glob)
{
	const char *runs[WD_STUDY_STEP_RUNS_MAX];
	size_t n = wd_study_step_runs(st, runs, WD_STUDY_STEP_RUNS_MAX);
	int ok = (!glob || (q->glob = strdup(glob))) && (q->baseline = strdup(st->baseline));

	q->batch = result_batch_ref(b);
	for (size_t k = 0; ok && k < b->n_proxies; k++) {
		const char *run = wd_study_proxy_run(st, b->proxies[k]);
		ok = (q->proxy_runs[k] = strdup(run ? run : b->proxies[k])) != NULL;
		q->proxy_gone[k] = !run;	/* a trial's removed proxy stayed a column of '-' in every row */
	}
	q->n_candidates = st->candidates.n < n ? st->candidates.n : n;	/* wd_study_step_runs: first */
	ok = ok && (q->runs = calloc(n + 1, sizeof(*q->runs)));
	for (size_t k = 0; ok && k < n; k++, q->n_runs++)
		ok = (q->runs[k] = strdup(runs[k])) != NULL;
	return ok ? 0 : -ENOMEM;
}

int drift_query_find_latest(struct drift_query *q, struct result_batch *const *results, size_t n)
{
	const struct result_batch *b = q->batch;

	if (!(q->latest = malloc((q->n_runs + 1) * sizeof(*q->latest))))
		return -ENOMEM;
	for (size_t k = 0; k < q->n_runs; k++) {
		q->latest[k] = -1;
		if (result_batch_has_run(b, q->runs[k]))
			continue;
		for (size_t i = 0; i < n; i++) {
			const struct result_batch *o = results[i];
			if (o->step < b->step && o->step > q->latest[k] && !strcmp(o->study, b->study) &&
			    !strcmp(o->baseline, b->baseline) && result_batch_has_run(o, q->runs[k]))
				q->latest[k] = o->step;
		}
	}
	return 0;
}

/* --- the reply --- */

/* A growing string; failed once anything did not fit in memory. */
struct out {
	char *p;
	size_t len, cap;
	int failed;
};

static int out_add(const char *s, size_t n, void *ctx)
{
	struct out *o = ctx;

	if (o->failed)
		return -1;
	if (o->len + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 1 << 16;
		while (cap < o->len + n + 1)
			cap *= 2;
		char *p = realloc(o->p, cap);
		if (!p) {
			o->failed = 1;
			return -1;
		}
		o->p = p;
		o->cap = cap;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
	o->p[o->len] = 0;
	return 0;
}

static void out_str(struct out *o, const char *s)
{
	out_add(s, strlen(s), o);
}

/* o's JSON text, through jansson (the same numbers as everywhere else); takes o. */
static void out_json(struct out *out, json_t *o)
{
	if (!o || json_dump_callback(o, out_add, out, JSON_COMPACT | JSON_ENCODE_ANY) < 0)
		out->failed = 1;
	json_decref(o);
}

static json_t *jnum(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

/*
 * The ratio of candidate row r to proxy k, while the proxy's own row is
 * there: a proxy that runs rm forgot has no W1 at the step, and the ratio
 * the row kept from before is of a run the daemon no longer has (a trial
 * read W1 "-" beside ratio 0.407). NaN then.
 */
static double ratio_of(const struct drift_query *q, const struct drift_row *r, size_t k, const struct drift_row **proxy)
{
	const struct drift_row *p = result_batch_find(q->batch, q->proxy_runs[k], r->tensor);
	if (proxy)
		*proxy = p;
	return p ? r->ratio[k] : NAN;
}

/* Is h among the n ascending hashes of v? */
static int hash_in(const uint64_t *v, size_t n, uint64_t h)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid] < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && v[lo] == h;
}

/*
 * One layer, as compare --json writes it: r the candidate's row; reshaped
 * (n of them): its run's tensors in another shape than the baseline's, whose
 * layer says so, as compare's shape_note does.
 */
static json_t *layer(const struct drift_query *q, const struct drift_row *r, const uint64_t *reshaped,
		     size_t n_reshaped)
{
	const struct result_batch *b = q->batch;
	json_t *proxies = json_object();

	for (size_t k = 0; k < b->n_proxies; k++) {
		const struct drift_row *p;
		if (q->proxy_gone[k])
			continue;
		double ratio = ratio_of(q, r, k, &p);
		json_object_set_new(proxies, b->proxies[k], json_pack("{s:o,s:o}",
			"w1", p ? jnum(p->w1) : json_null(), "ratio", jnum(ratio)));
	}
	json_t *l = json_pack("{s:s,s:I,s:o,s:o,s:o,s:{s:{s:I,s:I,s:I}},s:o}",
		"name", r->tensor, "numel", (json_int_t)r->numel, "w1", jnum(r->w1),
		"max_abs_diff", jnum(r->max_abs_diff), "rel_l2", jnum(r->rel_l2),
		"nonfinite", "candidate", "nan", (json_int_t)r->nan, "posinf", (json_int_t)r->posinf,
		"neginf", (json_int_t)r->neginf, "proxies", proxies);
	if (l && n_reshaped && hash_in(reshaped, n_reshaped, identity_name_hash(r->tensor)))
		json_object_set_new(l, "other_shape", json_true());	/* only then */
	return l;
}

/*
 * The summary of one candidate's n layers (rows idx[0..n)), as the
 * "summary" of compare --json: every figure through wd_drift_summarize,
 * the one definition. vals and numel: room for n each.
 */
static json_t *summary(const struct drift_query *q, const size_t *idx, size_t n, double *vals,
		       uint64_t *numel)
{
	const struct result_batch *b = q->batch;
	struct wd_drift_summary w1, pair, d;
	uint64_t total = 0, nan = 0, posinf = 0, neginf = 0;

	for (size_t i = 0; i < n; i++) {
		const struct drift_row *r = &b->rows[idx[i]];
		numel[i] = r->numel;
		total += r->numel;
		nan += r->nan;
		posinf += r->posinf;
		neginf += r->neginf;
		vals[i] = r->w1;
	}
	if (wd_drift_summarize(vals, numel, n, &w1) < 0)
		return NULL;
	for (size_t i = 0; i < n; i++)
		vals[i] = b->rows[idx[i]].max_abs_diff;
	if (wd_drift_summarize(vals, numel, n, &pair) < 0)
		return NULL;
	json_t *proxies = json_object();
	for (size_t k = 0; proxies && k < b->n_proxies; k++) {
		if (q->proxy_gone[k])
			continue;
		for (size_t i = 0; i < n; i++) {
			const struct drift_row *p = result_batch_find(b, q->proxy_runs[k], b->rows[idx[i]].tensor);
			vals[i] = p ? p->w1 : NAN;
		}
		if (wd_drift_summarize(vals, numel, n, &d) < 0)
			goto fail;
		double proxy_w1 = d.weighted;
		for (size_t i = 0; i < n; i++)
			vals[i] = ratio_of(q, &b->rows[idx[i]], k, NULL);
		if (wd_drift_summarize(vals, numel, n, &d) < 0)
			goto fail;
		json_object_set_new(proxies, b->proxies[k], json_pack("{s:o,s:o,s:o,s:o}",
			"w1_weighted", jnum(proxy_w1), "ratio_weighted", jnum(d.weighted),
			"ratio_median", jnum(d.median), "ratio_max", jnum(d.max)));
	}
	return json_pack("{s:I,s:I,s:o,s:o,s:o,s:o,s:{s:{s:I,s:I,s:I}},s:o}",
		"tensors", (json_int_t)n, "numel", (json_int_t)total, "w1_weighted", jnum(w1.weighted),
		"w1_median", jnum(w1.median), "w1_max", jnum(w1.max), "max_abs_diff", jnum(pair.max),
		"nonfinite", "candidate", "nan", (json_int_t)nan, "posinf", (json_int_t)posinf,
		"neginf", (json_int_t)neginf, "proxies", proxies);
fail:
	json_decref(proxies);
	return NULL;
}

/* Is run none of the study's candidates now (a reload renamed or removed it)? */
static int is_former(const struct drift_query *q, const char *run)
{
	for (size_t k = 0; k < q->n_candidates; k++)
		if (!strcmp(q->runs[k], run))
			return 0;
	return 1;
}

/*
 * q's runs that have no row in the batch: not compared at this step (yet);
 * every one when the rows are stale. Rows come grouped by run, so each
 * run's name is looked up once.
 */
static json_t *missing_runs(const struct drift_query *q, int stale)
{
	const struct result_batch *b = q->batch;
	unsigned char *seen = calloc(q->n_runs + 1, 1);
	json_t *missing = json_array();

	if (!seen || !missing) {
		free(seen);
		json_decref(missing);
		return NULL;
	}
	/* rows against another baseline than the study's now: none of its runs is compared against it */
	for (size_t i = 0; !stale && i < b->n_rows; i++) {
		if (i && !strcmp(b->rows[i].run, b->rows[i - 1].run))
			continue;
		for (size_t k = 0; k < q->n_runs; k++)
			if (!strcmp(q->runs[k], b->rows[i].run))
				seen[k] = 1;
	}
	for (size_t k = 0; k < q->n_runs; k++)
		if (!seen[k] && json_array_append_new(missing, json_string(q->runs[k])) < 0)
			json_array_append_new(missing, json_string("(a name that is not UTF-8)"));
	free(seen);
	return missing;
}

/*
 * The error reply to a glob that matches none of the candidates' tensors,
 * with a few names that are there, to show what they look like.
 */
/* How much of s to print, at most max bytes, not cutting a UTF-8 character. */
static int clip(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n <= max)
		return (int)n;
	while (max && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	return (int)max;
}

static char *no_match(const struct drift_query *q, size_t *len)
{
	const struct result_batch *b = q->batch;
	const char *run = NULL;
	char msg[1024], names[512] = "";
	size_t used = 0, shown = 0, n = 0;

	for (size_t i = 0; i < b->n_rows; i++) {
		const struct drift_row *r = &b->rows[i];
		if (r->kind != ROW_TENSOR || r->role != ROLE_CANDIDATE || !r->tensor)
			continue;
		if (!run)
			run = r->run;
		if (strcmp(r->run, run))	/* one candidate's tensors: each name once */
			continue;
		n++;
		int w = shown == 3 ? 0 : snprintf(names + used, sizeof(names) - used, "%s'%.*s'",
						  shown ? ", " : "", clip(r->tensor, 100), r->tensor);
		if (w > 0 && (size_t)w < sizeof(names) - used) {
			used += (size_t)w;
			shown++;
		}
	}
	snprintf(msg, sizeof(msg), "no tensor of study '%.*s' at step %lld matches '%.*s' (%zu tensors, "
		 "such as %s)", clip(b->study, 128), b->study, (long long)b->step, clip(q->glob, 200), q->glob,
		 n, names);
	json_t *o = json_pack("{s:i,s:b,s:s}", "v", 1, "ok", 0, "error", msg);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (text)
		*len = strlen(text);
	return text;
}

/*
 * Written piece by piece, not as one jansson tree: a study of 100,000
 * tensors is a tree of millions of nodes, and the text is all we need.
 * Candidates keep the order of their first row, and each its rows' order.
 */
char *drift_query_reply(const struct drift_query *q, size_t *len)
{
	const struct result_batch *b = q->batch;
	struct out out = { 0 };
	const char **runs = NULL;
	size_t n_runs = 0, cap_runs = 0;
	uint32_t *slot = malloc((b->n_rows + 1) * sizeof(*slot));
	size_t *start = NULL, *order = NULL;
	double *vals = NULL;		/* a summary's values, and their weights */
	uint64_t *numel = NULL;

	if (!slot)
		goto out;
	/* each matching candidate row's run: a slot in order of first appearance */
	size_t n_cand = 0;
	for (size_t i = 0, last = SIZE_MAX; i < b->n_rows; i++) {
		const struct drift_row *r = &b->rows[i];
		slot[i] = UINT32_MAX;
		if (r->kind != ROW_TENSOR || r->role != ROLE_CANDIDATE || !r->tensor)
			continue;
		n_cand++;
		if (q->glob && fnmatch(q->glob, r->tensor, 0))
			continue;
		if (last == SIZE_MAX || strcmp(runs[last], r->run)) {	/* rows come grouped by run */
			for (last = 0; last < n_runs && strcmp(runs[last], r->run); last++)
				;
			if (last == n_runs) {
				if (n_runs == cap_runs) {
					cap_runs = cap_runs ? 2 * cap_runs : 8;
					const char **v = realloc(runs, cap_runs * sizeof(*v));
					if (!v)
						goto out;
					runs = v;
				}
				runs[n_runs++] = r->run;
			}
		}
		slot[i] = (uint32_t)last;
	}
	if (q->glob && !n_runs && n_cand) {	/* candidates were compared, but not one tensor matches */
		free(slot);
		free(runs);
		return no_match(q, len);
	}
	/* a counting sort of the rows by slot, stable */
	start = calloc(n_runs + 1, sizeof(*start));
	order = malloc((b->n_rows + 1) * sizeof(*order));
	vals = malloc((b->n_rows + 1) * sizeof(*vals));
	numel = malloc((b->n_rows + 1) * sizeof(*numel));
	if (!start || !order || !vals || !numel)
		goto out;
	for (size_t i = 0; i < b->n_rows; i++)
		if (slot[i] != UINT32_MAX)
			start[slot[i] + 1]++;
	for (size_t s = 0; s < n_runs; s++)
		start[s + 1] += start[s];
	size_t *next = calloc(n_runs + 1, sizeof(*next));
	if (!next)
		goto out;
	memcpy(next, start, (n_runs + 1) * sizeof(*next));
	for (size_t i = 0; i < b->n_rows; i++)
		if (slot[i] != UINT32_MAX)
			order[next[slot[i]]++] = i;
	free(next);

	out_str(&out, "{\"v\":1,\"ok\":true,\"study\":");
	out_json(&out, json_string(b->study));
	out_str(&out, ",\"step\":");
	out_json(&out, json_integer((json_int_t)b->step));
	out_str(&out, ",\"baseline\":");
	out_json(&out, json_string(b->baseline));
	/* when its rows were computed, the latest of them: an old result must not pass for a fresh one */
	double at = 0;
	for (size_t i = 0; i < b->n_rows; i++)
		at = b->rows[i].wall > at ? b->rows[i].wall : at;
	if (at > 0) {
		out_str(&out, ",\"compared_at\":");
		out_json(&out, json_real(at));
	}
	/*
	 * A reload gave the study another baseline (a typo, often): these rows
	 * compared the old one, and no run is compared against the new one.
	 * They are shown, for what they are, never as the study's current state.
	 */
	int stale = q->baseline && strcmp(b->baseline, q->baseline) != 0;
	json_t *missing = missing_runs(q, stale);
	if (stale) {
		out_str(&out, ",\"stale\":");
		out_json(&out, json_sprintf("the study's baseline is now '%s' (a reload), and these rows "
					    "compared '%s'", q->baseline, b->baseline));
	}
	out_str(&out, ",\"complete\":");
	out_json(&out, json_boolean(!stale && missing && !json_array_size(missing)));
	/* where each run missing here was compared last (a run that lags): the step to ask for */
	json_t *lag = json_object();
	size_t i;
	json_t *v;
	json_array_foreach(stale || !q->latest ? NULL : missing, i, v)
		for (size_t k = 0; lag && k < q->n_runs; k++)
			if (q->latest[k] >= 0 && !strcmp(q->runs[k], json_string_value(v)))
				json_object_set_new(lag, q->runs[k], json_integer((json_int_t)q->latest[k]));
	/*
	 * Which of them are candidates: "no candidate compared ... yet" asks
	 * of those alone (a trial's), and lagging names each run's role; sent
	 * whenever runs are missing, empty too, so that its absence says a
	 * daemon before it.
	 */
	json_t *mc = json_array();
	json_array_foreach(missing, i, v)
		for (size_t k = 0; mc && k < q->n_candidates && k < q->n_runs; k++)
			if (!strcmp(q->runs[k], json_string_value(v)))
				json_array_append_new(mc, json_string(q->runs[k]));
	size_t n_missing = json_array_size(missing);	/* out_json takes missing */
	out_str(&out, ",\"missing\":");
	out_json(&out, missing);
	if (n_missing) {
		out_str(&out, ",\"missing_candidates\":");
		out_json(&out, mc);
	} else {
		json_decref(mc);
	}
	if (json_object_size(lag)) {
		out_str(&out, ",\"missing_latest\":");
		out_json(&out, lag);
	} else {
		json_decref(lag);
	}
	if (q->never && !stale) {	/* runs missing here whose row never comes: no step to wait for */
		out_str(&out, ",\"never\":");
		out_str(&out, q->never);
	}
	if (q->silent) {
		out_str(&out, ",\"silent\":");
		out_json(&out, json_string(q->silent));
	}
	if (q->run_steps) {	/* alignment.tolerance: the steps the rows compared, where not this one */
		out_str(&out, ",\"run_steps\":");
		out_str(&out, q->run_steps);
		out_str(&out, ",\"alignment_tolerance\":");
		out_json(&out, json_integer((json_int_t)q->tolerance));
	}
	if (q->refused) {	/* a re-run refused: these rows are not its job's now */
		out_str(&out, ",\"refused\":");
		out_json(&out, json_string(q->refused));
	}
	if (q->unaligned) {	/* runs at other steps than the baseline's: no row, ever */
		out_str(&out, ",\"unaligned\":");
		out_json(&out, json_string(q->unaligned));
	}
	if (q->later) {	/* the latest step is the baseline's alone: the one shown is earlier */
		out_str(&out, ",\"later\":");
		out_json(&out, json_string(q->later));
		out_str(&out, ",\"later_step\":");
		out_json(&out, json_integer((json_int_t)q->later_step));
	}
	if (q->ahead) {	/* the baseline stopped, or lags: later steps have no rows yet */
		out_str(&out, ",\"ahead\":");
		out_json(&out, json_string(q->ahead));
	}
	if (q->expired) {	/* a rank died: those steps have no rows, and will not */
		out_str(&out, ",\"expired\":");
		out_json(&out, json_string(q->expired));
	}
	if (q->unmatched) {	/* tensors no row holds, or whose max|d| and rel L2 mean nothing */
		out_str(&out, ",\"unmatched\":");
		out_json(&out, json_string(q->unmatched));
	}
	if (q->stuck) {		/* a step held up by a rank (dead?): no row until it comes, or expires */
		out_str(&out, ",\"stuck\":");
		out_json(&out, json_string(q->stuck));
	}
	if (q->mixed) {		/* two jobs in one run: its rows may be either's */
		out_str(&out, ",\"mixed\":");
		out_json(&out, json_string(q->mixed));
	}
	out_str(&out, ",\"candidates\":{");
	for (size_t s = 0; s < n_runs && !out.failed; s++) {
		out_str(&out, s ? "," : "");
		out_json(&out, json_string(runs[s]));
		out_str(&out, ":{");
		if (is_former(q, runs[s]))	/* a reload took it out of the study: its rows are from before */
			out_str(&out, "\"former\":true,");
		out_str(&out, "\"layers\":[");
		/*
		 * Its tensors with no element compared: the baseline's that its
		 * snapshot lacks (named otherwise), empty ones, or ones that
		 * could not be read; their drift is null, which a table shows as
		 * '-' (the daemon's log says which).
		 */
		size_t absent = 0, rk = 0;
		int first = 1;
		while (rk < q->n_runs && strcmp(q->runs[rk], runs[s]))	/* its tensors in another shape */
			rk++;
		const uint64_t *rs = rk < q->n_runs && q->reshaped ? q->reshaped[rk] : NULL;
		size_t n_rs = rs ? q->n_reshaped[rk] : 0;
		for (size_t k = start[s]; k < start[s + 1] && !out.failed; k++) {
			absent += b->rows[order[k]].numel == 0;
			json_t *l = layer(q, &b->rows[order[k]], rs, n_rs);
			if (!l)
				continue;	/* a name jansson refuses (not UTF-8): left out, as before */
			out_str(&out, first ? "" : ",");
			out_json(&out, l);
			first = 0;
		}
		out_str(&out, "],\"absent\":");
		out_json(&out, json_integer((json_int_t)absent));
		out_str(&out, ",\"summary\":");
		out_json(&out, summary(q, order + start[s], start[s + 1] - start[s], vals, numel));
		out_str(&out, "}");
	}
	out_str(&out, "}}");
out:
	free(slot);
	free(start);
	free(order);
	free(runs);
	free(vals);
	free(numel);
	if (!out.p || out.failed) {
		free(out.p);
		return NULL;
	}
	*len = out.len;
	return out.p;
}

void drift_query_release(struct drift_query *q)
{
	result_batch_free(&q->batch);
	free(q->glob);
	q->glob = NULL;
	free(q->baseline);
	q->baseline = NULL;
	free(q->silent);
	q->silent = NULL;
	free(q->refused);
	q->refused = NULL;
	free(q->mixed);
	q->mixed = NULL;
	free(q->expired);
	q->expired = NULL;
	free(q->ahead);
	q->ahead = NULL;
	free(q->later);
	q->later = NULL;
	free(q->unaligned);
	q->unaligned = NULL;
	free(q->stuck);
	q->stuck = NULL;
	free(q->unmatched);
	q->unmatched = NULL;
	free(q->run_steps);
	q->run_steps = NULL;
	free(q->never);
	q->never = NULL;
	free(q->latest);
	q->latest = NULL;
	for (size_t k = 0; q->reshaped && k < q->n_runs; k++)
		free(q->reshaped[k]);
	free(q->reshaped);
	q->reshaped = NULL;
	free(q->n_reshaped);
	q->n_reshaped = NULL;
	for (size_t k = 0; k < q->n_runs; k++)
		free(q->runs[k]);
	free(q->runs);
	q->runs = NULL;
	q->n_runs = 0;
	for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++) {
		free(q->proxy_runs[k]);
		q->proxy_runs[k] = NULL;
	}
}

/* --- the thread --- */

struct query {
	struct workq q;
};

void query_waiter_free(struct query_waiter *w)
{
	for (size_t i = 0; w && i < w->n; i++)
		free(w->data[i]);
	if (w) {
		free(w->data);
		free(w->len);
	}
	free(w);
}

struct query_waiter *query_waiter_new(const struct query_envelope *env)
{
	struct query_waiter *w = calloc(1, sizeof(*w));

	if (!w || !(w->data = calloc(env->n + 1, sizeof(*w->data))) ||
	    !(w->len = calloc(env->n + 1, sizeof(*w->len)))) {
		query_waiter_free(w);
		return NULL;
	}
	for (w->n = 0; w->n < env->n; w->n++) {
		if (!(w->data[w->n] = malloc(env->len[w->n] + 1))) {
			query_waiter_free(w);
			return NULL;
		}
		memcpy(w->data[w->n], env->data[w->n], env->len[w->n]);
		w->len[w->n] = env->len[w->n];
	}
	return w;
}

void query_job_free(struct query_job **pj)
{
	struct query_job *j = *pj;
	if (!j)
		return;
	for (struct query_waiter *w = j->waiters, *n; w; w = n) {
		n = w->next;
		query_waiter_free(w);
	}
	drift_query_release(&j->q);
	free(j->reply);
	free(j);
	*pj = NULL;
}

static int str_eq(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/*
 * The same reply: the batch itself (a job's reference keeps it alive, so
 * its address cannot be reused while the job exists), tensors and proxies.
 */
static int same_query(const struct drift_query *a, const struct drift_query *b)
{
	if (a->batch != b->batch || !str_eq(a->glob, b->glob) || a->n_runs != b->n_runs ||
	    a->n_candidates != b->n_candidates || !str_eq(a->baseline, b->baseline) ||
	    !str_eq(a->silent, b->silent) || !str_eq(a->refused, b->refused) ||
	    !str_eq(a->mixed, b->mixed) || !str_eq(a->expired, b->expired) || !str_eq(a->ahead, b->ahead) ||
	    !str_eq(a->later, b->later) ||
	    !str_eq(a->unaligned, b->unaligned) || !str_eq(a->stuck, b->stuck) ||
	    !str_eq(a->unmatched, b->unmatched) ||
	    !str_eq(a->run_steps, b->run_steps) || !str_eq(a->never, b->never))
		return 0;
	for (size_t k = 0; k < a->n_runs; k++)
		if (!str_eq(a->runs[k], b->runs[k]))
			return 0;
	for (size_t k = 0; k < a->n_runs; k++) {	/* from the identities: the same batch has the same */
		size_t na = a->n_reshaped ? a->n_reshaped[k] : 0, nb = b->n_reshaped ? b->n_reshaped[k] : 0;
		if (na != nb || (na && memcmp(a->reshaped[k], b->reshaped[k], na * sizeof(uint64_t))))
			return 0;
	}
	for (size_t k = 0; k < DRIFTLOG_MAX_PROXIES; k++)
		if (!str_eq(a->proxy_runs[k], b->proxy_runs[k]) || a->proxy_gone[k] != b->proxy_gone[k])
			return 0;
	return 1;
}

static int is_same(struct workq_item *item, void *q)
{
	return same_query(&workq_entry(item, struct query_job, item)->q, q);
}

static void work(struct workq *q, struct workq_item *item, void *ctx)
{
	struct query_job *j = workq_entry(item, struct query_job, item);
	char *reply = drift_query_reply(&j->q, &j->reply_len);

	(void)ctx;
	if (!reply) {
		static const char oom[] = "{\"v\":1,\"ok\":false,\"error\":\"out of memory building "
					  "the drift reply\"}";
		reply = strdup(oom);
		j->reply_len = reply ? strlen(oom) : 0;
	}
	j->reply = reply;
	workq_finish(q, item);
}

static void drop_job(struct workq_item *item)
{
	struct query_job *j = workq_entry(item, struct query_job, item);
	query_job_free(&j);
}

int query_start(struct query **out)
{
	struct query *w = calloc(1, sizeof(*w));
	int r;

	*out = NULL;
	if (!w)
		return -ENOMEM;
	if ((r = workq_start(&w->q, "query", work, NULL)) < 0) {
		free(w);
		return r;
	}
	*out = w;
	return 0;
}

void query_stop(struct query **pw)
{
	struct query *w = *pw;
	if (!w)
		return;
	workq_stop(&w->q, 0, drop_job, drop_job);
	free(w);
	*pw = NULL;
}

int query_fd(const struct query *w)
{
	return workq_fd(&w->q);
}

/*
 * The main thread's alone, as query_take is: a job found here is not taken
 * meanwhile, and the worker reads none of the waiters it gets.
 */
int query_submit(struct query *w, struct drift_query *q, const struct query_envelope *env)
{
	struct query_waiter *wt = query_waiter_new(env);
	int r = 0;

	if (!wt)
		return -ENOMEM;
	struct workq_item *found = workq_find(&w->q, is_same, q);
	struct query_job *j = found ? workq_entry(found, struct query_job, item) : NULL;
	if (j && j->n_waiters < QUERY_WAITERS_MAX) {
		wt->next = j->waiters;
		j->waiters = wt;
		j->n_waiters++;
		drift_query_release(q);	/* the job has its own */
		r = 1;
	} else if (j || workq_queued(&w->q) >= QUERY_QUEUE_MAX) {
		r = -EBUSY;
	} else if (!(j = calloc(1, sizeof(*j)))) {
		r = -ENOMEM;
	} else {
		j->q = *q;
		memset(q, 0, sizeof(*q));
		j->waiters = wt;
		j->n_waiters = 1;
		workq_push(&w->q, &j->item);
	}
	if (r < 0)
		query_waiter_free(wt);
	return r;
}

struct query_job *query_take(struct query *w)
{
	struct workq_item *i = workq_take(&w->q);
	return i ? workq_entry(i, struct query_job, item) : NULL;
}

size_t query_depth(struct query *w)
{
	return workq_pending(&w->q);
}
