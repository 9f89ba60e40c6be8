/*
 * test_records.c: the WAL's record codec (daemon/records.c). Each kind
 * comes back from its payload as it went in (snapshot, result, drop,
 * forget, alert); a kind of a later version is skipped; a malformed payload, cut
 * at any byte or missing a field, is refused with a reason, never a crash;
 * runs rm takes a run's rows out of a result record.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "identity.h"
#include "records.h"
#include "result_batch.h"
#include "state.h"

static void test_snapshot(void)
{
	struct run run = { .name = "base" };
	uint64_t shape_w[2] = { 3, 4 }, shape_b[1] = { 4 };
	uint32_t crc_w = 0xdeadbeef, crc_b = 0x12345678;
	struct tensor_buf t[2] = {
		{ .name = "layers.0.w", .dtype = WD_F32, .ndims = 2, .crcs = &crc_w, .n_ranges = 1 },
		{ .name = "layers.0.b", .dtype = WD_BF16, .ndims = 1, .crcs = &crc_b, .n_ranges = 1 },
	};
	memcpy(t[0].shape, shape_w, sizeof(shape_w));
	memcpy(t[1].shape, shape_b, sizeof(shape_b));
	struct snapshot snap = { .run = &run, .step = 700, .tensors = t, .n_tensors = 2, .bytes = 56 };
	char *p = record_snapshot(&snap, "spool/base/700.h5", 1790000000.25), err[256] = "";
	struct record r;

	CHECK(p && strstr(p, "\"t\":\"snapshot\""), "a snapshot record says its kind: %s", p ? p : "NULL");
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0, "it decodes (%s)", err);
	CHECK(r.kind == RECORD_SNAPSHOT && !strcmp(r.run, "base") && r.step == 700,
	      "as a snapshot of run 'base' at step 700 (%d %s %lld)", r.kind, r.run, (long long)r.step);
	CHECK(r.tensors == 2 && r.bytes == 56 && r.file && !strcmp(r.file, "spool/base/700.h5"),
	      "with its tensor count, bytes and spool file");
	CHECK(r.at == 1790000000.25, "and the Unix time it was recorded (%.17g)", r.at);
	{
		const char old[] = "{\"t\":\"snapshot\",\"run\":\"a\",\"step\":1,\"file\":\"spool/a/1.h5\"}";
		struct record o;
		CHECK(record_decode(old, strlen(old), &o, err, sizeof(err)) == 0 && o.at == 0 && !o.id,
		      "a record from before \"at\" and \"content\" decodes with neither (%s)", err);
		record_release(&o);
	}
	const struct tensor_id *w = r.id ? identity_find(r.id, identity_name_hash("layers.0.w")) : NULL;
	const struct tensor_id *b = r.id ? identity_find(r.id, identity_name_hash("layers.0.b")) : NULL;
	CHECK(r.id && r.id->n == 2 && w && b, "and its identity: both tensors");
	CHECK(w && w->crc == crc_w && w->dtype == WD_F32 &&
	      w->shape_hash == identity_shape_hash(2, shape_w),
	      "each with its CRC-32, dtype and shape (layers.0.w)");
	CHECK(b && b->crc == crc_b && b->dtype == WD_BF16, "each with its CRC-32 and dtype (layers.0.b)");
	record_release(&r);
	CHECK(r.run == NULL && r.id == NULL && r.kind == RECORD_OTHER, "record_release empties it");
	free(p);

	const char *old = "{\"t\":\"snapshot\",\"run\":\"a\",\"step\":3,\"tensors\":1,\"bytes\":8,"
			  "\"file\":\"spool/a/3.h5\"}";
	CHECK(record_decode(old, strlen(old), &r, err, sizeof(err)) == 0 && r.kind == RECORD_SNAPSHOT &&
	      r.step == 3 && r.id == NULL, "a record older than identities decodes, with no identity");
	record_release(&r);
}

static struct drift_row row(int kind, int role, const char *tensor, const char *run, double w1,
			    double mad, double r0, double r1)
{
	struct drift_row x = { .step = 40, .kind = kind, .role = role, .tensor = tensor, .run = run,
			       .numel = 12, .w1 = w1, .max_abs_diff = mad, .rel_l2 = 0.125, .nan = 1,
			       .posinf = 2, .neginf = 3, .wall = 1700000000.5 };
	x.ratio[0] = r0;
	x.ratio[1] = r1;
	return x;
}

static int same(double a, double b)
{
	return isnan(a) ? isnan(b) : a == b;
}

static void test_result(void)
{
	struct drift_row rows[3] = {
		row(ROW_TENSOR, ROLE_PROXY, "layers.0.w", "lowprec", 0.25, 0.5, 1.0, NAN),
		row(ROW_TENSOR, ROLE_CANDIDATE, "layers.0.w", "fa", 1.0 / 3, NAN, 4.0 / 3, NAN),
		row(ROW_MEAN, ROLE_CANDIDATE, NULL, "fa", 0.1, NAN, NAN, 2.5),
	};
	struct result_batch b = { .study = "demo", .step = 40, .baseline = "base",
				  .proxies = { "lowprec", "round:bf16" }, .n_proxies = 2, .rows = rows,
				  .n_rows = 3 };
	char *p = record_result(&b), err[256] = "";
	struct record r;

	CHECK(p != NULL, "a result record encodes");
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_RESULT &&
	      r.batch, "and decodes as a result (%s)", err);
	const struct result_batch *d = r.batch;
	CHECK(d && !strcmp(d->study, "demo") && d->step == 40 && r.step == 40 &&
	      !strcmp(d->baseline, "base"), "its study, step and baseline come back");
	CHECK(d && d->n_proxies == 2 && !strcmp(d->proxies[0], "lowprec") &&
	      !strcmp(d->proxies[1], "round:bf16"), "its proxy labels, in order");
	int ok = d && d->n_rows == 3;
	for (size_t i = 0; ok && i < 3; i++) {
		const struct drift_row *x = &d->rows[i], *y = &rows[i];
		ok = x->step == 40 && x->kind == y->kind && x->role == y->role && !strcmp(x->run, y->run) &&
		     (y->tensor ? x->tensor && !strcmp(x->tensor, y->tensor) : !x->tensor) &&
		     x->numel == 12 && same(x->w1, y->w1) && same(x->max_abs_diff, y->max_abs_diff) &&
		     x->rel_l2 == 0.125 && x->nan == 1 && x->posinf == 2 && x->neginf == 3 &&
		     same(x->ratio[0], y->ratio[0]) && same(x->ratio[1], y->ratio[1]) &&
		     x->wall == y->wall;
	}
	CHECK(ok, "every row comes back field for field, bit for bit (1/3 too), NaN as NaN");
	record_release(&r);

	struct result_batch *rb = record_result_decode(p, strlen(p));
	CHECK(rb && rb->n_rows == 3, "record_result_decode gives the batch");
	result_batch_free(&rb);
	char study[64] = "";
	int64_t step = 0;
	CHECK(record_result_study(p, strlen(p), study, sizeof(study), &step) == 1 &&
	      !strcmp(study, "demo") && step == 40, "record_result_study reads its study and step");

	/* runs rm on it */
	char *out = NULL;
	CHECK(record_result_without(p, strlen(p), "other", &out) == 0 && !out,
	      "a run not in it leaves it as it is");
	CHECK(record_result_without(p, strlen(p), "fa", &out) == 1 && out,
	      "a candidate in it: its rows go");
	rb = out ? record_result_decode(out, strlen(out)) : NULL;
	CHECK(rb && rb->n_rows == 1 && !strcmp(rb->rows[0].run, "lowprec"), "the proxy's row is left");
	result_batch_free(&rb);
	free(out);
	CHECK(record_result_without(p, strlen(p), "base", &out) == 2, "its baseline: the whole record goes");
	free(p);
	/* a run's note goes with its rows (a review: the replay of runs rm kept it, for a run with no rows) */
	struct result_note notes[2] = { { "fa", "names carry a prefix 'module.'" }, { "lowprec", "lacks 2" } };
	b.notes = notes;
	b.n_notes = 2;
	p = record_result(&b);
	CHECK(p && record_result_without(p, strlen(p), "fa", &out) == 1 && out, "a run with rows and a note: rewritten");
	rb = out ? record_result_decode(out, strlen(out)) : NULL;
	CHECK(rb && !result_batch_note_of(rb, "fa") && result_batch_note_of(rb, "lowprec") && rb->n_notes == 1,
	      "its note went with its rows; the other run's stays");
	result_batch_free(&rb);
	free(out);
	out = NULL;
	b.n_rows = 1;	/* lowprec's row alone, and fa's note: a note of a run with no rows */
	free(p);
	p = record_result(&b);
	CHECK(p && record_result_without(p, strlen(p), "fa", &out) == 1 && out && !strstr(out, "module."),
	      "a note of a run with no rows in the record: the note goes (%s)", out ? out : "unchanged");
	free(out);
	free(p);
}

/* A step computed again keeps the rows of the runs it did not compute (control.c, t97). */
static void test_keep_runs(void)
{
	struct drift_row old_rows[4] = {
		row(ROW_TENSOR, ROLE_CANDIDATE, "layers.0.w", "fa", 0.5, 1, 5.0, 6.0),
		row(ROW_TENSOR, ROLE_CANDIDATE, "layers.0.w", "fb", 0.75, 1, 7.0, 8.0),
		row(ROW_MEAN, ROLE_CANDIDATE, NULL, "fb", 0.75, NAN, 7.0, 8.0),
		row(ROW_TENSOR, ROLE_PROXY, "layers.0.w", "lowprec", 0.25, 1, NAN, NAN),
	};
	struct result_note old_notes[2] = { { "fb", "has none of the baseline's 1 tensors" },
					    { "lowprec", "lacks 1 of the baseline's 2 tensors" } };
	struct result_batch old = { .study = "demo", .step = 40, .baseline = "base",
				    .proxies = { "lowprec", "other" }, .n_proxies = 2, .rows = old_rows,
				    .n_rows = 4, .notes = old_notes, .n_notes = 2 };
	/* computed again: fa and a synthetic proxy, under labels in another order */
	struct drift_row rows[2] = {
		row(ROW_TENSOR, ROLE_CANDIDATE, "layers.0.w", "fa", 0.5, 1, 9.0, 2.0),
		row(ROW_TENSOR, ROLE_PROXY, "layers.0.w", "lowprec", 0.25, 1, NAN, NAN),
	};
	char *p = record_result(&(struct result_batch){ .study = "demo", .step = 40, .baseline = "base",
		.proxies = { "round:bf16", "lowprec" }, .n_proxies = 2, .rows = rows, .n_rows = 2 });
	struct result_batch *b = p ? record_result_decode(p, strlen(p)) : NULL;

	CHECK(b != NULL, "a batch to keep rows in");
	if (!b) {
		free(p);
		return;
	}
	result_batch_index(b);
	/* superseded: runs whose steps align to another baseline step now (control.c says which) */
	const char *only_synthetic[] = { "round:bf16" }, *with_fb[] = { "fb", "round:bf16" };
	CHECK(result_batch_keeps(b, &old, with_fb, 2) == 0,
	      "a run the study still names, left out of the step computed again (its step aligns to "
	      "another baseline step now), is not kept: its old rows are superseded");
	CHECK(result_batch_keeps(b, &old, only_synthetic, 1) == 2,
	      "a former candidate's two rows would be kept (fb is not superseded)");
	CHECK(result_batch_keep_runs(b, &old, only_synthetic, 1) == 0 && b->n_rows == 4,
	      "fb's two rows are kept beside the two computed (%zu rows)", b->n_rows);
	const struct drift_row *fa = result_batch_find(b, "fa", "layers.0.w"),
			       *fb = result_batch_find(b, "fb", "layers.0.w");
	CHECK(fa && fa->ratio[0] == 9.0 && fa->ratio[1] == 2.0, "fa's rows are the new ones");
	CHECK(fb && fb->w1 == 0.75 && fb->role == ROLE_CANDIDATE && isnan(fb->ratio[0]) &&
	      fb->ratio[1] == 7.0, "fb's row, found by the index made again, its ratio under 'lowprec' "
	      "and none under the label it never had");
	CHECK(!strcmp(b->rows[3].run, "fb") && !b->rows[3].tensor && b->rows[3].kind == ROW_MEAN,
	      "its summary row too");
	CHECK(result_batch_keep_runs(b, &old, only_synthetic, 1) == 0 && b->n_rows == 4, "kept once: twice adds nothing");
	const char *nb = result_batch_note_of(b, "fb");
	CHECK(nb && !strcmp(nb, old_notes[0].text) && !result_batch_note_of(b, "lowprec") && b->n_notes == 1,
	      "the kept run's note (its names unlike the baseline's) is kept with its rows, once; not a "
	      "computed run's old one");
	/* a result record keeps its notes: `drift` says them after a restart too (a trial's fell back) */
	char *kept = record_result(b);
	struct result_batch *back = kept ? record_result_decode(kept, strlen(kept)) : NULL;
	CHECK(back && back->n_notes == 1 && result_batch_note_of(back, "fb") &&
	      !strcmp(result_batch_note_of(back, "fb"), old_notes[0].text),
	      "a result record's notes come back from the WAL: %s", kept ? kept : "(none)");
	result_batch_free(&back);
	free(kept);
	kept = record_result(&(struct result_batch){ .study = "demo", .step = 40, .baseline = "base",
		.n_proxies = 0, .rows = rows, .n_rows = 1 });
	CHECK(kept && !strstr(kept, "notes"), "... and one without notes has no \"notes\"");
	free(kept);
	kept = strdup("{\"t\":\"result\",\"study\":\"s\",\"step\":1,\"baseline\":\"b\",\"proxies\":[],"
		      "\"rows\":[],\"notes\":{\"x\":7,\"y\":\"said\"}}");
	back = kept ? record_result_decode(kept, strlen(kept)) : NULL;
	CHECK(back && back->n_notes == 1 && result_batch_note_of(back, "y") && !result_batch_note_of(back, "x"),
	      "a note that is no string is left out, the others kept");
	result_batch_free(&back);
	free(kept);
	struct result_batch *d = result_batch_dup(b);
	CHECK(d && d->n_notes == 1 && result_batch_note_of(d, "fb") && result_batch_note_of(d, "fb") != nb,
	      "a copy of the batch has its own copy of the note");
	CHECK(d && result_batch_forget(d, "fb") == 0 && d->n_notes == 0 && !result_batch_note_of(d, "fb"),
	      "a run forgotten (runs rm): its note goes with its rows");
	const uint32_t *idx = d ? d->index : NULL;
	size_t n_before = d ? d->n_rows : 0;
	CHECK(d && idx && result_batch_forget(d, "nobody") == 0 && d->index == idx && d->n_rows == n_before,
	      "a run the batch has nothing of: the batch untouched, its index not made again (a query "
	      "thread may be reading it: control_forget copies only a batch with the run's rows)");
	result_batch_free(&d);

	old.baseline = "base-before";
	struct result_batch *c = record_result_decode(p, strlen(p));
	CHECK(c && result_batch_keep_runs(c, &old, only_synthetic, 1) == 0 && c->n_rows == 2,
	      "rows of another baseline are not kept: they are stale");
	old.baseline = "base";
	old.step = 50;
	CHECK(c && result_batch_keep_runs(c, &old, only_synthetic, 1) == 0 && c->n_rows == 2, "nor rows of another step");
	result_batch_free(&c);
	result_batch_free(&b);
	free(p);
}

static void test_drop_forget(void)
{
	char *p = record_drop("fa", 15, "step is not a multiple of spool.retention.every (10)");
	char err[256] = "";
	struct record r;

	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_DROP &&
	      !strcmp(r.run, "fa") && r.step == 15 && r.why && strstr(r.why, "every (10)"),
	      "a drop record comes back: run, step and why (%s)", err);
	record_release(&r);
	free(p);
	p = record_forget("old run");
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_FORGET &&
	      !strcmp(r.run, "old run"), "a forget record comes back with its run");
	record_release(&r);
	free(p);
	p = record_expired("fa", 20, 1790000000.5, "expired after 600 s waiting for the other ranks: rank 2 of 4 "
			   "never committed; 'w' has 3072 of 4096 elements");
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_EXPIRED &&
	      !strcmp(r.run, "fa") && r.step == 20 && r.at == 1790000000.5 && r.why &&
	      strstr(r.why, "rank 2 of 4 never committed; 'w' has 3072"),
	      "an expired record comes back: run, step, when and why (%s)", err);
	record_release(&r);
	free(p);
	p = record_conflict("fa", 10, 1790000001.25, 0);
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_CONFLICT &&
	      !strcmp(r.run, "fa") && r.step == 10 && r.at == 1790000001.25 && !r.own && !strstr(p, "own"),
	      "a conflict record comes back: run, step and when (%s)", err);
	record_release(&r);
	free(p);
	/* the job's own step count gone back: said so after a restart too (a trial's CLI said "a re-run?") */
	p = record_conflict("fa", 3, 1790000001.5, 1);
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_CONFLICT &&
	      r.step == 3 && r.own, "a conflict record of the job's own comes back as such (%s)", p ? p : err);
	record_release(&r);
	free(p);
	/* a re-run's session: 64 bits, past a JSON integer's sign, come back whole */
	p = record_rerun("fa", 0xfedcba9876543210ull, 0, 10);
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_RERUN &&
	      !strcmp(r.run, "fa") && r.step == 10 && r.from == 0 && r.session == 0xfedcba9876543210ull,
	      "a rerun record comes back: run, the conflict's step, the session and the first step (%s)", p ? p : err);
	record_release(&r);
	free(p);
	static const char *const bad_rerun[] = {
		"{\"t\":\"rerun\",\"run\":\"fa\",\"step\":1,\"from\":0}",
		"{\"t\":\"rerun\",\"run\":\"fa\",\"step\":1,\"session\":\"xyz\",\"from\":0}",
		"{\"t\":\"rerun\",\"run\":\"fa\",\"step\":1,\"session\":\"0\",\"from\":0}",
		"{\"t\":\"rerun\",\"run\":\"fa\",\"step\":1,\"session\":\"12ab\"}",
		"{\"t\":\"rerun\",\"run\":\"fa\",\"session\":\"12ab\",\"from\":0}",
	};
	for (size_t i = 0; i < sizeof(bad_rerun) / sizeof(bad_rerun[0]); i++) {
		err[0] = 0;
		CHECK(record_decode(bad_rerun[i], strlen(bad_rerun[i]), &r, err, sizeof(err)) < 0 &&
		      strstr(err, "rerun record: needs"), "a malformed rerun record is an error naming it: %s (%s)",
		      bad_rerun[i], err);
		record_release(&r);
	}
	p = record_mixed("mix", 5, 1790000002.0, "ipc pid 10 (after step 10) and ipc pid 11 (step 5, its first)");
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_MIXED &&
	      !strcmp(r.run, "mix") && r.step == 5 && r.at == 1790000002.0 && r.why &&
	      !strcmp(r.why, "ipc pid 10 (after step 10) and ipc pid 11 (step 5, its first)"),
	      "a mixed record comes back: run, step, when and who (%s)", err);
	record_release(&r);
	free(p);
	/* a reason quoting a name cut inside a character ('%.80s'): recorded, the cut byte '?' (a review's was lost) */
	char cut[96];
	snprintf(cut, sizeof(cut), "expired: 'w\xc3\xa9\xc3' has 2 of 4 elements");
	p = record_expired("fa", 21, 1.0, cut);
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_EXPIRED &&
	      r.why && !strcmp(r.why, "expired: 'w\xc3\xa9?' has 2 of 4 elements"),
	      "an expired record whose why holds part of a character: recorded, the part '?' (%s)", err);
	record_release(&r);
	free(p);
	p = record_mixed("mix", 5, 1.0, "ipc pid 1 and \xe2\x82");
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.why &&
	      !strcmp(r.why, "ipc pid 1 and ??"), "so is a mixed record's who (%s)", err);
	record_release(&r);
	free(p);
	const char *no_why = "{\"t\":\"expired\",\"run\":\"fa\",\"step\":3}";
	CHECK(record_decode(no_why, strlen(no_why), &r, err, sizeof(err)) == 0 && r.kind == RECORD_EXPIRED &&
	      r.why && !r.why[0] && r.at == 0, "one without why and at decodes, both empty");
	record_release(&r);
	const char *later = "{\"t\":\"compact\",\"upto\":7}";
	CHECK(record_decode(later, strlen(later), &r, err, sizeof(err)) == 0 && r.kind == RECORD_OTHER,
	      "a kind of a later version decodes as one to skip");
	record_release(&r);
}

static void test_malformed(void)
{
	static const char *bad[] = {
		"", "not json", "[1,2,3]", "{}", "{\"t\":7}", "{\"run\":\"a\",\"step\":1}",
		"{\"t\":\"snapshot\"}", "{\"t\":\"snapshot\",\"run\":\"a\"}",
		"{\"t\":\"snapshot\",\"run\":\"a\",\"step\":\"7\"}", "{\"t\":\"snapshot\",\"run\":3,\"step\":7}",
		"{\"t\":\"drop\",\"run\":\"a\"}", "{\"t\":\"drop\",\"step\":1}", "{\"t\":\"forget\"}",
		"{\"t\":\"expired\",\"run\":\"a\"}", "{\"t\":\"expired\",\"step\":1,\"why\":\"x\"}",
		"{\"t\":\"expired\",\"run\":\"a\",\"step\":\"1\"}", "{\"t\":\"conflict\",\"step\":1}",
		"{\"t\":\"mixed\",\"run\":\"a\"}",
		"{\"t\":\"forget\",\"run\":null}", "{\"t\":\"result\"}",
		"{\"t\":\"result\",\"study\":\"s\",\"step\":1,\"baseline\":\"b\",\"proxies\":[]}",
		"{\"t\":\"result\",\"study\":\"s\",\"step\":1,\"baseline\":\"b\",\"proxies\":[],\"rows\":{}}",
		"{\"t\":\"result\",\"study\":\"s\",\"step\":1.5,\"baseline\":\"b\",\"proxies\":[],\"rows\":[]}",
		"{\"t\":\"result\",\"study\":\"s\",\"step\":1,\"baseline\":\"b\",\"proxies\":[\"a\",\"b\","
		"\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\","
		"\"r\",\"s\",\"t\",\"u\",\"v\",\"w\",\"x\",\"y\",\"z\",\"0\",\"1\",\"2\",\"3\",\"4\",\"5\","
		"\"6\",\"7\",\"8\",\"9\",\"A\",\"B\",\"C\",\"D\",\"E\",\"F\",\"G\",\"H\",\"I\",\"J\",\"K\","
		"\"L\",\"M\",\"N\",\"O\",\"P\",\"Q\",\"R\",\"S\",\"T\",\"U\",\"V\",\"W\",\"X\",\"Y\",\"Z\","
		"\"_\",\"-\",\"+\",\"=\",\"!\"],\"rows\":[]}",
	};
	struct record r;
	char err[256];
	int refused = 0, said = 0, empty = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		r.kind = RECORD_DROP;
		if (record_decode(bad[i], strlen(bad[i]), &r, err, sizeof(err)) == -1)
			refused++;
		else
			printf("# accepted: %s\n", bad[i]);
		said += err[0] != 0;
		empty += r.kind == RECORD_OTHER && !r.run && !r.batch && !r.id;
		record_release(&r);
	}
	size_t n = sizeof(bad) / sizeof(bad[0]);
	CHECK(refused == (int)n, "%d of %zu malformed payloads are refused", refused, n);
	CHECK(said == (int)n && empty == (int)n, "each with a reason, and nothing left in the record");
	CHECK(record_decode("{}", 2, &r, NULL, 0) == -1, "with nowhere to put the reason, still refused");

	/* a good record cut at every byte: refused, never read past its length */
	struct drift_row rows[1] = { row(ROW_TENSOR, ROLE_CANDIDATE, "w", "fa", 0.5, 0.5, 1, 2) };
	struct result_batch b = { .study = "demo", .step = 4, .baseline = "base", .proxies = { "p" },
				  .n_proxies = 1, .rows = rows, .n_rows = 1 };
	char *p = record_result(&b);
	size_t len = p ? strlen(p) : 0;
	int cut_refused = 0;
	for (size_t k = 0; k < len; k++) {
		char *cut = malloc(k + 1);	/* no NUL after it: a read past k would show under ASan */
		memcpy(cut, p, k);
		cut_refused += record_decode(cut, k, &r, err, sizeof(err)) == -1;
		record_release(&r);
		free(cut);
	}
	CHECK(len > 0 && cut_refused == (int)len, "a result record cut at each of its %zu bytes is refused (%d)",
	      len, cut_refused);
	free(p);

	const char *odd_row = "{\"t\":\"result\",\"study\":\"s\",\"step\":2,\"baseline\":\"b\",\"proxies\":[],"
			      "\"rows\":[[0,1,\"w\",\"fa\",4,0.5,0.5,0.5,0,0,0,[],1.0],[0,1],7,"
			      "[0,1,\"w\",null,4,0.5,0.5,0.5,0,0,0,[],1.0]]}";
	CHECK(record_decode(odd_row, strlen(odd_row), &r, err, sizeof(err)) == 0 && r.batch &&
	      r.batch->n_rows == 1 && !strcmp(r.batch->rows[0].run, "fa"),
	      "a row it cannot read is skipped, the others stand");
	record_release(&r);
}

/* An alert record: the state of a rule's instances, both ways, and what it refuses. */
static void test_alert(void)
{
	struct alert_inst in[2] = {
		{ "fa", NULL, 2, 1, 3, 2, 40, 1.75, 1700000000.5, 0, 1, 1.5, 1.0, 30 },
		/* held: the resolve it owes, judged at step 30, value 0.5 under threshold 0.75 */
		{ "fb", "layers.0.w", 0, 2, 0, 1, 40, NAN, 0, 1, 1, 0.5, 0.75, 30 },
	};
	struct alert_state s = { "fa-ratio", 0xfedcba9876543210ull, 0, 1700000001.25, in, 2 };
	char *p = record_alert(&s), err[256] = "";
	struct record r;

	CHECK(p && strstr(p, "\"t\":\"alert\"") && strstr(p, "\"fedcba9876543210\""),
	      "an alert record says its kind and its definition's hash in hex: %s", p ? p : "NULL");
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.kind == RECORD_ALERT &&
	      r.alert, "it decodes (%s)", err);
	const struct alert_state *a = r.alert;
	CHECK(a && !strcmp(a->rule, "fa-ratio") && a->def == s.def && !a->reset &&
	      a->last_command == 1700000001.25 && a->n_inst == 2,
	      "rule, hash, last command and both instances come back");
	CHECK(a && a->n_inst == 2 && !strcmp(a->inst[0].run, "fa") && !a->inst[0].tensor &&
	      a->inst[0].state == 2 && a->inst[0].prev_state == 1 && a->inst[0].above == 3 &&
	      a->inst[0].prev_above == 2 && a->inst[0].step == 40 && a->inst[0].value == 1.75 &&
	      a->inst[0].since == 1700000000.5, "a firing instance, field by field");
	CHECK(a && a->n_inst == 2 && !strcmp(a->inst[1].tensor, "layers.0.w") && a->inst[1].state == 0 &&
	      isnan(a->inst[1].value), "a resolved per-tensor one, its missing value NaN (null)");
	CHECK(a && a->n_inst == 2 && !a->inst[0].held && a->inst[1].held && strstr(p, "\"held\":[1]"),
	      "held (its command has not heard its resolve yet) comes back for that one alone: %s", p);
	CHECK(a && a->n_inst == 2 && a->inst[1].has_trans && a->inst[1].trans_value == 0.5 &&
	      a->inst[1].trans_threshold == 0.75 && a->inst[1].trans_step == 30 && !a->inst[0].has_trans &&
	      strstr(p, "\"held_at\":[[0.5,30,0.75]]"),
	      "a held one's transition (value, step, threshold then) comes back; none kept for the other");
	record_release(&r);
	CHECK(r.alert == NULL && r.kind == RECORD_OTHER, "record_release empties it");
	free(p);

	s.reset = 1;
	s.n_inst = 0;
	p = record_alert(&s);
	CHECK(p && record_decode(p, strlen(p), &r, err, sizeof(err)) == 0 && r.alert && r.alert->reset &&
	      r.alert->n_inst == 0, "a reset record, with no instance");
	record_release(&r);
	free(p);
	in[0].state = 3;	/* no such state: nothing is written rather than a wrong one */
	s.n_inst = 1;
	CHECK(record_alert(&s) == NULL, "an instance in no known state is not encoded");

	static const char *bad[] = {
		"{\"t\":\"alert\"}",
		"{\"t\":\"alert\",\"rule\":\"r\",\"def\":\"00000000000000ff\"}",
		"{\"t\":\"alert\",\"rule\":\"\",\"def\":\"00000000000000ff\",\"inst\":[]}",
		"{\"t\":\"alert\",\"rule\":7,\"def\":\"00000000000000ff\",\"inst\":[]}",
		"{\"t\":\"alert\",\"rule\":\"r\",\"def\":\"ff\",\"inst\":[]}",
		"{\"t\":\"alert\",\"rule\":\"r\",\"def\":\"00000000000000fg\",\"inst\":[]}",
		"{\"t\":\"alert\",\"rule\":\"r\",\"def\":255,\"inst\":[]}",
		"{\"t\":\"alert\",\"rule\":\"r\",\"def\":\"00000000000000ff\",\"inst\":{}}",
		"{\"t\":\"alert\",\"rule\":\"r\",\"def\":\"00000000000000ff\",\"inst\":[],"
		"\"last_command\":\"now\"}",
	};
	int refused = 0, said = 0;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		if (record_decode(bad[i], strlen(bad[i]), &r, err, sizeof(err)) == -1)
			refused++;
		else
			printf("# accepted: %s\n", bad[i]);
		said += err[0] != 0 && r.alert == NULL;
		record_release(&r);
	}
	size_t n = sizeof(bad) / sizeof(bad[0]);
	CHECK(refused == (int)n && said == (int)n, "%d of %zu malformed alert records are refused, "
	      "each with a reason", refused, n);

	/* "held_at" beside "held": a malformed entry, or none (an older record), leaves no transition */
	const char *ats = "{\"t\":\"alert\",\"rule\":\"r\",\"def\":\"00000000000000ff\",\"inst\":["
		"[\"fa\",null,\"inactive\",0,10,0.5,5.0,\"firing\",2],"
		"[\"fb\",null,\"inactive\",0,10,0.5,5.0,\"firing\",2],"
		"[\"fc\",null,\"inactive\",0,10,0.5,5.0,\"firing\",2],"
		"[\"fd\",null,\"inactive\",0,10,0.5,5.0,\"firing\",2]],"
		"\"held\":[0,1,2,3],\"held_at\":[[null,9,1.0],[0.5,\"x\",1.0],[0.5,9],7]}";
	CHECK(record_decode(ats, strlen(ats), &r, err, sizeof(err)) == 0 && r.alert && r.alert->n_inst == 4 &&
	      r.alert->inst[0].held && r.alert->inst[0].has_trans && isnan(r.alert->inst[0].trans_value) &&
	      r.alert->inst[0].trans_step == 9 && r.alert->inst[3].held && !r.alert->inst[1].has_trans &&
	      !r.alert->inst[2].has_trans && !r.alert->inst[3].has_trans,
	      "held_at: a well-formed entry is read (null value: none), malformed ones leave none, all held");
	record_release(&r);
	const char *old_rec = "{\"t\":\"alert\",\"rule\":\"r\",\"def\":\"00000000000000ff\",\"inst\":["
		"[\"fa\",null,\"inactive\",0,10,0.5,5.0,\"firing\",2]],\"held\":[0]}";
	CHECK(record_decode(old_rec, strlen(old_rec), &r, err, sizeof(err)) == 0 && r.alert && r.alert->n_inst == 1 &&
	      r.alert->inst[0].held && !r.alert->inst[0].has_trans, "a record before held_at: held, no transition");
	record_release(&r);

	/* instances it cannot read are skipped, the others stand */
	const char *odd = "{\"t\":\"alert\",\"rule\":\"r\",\"def\":\"00000000000000ff\",\"inst\":["
		"[\"fa\",null,\"firing\",2,10,1.5,5.0,\"pending\",1],"
		"[\"fb\",null,\"burning\",2,10,1.5,5.0,\"pending\",1],"
		"[\"fc\",null,\"firing\",-1,10,1.5,5.0,\"pending\",1],"
		"[\"fd\",null,\"firing\",2,10.5,1.5,5.0,\"pending\",1],"
		"[\"fe\",3,\"firing\",2,10,1.5,5.0,\"pending\",1],"
		"[\"ff\",null,\"firing\",2,10,\"x\",5.0,\"pending\",1],"
		"[null,null,\"firing\",2,10,1.5,5.0,\"pending\",1],"
		"[\"fg\",null,\"firing\",2,10,1.5,5.0],7,\"x\",{},"
		"[\"fh\",\"t\",\"inactive\",0,11,null,0,\"inactive\",0]]}";
	CHECK(record_decode(odd, strlen(odd), &r, err, sizeof(err)) == 0 && r.alert &&
	      r.alert->n_inst == 2 && !strcmp(r.alert->inst[0].run, "fa") &&
	      !strcmp(r.alert->inst[1].run, "fh") && !strcmp(r.alert->inst[1].tensor, "t"),
	      "of 12 instances, the 2 well-formed ones are read (%zu)", r.alert ? r.alert->n_inst : 0);
	record_release(&r);

	/* a good alert record cut at every byte: refused, never read past its length */
	in[0].state = 2;
	s.reset = 0;
	s.n_inst = 2;
	p = record_alert(&s);
	size_t len = p ? strlen(p) : 0;
	int cut_refused = 0;
	for (size_t k = 0; k < len; k++) {
		char *cut = malloc(k + 1);
		memcpy(cut, p, k);
		cut_refused += record_decode(cut, k, &r, err, sizeof(err)) == -1;
		record_release(&r);
		free(cut);
	}
	CHECK(len > 0 && cut_refused == (int)len, "an alert record cut at each of its %zu bytes is refused (%d)",
	      len, cut_refused);
	free(p);
}

int main(void)
{
	test_snapshot();
	test_result();
	test_keep_runs();
	test_drop_forget();
	test_malformed();
	test_alert();
	return tap_done();
}
