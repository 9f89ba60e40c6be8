/*
 * compare.h: the result of comparing checkpoints, shared by the code that
 * computes it (cmd_compare.c) and the code that prints it (compare_out.c).
 */
#ifndef WD_COMPARE_H
#define WD_COMPARE_H

#include <stddef.h>
#include "wdrift.h"

struct compare_proxy {
	char *label;
	const char *path;	/* NULL for a synthetic (rounded) proxy */
	int round_to;		/* WD_BF16 or WD_F16 for round:*, else -1 */
};

struct layer_result {
	char *name;
	uint64_t numel, numel_cand;
	enum wd_dtype dtype, dtype_cand;
	double w1;		/* NaN when a side has no finite value */
	int have_pair;		/* element counts match */
	struct wd_pair_stats pair;
	struct wd_summary base, cand;
	double *proxy_w1;	/* one per proxy */
	double *ratio;		/* w1 / proxy_w1; NaN where proxy_w1 is 0 */
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
};

void compare_print_table(const struct compare_result *r);
int compare_print_json(const struct compare_result *r);

#endif
