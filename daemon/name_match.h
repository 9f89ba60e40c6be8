/*
 * name_match.h: a run's tensor names against its baseline's, at one step.
 * Tensors are matched by name; one the run lacks gets a row with no drift
 * ('-' in wdrift drift), and one only the run has is not compared. A whole
 * run named otherwise (a model wrapped for DDP or FSDP names every tensor
 * "module.<name>") was a study with no numbers and nothing said: the
 * compute thread now says it (compute.c), once per change. Depends on the
 * checkpoint listings (lib/checkpoint.h) and libc.
 */
#ifndef WD_NAME_MATCH_H
#define WD_NAME_MATCH_H

#include <stddef.h>

#include "checkpoint.h"

struct name_match {
	size_t n_base, n_run;		/* tensors in each listing */
	size_t lacking;			/* the baseline's that the run lacks */
	size_t extra;			/* the run's that the baseline lacks */
	const char *lacking_first;	/* the first of each in name order, into the listings; NULL: none */
	const char *extra_first;
	/*
	 * Tensors of both whose shapes differ (a trial's was silent): W1
	 * compares their values either way. Of another count of elements
	 * (reshaped), max|d| and rel L2 are empty; of as many (relaid, [8, 8]
	 * against [64], or transposed), they pair the elements in storage
	 * order, which another layout makes meaningless. The first of them,
	 * each side's entry: a reshaped one before a relaid one.
	 */
	size_t reshaped, relaid;
	const struct wd_ckpt_entry *reshaped_base, *reshaped_run;
};

/* Counts them: one walk over the two listings, both in name order. */
void name_match_count(const struct wd_ckpt *base, const struct wd_ckpt *run, struct name_match *m);

/*
 * What differs, as one clause for a warning that names the study, step
 * and run before it ("has none of the baseline's 291 tensors: ..."), with
 * the prefix that one side's names carry when that explains it. "" when
 * the names match.
 */
void name_match_say(const struct name_match *m, const struct wd_ckpt *base, const struct wd_ckpt *run,
		    char *buf, size_t len);
/*
 * Where a sentence of name_match_say lays the difference on the baseline
 * (its names carry a prefix the run's lack): the start of that clause in
 * said ("; the baseline's names carry a prefix 'module.' ..."), else NULL.
 * Then the baseline's job is the one to change, and is told too
 * (ingest_tell_names).
 */
const char *name_match_baseline_clause(const char *said);
/*
 * head, said and tail into out (len bytes): said's prefix clause, the way
 * out, whole however long the names before it, which are cut to fit,
 * marked "…" (the job's notice, WIRE_NOTICE_MAX: a cut at a fixed width
 * lost the clause to long names). A cut may split a UTF-8 character: the
 * caller scrubs what it sends as JSON.
 */
void name_match_fit(char *out, size_t len, const char *head, const char *said, const char *tail);
/*
 * "has 1 of the baseline's tensors in another shape ('w' [512], where the
 * baseline's is [1024]): ..." for a warning, as name_match_say, said of
 * the reshaped ones when there are any, else of the relaid ones; "" when
 * every tensor of both has one shape.
 */
void name_match_say_shapes(const struct name_match *m, char *buf, size_t len);

#endif
