/*
 * metrics.c: the /metrics body (see metrics.h; the series are listed in
 * docs/metrics.md). Every family is written whole, under its # HELP and
 * # TYPE, as the text format 0.0.4 requires; counters end in _total and
 * are never lowered while the daemon runs. Reads struct control and what
 * it points to (state, config, kept results, alerts) on the main thread.
 *
 * Steps: W1, step and non-finite counts per run are of the run's latest
 * step; the ratios, and W1 beside them, of the study's latest complete step
 * (control_latest_complete), where every run has been compared.
 *
 * Cardinality: a series per study and run (and proxy, and summary) for
 * drift, per rule and instance for alerts; per tensor only for instances
 * of rules with scope tensors, unless metrics.per_tensor asks for all.
 */
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alerts.h"
#include "control.h"
#include "grow.h"
#include "config_file.h"
#include "metrics.h"
#include "study_waiting.h"
#include "result_batch.h"
#include "spool.h"

struct label {
	const char *name, *value;
};

/* The latest summary rows of one run of one study: from the newest batch that has them. */
struct latest {
	const struct result_batch *b;
	const char *run;
	const struct drift_row *sum[3];		/* ROW_MEAN, ROW_MEDIAN, ROW_MAX */
};

static const char *const summary_name[3] = { "weighted", "median", "max" };

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the format escapes it: backslash, double quote and newline. */
static void put_escaped(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f), fputc(*s, f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

/* name{labels} text: labels end at a NULL name (or l is NULL). */
static void sample_text(FILE *f, const char *name, const struct label *l, const char *text)
{
	fputs(name, f);
	if (l && l->name) {
		fputc('{', f);
		for (const struct label *p = l; p->name; p++) {
			fprintf(f, "%s%s=\"", p == l ? "" : ",", p->name);
			put_escaped(f, p->value ? p->value : "");
			fputc('"', f);
		}
		fputc('}', f);
	}
	fprintf(f, " %s\n", text);
}

static void sample(FILE *f, const char *name, const struct label *l, double v)
{
	char text[40];

	if (isnan(v))
		snprintf(text, sizeof(text), "NaN");
	else if (isinf(v))
		snprintf(text, sizeof(text), v > 0 ? "+Inf" : "-Inf");
	else
		for (int prec = 15; prec <= 17; prec++) {	/* the shortest that reads back the same */
			snprintf(text, sizeof(text), "%.*g", prec, v);
			if (strtod(text, NULL) == v)
				break;
		}
	sample_text(f, name, l, text);
}

/* Counts as integers: a double would round them past 2^53. */
static void sample_u64(FILE *f, const char *name, const struct label *l, uint64_t v)
{
	char text[24];

	snprintf(text, sizeof(text), "%llu", (unsigned long long)v);
	sample_text(f, name, l, text);
}

static void one_u64(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
	family(f, name, type, help);
	sample_u64(f, name, NULL, v);
}

/* --- the daemon's own counters, queues and memory (what `wdrift status` shows) --- */

/* The counts of struct counters that are one series each, with no label. */
#define COUNT(field) offsetof(struct counters, field)
static const struct {
	const char *name, *type, *help;
	size_t off;
} plain_counts[] = {
	{ "wdrift_messages_received_total", "counter",
	  "Protocol messages received on the ingest socket.", COUNT(messages) },
	{ "wdrift_tensors_received_total", "counter", "Tensor messages (shards) accepted.", COUNT(tensors) },
	{ "wdrift_bytes_received_total", "counter", "Bytes of tensor data accepted.", COUNT(bytes_received) },
	{ "wdrift_snapshots_received_total", "counter",
	  "Snapshots committed by publishers (commit messages).", COUNT(commits) },
	{ "wdrift_snapshots_durable_total", "counter",
	  "Snapshots made durable (spooled and in the write-ahead log) since the daemon started.",
	  COUNT(stored) },
	{ "wdrift_durable_snapshots", "gauge",
	  "Durable snapshots the daemon knows, those replayed at start included, whether retention "
	  "removed their files since or not (status: durable; wdrift_spool_files: the files kept).",
	  COUNT(snapshots_durable) },
	{ "wdrift_snapshots_duplicate_total", "counter",
	  "Durable snapshots sent again with the same content (acked as duplicates).", COUNT(duplicates) },
	{ "wdrift_duplicate_tensors_total", "counter", "Tensor messages of duplicate snapshots.",
	  COUNT(duplicate_tensors) },
	{ "wdrift_snapshots_conflict_total", "counter",
	  "Durable snapshots sent again with other content, refused.", COUNT(conflicts) },
	{ "wdrift_spool_failures_total", "counter",
	  "Snapshots the spool could not store (disk full, I/O error).", COUNT(spool_failures) },
	{ "wdrift_control_requests_total", "counter", "Requests on the control socket.",
	  COUNT(control_requests) },
	{ "wdrift_comparisons_total", "counter",
	  "Comparison passes of the compute thread since the daemon started: a study at one "
	  "step, compared again each time a later run arrives at that step.", COUNT(comparisons) },
};
#undef COUNT

static void daemon_series(FILE *f, const struct control *c)
{
	const struct state *s = c->st;
	const struct counters *k = &s->count;
	size_t pending = state_pending(s);	/* as status counts them */
	family(f, "wdrift_build_info", "gauge", "Always 1; the daemon's version as a label.");
	sample(f, "wdrift_build_info", (struct label[]){ { "version", WDRIFT_VERSION }, { 0 } }, 1);
	family(f, "wdrift_uptime_seconds", "gauge", "Seconds since the daemon started.");
	sample(f, "wdrift_uptime_seconds", NULL, now_mono() - s->started);
	one_u64(f, "wdrift_runs", "gauge", "Runs the daemon knows (wdrift runs).", s->n_runs);
	for (size_t i = 0; i < sizeof(plain_counts) / sizeof(plain_counts[0]); i++)
		one_u64(f, plain_counts[i].name, plain_counts[i].type, plain_counts[i].help,
			*(const uint64_t *)(const void *)((const char *)k + plain_counts[i].off));
	family(f, "wdrift_snapshots_dropped_total", "counter",
	       "Unfinished snapshots given up: idle past limits.pending_timeout, or to free memory.budget.");
	sample_u64(f, "wdrift_snapshots_dropped_total", (struct label[]){ { "reason", "idle" }, { 0 } },
		   k->dropped - (k->dropped_for_room < k->dropped ? k->dropped_for_room : k->dropped));
	sample_u64(f, "wdrift_snapshots_dropped_total", (struct label[]){ { "reason", "room" }, { 0 } },
		   k->dropped_for_room);
	one_u64(f, "wdrift_snapshots_pending", "gauge",
		"Snapshots being received or stored (status: pending).", pending);
	family(f, "wdrift_run_conflicts_total", "counter",
	       "Snapshots of a run refused as conflicts (other content at a step it has, or a re-run's "
	       "later step), kept in the "
	       "write-ahead log until runs rm: a re-run under the same name?; only runs that have some.");
	for (const struct run *r = s->runs; r; r = r->next)
		if (r->conflicts)
			sample_u64(f, "wdrift_run_conflicts_total", (struct label[]){ { "run", r->name }, { 0 } },
				   r->conflicts);
	family(f, "wdrift_errors_total", "counter",
	       "Error replies to publishers, by protocol error code (docs/protocol.md).");
	for (int e = 1; e < WIRE_CODE_COUNT; e++)
		sample_u64(f, "wdrift_errors_total",
			   (struct label[]){ { "code", wire_code_name((enum wire_code)e) }, { 0 } },
			   k->errors[e]);
	family(f, "wdrift_auth_handshakes_total", "counter", "CURVE handshakes, by outcome.");
	const struct { const char *name; uint64_t v; } au[] = {
		{ "accepted", k->auth.accepted }, { "unknown_key", k->auth.unknown_key },
		{ "no_curve", k->auth.no_curve }, { "bad_server_key", k->auth.bad_server_key },
		{ "other", k->auth.other },
	};
	for (size_t i = 0; i < sizeof(au) / sizeof(au[0]); i++)
		sample_u64(f, "wdrift_auth_handshakes_total",
			   (struct label[]){ { "result", au[i].name }, { 0 } }, au[i].v);
	family(f, "wdrift_queue_depth", "gauge",
	       "Work queued: snapshots waiting for the spool thread, comparisons for the compute thread.");
	sample_u64(f, "wdrift_queue_depth", (struct label[]){ { "queue", "spool" }, { 0 } },
		   c->spool ? spool_depth(c->spool) : 0);
	sample_u64(f, "wdrift_queue_depth", (struct label[]){ { "queue", "compute" }, { 0 } },
		   c->compute_depth);
	one_u64(f, "wdrift_spool_bytes", "gauge",
		"Bytes of the snapshot files kept in the spool (spool.retention.disk_budget bounds them).",
		c->spool_usage.bytes);
	one_u64(f, "wdrift_spool_files", "gauge", "Snapshot files kept in the spool.", c->spool_usage.files);
	one_u64(f, "wdrift_spool_disk_budget_bytes", "gauge", "spool.retention.disk_budget, in bytes.",
		(uint64_t)c->cfg->spool.retention.disk_budget);
	one_u64(f, "wdrift_retention_dropped_total", "counter",
		"Snapshot files retention removed since the daemon started (they stay durable: a re-send is "
		"a duplicate).", c->spool_usage.dropped);
	one_u64(f, "wdrift_memory_reserved_bytes", "gauge",
		"Bytes held for snapshots in flight.", s->reserved);
	one_u64(f, "wdrift_memory_budget_bytes", "gauge", "memory.budget, in bytes.", s->budget);
	one_u64(f, "wdrift_memory_kept_bytes", "gauge",
		"Bytes of stored snapshots' tensor buffers kept for the next ones, within memory.budget.",
		s->kept.bytes);
	one_u64(f, "wdrift_engine_spare_bytes", "gauge",
		"Bytes of freed sort keys and 16-bit counts the engine keeps for the next tensors, "
		"beside memory.budget.", wd_engine_spare_bytes());
	one_u64(f, "wdrift_memory_kept_reused_total", "counter",
		"Tensor buffers taken again from those kept, instead of fresh memory.", s->kept.reused);
	one_u64(f, "wdrift_memory_kept_freed_total", "counter",
		"Kept tensor buffers given back: for room within memory.budget, idle, or runs rm.",
		s->kept.freed);
	char why[1400];
	one_u64(f, "wdrift_config_pending", "gauge",
		"1 when the config file is not the config that runs: edited and not reloaded, or its "
		"reload refused (wdrift status says why).",
		c->config_file && config_file_pending(c->config_file, why, sizeof(why)) ? 1 : 0);
	family(f, "wdrift_compute_seconds_total", "counter",
	       "Seconds the compute thread spent comparing (loading, engine, logging the results).");
	sample(f, "wdrift_compute_seconds_total", NULL, k->compute_seconds);
}

/* --- drift: the latest summaries of each study's runs --- */

static int by_study_then_newest(const void *x, const void *y)
{
	const struct result_batch *a = *(const struct result_batch *const *)x;
	const struct result_batch *b = *(const struct result_batch *const *)y;
	int s = strcmp(a->study, b->study);

	return s ? s : (a->step < b->step) - (a->step > b->step);
}

/* The runs a study's config names besides the baseline: when as many are found, older
 * batches need no look. */
static const struct wd_config_study *study_named(const struct wd_config *cfg, const char *study)
{
	for (size_t i = 0; i < cfg->n_studies; i++)
		if (!strcmp(cfg->studies[i].name, study))
			return &cfg->studies[i];
	return NULL;
}

/* Is label one of b's study's proxies now (a trained one's, or its synthetic one's), with rows in b? */
static int proxy_now(const struct wd_config *cfg, const struct result_batch *b, const char *label)
{
	const struct wd_config_study *s = study_named(cfg, b->study);
	const char *run = s ? wd_study_proxy_run(s, label) : NULL;

	/* its rows gone (runs rm forgot its run): the ratios kept are to a run no longer there */
	return run && result_batch_has_run(b, run);
}

/* Is run one the study has rows of now: a candidate, a trained proxy's run, or its synthetic label? */
static int step_run(const struct wd_config_study *s, const char *run)
{
	const char *synthetic = wd_config_synthetic_label(s->synthetic_proxy);
	const char *role = wd_study_role(s, run, NULL);

	return (role && strcmp(role, "baseline")) || (synthetic && !strcmp(synthetic, run));
}

/*
 * For each (study, run) with summary rows in the kept results, those of its
 * newest step. Returns the array (*n entries, sorted by study), or NULL with
 * *n = 0 (none, or out of memory: the body then has no drift series).
 */
static struct latest *latest_rows(const struct control *c, size_t *n)
{
	const struct result_batch **order = malloc((c->n_results + 1) * sizeof(*order));
	struct latest *v = NULL;
	size_t cap = 0;

	*n = 0;
	if (!order)
		return NULL;
	for (size_t i = 0; i < c->n_results; i++)
		order[i] = c->results[i];
	qsort(order, c->n_results, sizeof(*order), by_study_then_newest);
	const struct wd_config_study *s = NULL;
	size_t want = 0, found = 0;	/* the study's runs now, and how many of them are found */
	for (size_t i = 0, first = 0; i < c->n_results; i++) {
		const struct result_batch *b = order[i];
		if (!i || strcmp(order[i - 1]->study, b->study)) {
			first = *n;
			s = study_named(c->cfg, b->study);
			want = s ? s->candidates.n + s->proxies.n +
				   (wd_config_synthetic_label(s->synthetic_proxy) != NULL) : SIZE_MAX;
			found = 0;
		} else if (found >= want) {
			continue;	/* every run of the study found in newer batches */
		}
		/*
		 * A study no longer configured (renamed or removed by a reload):
		 * no series, as `drift` has no such study (a trial's old name
		 * went on being exported, across restarts).
		 */
		if (!s)
			continue;
		/*
		 * Against another baseline than the study's now (a reload's typo,
		 * or a study pointed elsewhere): stale, as `drift` says; exported
		 * as current, they hid the typo from every rule (a trial).
		 */
		if (strcmp(b->baseline, s->baseline))
			continue;
		for (size_t r = 0; r < b->n_rows; r++) {
			const struct drift_row *row = &b->rows[r];
			if (row->kind < ROW_MEAN || row->kind > ROW_MAX)
				continue;
			size_t e = first;
			while (e < *n && strcmp(v[e].run, row->run))
				e++;
			if (e == *n) {
				struct latest *g = wd_grow(v, *n, &cap, sizeof(*v), 16);
				if (!g) {
					free(v);
					free(order);
					*n = 0;
					return NULL;
				}
				v = g;
				v[(*n)++] = (struct latest){ .b = b, .run = row->run };
				/* a former run's rows (kept beside a step computed again) do not count */
				found += s && step_run(s, row->run);
			}
			if (v[e].b == b)
				v[e].sum[row->kind - ROW_MEAN] = row;
		}
	}
	free(order);
	return v;
}

/*
 * The run's part in the study now: "candidate" or "proxy", or "former" for
 * one a reload took out of it (its rows are from before), so that a panel
 * or rule on role="candidate" does not show a run the study no longer has.
 */
static const char *role_name(const struct wd_config *cfg, const char *study, const char *run)
{
	for (size_t i = 0; i < cfg->n_studies; i++) {
		const struct wd_config_study *s = &cfg->studies[i];
		if (strcmp(s->name, study))
			continue;
		const char *role = wd_study_role(s, run, NULL);
		const char *synthetic = wd_config_synthetic_label(s->synthetic_proxy);
		if (synthetic && !strcmp(synthetic, run))	/* its rows carry the label as their run */
			return "proxy";
		return role && strcmp(role, "baseline") ? role : "former";
	}
	return "former";
}

/*
 * Per configured study: whether it has results against its baseline now,
 * how many runs it names, and how many of them have sent nothing at all (a
 * reload's typo, or a job not started): what `status` names, for rules
 * (docs/metrics.md).
 */
static void study_series(FILE *f, const struct control *c)
{
	family(f, "wdrift_study_results", "gauge",
	       "1 when the study has results against its baseline now, else 0 (wdrift studies says why).");
	for (size_t i = 0; i < c->cfg->n_studies; i++)
		sample(f, "wdrift_study_results", (struct label[]){ { "study", c->cfg->studies[i].name }, { 0 } },
		       control_has_current_results(c, &c->cfg->studies[i]));
	family(f, "wdrift_study_runs", "gauge",
	       "The study's runs named now: its baseline, candidates and trained proxies.");
	for (size_t i = 0; i < c->cfg->n_studies; i++) {
		const struct wd_config_study *st = &c->cfg->studies[i];
		sample_u64(f, "wdrift_study_runs", (struct label[]){ { "study", st->name }, { 0 } },
			   1 + st->candidates.n + st->proxies.n);
	}
	family(f, "wdrift_study_runs_silent", "gauge",
	       "The study's runs named now (baseline, candidates, trained proxies) that have sent no "
	       "snapshot at all: a typo in the config, or a job not started.");
	for (size_t i = 0; i < c->cfg->n_studies; i++)
		sample_u64(f, "wdrift_study_runs_silent", (struct label[]){ { "study", c->cfg->studies[i].name },
			   { 0 } }, study_silent_count(c->st, &c->cfg->studies[i]));
	family(f, "wdrift_study_runs_ahead", "gauge",
	       "The study's compared runs with snapshots past its baseline's latest step, which no result "
	       "holds until the baseline sends them: a baseline that stopped, or lags (wdrift drift: ahead).");
	for (size_t i = 0; i < c->cfg->n_studies; i++)
		sample_u64(f, "wdrift_study_runs_ahead", (struct label[]){ { "study", c->cfg->studies[i].name },
			   { 0 } }, study_ahead(c->cfg, c->st, &c->cfg->studies[i], NULL, 0));
	family(f, "wdrift_study_steps_stuck", "gauge",
	       "Snapshots of the study's runs held up in intake now: a step that waits for a rank the "
	       "daemon's log says died or lags, or had no new element for a minute (wdrift drift: stuck).");
	for (size_t i = 0; i < c->cfg->n_studies; i++)
		sample_u64(f, "wdrift_study_steps_stuck", (struct label[]){ { "study", c->cfg->studies[i].name },
			   { 0 } }, study_stuck(c->cfg, c->st, &c->cfg->studies[i], NULL, 0));
}

static void drift_series(FILE *f, const struct wd_config *cfg, const struct latest *v, size_t n)
{
	family(f, "wdrift_drift_step", "gauge",
	       "Step of the latest results of the run in the study (the baseline's step).");
	for (size_t i = 0; i < n; i++) {
		sample(f, "wdrift_drift_step", (struct label[]){ { "study", v[i].b->study },
			{ "run", v[i].run }, { "role", role_name(cfg, v[i].b->study, v[i].run) }, { 0 } },
		       (double)v[i].b->step);
	}
	family(f, "wdrift_drift_w1", "gauge",
	       "W1 distance of the run's weights from the baseline's at its latest step, summarized "
	       "over tensors: weighted (mean by element count), median or max.");
	for (size_t i = 0; i < n; i++)
		for (int s = 0; s < 3; s++)
			if (v[i].sum[s])
				sample(f, "wdrift_drift_w1", (struct label[]){ { "study", v[i].b->study },
					{ "run", v[i].run }, { "role", role_name(cfg, v[i].b->study, v[i].run) },
					{ "summary", summary_name[s] }, { 0 } }, v[i].sum[s]->w1);
	family(f, "wdrift_drift_nonfinite", "gauge",
	       "NaN and infinite values in the run's weights at its latest step.");
	for (size_t i = 0; i < n; i++) {
		const struct drift_row *r = v[i].sum[0] ? v[i].sum[0] : v[i].sum[1] ? v[i].sum[1] : v[i].sum[2];
		const char *kinds[3] = { "nan", "posinf", "neginf" };
		uint64_t counts[3] = { r->nan, r->posinf, r->neginf };
		for (int k = 0; k < 3; k++)
			sample_u64(f, "wdrift_drift_nonfinite", (struct label[]){ { "study", v[i].b->study },
				   { "run", v[i].run }, { "kind", kinds[k] }, { 0 } }, counts[k]);
	}
}

/*
 * The latest complete step of each configured study (control_latest_complete:
 * every run of the study compared there, wd_study_step_runs), NULL-free, in
 * config order; *n of them. A candidate ahead of its proxy has no ratio at
 * its own latest step: the ratios come from here, so that they are numbers
 * whenever the study has a complete step past step 0.
 */
static const struct result_batch **complete_batches(const struct control *c, size_t *n)
{
	const struct result_batch **v = calloc(c->cfg->n_studies + 1, sizeof(*v));

	*n = 0;
	for (size_t i = 0; v && i < c->cfg->n_studies; i++)
		if ((v[*n] = control_latest_complete(c, c->cfg->studies[i].name)))
			(*n)++;
	return v;
}

static void complete_series(FILE *f, const struct wd_config *cfg, const struct result_batch *const *v,
			    size_t n)
{
	family(f, "wdrift_drift_complete_step", "gauge",
	       "The study's latest complete step (the baseline's): every run of the study compared "
	       "there. wdrift_drift_complete_w1 and wdrift_drift_ratio are of this step.");
	for (size_t i = 0; i < n; i++)
		sample(f, "wdrift_drift_complete_step", (struct label[]){ { "study", v[i]->study }, { 0 } },
		       (double)v[i]->step);
	family(f, "wdrift_drift_complete_w1", "gauge",
	       "W1 distance of the run's weights from the baseline's at the study's latest complete "
	       "step, summarized over tensors: weighted (mean by element count), median or max.");
	for (size_t i = 0; i < n; i++)
		for (size_t r = 0; r < v[i]->n_rows; r++) {
			const struct drift_row *row = &v[i]->rows[r];
			if (row->kind >= ROW_MEAN && row->kind <= ROW_MAX)
				sample(f, "wdrift_drift_complete_w1", (struct label[]){ { "study", v[i]->study },
					{ "run", row->run }, { "role", role_name(cfg, v[i]->study, row->run) },
					{ "summary", summary_name[row->kind - ROW_MEAN] }, { 0 } }, row->w1);
		}
	family(f, "wdrift_drift_ratio", "gauge",
	       "A candidate's W1 over a proxy's, tensor by tensor, summarized over tensors, at the "
	       "study's latest complete step; above 1: it drifts more than the proxy. NaN where the "
	       "proxy's W1 is 0 (a complete step 0).");
	for (size_t i = 0; i < n; i++) {
		int now[DRIFTLOG_MAX_PROXIES];
		for (size_t p = 0; p < v[i]->n_proxies; p++)
			now[p] = proxy_now(cfg, v[i], v[i]->proxies[p]);
		for (size_t r = 0; r < v[i]->n_rows; r++) {
			const struct drift_row *row = &v[i]->rows[r];
			/* a candidate a reload took out (former) has no ratio now: a rule went on firing on it */
			if (row->kind < ROW_MEAN || row->kind > ROW_MAX || row->role != ROLE_CANDIDATE ||
			    strcmp(role_name(cfg, v[i]->study, row->run), "candidate"))
				continue;
			for (size_t p = 0; p < v[i]->n_proxies; p++) {
				if (!now[p])
					continue;	/* a label a reload took out, or a run runs rm forgot */
				sample(f, "wdrift_drift_ratio", (struct label[]){ { "study", v[i]->study },
					{ "run", row->run }, { "proxy", v[i]->proxies[p] },
					{ "summary", summary_name[row->kind - ROW_MEAN] }, { 0 } }, row->ratio[p]);
			}
		}
	}
}

/* metrics.per_tensor: each tensor's W1 at its run's latest step. */
static void tensor_w1_series(FILE *f, const struct latest *v, size_t n)
{
	family(f, "wdrift_tensor_w1", "gauge", "W1 distance of one tensor from the baseline's, "
	       "at the run's latest step (metrics.per_tensor).");
	for (size_t i = 0; i < n; i++) {
		const struct result_batch *b = v[i].b;
		for (size_t r = 0; r < b->n_rows; r++) {
			const struct drift_row *row = &b->rows[r];
			if (row->kind == ROW_TENSOR && !strcmp(row->run, v[i].run))
				sample(f, "wdrift_tensor_w1", (struct label[]){ { "study", b->study },
					{ "run", row->run }, { "tensor", row->tensor }, { 0 } }, row->w1);
		}
	}
}

/* metrics.per_tensor: each tensor's ratio at the study's latest complete step, as wdrift_drift_ratio. */
static void tensor_ratio_series(FILE *f, const struct wd_config *cfg, const struct result_batch *const *v,
				size_t n)
{
	family(f, "wdrift_tensor_ratio", "gauge", "A candidate's W1 over a proxy's, for one tensor, "
	       "at the study's latest complete step (metrics.per_tensor).");
	for (size_t i = 0; i < n; i++) {
		int now[DRIFTLOG_MAX_PROXIES];
		for (size_t p = 0; p < v[i]->n_proxies; p++)
			now[p] = proxy_now(cfg, v[i], v[i]->proxies[p]);
		for (size_t r = 0; r < v[i]->n_rows; r++) {
			const struct drift_row *row = &v[i]->rows[r];
			if (row->kind != ROW_TENSOR || row->role != ROLE_CANDIDATE ||
			    strcmp(role_name(cfg, v[i]->study, row->run), "candidate"))
				continue;	/* as wdrift_drift_ratio: candidates now only */
			for (size_t p = 0; p < v[i]->n_proxies; p++)
				if (now[p])
					sample(f, "wdrift_tensor_ratio", (struct label[]){ { "study", v[i]->study },
						{ "run", row->run }, { "tensor", row->tensor },
						{ "proxy", v[i]->proxies[p] }, { 0 } }, row->ratio[p]);
		}
	}
}

/* --- alerts --- */

/* The alert families, in the order of alert_pass.which. */
static const struct {
	const char *name, *type, *help;
} alert_families[] = {
	{ "wdrift_alert_rule_state", "gauge",
	  "An alert rule's state: the highest of its instances', 0 ok, 1 pending, 2 firing." },
	{ "wdrift_alert_threshold", "gauge", "An alert rule's threshold: it fires above it (stalled: seconds)." },
	{ "wdrift_alert_state", "gauge",
	  "One instance of an alert rule (a candidate run; and a tensor for scope tensors): 0 ok, 1 pending, "
	  "2 firing." },
	{ "wdrift_alert_value", "gauge", "The value an alert instance last compared with its rule's threshold." },
	/* a glob that matches nothing leaves its rule "ok" for ever: said (a trial's rule_state read 0) */
	{ "wdrift_alert_unmatched", "gauge",
	  "1 when a rule has nothing to judge on a candidate at its latest snapshot: a scope tensors rule's glob "
	  "matched none of its tensors, or none of the tensors it takes had an element compared (named otherwise "
	  "than the baseline's); it cannot fire there (wdrift alerts says which run and step)." },
	/* a pager that fails was said in the daemon's log alone (an ops trial) */
	{ "wdrift_alert_command_runs_total", "counter",
	  "Runs of an alert rule's command since the daemon started (those that could not start too)." },
	{ "wdrift_alert_command_failures_total", "counter",
	  "Runs of an alert rule's command that failed since the daemon started: not started, an exit status "
	  "other than 0, a signal, or past its command_timeout (wdrift alerts says the latest)." },
};

struct alert_pass {
	FILE *f;
	int which;				/* 0 rule state, 1 threshold, 2 instance state, 3 value, 4 unmatched,
						   5 command runs, 6 command failures */
	const struct wd_config_alert *cur;	/* pass 0: the rule being gathered */
	int max;
};

static void rule_state_flush(struct alert_pass *p)
{
	if (p->cur)
		sample(p->f, alert_families[0].name, (struct label[]){ { "alert", p->cur->name },
			{ "study", p->cur->study }, { "severity", wd_config_severity_name(p->cur->severity) },
			{ 0 } }, p->max);
}

static void alert_visit(void *ctx, const struct alert_view *v)
{
	struct alert_pass *p = ctx;
	const struct wd_config_alert *a = v->rule;

	switch (p->which) {
	case 0:
		if (a != p->cur) {
			rule_state_flush(p);
			p->cur = a;
			p->max = 0;
		}
		if (v->run && v->state > p->max)
			p->max = v->state;
		return;
	case 4:
		if (p->cur == a || a->metric == WD_METRIC_STALLED)
			return;	/* once per rule, of those judged on results */
		p->cur = a;
		sample(p->f, alert_families[4].name, (struct label[]){ { "alert", a->name },
			{ "study", a->study }, { 0 } }, v->unmatched);
		return;
	case 5:
	case 6:
		if (p->cur == a || !a->command)
			return;	/* once per rule, of those with a command */
		p->cur = a;
		sample(p->f, alert_families[p->which].name, (struct label[]){ { "alert", a->name },
			{ "study", a->study }, { 0 } }, (double)(p->which == 5 ? v->commands_run : v->commands_failed));
		return;
	case 1:
		if (v->run && p->cur == a)
			return;	/* once per rule */
		p->cur = a;
		sample(p->f, alert_families[1].name, (struct label[]){ { "alert", a->name },
			{ "study", a->study }, { "metric", wd_config_metric_name(a->metric) },
			{ "scope", a->metric == WD_METRIC_STALLED ? "none" : wd_config_scope_name(a->scope) },
			{ a->proxy ? "proxy" : NULL, a->proxy }, { 0 } }, a->threshold);
		return;
	default: {
		if (!v->run)
			return;
		struct label l[5] = { { "alert", a->name }, { "study", a->study }, { "run", v->run },
				      { v->tensor ? "tensor" : NULL, v->tensor }, { 0 } };
		if (p->which == 2)
			sample(p->f, alert_families[2].name, l, v->state);
		else if (!isnan(v->value))	/* no value yet (a ratio waits for its proxy): no sample, not 0 */
			sample(p->f, alert_families[3].name, l, v->value);
	}
	}
}

static void alert_series(FILE *f, const struct alerts *a)
{
	for (int k = 0; k < (int)(sizeof(alert_families) / sizeof(alert_families[0])); k++) {
		struct alert_pass p = { .f = f, .which = k };
		family(f, alert_families[k].name, alert_families[k].type, alert_families[k].help);
		alerts_each(a, alert_visit, &p);
		if (k == 0)
			rule_state_flush(&p);	/* the last rule gathered */
	}
}

char *metrics_render(const struct control *c, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		return NULL;
	daemon_series(f, c);
	struct latest *v = latest_rows(c, &n);
	size_t n_complete = 0;
	const struct result_batch **done = complete_batches(c, &n_complete);
	study_series(f, c);
	drift_series(f, c->cfg, v, n);
	complete_series(f, c->cfg, done, n_complete);
	if (c->cfg->metrics.per_tensor) {
		tensor_w1_series(f, v, n);
		tensor_ratio_series(f, c->cfg, done, n_complete);
	}
	free(done);
	free(v);
	if (c->alerts)
		alert_series(f, c->alerts);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
