/*
 * records.h: the write-ahead log's record formats (docs/storage.md, "Write-
 * ahead log"), encoded and decoded here and nowhere else. wal.h moves opaque
 * payloads; this says what they hold:
 *
 *   snapshot  {"t":"snapshot","run","step","tensors","bytes","file","content"}
 *   result    {"t":"result","study","step","baseline","proxies","rows":[...]}
 *   drop      {"t":"drop","run","step","why"}
 *   expired   {"t":"expired","run","step","at","why"}
 *   conflict  {"t":"conflict","run","step","at"}
 *   mixed     {"t":"mixed","run","step","at","who"}
 *   rerun     {"t":"rerun","run","step","session","from"}
 *   forget    {"t":"forget","run"}
 *   alert     {"t":"alert","rule","def","last_command","reset"?,"inst":[...],"held"?:[...]}
 *
 * A result row is [kind, role, tensor|null, run, numel, w1, max_abs_diff,
 * rel_l2, nan, posinf, neginf, [ratio per proxy], wall], non-finite numbers
 * as null. An alert instance is [run, tensor|null, state, above, step,
 * value|null, since, prev_state, prev_above], state "inactive", "pending" or
 * "firing" (docs/reliability.md, "Alert state"). Depends on libc, jansson (inside only), identity.h, result_batch.h.
 */
#ifndef WD_RECORDS_H
#define WD_RECORDS_H

#include <stddef.h>
#include <stdint.h>

struct result_batch;
struct snap_id;
struct snapshot;

enum record_kind {
	RECORD_OTHER = 0,	/* a kind this version does not know (a later one's): skipped */
	RECORD_SNAPSHOT,
	RECORD_RESULT,
	RECORD_DROP,
	RECORD_FORGET,
	RECORD_ALERT,
	RECORD_EXPIRED,
	RECORD_CONFLICT,
	RECORD_MIXED,
	RECORD_RERUN,
};

/* One alert instance as the WAL keeps it (alerts.c's, without its links). */
struct alert_inst {
	const char *run, *tensor;	/* tensor NULL unless scope: tensors */
	int state, prev_state;		/* 0 inactive, 1 pending, 2 firing */
	int64_t above, prev_above, step;
	double value, since;		/* value NaN: none */
	int held;			/* its command has not heard its state yet (command_min_interval) */
	/*
	 * held: the transition its command owes, as it was judged (value NaN:
	 * none; the threshold then, which a reload may have changed since);
	 * has_trans 0 in records before "held_at": the latest value stands in.
	 */
	int has_trans;
	double trans_value, trans_threshold;
	int64_t trans_step;
};

/*
 * An "alert" record: instances of one rule written after an evaluation
 * changed them. def: the hash of what the rule's instances mean (alerts.c);
 * reset: the rule's instances were dropped (a reload changed or removed it).
 */
struct alert_state {
	const char *rule;
	uint64_t def;
	int reset;
	double last_command;		/* Unix seconds; 0: never */
	struct alert_inst *inst;
	size_t n_inst;
};

/* One decoded record; what a kind does not have is zero. */
struct record {
	enum record_kind kind;
	char *run;			/* snapshot, drop, expired, conflict, mixed, rerun, forget */
	int64_t step;			/* snapshot, drop, expired, conflict, mixed, rerun, result (the baseline's) */
	/* snapshot */
	uint64_t tensors, bytes;
	char *file;			/* spool/RUN/STEP.h5, relative to storage.dir */
	struct snap_id *id;		/* its content; NULL in records written before it */
	/* Unix seconds it was recorded (snapshot, expired, conflict, mixed); 0 in records before "at" */
	double at;
	/* conflict: from the job that had published the run before (its step count went back) */
	int own;
	/* rerun: the publisher's session (hex in the record) and the run's first step it sent again */
	uint64_t session;
	int64_t from;
	/* drop, expired; mixed: its "who" */
	char *why;
	/* result */
	struct result_batch *batch;
	/* alert: its strings are the record's own */
	struct alert_state *alert;
};

/*
 * Payloads (malloc'd, NUL-terminated JSON); NULL when out of memory.
 * record_snapshot: of an assembled snapshot (its identity is computed
 * here), file its spool file relative to storage.dir, at the Unix time
 * it is recorded (now_wall()).
 */
char *record_snapshot(const struct snapshot *snap, const char *file, double at);
char *record_result(const struct result_batch *b);
char *record_drop(const char *run, int64_t step, const char *why);
/* A step of run refused incomplete at Unix seconds at, never durable, for why (its ranks were told that). */
char *record_expired(const char *run, int64_t step, double at, const char *why);
/* A snapshot of run at step refused as a conflict (other content at a durable step) at Unix seconds at. */
char *record_conflict(const char *run, int64_t step, double at, int own);
/* Two jobs first seen publishing run at once, each as its only rank, at step (who: both, peers_message). */
char *record_mixed(const char *run, int64_t step, double at, const char *who);
/*
 * A publisher's session found a re-run of run (struct run's reruns): it
 * sent the run's first step, from, again, and had step refused as a
 * conflict. Replayed, its later steps are refused after a restart too.
 */
char *record_rerun(const char *run, uint64_t session, int64_t from, int64_t step);
char *record_forget(const char *run);
char *record_alert(const struct alert_state *s);

/*
 * Decodes one payload into *out (released with record_release): 0, with
 * kind RECORD_OTHER for a well-formed record of an unknown kind; -1 with
 * err filled when the payload is not JSON, or a known kind lacks a field or
 * has one of the wrong type (*out is then empty). A malformed result row is
 * skipped, as is a snapshot's malformed "content" (its id is then NULL) and
 * a malformed alert instance.
 */
int record_decode(const char *payload, size_t len, struct record *out, char *err, size_t errlen);
void record_release(struct record *r);

/* A "result" record's batch; NULL when it is not one (or out of memory). */
struct result_batch *record_result_decode(const char *payload, size_t len);
/* A "result" record's study and step, without decoding its rows: 1, or 0 when not one. */
int record_result_study(const char *payload, size_t len, char *study, size_t size, int64_t *step);

/*
 * runs rm, on a "result" record: 0 when run is not in it (*out untouched),
 * 1 when rows of run were taken out (*out: the new payload, malloc'd), 2
 * when the whole record goes (run was its baseline, or no row is left).
 * Rows are kept as written, fields this version does not know included.
 */
int record_result_without(const char *payload, size_t len, const char *run, char **out);
/*
 * Filters n "result" records (malloc'd strings) in place through
 * record_result_without: records without run stay, the others are
 * rewritten or freed. seen (may be NULL) is called with each record run was
 * in, before it changes. Returns how many records are left.
 */
size_t record_results_without(char **rec, size_t n, const char *run,
			      void (*seen)(void *ctx, const char *payload), void *ctx);

#endif
