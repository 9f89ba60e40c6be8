/*
 * compare_result.h: the result of `wdrift compare`, shared by the code that
 * computes it (cmd_compare.c) and the code that prints it (compare_out.c).
 * Each tensor's drift is lib/drift.h's; this adds what the CLI alone shows.
 */
#ifndef WD_COMPARE_RESULT_H
#define WD_COMPARE_RESULT_H

#include <stddef.h>

#include "drift.h"
#include "wdrift.h"

struct compare_proxy {
	char *label;
	const char *path;	/* NULL for a synthetic (rounded) proxy */
	int round_to;		/* WD_BF16 or WD_F16 for round:*, else -1 */
	/* round:*: the baseline's finite values out of the format's range, rounded to +-Inf */
	uint64_t overflow, overflow_now;	/* in all; in the tensor being compared */
	char overflow_first[256];		/* the first tensor that had some */
};

struct layer_result {
	char *name;
	uint64_t numel;		/* the baseline's; the candidate's is drift.numel */
	enum wd_dtype dtype, dtype_cand;
	struct wd_drift_tensor drift;	/* the candidate against the baseline */
	struct wd_summary base, cand;
	double *proxy_w1;	/* one per proxy */
	double *ratio;		/* wd_drift_ratio(drift.w1, proxy_w1) */
	/* equal counts, other shapes (a transposed weight): what the element-wise columns mean; NULL */
	char *shape_note;
};

/*
 * Where the wall-clock time of `wdrift compare --timings` went, in seconds:
 * from the command's start (after the process started and loaded its
 * libraries) to the output. engine: inside engine calls (start, prepare,
 * drift, proxy W1); read_wait: waiting for reader children's tensors
 * (reads that finished while the engine ran cost nothing here); open:
 * starting the children and their listings.
 */
struct compare_timings {
	int on;
	double total, open, read_wait, engine;
};

struct compare_result {
	const char *baseline, *candidate;
	const char *engine;
	size_t n_proxies;
	struct compare_proxy *proxies;
	size_t n_layers;
	struct layer_result *layers;
	size_t n_only_base, n_only_cand;
	char **only_base, **only_cand;
	char *unmatched_hint;	/* unmatched names that differ by a prefix; NULL: none */
	size_t n_skipped;	/* --skip-other: tensors not compared, their element type not a float */
	struct compare_skipped {
		char *name, *why;
	} *skipped;
	struct compare_timings timings;
};

void compare_print_table(const struct compare_result *r);
/* The --timings line of the table: "timings: total ... s = ..." */
void compare_print_timings(const struct compare_timings *t);
int compare_print_json(const struct compare_result *r);

#endif
