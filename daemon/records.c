/* records.c: the WAL's record formats, both ways (see records.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "error.h"
#include "identity.h"
#include "records.h"
#include "result_batch.h"
#include "state.h"
#include "utf8.h"

#define ROW_FIELDS 13	/* the fields of a result row, records.h */

/* JSON of o, compact; o is released. NULL when o is (out of memory). */
static char *dump(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

/*
 * A sentence as a JSON string, each byte that is not part of a whole UTF-8
 * character '?': a reason quotes names cut to fit ("'%.80s'"), which
 * json_string refuses, and the record was lost (a review). NULL when out
 * of memory.
 */
static json_t *text(const char *s)
{
	char *copy = strdup(s);
	json_t *j = copy ? json_string(wd_utf8_scrub(copy)) : NULL;

	free(copy);
	return j;
}

/* Non-finite numbers are null: JSON has no NaN. */
static json_t *jnum(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

static double num_of(const json_t *v)
{
	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* --- encoding --- */

char *record_snapshot(const struct snapshot *snap, const char *file, double at)
{
	/* content: what identifies it, so that a re-send with other content is refused */
	json_t *content = identity_content_json(snap);

	return dump(content ? json_pack("{s:s,s:s,s:I,s:I,s:I,s:s,s:f,s:o}", "t", "snapshot", "run",
					snap->run->name, "step", (json_int_t)snap->step, "tensors",
					(json_int_t)snap->n_tensors, "bytes", (json_int_t)snap->bytes,
					"file", file, "at", at, "content", content) : NULL);
}

char *record_result(const struct result_batch *b)
{
	json_t *rows = json_array(), *labels = json_array();

	if (!rows || !labels) {
		json_decref(rows);
		json_decref(labels);
		return NULL;
	}
	for (size_t i = 0; i < b->n_proxies; i++)
		json_array_append_new(labels, json_string(b->proxies[i]));
	for (size_t i = 0; i < b->n_rows; i++) {
		const struct drift_row *r = &b->rows[i];
		json_t *ratio = json_array();
		for (size_t k = 0; ratio && k < b->n_proxies; k++)
			json_array_append_new(ratio, jnum(r->ratio[k]));
		json_t *row = ratio ? json_pack("[i,i,o,s,I,o,o,o,I,I,I,o,f]", r->kind, r->role,
			r->tensor ? json_string(r->tensor) : json_null(), r->run, (json_int_t)r->numel,
			jnum(r->w1), jnum(r->max_abs_diff), jnum(r->rel_l2), (json_int_t)r->nan,
			(json_int_t)r->posinf, (json_int_t)r->neginf, ratio, r->wall) : NULL;
		if (!row || json_array_append_new(rows, row) < 0) {
			json_decref(rows);
			json_decref(labels);
			return NULL;
		}
	}
	/* "o" takes the references, even when json_pack fails */
	json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "t", "result", "study", b->study, "step",
			      (json_int_t)b->step, "baseline", b->baseline, "proxies", labels, "rows", rows);
	/*
	 * What `drift` says of a run whose names differ from the baseline's
	 * (a "module." prefix): after a restart too, where it fell back to
	 * "the daemon's log names ..." of a line an earlier process logged
	 * (a trial's). Absent when none, and in records from before it.
	 */
	json_t *notes = o && b->n_notes ? json_object() : NULL;
	for (size_t i = 0; notes && i < b->n_notes; i++)
		json_object_set_new(notes, b->notes[i].run, text(b->notes[i].text));
	if (notes)
		json_object_set_new(o, "notes", notes);
	return dump(o);
}

char *record_drop(const char *run, int64_t step, const char *why)
{
	return dump(json_pack("{s:s,s:s,s:I,s:o}", "t", "drop", "run", run, "step", (json_int_t)step,
			      "why", text(why)));
}

char *record_expired(const char *run, int64_t step, double at, const char *why)
{
	return dump(json_pack("{s:s,s:s,s:I,s:f,s:o}", "t", "expired", "run", run, "step", (json_int_t)step,
			      "at", at, "why", text(why)));
}

char *record_conflict(const char *run, int64_t step, double at, int own)
{
	json_t *o = json_pack("{s:s,s:s,s:I,s:f}", "t", "conflict", "run", run, "step", (json_int_t)step, "at", at);

	if (o && own)	/* absent: a re-run's, or a record from before "own" */
		json_object_set_new(o, "own", json_true());
	return dump(o);
}

char *record_rerun(const char *run, uint64_t session, int64_t from, int64_t step)
{
	char hex[17];	/* a JSON integer is signed: a session is 64 bits */

	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)session);
	return dump(json_pack("{s:s,s:s,s:I,s:s,s:I}", "t", "rerun", "run", run, "step", (json_int_t)step,
			      "session", hex, "from", (json_int_t)from));
}

char *record_mixed(const char *run, int64_t step, double at, const char *who)
{
	return dump(json_pack("{s:s,s:s,s:I,s:f,s:o}", "t", "mixed", "run", run, "step", (json_int_t)step,
			      "at", at, "who", text(who)));
}

char *record_forget(const char *run)
{
	return dump(json_pack("{s:s,s:s}", "t", "forget", "run", run));
}

static const char *const alert_states[] = { "inactive", "pending", "firing" };

char *record_alert(const struct alert_state *s)
{
	json_t *inst = json_array(), *held = json_array(), *held_at = json_array();
	char def[17];

	/* no record rather than one that lacks what it should hold: the caller keeps them dirty */
	for (size_t i = 0; inst && held && held_at && i < s->n_inst; i++) {
		const struct alert_inst *a = &s->inst[i];
		if ((a->held && json_array_append_new(held, json_integer((json_int_t)i)) < 0) ||
		    (a->held && json_array_append_new(held_at, a->has_trans ? json_pack("[o,I,f]",
			jnum(a->trans_value), (json_int_t)a->trans_step, a->trans_threshold) : json_null()) < 0) ||
		    a->state < 0 || a->state > 2 || a->prev_state < 0 || a->prev_state > 2 ||
		    json_array_append_new(inst, json_pack("[s,o,s,I,I,o,f,s,I]", a->run,
			a->tensor ? json_string(a->tensor) : json_null(), alert_states[a->state],
			(json_int_t)a->above, (json_int_t)a->step, jnum(a->value), a->since,
			alert_states[a->prev_state], (json_int_t)a->prev_above)) < 0) {
			json_decref(inst);
			inst = NULL;
		}
	}
	if (!held || !held_at) {
		json_decref(inst);
		inst = NULL;
	}
	/* the hash as hex: JSON integers are signed 64-bit, and readers differ above 2^53 */
	snprintf(def, sizeof(def), "%016llx", (unsigned long long)s->def);
	json_t *o = inst ? json_pack("{s:s,s:s,s:s,s:f,s:o}", "t", "alert", "rule", s->rule, "def",
				     def, "last_command", s->last_command, "inst", inst) : NULL;
	if (o && s->reset)
		json_object_set_new(o, "reset", json_true());
	/* "held": the indexes in inst of those whose command has not heard them (an older reader skips it) */
	if (o && held && json_array_size(held))
		json_object_set(o, "held", held);
	/* "held_at": for each of "held", the transition owed, [value, step, threshold] (an older reader skips it) */
	if (o && held_at && json_array_size(held_at))
		json_object_set(o, "held_at", held_at);
	json_decref(held);
	json_decref(held_at);
	return dump(o);
}

/* --- decoding --- */

/* A result record's body into a batch: NULL (err filled) when a field is missing or wrong. */
static struct result_batch *batch_of(const json_t *o, char *err, size_t errlen)
{
	const char *study = json_string_value(json_object_get(o, "study"));
	const char *base = json_string_value(json_object_get(o, "baseline"));
	const json_t *rows = json_object_get(o, "rows"), *labels = json_object_get(o, "proxies");
	const json_t *step = json_object_get(o, "step");
	struct result_batch *b;

	if (!study || !base || !json_is_integer(step) || !json_is_array(rows) || !json_is_array(labels)) {
		wd_error(err, errlen, "result record: needs study, baseline, step, proxies and rows");
		return NULL;
	}
	if (json_array_size(labels) > DRIFTLOG_MAX_PROXIES) {
		wd_error(err, errlen, "result record: %zu proxies, at most %d", json_array_size(labels),
			 DRIFTLOG_MAX_PROXIES);
		return NULL;
	}
	if (!(b = calloc(1, sizeof(*b))) || !(b->study = strdup(study)) ||
	    !(b->baseline = strdup(base)) ||
	    !(b->rows = calloc(json_array_size(rows) + 1, sizeof(*b->rows))))
		goto oom;
	b->step = json_integer_value(step);
	for (size_t k = 0; k < json_array_size(labels); k++) {
		const char *l = json_string_value(json_array_get(labels, k));
		if (!(b->proxies[b->n_proxies++] = strdup(l ? l : "?")))
			goto oom;
	}
	for (size_t i = 0; i < json_array_size(rows); i++) {
		const json_t *a = json_array_get(rows, i);
		struct drift_row *r = &b->rows[b->n_rows];
		const char *t = json_string_value(json_array_get(a, 2));
		const char *run = json_string_value(json_array_get(a, 3));
		if (!json_is_array(a) || json_array_size(a) != ROW_FIELDS || !run)
			continue;	/* a row this version cannot read; the others stand */
		r->step = b->step;
		r->kind = (int)json_integer_value(json_array_get(a, 0));
		r->role = (int)json_integer_value(json_array_get(a, 1));
		r->numel = (uint64_t)json_integer_value(json_array_get(a, 4));
		r->w1 = num_of(json_array_get(a, 5));
		r->max_abs_diff = num_of(json_array_get(a, 6));
		r->rel_l2 = num_of(json_array_get(a, 7));
		r->nan = (uint64_t)json_integer_value(json_array_get(a, 8));
		r->posinf = (uint64_t)json_integer_value(json_array_get(a, 9));
		r->neginf = (uint64_t)json_integer_value(json_array_get(a, 10));
		for (size_t k = 0; k < b->n_proxies; k++)
			r->ratio[k] = num_of(json_array_get(json_array_get(a, 11), k));
		r->wall = num_of(json_array_get(a, 12));
		if (!(r->run = strdup(run)) || (t && !(r->tensor = strdup(t)))) {
			b->n_rows++;	/* what it holds is freed with it */
			goto oom;
		}
		b->n_rows++;
	}
	const char *run;
	json_t *note;
	json_object_foreach(json_object_get(o, "notes"), run, note)	/* absent: none */
		if (json_is_string(note) && result_batch_note(b, run, json_string_value(note)) < 0)
			goto oom;
	return b;
oom:
	result_batch_free(&b);
	wd_error(err, errlen, "result record: out of memory");
	return NULL;
}

/* A state name of records.h's, its index; -1 when it is none. */
static int alert_state_of(const json_t *v)
{
	const char *s = json_string_value(v);
	for (int k = 0; s && k < 3; k++)
		if (!strcmp(s, alert_states[k]))
			return k;
	return -1;
}

static void alert_state_free(struct alert_state *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_inst; i++) {
		free((char *)s->inst[i].run);
		free((char *)s->inst[i].tensor);
	}
	free(s->inst);
	free((char *)s->rule);
	free(s);
}

/* An alert record's body: NULL (err filled) when a field is missing or wrong. */
static struct alert_state *alert_of(const json_t *o, char *err, size_t errlen)
{
	const char *rule = json_string_value(json_object_get(o, "rule"));
	const char *def = json_string_value(json_object_get(o, "def"));
	const json_t *inst = json_object_get(o, "inst"), *lc = json_object_get(o, "last_command");
	const json_t *held = json_object_get(o, "held"), *held_at = json_object_get(o, "held_at");
	struct alert_state *s;
	char *end, *is_held = NULL;
	const json_t **trans = NULL;	/* per inst: its "held_at" entry, or NULL */

	if (!rule || !rule[0] || !def || !json_is_array(inst) || (lc && !json_is_number(lc))) {
		wd_error(err, errlen, "alert record: needs rule, def and inst");
		return NULL;
	}
	unsigned long long h = strtoull(def, &end, 16);
	if (strlen(def) != 16 || *end) {
		wd_error(err, errlen, "alert record: rule '%.128s': def '%.32s' is not 16 hex digits",
			 rule, def);
		return NULL;
	}
	if (!(s = calloc(1, sizeof(*s))) || !(s->rule = strdup(rule)) ||
	    !(s->inst = calloc(json_array_size(inst) + 1, sizeof(*s->inst))))
		goto oom;
	s->def = h;
	s->reset = json_is_true(json_object_get(o, "reset"));
	s->last_command = lc ? json_number_value(lc) : 0;
	/* "held" (optional): indexes into inst; one out of range, or not an integer, is no index */
	if (!(is_held = calloc(json_array_size(inst) + 1, 1)) ||
	    !(trans = calloc(json_array_size(inst) + 1, sizeof(*trans))))
		goto oom;
	for (size_t k = 0; json_is_array(held) && k < json_array_size(held); k++) {
		const json_t *x = json_array_get(held, k);
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    (size_t)json_integer_value(x) >= json_array_size(inst))
			continue;
		is_held[json_integer_value(x)] = 1;
		/* "held_at" (optional), beside "held": [value or null, step, threshold]; else none */
		const json_t *at = json_is_array(held_at) ? json_array_get(held_at, k) : NULL;
		if (json_is_array(at) && json_array_size(at) == 3 && (json_is_number(json_array_get(at, 0)) ||
		    json_is_null(json_array_get(at, 0))) && json_is_integer(json_array_get(at, 1)) &&
		    json_is_number(json_array_get(at, 2)))
			trans[json_integer_value(x)] = at;
	}
	for (size_t i = 0; i < json_array_size(inst); i++) {
		const json_t *a = json_array_get(inst, i);
		const char *run = json_string_value(json_array_get(a, 0));
		const json_t *t = json_array_get(a, 1), *above = json_array_get(a, 3);
		const json_t *step = json_array_get(a, 4), *v = json_array_get(a, 5);
		const json_t *prev_above = json_array_get(a, 8);
		struct alert_inst *x = &s->inst[s->n_inst];
		x->state = alert_state_of(json_array_get(a, 2));
		x->prev_state = alert_state_of(json_array_get(a, 7));
		if (!json_is_array(a) || json_array_size(a) != 9 || !run || !(json_is_string(t) ||
		    json_is_null(t)) || x->state < 0 || x->prev_state < 0 || !json_is_integer(above) ||
		    json_integer_value(above) < 0 || !json_is_integer(step) ||
		    !(json_is_number(v) || json_is_null(v)) || !json_is_number(json_array_get(a, 6)) ||
		    !json_is_integer(prev_above) || json_integer_value(prev_above) < 0)
			continue;	/* an instance this version cannot read; the others stand */
		x->above = json_integer_value(above);
		x->prev_above = json_integer_value(prev_above);
		x->step = json_integer_value(step);
		x->value = num_of(v);
		x->since = json_number_value(json_array_get(a, 6));
		x->held = is_held[i];
		if ((x->has_trans = trans[i] != NULL)) {
			x->trans_value = num_of(json_array_get(trans[i], 0));
			x->trans_step = json_integer_value(json_array_get(trans[i], 1));
			x->trans_threshold = json_number_value(json_array_get(trans[i], 2));
		}
		if (!(x->run = strdup(run)) || (json_is_string(t) && !(x->tensor = strdup(json_string_value(t))))) {
			s->n_inst++;	/* what it holds is freed with it */
			goto oom;
		}
		s->n_inst++;
	}
	free(is_held);
	free(trans);
	return s;
oom:
	free(is_held);
	free(trans);
	alert_state_free(s);
	wd_error(err, errlen, "alert record: out of memory");
	return NULL;
}

void record_release(struct record *r)
{
	alert_state_free(r->alert);
	free(r->run);
	free(r->file);
	free(r->why);
	free(r->id);
	result_batch_free(&r->batch);
	memset(r, 0, sizeof(*r));
}

int record_decode(const char *payload, size_t len, struct record *out, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *o = json_loadb(payload, len, 0, &jerr);
	const char *t = json_string_value(json_object_get(o, "t"));
	const char *run = json_string_value(json_object_get(o, "run"));
	const json_t *step = json_object_get(o, "step");
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!o) {
		return wd_error(err, errlen, "record: not JSON: %s (offset %d)", jerr.text,
				jerr.position);
	}
	if (!t) {
		json_decref(o);
		return wd_error(err, errlen, "record: no \"t\" saying its kind");
	}
	if (!strcmp(t, "snapshot") || !strcmp(t, "drop") || !strcmp(t, "expired") || !strcmp(t, "conflict") ||
	    !strcmp(t, "mixed") || !strcmp(t, "rerun") || !strcmp(t, "forget")) {
		int stepped = strcmp(t, "forget") != 0;
		if (!run || (stepped && !json_is_integer(step))) {
			rc = wd_error(err, errlen, "%s record: needs run%s", t, stepped ? " and step" : "");
			goto out;
		}
		if (!(out->run = strdup(run))) {
			rc = wd_error(err, errlen, "%s record: out of memory", t);
			goto out;
		}
		out->step = stepped ? json_integer_value(step) : 0;
	}
	if (!strcmp(t, "snapshot")) {
		const char *file = json_string_value(json_object_get(o, "file"));
		out->kind = RECORD_SNAPSHOT;
		out->tensors = (uint64_t)json_integer_value(json_object_get(o, "tensors"));
		out->bytes = (uint64_t)json_integer_value(json_object_get(o, "bytes"));
		out->file = file ? strdup(file) : NULL;
		/* content: absent in records older than it; such steps go unchecked */
		out->id = identity_from_json(json_object_get(o, "content"));
		out->at = json_number_value(json_object_get(o, "at"));	/* 0 when absent */
	} else if (!strcmp(t, "drop")) {
		const char *why = json_string_value(json_object_get(o, "why"));
		out->kind = RECORD_DROP;
		out->why = why ? strdup(why) : NULL;
	} else if (!strcmp(t, "expired") || !strcmp(t, "mixed")) {
		int mixed = !strcmp(t, "mixed");
		const char *why = json_string_value(json_object_get(o, mixed ? "who" : "why"));
		out->kind = mixed ? RECORD_MIXED : RECORD_EXPIRED;
		out->why = strdup(why ? why : "");
		out->at = json_number_value(json_object_get(o, "at"));	/* 0 when absent */
		if (!out->why) {
			rc = wd_error(err, errlen, "%s record: out of memory", t);
			goto out;
		}
	} else if (!strcmp(t, "conflict")) {
		out->kind = RECORD_CONFLICT;
		out->at = json_number_value(json_object_get(o, "at"));
		out->own = json_is_true(json_object_get(o, "own"));
	} else if (!strcmp(t, "rerun")) {
		const char *hex = json_string_value(json_object_get(o, "session"));
		const json_t *from = json_object_get(o, "from");
		char *end = NULL;
		errno = 0;
		out->session = hex ? strtoull(hex, &end, 16) : 0;
		if (!hex || !*hex || *end || errno || !out->session || !json_is_integer(from)) {
			rc = wd_error(err, errlen, "rerun record: needs session (16 hex digits, not 0) and from");
			goto out;
		}
		out->kind = RECORD_RERUN;
		out->from = json_integer_value(from);
	} else if (!strcmp(t, "forget")) {
		out->kind = RECORD_FORGET;
	} else if (!strcmp(t, "result")) {
		if (!(out->batch = batch_of(o, err, errlen))) {
			rc = -1;
			goto out;
		}
		out->kind = RECORD_RESULT;
		out->step = out->batch->step;
	} else if (!strcmp(t, "alert")) {
		if (!(out->alert = alert_of(o, err, errlen))) {
			rc = -1;
			goto out;
		}
		out->kind = RECORD_ALERT;
	}
out:
	if (rc < 0)
		record_release(out);
	json_decref(o);
	return rc;
}

struct result_batch *record_result_decode(const char *payload, size_t len)
{
	struct record r;
	struct result_batch *b = NULL;

	if (record_decode(payload, len, &r, NULL, 0) == 0 && r.kind == RECORD_RESULT) {
		b = r.batch;
		r.batch = NULL;
	}
	record_release(&r);
	return b;
}

int record_result_study(const char *payload, size_t len, char *study, size_t size, int64_t *step)
{
	json_t *o = json_loadb(payload, len, 0, NULL);
	const char *t = json_string_value(json_object_get(o, "t"));
	const char *s = json_string_value(json_object_get(o, "study"));
	int r = t && s && !strcmp(t, "result");

	if (r) {
		snprintf(study, size, "%s", s);
		*step = json_integer_value(json_object_get(o, "step"));
	}
	json_decref(o);
	return r;
}

/* --- runs rm --- */

int record_result_without(const char *payload, size_t len, const char *run, char **out)
{
	json_t *o = json_loadb(payload, len, 0, NULL);
	const char *t = json_string_value(json_object_get(o, "t"));
	const char *base = json_string_value(json_object_get(o, "baseline"));
	json_t *rows = json_object_get(o, "rows"), *keep;
	int r = 0;

	if (!t || strcmp(t, "result") || !json_is_array(rows))
		goto out;
	if (base && !strcmp(base, run)) {	/* every row was against it */
		r = 2;
		goto out;
	}
	if (!(keep = json_array()))
		goto out;
	for (size_t i = 0; i < json_array_size(rows); i++) {
		json_t *row = json_array_get(rows, i);
		const char *who = json_string_value(json_array_get(row, 3));
		if (who && !strcmp(who, run))
			r = 1;
		else
			json_array_append(keep, row);
	}
	if (r == 1 && json_array_size(keep) == 0)
		r = 2;
	/* its note goes with its rows, as result_batch_forget drops it (a review: a replay kept it) */
	json_t *notes = json_object_get(o, "notes");
	if (r != 2 && json_object_get(notes, run)) {
		r = 1;
		json_object_del(notes, run);
		if (!json_object_size(notes))
			json_object_del(o, "notes");
	}
	if (r == 1) {
		json_object_set(o, "rows", keep);
		if (!(*out = json_dumps(o, JSON_COMPACT)))
			r = 0;	/* out of memory: the record stays as it was */
	}
	json_decref(keep);
out:
	json_decref(o);
	return r;
}

size_t record_results_without(char **rec, size_t n, const char *run,
			      void (*seen)(void *ctx, const char *payload), void *ctx)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		char *out = NULL;
		int f = record_result_without(rec[i], strlen(rec[i]), run, &out);
		if (f && seen)
			seen(ctx, rec[i]);
		if (f == 2) {
			free(rec[i]);
			continue;
		}
		if (f == 1) {
			free(rec[i]);
			rec[i] = out;
		}
		rec[k++] = rec[i];
	}
	return k;
}
