/*
 * result_cover.h: which (baseline step, run) pairs of a study the logged
 * result records hold a row for. The compute thread asks it when a reload
 * adds a study, or changes its runs, to compute that study at the steps it
 * lacks (compute.c, "a reload's new studies"). Plain data; depends on
 * records.h (decoding the records) and libc.
 */
#ifndef WD_RESULT_COVER_H
#define WD_RESULT_COVER_H

#include <stddef.h>
#include <stdint.h>

struct result_cover {
	struct result_cover_pair {
		int64_t step;	/* the baseline's */
		char *run;	/* a run, or a synthetic proxy's label; or with label, a proxy label */
		int label;	/* the step's candidate rows carry ratios under the proxy label run */
	} *v;
	size_t n, cap;
};

/*
 * The pairs of study's rows in the result records payloads[0..n) (WAL
 * payloads), counting only those computed against baseline: a study whose
 * baseline changed has no rows yet. 0, or -ENOMEM (cv is then empty but
 * must still be released).
 */
int result_cover_build(struct result_cover *cv, char *const *payloads, size_t n, const char *study,
		       const char *baseline);
/* Has run a row at the baseline's step? */
int result_cover_has(const struct result_cover *cv, int64_t step, const char *run);
/*
 * Have the step's candidate rows a ratio under the proxy label, computed
 * with it (a label a reload added or renamed has none: its rows hold NaN
 * there, and a trial's renamed proxy lost every ratio of the history)?
 */
int result_cover_has_label(const struct result_cover *cv, int64_t step, const char *label);
void result_cover_release(struct result_cover *cv);

#endif
