/*
 * test_alerts.c: the lifecycle of an alert rule (daemon/alerts.c, the
 * "Alerts" section of docs/config.md), driven as the main thread drives it:
 * result batches in (alerts_on_results), the instances read back as the
 * control socket reads them (alerts_json), each transition seen as the
 * events socket sees it (the sink). No daemon, no sockets, no spool.
 * A rule with `for: N` goes inactive -> pending (counting) -> firing at the
 * Nth consecutive step above its threshold, a step at or below resets it,
 * firing resolves; a step computed again counts once, an older one not at
 * all, a NaN value is no data; the scopes max, median, mean and a per-tensor
 * glob each evaluate the value they name; stalled runs on the clock.
 * Restarts: the "alert" records the store was given, decoded and handed to
 * a new alerts object as a start-up's replay does, bring back firing,
 * pending and resolved instances, which then fire no second time; a rule
 * whose meaning changed starts afresh. A rule's scope and proxy are listed.
 *
 * now_mono and now_wall are defined here, not linked from state.o:
 * alerts_tick reads them, and the test sets the clocks.
 */
#include <math.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "alerts.h"
#include "compute.h"
#include "config.h"
#include "harness.h"
#include "logging.h"
#include "records.h"
#include "state.h"

static double clock_now = 1000.0;

double now_mono(void)
{
	return clock_now;
}

static double wall_clock = 1790000000.0;

double now_wall(void)
{
	return wall_clock;
}

/* What the sink was given: each transition's topic and JSON, in order. */
static struct event {
	char topic[64];
	char state[16], run[32], tensor[64], reason[160];
	double value;
	long long step;
} events[64];
static int n_events;

static void sink(void *ctx, const char *topic, const char *json)
{
	(void)ctx;
	if (n_events >= 64)
		return;
	struct event *e = &events[n_events++];
	json_t *o = json_loads(json, 0, NULL);
	json_t *v = json_object_get(o, "value"), *t = json_object_get(o, "tensor");

	snprintf(e->topic, sizeof(e->topic), "%s", topic);
	snprintf(e->state, sizeof(e->state), "%s", json_string_value(json_object_get(o, "state")));
	snprintf(e->run, sizeof(e->run), "%s", json_string_value(json_object_get(o, "run")));
	snprintf(e->tensor, sizeof(e->tensor), "%s", t ? json_string_value(t) : "");
	json_t *why = json_object_get(o, "reason");
	snprintf(e->reason, sizeof(e->reason), "%s", why ? json_string_value(why) : "");
	e->value = json_is_number(v) ? json_number_value(v) : NAN;
	e->step = (long long)json_integer_value(json_object_get(o, "step"));
	json_decref(o);
}

/* One instance as `wdrift alerts` sees it; state "" when there is none. */
struct seen {
	char state[16];
	double value;
	long long step, above;
};

static struct seen instance(const struct alerts *a, const char *rule, const char *run,
			    const char *tensor)
{
	struct seen s = { "", NAN, -1, -1 };
	char *text = alerts_json(a);
	json_t *o = text ? json_loads(text, 0, NULL) : NULL;
	json_t *rules = json_object_get(o, "alerts"), *r, *i;
	size_t k, j;

	json_array_foreach(rules, k, r) {
		if (strcmp(json_string_value(json_object_get(r, "name")), rule))
			continue;
		json_array_foreach(json_object_get(r, "instances"), j, i) {
			json_t *t = json_object_get(i, "tensor"), *v = json_object_get(i, "value");
			if (strcmp(json_string_value(json_object_get(i, "run")), run) ||
			    (tensor ? !t || strcmp(json_string_value(t), tensor) : t != NULL))
				continue;
			snprintf(s.state, sizeof(s.state), "%s", json_string_value(json_object_get(i, "state")));
			s.value = json_is_number(v) ? json_number_value(v) : NAN;
			s.step = json_is_integer(json_object_get(i, "step")) ?
				 (long long)json_integer_value(json_object_get(i, "step")) : -2;	/* null */
			s.above = (long long)json_integer_value(json_object_get(i, "above"));
		}
	}
	json_decref(o);
	free(text);
	return s;
}

/* How many instances rule has. */
static size_t n_instances(const struct alerts *a, const char *rule)
{
	char *text = alerts_json(a);
	json_t *o = text ? json_loads(text, 0, NULL) : NULL, *r;
	size_t k, n = 0;

	json_array_foreach(json_object_get(o, "alerts"), k, r)
		if (!strcmp(json_string_value(json_object_get(r, "name")), rule))
			n = json_array_size(json_object_get(r, "instances"));
	json_decref(o);
	free(text);
	return n;
}

/* A batch of study s at step, its rows added by row(). */
static struct result_batch batch;
static struct drift_row rows[512];

static void start(const char *study, int64_t step)
{
	memset(&batch, 0, sizeof(batch));
	memset(rows, 0, sizeof(rows));
	batch.study = (char *)study;
	batch.step = step;
	batch.baseline = (char *)"base";
	batch.proxies[0] = (char *)"p";
	batch.n_proxies = 1;
	batch.rows = rows;
}

/* A tensor row of run (a candidate, or the proxy "px") with its w1 and ratio to p. */
static void row(const char *run, const char *tensor, uint64_t numel, double w1, double ratio)
{
	struct drift_row *r = &rows[batch.n_rows++];
	r->step = batch.step;
	r->kind = ROW_TENSOR;
	r->role = strcmp(run, "px") ? ROLE_CANDIDATE : ROLE_PROXY;
	r->run = run;
	r->tensor = tensor;
	r->numel = numel;
	r->w1 = w1;
	r->ratio[0] = ratio;
}

/* One step of candidate c1 with one tensor whose w1 is w1. */
static void step_w1(struct alerts *a, int64_t step, double w1)
{
	start("s", step);
	row("c1", "t", 10, w1, NAN);
	alerts_on_results(a, &batch);
}

static const char yaml[] =
	"studies:\n"
	"  - {name: s, baseline: base, candidates: [c1, c2], proxies: {p: px}}\n"
	"  - {name: other, baseline: base, candidates: [c1]}\n"
	"alerts:\n"
	"  - {name: for3, study: s, metric: w1, threshold: 0.5, for: 3}\n"
	"  - {name: max, study: s, metric: w1, scope: max, threshold: 9}\n"
	"  - {name: median, study: s, metric: w1, scope: median, threshold: 2.5}\n"
	"  - {name: mean, study: s, metric: w1, scope: mean, threshold: 5}\n"
	"  - {name: attn, study: s, metric: w1, scope: tensors, tensors: 'layers.*.attn', threshold: 1}\n"
	"  - {name: ratio, study: s, metric: ratio, proxy: p, threshold: 1}\n"
	"  - {name: quiet, study: s, metric: stalled, threshold: 60}\n";

static struct alerts *fresh(struct wd_config *cfg)
{
	struct alerts *a = alerts_new(sink, NULL);
	if (a)
		alerts_set_config(a, cfg);
	n_events = 0;
	return a;
}

/* The store: each "alert" record kept in order, as the WAL keeps them. */
static char *stored[512];
static int n_stored, store_rc;

static int store(void *ctx, const char *payload)
{
	(void)ctx;
	if (store_rc < 0)
		return store_rc;	/* a full disk, say */
	if (n_stored < 512)
		stored[n_stored++] = strdup(payload);
	return 0;
}

static void stored_clear(void)
{
	for (int k = 0; k < n_stored; k++)
		free(stored[k]);
	n_stored = 0;
}

/* A restart: a new alerts object for cfg, the stored records replayed into it. */
static struct alerts *restart(const struct wd_config *cfg)
{
	struct alerts *a = alerts_new(sink, NULL);
	struct record r;
	char err[256];

	alerts_set_config(a, cfg);
	for (int k = 0; k < n_stored; k++) {
		if (record_decode(stored[k], strlen(stored[k]), &r, err, sizeof(err)) == 0 &&
		    r.kind == RECORD_ALERT)
			alerts_restore(a, r.alert);
		else
			printf("# record %d does not decode as an alert record: %s\n", k, err);
		record_release(&r);
	}
	alerts_set_store(a, store, NULL);
	alerts_restore_done(a);
	n_events = 0;
	return a;
}

/* fresh(), its records kept by store() from none, as the WAL keeps them (restart() reads them). */
static struct alerts *fresh_stored(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);

	stored_clear();
	store_rc = 0;
	if (a)
		alerts_set_store(a, store, NULL);
	return a;
}

/* for: 3 on one candidate, step by step. */
static void test_for(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);
	struct seen s;

	step_w1(a, 1, 0.9);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "pending") && s.above == 1 && s.step == 1 && s.value == 0.9,
	      "a first step above the threshold makes it pending, 1 of 3 (%s, %lld)", s.state, s.above);
	step_w1(a, 2, 0.8);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "pending") && s.above == 2, "a second one: pending, 2 of 3 (%s, %lld)",
	      s.state, s.above);
	step_w1(a, 3, 0.5);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "inactive") && s.above == 0,
	      "a step at the threshold resets it: inactive, 0 (%s, %lld)", s.state, s.above);
	CHECK(n_events == 0, "pending and back sends no event (%d)", n_events);

	step_w1(a, 4, 0.7);
	step_w1(a, 4, 0.7);	/* step 4 computed again, when another run arrived at it */
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "pending") && s.above == 1,
	      "a step computed again counts once (%s, %lld)", s.state, s.above);
	step_w1(a, 5, 0.7);
	CHECK(n_events == 0, "still no event at 2 of 3 (%d)", n_events);
	step_w1(a, 6, 0.75);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.above == 3 && s.step == 6,
	      "the third consecutive step above fires it (%s, %lld, step %lld)", s.state, s.above, s.step);
	CHECK(n_events == 1 && !strcmp(events[0].topic, "alert.for3") &&
	      !strcmp(events[0].state, "firing") && !strcmp(events[0].run, "c1") &&
	      events[0].value == 0.75 && events[0].step == 6,
	      "one event: alert.for3 firing, run c1, value 0.75 at step 6 (%d: %s %s %g %lld)", n_events,
	      events[0].topic, events[0].state, events[0].value, events[0].step);
	step_w1(a, 7, 2.0);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.above == 4 && n_events == 1,
	      "firing stays firing, with no second event (%s, %lld, %d events)", s.state, s.above, n_events);
	step_w1(a, 5, 0.1);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.step == 7 && s.value == 2.0 && n_events == 1,
	      "an older step, computed late, changes nothing (%s, step %lld)", s.state, s.step);
	step_w1(a, 8, NAN);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.step == 7 && s.above == 4 && n_events == 1,
	      "a NaN value is no data: it neither resolves nor counts (%s, step %lld)", s.state, s.step);
	step_w1(a, 8, 0.2);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "inactive") && s.above == 0 && s.value == 0.2,
	      "the first step at or below resolves it (%s, %lld)", s.state, s.above);
	CHECK(n_events == 2 && !strcmp(events[1].state, "resolved") && events[1].step == 8 &&
	      events[1].value == 0.2, "one event: resolved at step 8, value 0.2 (%d: %s %lld)", n_events,
	      events[1].state, events[1].step);
	step_w1(a, 8, 0.9);	/* step 8 again, now above: its evaluation is redone from step 7's */
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.above == 5 && n_events == 3 &&
	      !strcmp(events[2].state, "firing"),
	      "step 8 computed again above: redone from step 7's count, firing again (%s, %lld)",
	      s.state, s.above);

	/* what the rule does not see */
	start("other", 9);
	row("c1", "t", 10, 5.0, NAN);
	alerts_on_results(a, &batch);
	start("s", 9);
	row("px", "t", 10, 5.0, NAN);
	alerts_on_results(a, &batch);
	s = instance(a, "for3", "c1", NULL);
	CHECK(s.step == 8 && n_instances(a, "for3") == 1,
	      "another study's batch and a proxy's rows are not evaluated (step %lld, %zu instances)",
	      s.step, n_instances(a, "for3"));
	start("s", 9);
	row("c2", "t", 10, 5.0, NAN);
	alerts_on_results(a, &batch);
	CHECK(!strcmp(instance(a, "for3", "c2", NULL).state, "pending") &&
	      !strcmp(instance(a, "for3", "c1", NULL).state, "firing"),
	      "each candidate has its own instance: c2 pending, c1 still firing");
	alerts_free(&a);
	CHECK(a == NULL, "alerts_free clears the pointer");
}

/* max, median and the weighted mean over one snapshot's tensors; NaN left out. */
static void test_scopes(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);

	start("s", 1);
	row("c1", "a", 1, 1.0, NAN);
	row("c1", "b", 1, 2.0, NAN);
	row("c1", "c", 2, 10.0, NAN);
	row("c1", "d", 100, NAN, NAN);	/* no W1: left out of all three */
	row("c2", "a", 1, 100.0, NAN);	/* another candidate: its own values */
	alerts_on_results(a, &batch);
	struct seen mx = instance(a, "max", "c1", NULL), md = instance(a, "median", "c1", NULL),
		    mn = instance(a, "mean", "c1", NULL);
	CHECK(mx.value == 10.0 && !strcmp(mx.state, "firing"),
	      "scope max: 10 of {1, 2, 10}, above 9: firing (%g, %s)", mx.value, mx.state);
	CHECK(md.value == 2.0 && !strcmp(md.state, "inactive"),
	      "scope median: 2 of {1, 2, 10}, not above 2.5: inactive (%g, %s)", md.value, md.state);
	CHECK(close_to(mn.value, 23.0 / 4.0, 1e-15, 0) && !strcmp(mn.state, "firing"),
	      "scope mean: weighted by elements, (1 + 2 + 2 * 10) / 4 = 5.75, above 5: firing (%g, %s)",
	      mn.value, mn.state);
	CHECK(instance(a, "max", "c2", NULL).value == 100.0 && instance(a, "median", "c2", NULL).value == 100.0,
	      "c2's summary is its own one tensor's 100");

	start("s", 2);
	row("c1", "a", 1, 1.0, NAN);
	row("c1", "b", 1, 4.0, NAN);
	alerts_on_results(a, &batch);
	md = instance(a, "median", "c1", NULL);
	CHECK(md.value == 2.5 && !strcmp(md.state, "inactive"),
	      "an even count's median is the mean of the middle two: 2.5, not above 2.5 (%g)", md.value);
	/* step 1 fired max and mean for c1; max, median and mean for c2 */
	CHECK(n_events == 7 && !strcmp(events[5].topic, "alert.max") && !strcmp(events[5].state, "resolved") &&
	      !strcmp(events[6].topic, "alert.mean") && !strcmp(events[6].state, "resolved") &&
	      events[6].value == 2.5, "step 2 resolves c1's max (4) and mean (2.5): 5 events, then these 2 "
	      "(%d)", n_events);
	alerts_free(&a);
}

/* scope: tensors with a glob: one instance per matching tensor, each with its own value. */
static void test_tensors(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);

	start("s", 1);
	row("c1", "layers.0.attn", 10, 3.0, NAN);
	row("c1", "layers.0.mlp", 10, 50.0, NAN);
	row("c1", "layers.1.attn", 10, 0.5, NAN);
	row("c1", "embed", 10, 99.0, NAN);
	alerts_on_results(a, &batch);
	struct seen t0 = instance(a, "attn", "c1", "layers.0.attn"),
		    t1 = instance(a, "attn", "c1", "layers.1.attn");
	CHECK(n_instances(a, "attn") == 2, "only the 2 tensors the glob matches have instances (%zu)",
	      n_instances(a, "attn"));
	CHECK(t0.value == 3.0 && !strcmp(t0.state, "firing"), "layers.0.attn: 3, above 1: firing (%g, %s)",
	      t0.value, t0.state);
	CHECK(t1.value == 0.5 && !strcmp(t1.state, "inactive"), "layers.1.attn: 0.5: inactive (%g, %s)",
	      t1.value, t1.state);
	int attn = 0, named = 0;
	for (int i = 0; i < n_events; i++) {
		attn += !strcmp(events[i].topic, "alert.attn");
		named += !strcmp(events[i].topic, "alert.attn") && !strcmp(events[i].tensor, "layers.0.attn");
	}
	CHECK(attn == 1 && named == 1, "one attn event, firing, naming tensor layers.0.attn (%d, %d)",
	      attn, named);

	start("s", 2);
	row("c1", "layers.0.attn", 10, NAN, NAN);
	row("c1", "layers.1.attn", 10, 7.0, NAN);
	alerts_on_results(a, &batch);
	t0 = instance(a, "attn", "c1", "layers.0.attn");
	t1 = instance(a, "attn", "c1", "layers.1.attn");
	CHECK(!strcmp(t0.state, "firing") && t0.step == 1 && t0.value == 3.0,
	      "a tensor whose value is NaN keeps its state and step (%s, %lld)", t0.state, t0.step);
	CHECK(!strcmp(t1.state, "firing") && t1.step == 2, "the other fires on its own (%s)", t1.state);
	alerts_free(&a);
}

/* ratio to a proxy: NaN until the proxy's snapshot arrives, then the step is evaluated. */
static void test_ratio_nan(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);

	start("s", 1);
	row("c1", "t", 10, 1.0, NAN);
	alerts_on_results(a, &batch);
	struct seen s = instance(a, "ratio", "c1", NULL);
	CHECK(!strcmp(s.state, "inactive") && s.step == -2 && isnan(s.value) && s.above == 0 && n_events == 0,
	      "a ratio before its proxy arrives is NaN: never evaluated, value and step null, not 0 (a trial "
	      "read 'value 0, step 0') (%s, step %lld, value %g)", s.state, s.step, s.value);
	start("s", 1);
	row("c1", "t", 10, 1.0, 2.0);
	row("px", "t", 10, 0.5, NAN);
	alerts_on_results(a, &batch);
	s = instance(a, "ratio", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.value == 2.0 && s.step == 1,
	      "the proxy arrived, step 1 again: ratio 2 fires (%s, %g)", s.state, s.value);
	alerts_free(&a);
}

/* stalled: seconds since the run's last snapshot, on the monotonic clock. */
static void test_stalled(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);
	struct state st;
	struct run c1, base;
	int64_t durable[] = { 3, 4 };

	memset(&st, 0, sizeof(st));
	memset(&c1, 0, sizeof(c1));
	memset(&base, 0, sizeof(base));
	base.name = (char *)"base";
	base.last_seen = 10.0;
	c1.name = (char *)"c1";
	c1.durable = durable;
	c1.n_durable = 2;
	c1.last_seen = 1000.0;
	c1.next = &base;
	st.runs = &c1;

	clock_now = 1030.0;
	alerts_tick(a, &st);
	struct seen s = instance(a, "quiet", "c1", NULL);
	CHECK(!strcmp(s.state, "inactive") && s.value == 30.0 && s.step == 4,
	      "30 s after c1's last snapshot, under 60: inactive, at its last step 4 (%s, %g, %lld)",
	      s.state, s.value, s.step);
	CHECK(n_instances(a, "quiet") == 1, "the baseline and c2, never seen, have no instance (%zu)",
	      n_instances(a, "quiet"));
	clock_now = 1061.0;
	alerts_tick(a, &st);
	s = instance(a, "quiet", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && n_events == 1 && !strcmp(events[0].topic, "alert.quiet"),
	      "61 s: firing at once, whatever `for` (%s, %d events)", s.state, n_events);
	c1.last_seen = 1062.0;
	clock_now = 1063.0;
	alerts_tick(a, &st);
	s = instance(a, "quiet", "c1", NULL);
	CHECK(!strcmp(s.state, "inactive") && n_events == 2 && !strcmp(events[1].state, "resolved"),
	      "a new snapshot resolves it (%s, %d events)", s.state, n_events);
	alerts_free(&a);

	/*
	 * After a restart c1 is known from the WAL alone (last_seen 0): its
	 * clock is the wall time of its last durable snapshot, so a run that
	 * died while the daemon was down still goes stalled.
	 */
	a = fresh(cfg);
	c1.last_seen = 0;
	c1.durable_wall = wall_clock - 30.0;
	alerts_tick(a, &st);
	s = instance(a, "quiet", "c1", NULL);
	CHECK(!strcmp(s.state, "inactive") && s.value == 30.0 && n_events == 0,
	      "known from the WAL, 30 s after its last durable snapshot: inactive (%s, %g)", s.state, s.value);
	wall_clock += 31.0;
	alerts_tick(a, &st);
	s = instance(a, "quiet", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.value == 61.0 && n_events == 1,
	      "61 s: firing, though not heard from since the start (%s, %g, %d events)", s.state, s.value,
	      n_events);
	c1.durable_wall = 0;	/* a WAL older than "at": no clock */
	alerts_free(&a);
	a = fresh(cfg);
	alerts_tick(a, &st);
	CHECK(n_instances(a, "quiet") == 0, "no time in the WAL: no clock, no instance (%zu)",
	      n_instances(a, "quiet"));
	alerts_free(&a);
}

/* A reload keeps the instances of rules that keep their name and meaning. */
static void test_reload(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);
	struct wd_config changed;
	char err[512];

	step_w1(a, 1, 0.9);
	alerts_set_config(a, cfg);
	struct seen s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "pending") && s.above == 1, "the same config again keeps pending 1 of 3 (%s, %lld)",
	      s.state, s.above);
	/* the same config, for3's metric w1 made rel_l2 */
	const char *w1 = strstr(yaml, "metric: w1, threshold: 0.5");
	char other[sizeof(yaml) + 16];
	snprintf(other, sizeof(other), "%.*smetric: rel_l2%s", (int)(w1 - yaml), yaml,
		 w1 + strlen("metric: w1"));
	int ok = wd_config_load_string("changed.yaml", other, &changed, err, sizeof(err)) == 0;
	CHECK(ok, "a config whose for3 measures rel_l2 loads (%s)", ok ? "" : err);
	if (ok) {
		alerts_set_config(a, &changed);
		CHECK(n_instances(a, "for3") == 0, "for3 now means another metric: it starts afresh (%zu)",
		      n_instances(a, "for3"));
		alerts_set_config(a, cfg);
		wd_config_release(&changed);
	}
	alerts_free(&a);
}

/* Firing, pending and resolved instances come back after a restart, and fire no second time. */
static void test_restart(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);
	struct seen s;

	stored_clear();
	alerts_set_store(a, store, NULL);
	step_w1(a, 1, 0.9);
	step_w1(a, 2, 0.9);
	CHECK(n_stored >= 2, "each evaluation that changed an instance is a record (%d)", n_stored);
	alerts_free(&a);
	a = restart(cfg);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "pending") && s.above == 2 && s.step == 2 && s.value == 0.9,
	      "after a restart, pending keeps its count: 2 of 3 at step 2 (%s, %lld, step %lld)",
	      s.state, s.above, s.step);
	step_w1(a, 2, 0.9);	/* the latest step again: the same snapshot, not a third */
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "pending") && s.above == 2 && n_events == 0,
	      "its step evaluated again after the restart counts once (%s, %lld)", s.state, s.above);
	step_w1(a, 3, 0.9);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && n_events == 1 && !strcmp(events[0].state, "firing"),
	      "the third step above fires it, once (%s, %d events)", s.state, n_events);
	alerts_free(&a);

	a = restart(cfg);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.above == 3 && s.step == 3,
	      "after a second restart it is still firing (%s, %lld, step %lld)", s.state, s.above, s.step);
	step_w1(a, 3, 0.9);
	step_w1(a, 4, 1.5);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "firing") && s.above == 4 && n_events == 0,
	      "and its step again, then one more above, fire nothing again (%s, %lld, %d events)",
	      s.state, s.above, n_events);
	step_w1(a, 5, 0.1);
	CHECK(n_events == 1 && !strcmp(events[0].state, "resolved"), "a step below resolves it, once");
	alerts_free(&a);

	a = restart(cfg);
	s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "inactive") && s.above == 0 && s.step == 5,
	      "resolved stays resolved after a restart (%s, step %lld)", s.state, s.step);
	step_w1(a, 5, 0.1);
	CHECK(n_events == 0, "and its step again sends nothing (%d)", n_events);

	/* per tensor: only new states and pending counts are written */
	int before = n_stored;
	start("s", 6);
	row("c1", "layers.0.attn", 10, 2.0, NAN);
	row("c1", "layers.1.attn", 10, 0.5, NAN);
	alerts_on_results(a, &batch);
	start("s", 7);
	row("c1", "layers.0.attn", 10, 3.0, NAN);
	row("c1", "layers.1.attn", 10, 0.4, NAN);
	alerts_on_results(a, &batch);
	int attn = 0;
	for (int k = before; k < n_stored; k++)
		attn += strstr(stored[k], "\"rule\":\"attn\"") != NULL;
	CHECK(attn == 1, "a per-tensor rule: a record when a tensor fires, none while it stays firing (%d)",
	      attn);
	alerts_free(&a);
	a = restart(cfg);
	CHECK(!strcmp(instance(a, "attn", "c1", "layers.0.attn").state, "firing") &&
	      !strcmp(instance(a, "attn", "c1", "layers.1.attn").state, ""),
	      "after a restart the firing tensor is firing; the quiet one comes back when evaluated");
	start("s", 8);
	row("c1", "layers.0.attn", 10, 3.0, NAN);
	alerts_on_results(a, &batch);
	int attn_events = 0;
	for (int k = 0; k < n_events; k++)
		attn_events += !strcmp(events[k].topic, "alert.attn");
	CHECK(attn_events == 0 && !strcmp(instance(a, "attn", "c1", "layers.0.attn").state, "firing"),
	      "the firing tensor, still above, fires no second time (%d)", attn_events);
	alerts_free(&a);
	stored_clear();
}

/* A rule whose instances mean something else, or that left the config, starts afresh. */
static void test_restart_changed(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);
	struct wd_config changed;
	char err[512];

	stored_clear();
	alerts_set_store(a, store, NULL);
	step_w1(a, 1, 0.9);
	/* for3 on rel_l2 instead of w1, and threshold 0.6 for max: */
	const char *w1 = strstr(yaml, "metric: w1, threshold: 0.5");
	char other[sizeof(yaml) + 16];
	snprintf(other, sizeof(other), "%.*smetric: rel_l2%s", (int)(w1 - yaml), yaml,
		 w1 + strlen("metric: w1"));
	if (wd_config_load_string("changed.yaml", other, &changed, err, sizeof(err)) < 0) {
		CHECK(0, "the changed config loads: %s", err);
		alerts_free(&a);
		return;
	}
	alerts_free(&a);
	a = restart(&changed);
	CHECK(n_instances(a, "for3") == 0, "restarted with for3 on another metric: no instance (%zu)",
	      n_instances(a, "for3"));
	CHECK(n_stored > 0 && strstr(stored[n_stored - 1], "\"reset\":true"),
	      "a reset record says so, so that the next start does not say it again");
	alerts_free(&a);
	a = restart(cfg);
	CHECK(n_instances(a, "for3") == 0, "back to the first config: the old state stays dropped (%zu)",
	      n_instances(a, "for3"));
	step_w1(a, 2, 0.9);
	alerts_set_config(a, &changed);	/* a reload that changes for3: a reset record */
	alerts_free(&a);
	a = restart(cfg);
	CHECK(n_instances(a, "for3") == 0, "state dropped by a reload stays dropped after a restart (%zu)",
	      n_instances(a, "for3"));

	/* a failed store is said and retried: the instances stay to be written */
	store_rc = -28;	/* ENOSPC */
	log_level = LOG_CRIT;	/* its error is expected here */
	step_w1(a, 3, 0.9);
	log_level = LOG_ERR;
	int before = n_stored;
	store_rc = 0;
	step_w1(a, 3, 0.9);
	CHECK(n_stored > before, "after a failed write, the next evaluation writes the state (%d)",
	      n_stored - before);
	alerts_free(&a);
	a = restart(cfg);
	struct seen s = instance(a, "for3", "c1", NULL);
	CHECK(!strcmp(s.state, "pending") && s.above == 1 && s.step == 3,
	      "and a restart finds it (%s, %lld, step %lld)", s.state, s.above, s.step);
	alerts_free(&a);
	wd_config_release(&changed);
	stored_clear();
}

/*
 * runs rm: a candidate's instances go, the other's stay and are still
 * found (the index is rebuilt: 100 tensors, most dropped); the baseline's
 * removal drops every instance of the study's rules. No event either way.
 */
static void test_forget_run(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);
	char names[100][16];
	size_t firing = 99;

	start("s", 1);
	row("c1", "layers.0.attn", 10, 3.0, NAN);
	row("c2", "layers.0.attn", 10, 4.0, NAN);
	alerts_on_results(a, &batch);
	for (int k = 0; k < 100; k++) {	/* more instances than the index's first size */
		start("s", 2 + k);
		snprintf(names[k], sizeof(names[k]), "layers.%d.attn", k + 1);
		row(k % 10 ? "c1" : "c2", names[k], 10, 0.5, NAN);
		alerts_on_results(a, &batch);
	}
	n_events = 0;	/* the sink keeps 64: count from here */
	size_t before = n_instances(a, "attn"), events_before = (size_t)n_events;
	size_t n = alerts_forget_run(a, "c1", cfg, 1, &firing);
	size_t events_after = (size_t)n_events;
	struct seen c2 = instance(a, "attn", "c2", "layers.0.attn"), c1 = instance(a, "attn", "c1", "layers.0.attn");
	CHECK(before == 102 && n_instances(a, "attn") == 11 && !c1.state[0] && !strcmp(c2.state, "firing"),
	      "runs rm c1: its instances go, c2's stay (%zu -> %zu; c1 '%s', c2 '%s')", before,
	      n_instances(a, "attn"), c1.state, c2.state);
	CHECK(n >= 91 && firing >= 1, "it says how many, and how many were firing (%zu, %zu)", n, firing);
	int found = 0;
	for (int k = 0; k < 100; k += 10)
		found += !strcmp(instance(a, "attn", "c2", names[k]).state, "inactive");
	start("s", 200);
	row("c2", "layers.1.attn", 10, 9.0, NAN);
	alerts_on_results(a, &batch);
	CHECK(found == 10 && n_instances(a, "attn") == 11 &&
	      !strcmp(instance(a, "attn", "c2", "layers.1.attn").state, "firing"),
	      "the index still finds each of c2's: updated in place, none made twice (%d of 10)", found);
	/* c2 stalled and firing: the baseline's removal is no part of that */
	struct state st;
	struct run r2 = { .name = (char *)"c2", .last_seen = clock_now - 100.0 };
	memset(&st, 0, sizeof(st));
	st.runs = &r2;
	alerts_tick(a, &st);
	CHECK(!strcmp(instance(a, "quiet", "c2", NULL).state, "firing"), "c2 is stalled: firing");
	size_t events_later = (size_t)n_events;	/* the step-200 batch's, and the stalled one */
	struct event last = events[n_events - 1 >= 0 ? n_events - 1 : 0];
	CHECK(events_after == events_before + firing && !strcmp(events[events_after - 1].state, "resolved") &&
	      !strcmp(events[events_after - 1].run, "c1") &&
	      !strcmp(events[events_after - 1].reason, "run 'c1' was removed (wdrift runs rm): forgotten, not recovered"),
	      "each firing instance of the removed run is resolved, saying why (%zu then %zu events; '%s')",
	      events_before, events_after, events_after ? events[events_after - 1].reason : "");
	(void)last;
	size_t firing_c1 = firing;
	n = alerts_forget_run(a, "base", cfg, 1, &firing);
	CHECK((size_t)n_events == events_later + firing && firing >= 1 &&
	      strstr(events[n_events - 1].reason, "run 'base' was removed (wdrift runs rm), which this rule's value "
		     "was judged against"), "the baseline's removal resolves its study's firing instances, saying why "
	      "(%zu then %d events, %zu firing; '%s')", events_later, n_events, firing,
	      n_events ? events[n_events - 1].reason : "");
	(void)firing_c1;
	CHECK(n >= 11 && n_instances(a, "attn") == 0 && n_instances(a, "max") == 0,
	      "runs rm of the baseline drops every instance of its study's rules (%zu)", n);
	alerts_tick(a, &st);
	CHECK(!strcmp(instance(a, "quiet", "c2", NULL).state, "firing") && (size_t)n_events == events_later + firing,
	      "but not a stalled rule's, which times each candidate on its own: still firing, no second "
	      "event (%s, %d events)", instance(a, "quiet", "c2", NULL).state, n_events);
	alerts_free(&a);
}

/*
 * command_min_interval holds across a reload even when the rule has no
 * instance left (runs rm emptied it): the cooldown is the rule's, not its
 * instances'. The command appends a line to a file: one line, not two.
 */
/*
 * A config of study s (candidate c1) and one alert rule, whose command
 * writes to a temp file: rule is its YAML flow mapping, %s the file's
 * path, which path (a mkstemp template) gets. 0, or -1 (said) with nothing
 * left behind.
 */
static int command_config(const char *rule, char *path, struct wd_config *cfg)
{
	char text[768], err[512];
	int fd = mkstemp(path);

	if (fd < 0) {
		CHECK(0, "a temp file for the command");
		return -1;
	}
	close(fd);
	int at = snprintf(text, sizeof(text), "studies:\n  - {name: s, baseline: base, candidates: [c1]}\n"
			  "alerts:\n  - ");
	snprintf(text + at, sizeof(text) - (size_t)at, rule, path);
	if (wd_config_load_string("command.yaml", text, cfg, err, sizeof(err)) < 0) {
		CHECK(0, "the config loads: %s", err);
		unlink(path);
		return -1;
	}
	return 0;
}

static void test_cooldown_kept(void)
{
	char path[] = "/tmp/wdrift-test-alerts-XXXXXX";
	struct wd_config cfg;

	if (command_config("{name: cmd, study: s, metric: w1, threshold: 1, command: 'echo run >> %s', "
			   "command_min_interval: 3600}\n", path, &cfg) < 0)
		return;
	struct alerts *a = fresh(&cfg);
	step_w1(a, 1, 5.0);
	alerts_forget_run(a, "c1", &cfg, 1, NULL);
	alerts_set_config(a, &cfg);	/* a reload of the same rule */
	step_w1(a, 2, 5.0);
	int lines = 0;
	for (int tries = 0; tries < 50; tries++) {	/* the commands run on their own: wait for them */
		usleep(20000);
		alerts_reap(a);
		FILE *f = fopen(path, "r");
		char buf[64];
		lines = 0;
		while (f && fgets(buf, sizeof(buf), f))
			lines++;
		if (f)
			fclose(f);
		if (lines >= 1 && tries >= 10)
			break;
	}
	CHECK(n_events == 3 && !strcmp(events[1].state, "resolved") && lines == 1,
	      "fired, resolved by runs rm, fired again (%d events), its command ran once (%d)", n_events, lines);
	alerts_free(&a);
	wd_config_release(&cfg);
	unlink(path);
}

/* The lines of path (at most max, each cut at 511 bytes) once the commands have run: how many. */
static int command_lines(struct alerts *a, const char *path, char lines[][512], int max, int want)
{
	int n = 0;
	for (int tries = 0; tries < 100; tries++) {	/* the commands run on their own: wait for them */
		usleep(20000);
		alerts_reap(a);
		FILE *f = fopen(path, "r");
		n = 0;
		while (f && n < max && fgets(lines[n], 512, f))
			n++;
		if (f)
			fclose(f);
		if (n >= want && tries >= 5)
			break;
	}
	return n;
}

/* Reaps a's runs until none is left going (past their timeouts, by the clock the caller set), 2 s at most. */
static void reap_all(struct alerts *a)
{
	for (int tries = 0; tries < 100; tries++) {
		alerts_reap(a);
		char *j = alerts_json(a);
		int left = j && strstr(j, "\"running_for\":");
		free(j);
		if (!left)
			return;
		usleep(20000);
	}
}

/*
 * One run of a rule's command at a time, and none past command_timeout: a
 * slow one holds the rule's later changes (a second run beside it could
 * deliver a resolve before its firing), and one past its timeout is killed
 * with what it started, counted failed, and the held changes go (an ops
 * trial's hung pager ran on while two more started).
 */
static void test_command_timeout(void)
{
	char path[] = "/tmp/wdrift-test-alerts-XXXXXX", lines[8][512];
	struct wd_config cfg;

	/* the sleep in the background: only a kill of its process group ends it */
	if (command_config("{name: slow, study: s, metric: w1, threshold: 1, command: 'p=%s; cat >> $p; sleep 30 "
			   "& echo $! > $p.pid; wait', command_min_interval: 0, command_timeout: 1}\n", path, &cfg) < 0)
		return;
	struct alerts *a = fresh(&cfg);
	double c0 = clock_now;
	step_w1(a, 1, 5.0);
	int n = command_lines(a, path, lines, 8, 1);
	CHECK(n == 1 && strstr(lines[0], "\"firing\""), "fired: the command runs, and sleeps (%d lines)", n);
	char pidfile[64];
	long sleeper = 0;
	snprintf(pidfile, sizeof(pidfile), "%s.pid", path);
	for (int tries = 0; tries < 100 && sleeper <= 0; tries++) {	/* written a moment after the line */
		FILE *pf = fopen(pidfile, "r");
		if (pf && fscanf(pf, "%ld", &sleeper) != 1)
			sleeper = 0;
		if (pf)
			fclose(pf);
		if (sleeper <= 0)
			usleep(20000);
	}
	step_w1(a, 2, 0.5);
	n = command_lines(a, path, lines, 8, 2);
	char *j = alerts_json(a);
	CHECK(n_events == 2 && n == 1 && j && strstr(j, "\"running_for\":") && strstr(j, "\"held\":true"),
	      "resolved while it runs: held, not a second run beside it (%d lines): %s", n, j ? j : "");
	free(j);
	clock_now = c0 + 2;	/* past command_timeout */
	n = command_lines(a, path, lines, 8, 2);
	j = alerts_json(a);
	CHECK(n == 2 && strstr(lines[1], "\"resolved\"") && j &&
	      strstr(j, "\"failed\":1,\"last_failure\":\"timed out after 1 s, killed at "),
	      "past command_timeout: killed and counted failed; the held resolve then goes (%d lines): %s", n,
	      j ? j : "");
	free(j);
	int gone = 0;	/* the background sleep went with its group: gone, or a zombie for init to reap */
	for (int tries = 0; tries < 100 && !gone; tries++) {
		char stat[64], buf[256] = "";
		snprintf(stat, sizeof(stat), "/proc/%ld/stat", sleeper);
		FILE *sf = fopen(stat, "r");
		if (!sf || !fgets(buf, sizeof(buf), sf) || strstr(buf, ") Z "))
			gone = 1;
		if (sf)
			fclose(sf);
		if (!gone)
			usleep(20000);
	}
	CHECK(sleeper > 0 && gone, "the run's background sleep (pid %ld) was killed with it: its process group", sleeper);
	clock_now = c0 + 4;	/* the second run, killed in turn: nothing left behind */
	reap_all(a);
	j = alerts_json(a);
	CHECK(j && !strstr(j, "\"running_for\":") && strstr(j, "\"failed\":2,"), "the second run killed too: %s",
	      j ? j : "");
	free(j);
	/*
	 * runs rm while a run goes: the resolve of the instances it drops is
	 * held, and kept for the next run, not lost with them (a review)
	 */
	clock_now = c0 + 10;
	step_w1(a, 3, 5.0);	/* fires again: a run starts */
	n = command_lines(a, path, lines, 8, 3);
	alerts_forget_run(a, "c1", &cfg, 1, NULL);
	clock_now = c0 + 12;	/* the firing's run past its timeout; then the kept resolve goes */
	n = command_lines(a, path, lines, 8, 4);
	CHECK(n == 4 && strstr(lines[2], "\"firing\"") && strstr(lines[3], "\"resolved\"") &&
	      strstr(lines[3], "\"reason\""),
	      "runs rm during a run: its resolve, with the reason, goes once the run ends (%d lines)", n);
	clock_now = c0 + 14;	/* the last run killed: nothing left behind */
	reap_all(a);
	clock_now = c0;
	alerts_free(&a);
	wd_config_release(&cfg);
	unlink(path);
	unlink(pidfile);
}

/*
 * A held change reaches the command as it was judged: the resolve's value,
 * step and threshold then, not a later evaluation's value nor a threshold a
 * reload set since, also across a restart (the WAL's "held_at"). An ops
 * trial's held line read "resolved, value 0.0035, threshold 0.003".
 */
static void test_command_held_as_judged(void)
{
	char path[] = "/tmp/wdrift-test-alerts-XXXXXX", lines[8][512];
	struct wd_config cfg, lower;
	struct state st = { 0 };
	char err[512], text[512];

	if (command_config("{name: w, study: s, metric: w1, threshold: 1, for: 2, command: 'cat >> %s', "
			   "command_min_interval: 60}\n", path, &cfg) < 0)
		return;
	snprintf(text, sizeof(text), "studies:\n  - {name: s, baseline: base, candidates: [c1]}\nalerts:\n"
		 "  - {name: w, study: s, metric: w1, threshold: 0.5, for: 2, command: 'cat >> %s', "
		 "command_min_interval: 60}\n", path);
	if (wd_config_load_string("lower.yaml", text, &lower, err, sizeof(err)) < 0) {
		CHECK(0, "the lowered config loads: %s", err);
		wd_config_release(&cfg);
		unlink(path);
		return;
	}
	struct alerts *a = fresh_stored(&cfg);
	double t0 = wall_clock;
	step_w1(a, 1, 5.0);
	step_w1(a, 2, 5.0);	/* for: 2: firing, and its command runs at once */
	int n = command_lines(a, path, lines, 8, 1);
	CHECK(n == 1 && strstr(lines[0], "\"firing\"") && strstr(lines[0], "\"threshold\":1"),
	      "fired at step 2: the command heard it (%d lines)", n);
	wall_clock = t0 + 10;
	step_w1(a, 3, 0.8);	/* resolved under threshold 1: held */
	step_w1(a, 3, 0.75);	/* step 3 computed again (another run arrived): still resolved, at 0.75 */
	alerts_set_config(a, &lower);	/* a reload: threshold 0.5, the same meaning, the instances kept */
	wall_clock = t0 + 20;
	step_w1(a, 4, 0.9);	/* above 0.5: pending (for: 2); the command still owes the resolve */
	alerts_free(&a);	/* a restart inside the interval */
	a = restart(&lower);
	wall_clock = t0 + 61;
	alerts_tick(a, &st);
	n = command_lines(a, path, lines, 8, 2);
	CHECK(n == 2 && strstr(lines[1], "\"resolved\"") && strstr(lines[1], "\"value\":0.75") &&
	      strstr(lines[1], "\"threshold\":1") && strstr(lines[1], "\"step\":3"),
	      "the held resolve goes as judged: value 0.75 (its step judged again) at step 3 under threshold 1 "
	      "(not 0.9, not 0.5): %s",
	      n == 2 ? lines[1] : "(none)");
	alerts_free(&a);
	wd_config_release(&cfg);
	wd_config_release(&lower);
	unlink(path);
}

/*
 * command_min_interval holds a rule's changes, never loses them (a trial:
 * a per-tensor rule's second tensor firing at the same step never reached
 * the command, nor did a resolve inside the interval). The changes of one
 * evaluation go to one run, a line each; those held go at the end of the
 * interval, each instance's latest state, and only those that differ from
 * what the command last heard.
 */
static void test_command_held(void)
{
	char path[] = "/tmp/wdrift-test-alerts-XXXXXX", lines[8][512];
	struct wd_config cfg;
	struct state st = { 0 };

	if (command_config("{name: tens, study: s, metric: w1, scope: tensors, tensors: '*', threshold: 1, "
			   "command: 'cat >> %s', command_min_interval: 60}\n", path, &cfg) < 0)
		return;
	struct alerts *a = fresh_stored(&cfg);
	double t0 = wall_clock;
	start("s", 1);
	row("c1", "a", 10, 5.0, NAN);
	row("c1", "b", 10, 5.0, NAN);
	alerts_on_results(a, &batch);
	int n = command_lines(a, path, lines, 8, 2);
	CHECK(n_events == 2 && n == 2 && strstr(lines[0], "\"tensor\":\"") && strstr(lines[1], "\"tensor\":\"") &&
	      strcmp(strstr(lines[0], "\"tensor\":\""), strstr(lines[1], "\"tensor\":\"")) &&
	      strstr(lines[0], "\"firing\"") && strstr(lines[1], "\"firing\""),
	      "two tensors firing at one step: one run of the command, a line for each (%d lines)", n);
	wall_clock = t0 + 10;
	start("s", 2);
	row("c1", "a", 10, 0.5, NAN);
	row("c1", "b", 10, 5.0, NAN);
	alerts_on_results(a, &batch);
	alerts_tick(a, &st);
	n = command_lines(a, path, lines, 8, 3);
	CHECK(n_events == 3 && n == 2, "'a' resolved 10 s after the command ran: held (%d events, %d lines)",
	      n_events, n);
	/* a restart meanwhile: what was held is owed still (the WAL's "held"), and nothing else */
	alerts_free(&a);
	a = restart(&cfg);
	alerts_tick(a, &st);
	n = command_lines(a, path, lines, 8, 3);
	CHECK(a && n == 2, "restarted inside the interval: still held (%d lines)", n);
	wall_clock = t0 + 61;
	alerts_tick(a, &st);
	n = command_lines(a, path, lines, 8, 3);
	CHECK(n == 3 && strstr(lines[2], "\"tensor\":\"a\"") && strstr(lines[2], "\"resolved\""),
	      "the interval over: the held resolve goes to the command (%d lines)", n);
	/* a flap inside the interval: the command last heard 'a' resolved, and it is again */
	wall_clock = t0 + 70;
	start("s", 3);
	row("c1", "a", 10, 5.0, NAN);
	alerts_on_results(a, &batch);
	wall_clock = t0 + 75;
	start("s", 4);
	row("c1", "a", 10, 0.5, NAN);
	alerts_on_results(a, &batch);
	wall_clock = t0 + 200;
	alerts_tick(a, &st);
	n = command_lines(a, path, lines, 8, 4);
	CHECK(n_events == 2 && n == 3, "fired and resolved inside the interval: two events, nothing new for the "
	      "command (%d events, %d lines)", n_events, n);
	/* the interval long over: a change goes at once */
	start("s", 5);
	row("c1", "b", 10, 0.5, NAN);
	alerts_on_results(a, &batch);
	n = command_lines(a, path, lines, 8, 4);
	CHECK(n == 4 && strstr(lines[3], "\"tensor\":\"b\"") && strstr(lines[3], "\"resolved\""),
	      "past the interval, a change runs the command at once (%d lines)", n);
	/*
	 * 400 tensors firing at one step: one run, 400 whole lines, some 100 KB
	 * (a review: a pipe's 64 KiB, non-blocking, cut the text mid-line)
	 */
	static char names[400][8];
	start("s", 6);
	for (int k = 0; k < 400; k++) {
		snprintf(names[k], sizeof(names[k]), "m%03d", k);
		row("c1", names[k], 10, 5.0, NAN);
	}
	wall_clock = t0 + 400;
	alerts_on_results(a, &batch);
	int whole = 0;
	FILE *f = NULL;
	for (int tries = 0; tries < 200; tries++) {	/* the command runs on its own: wait for it */
		usleep(20000);
		alerts_reap(a);
		f = fopen(path, "r");
		char line[1024];
		int m = 0;
		whole = 0;
		while (f && fgets(line, sizeof(line), f)) {
			m++;
			whole += m > 4 && line[strlen(line) - 1] == '\n' && strstr(line, "\"tensor\":\"m") &&
				 line[0] == '{';
		}
		if (f)
			fclose(f);
		if (whole >= 400)
			break;
	}
	CHECK(whole == 400, "400 instances firing at once: one run, 400 whole lines on its stdin (%d)", whole);
	alerts_free(&a);
	stored_clear();
	wd_config_release(&cfg);
	wall_clock = t0;
	unlink(path);
}

/*
 * A command that a reload adds to a rule already firing hears it firing
 * (a trial's heard only the lone resolve, later, of one it never heard
 * fire).
 */
static void test_command_added(void)
{
	char path[] = "/tmp/wdrift-test-alerts-XXXXXX", err[512], lines[4][512];
	struct wd_config bare, with;
	struct state st = { 0 };

	if (wd_config_load_string("bare.yaml", "studies:\n  - {name: s, baseline: base, candidates: [c1]}\n"
				  "alerts:\n  - {name: cmd, study: s, metric: w1, threshold: 1}\n", &bare, err,
				  sizeof(err)) < 0) {
		CHECK(0, "the config loads: %s", err);
		return;
	}
	if (command_config("{name: cmd, study: s, metric: w1, threshold: 1, command: 'cat >> %s', "
			   "command_min_interval: 0}\n", path, &with) < 0) {
		wd_config_release(&bare);
		return;
	}
	struct alerts *a = fresh(&bare);
	step_w1(a, 1, 5.0);
	alerts_set_config(a, &with);	/* the reload that adds the command */
	alerts_tick(a, &st);
	int n = command_lines(a, path, lines, 4, 1);
	CHECK(n == 1 && strstr(lines[0], "\"state\":\"firing\"") && strstr(lines[0], "\"step\":1"),
	      "a command added to a firing rule hears it firing (%d lines)", n);
	step_w1(a, 2, 0.5);
	n = command_lines(a, path, lines, 4, 2);
	CHECK(n == 2 && strstr(lines[1], "\"state\":\"resolved\""), "... and then its resolve (%d lines)", n);
	alerts_free(&a);
	wd_config_release(&bare);
	wd_config_release(&with);
	unlink(path);
}

/* The "unmatched" sentence of rule in alerts_json, "" when none. */
static void unmatched_of(const struct alerts *a, const char *rule, char *buf, size_t len)
{
	char *text = alerts_json(a);
	json_t *o = text ? json_loads(text, 0, NULL) : NULL, *r;
	size_t k;

	buf[0] = 0;
	json_array_foreach(json_object_get(o, "alerts"), k, r)
		if (!strcmp(json_string_value(json_object_get(r, "name")), rule) &&
		    json_is_string(json_object_get(r, "unmatched")))
			snprintf(buf, len, "%s", json_string_value(json_object_get(r, "unmatched")));
	json_decref(o);
	free(text);
}

/*
 * A per-tensor rule whose glob matches none of a candidate's tensors can
 * never fire: said (alerts_json "unmatched", and the log once) until a
 * snapshot has a tensor it matches (a trial's typo went unsaid for ever).
 */
static void test_glob_unmatched(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);
	char why[512];

	step_w1(a, 1, 5.0);	/* one tensor, 't': 'layers.*.attn' matches nothing */
	unmatched_of(a, "attn", why, sizeof(why));
	CHECK(strstr(why, "tensors 'layers.*.attn' matched none of the 1 tensors of run 'c1' at step 1 (such as "
		      "'t'): it can never fire"), "a glob that matches no tensor of the snapshot: said (%s)", why);
	unmatched_of(a, "max", why, sizeof(why));
	CHECK(!why[0], "not for a rule with another scope (%s)", why);
	start("s", 2);
	row("c1", "t", 10, 5.0, NAN);
	row("c1", "layers.0.attn", 10, 5.0, NAN);
	alerts_on_results(a, &batch);
	unmatched_of(a, "attn", why, sizeof(why));
	CHECK(!why[0] && !strcmp(instance(a, "attn", "c1", "layers.0.attn").state, "firing"),
	      "a snapshot with a tensor it matches: no longer said, and the rule judges it (%s)", why);
	alerts_free(&a);

	/*
	 * Two candidates, one whose tensors the glob misses: said once, not at
	 * every batch (a review: the other's match cleared it, and it was said
	 * again each time); the log read from stderr.
	 */
	a = fresh(cfg);
	char logpath[] = "/tmp/wdrift-test-alerts-log-XXXXXX";
	int fd = mkstemp(logpath), saved = dup(2), level = log_level;
	if (fd < 0 || saved < 0) {
		CHECK(0, "a temp file for the log");
		alerts_free(&a);
		return;
	}
	fflush(stderr);
	dup2(fd, 2);
	log_level = LOG_WARNING;
	for (int64_t s = 3; s <= 5; s++) {
		start("s", s);
		row("c1", "t", 10, 0.5, NAN);
		row("c2", "layers.0.attn", 10, 0.5, NAN);
		alerts_on_results(a, &batch);
	}
	log_level = level;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	int said = 0;
	char line[1024];
	FILE *f = fdopen(fd, "r");
	rewind(f);
	while (fgets(line, sizeof(line), f))
		said += strstr(line, "alert 'attn': tensors 'layers.*.attn' matched none") != NULL;
	fclose(f);
	unlink(logpath);
	unmatched_of(a, "attn", why, sizeof(why));
	CHECK(said == 1 && strstr(why, "of run 'c1' at step 3"),
	      "c1 missed by the glob, c2 matched, three batches: said once, and still shown (%d lines; %s)", said, why);
	/* runs rm c1: the sentence about its snapshot goes with it (a trial saw it stay) */
	alerts_forget_run(a, "c1", cfg, 1, NULL);
	unmatched_of(a, "attn", why, sizeof(why));
	CHECK(!why[0], "runs rm of the run the sentence names: no longer shown (%s)", why);
	alerts_free(&a);

	/* a reload that takes c1 out of the study: the sentence about it goes too (a trial saw it stay) */
	a = fresh(cfg);
	start("s", 6);
	row("c1", "t", 10, 0.5, NAN);
	alerts_on_results(a, &batch);
	unmatched_of(a, "attn", why, sizeof(why));
	CHECK(strstr(why, "of run 'c1'"), "c1 missed by the glob: said (%s)", why);
	struct wd_config changed;
	char err[512], other[sizeof(yaml)];
	const char *at = strstr(yaml, "candidates: [c1, c2]");
	snprintf(other, sizeof(other), "%.*scandidates: [c2]%s", (int)(at - yaml), yaml,
		 at + strlen("candidates: [c1, c2]"));
	if (wd_config_load_string("changed.yaml", other, &changed, err, sizeof(err)) == 0) {
		alerts_set_config(a, &changed);
		unmatched_of(a, "attn", why, sizeof(why));
		CHECK(!why[0], "a reload takes c1 out of the study: the sentence about it goes (%s)", why);
		alerts_set_config(a, cfg);
		wd_config_release(&changed);
	} else {
		CHECK(0, "a config without c1 loads (%s)", err);
	}
	alerts_free(&a);
}

/* alerts_json says what each rule means: scope, glob, proxy. */
static void test_json_scope(struct wd_config *cfg)
{
	struct alerts *a = fresh(cfg);
	char *text = alerts_json(a);
	json_t *o = text ? json_loads(text, 0, NULL) : NULL, *r;
	size_t k;
	int ok = 0;

	json_array_foreach(json_object_get(o, "alerts"), k, r) {
		const char *name = json_string_value(json_object_get(r, "name"));
		const char *scope = json_string_value(json_object_get(r, "scope"));
		const char *glob = json_string_value(json_object_get(r, "tensors"));
		const char *proxy = json_string_value(json_object_get(r, "proxy"));
		ok += !strcmp(name, "max") && scope && !strcmp(scope, "max") && !glob && !proxy;
		ok += !strcmp(name, "mean") && scope && !strcmp(scope, "mean");
		ok += !strcmp(name, "attn") && scope && !strcmp(scope, "tensors") && glob &&
		      !strcmp(glob, "layers.*.attn");
		ok += !strcmp(name, "ratio") && proxy && !strcmp(proxy, "p");
		ok += !strcmp(name, "quiet") && json_is_null(json_object_get(r, "scope")) &&
		      json_is_null(json_object_get(r, "for"));	/* a trial: "for": 1 on a stalled rule */
		ok += !strcmp(name, "for3") && json_object_get(r, "threshold") && json_object_get(r, "for") &&
		      json_object_get(r, "severity") && json_object_get(r, "metric");
	}
	CHECK(ok == 6, "each rule lists its scope, glob and proxy, beside the fields it had (%d of 6)", ok);
	json_decref(o);
	free(text);
	alerts_free(&a);
}

int main(void)
{
	struct wd_config cfg;
	char err[512];

	log_level = LOG_ERR;	/* transitions log at warning and notice: expected here */
	/*
	 * As wdriftd does (main.c): a command that exits before reading its
	 * stdin (test_cooldown_kept's echo) closes the pipe the event is
	 * written to. Without this, SIGPIPE ended the test 3 times in 600
	 * runs on a loaded host (exit 141), once in a make check.
	 */
	signal(SIGPIPE, SIG_IGN);
	if (wd_config_load_string("test.yaml", yaml, &cfg, err, sizeof(err)) < 0) {
		printf("not ok 1 - the test's config loads: %s\n", err);
		return 1;
	}
	test_for(&cfg);
	test_scopes(&cfg);
	test_tensors(&cfg);
	test_ratio_nan(&cfg);
	test_stalled(&cfg);
	test_reload(&cfg);
	test_restart(&cfg);
	test_restart_changed(&cfg);
	test_json_scope(&cfg);
	test_forget_run(&cfg);
	test_cooldown_kept();
	test_command_held();
	test_command_held_as_judged();
	test_command_timeout();
	test_command_added();
	test_glob_unmatched(&cfg);
	wd_config_release(&cfg);
	return tap_done();
}
