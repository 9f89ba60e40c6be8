/*
 * compare.h: one study at one step, through the engine, into drift rows
 * (docs/daemon.md, "Compute"). The compute thread aligns the runs and opens
 * their spooled snapshots (compute.c); this turns them into the batch of
 * rows that goes to the WAL and the drift log: each run's tensor rows, then
 * its summary rows. What a row holds is defined once, in lib/drift.h.
 */
#ifndef WD_COMPARE_H
#define WD_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "driftlog.h"

struct result_batch;
struct wd_ckpt;
struct wd_engine;

/* The compute thread's copy of a study (config.h's, as of the last reload). */
struct cstudy {
	char *name, *baseline;
	char **cands;
	size_t n_cands;
	char *labels[DRIFTLOG_MAX_PROXIES], *pruns[DRIFTLOG_MAX_PROXIES];
	size_t n_proxies;	/* trained proxies, then the synthetic one */
	int synthetic;		/* enum wd_synthetic; its label is last */
	struct driftlog_writer *store;
	/*
	 * The drift log's rows when the compute thread closed it, idle and
	 * cleanly (closed_clean): it opens again as it was, without being
	 * checked against the WAL's results (compute.c, store_rest).
	 */
	uint64_t rows_at_close;
	int closed_clean;
	/*
	 * Per run, what the compute thread last said of its tensor names
	 * against the baseline's (name_match.h): proxies' at k, candidates'
	 * at n_proxies + k, and the baseline step it was said at. Zeros: they
	 * matched, or nothing was said. An older step computed again (a late
	 * proxy) says nothing: it is not the run's names now (a trial read
	 * "names again" of a run whose latest step still differed).
	 */
	struct { size_t lacking, extra, reshaped, relaid; int64_t step; } *names_said;
	/* per run, at the same places: its last step held NaN or +-Inf, said (compute.c) */
	unsigned char *nonfinite_said;
	/* per candidate: retention dropped a step of it not reached yet, said (compute.c) */
	unsigned char *behind_said;
};

/*
 * Every run a study can have: the config allows CONFIG_MAX_CANDIDATES
 * candidates and CONFIG_MAX_PROXIES proxies (a literal 256 for both
 * together skipped candidates beyond 192 with 64 proxies, silently).
 */
#define COMPARE_MAX_RUNS (CONFIG_MAX_PROXIES + CONFIG_MAX_CANDIDATES)

/* The runs of study s aligned to the baseline's step, their snapshots open. */
struct compare_input {
	int64_t step;			/* the baseline's */
	struct wd_ckpt *base;
	size_t n_runs;			/* trained proxies first, then candidates */
	const char *runs[COMPARE_MAX_RUNS];
	int role[COMPARE_MAX_RUNS];	/* ROLE_PROXY or ROLE_CANDIDATE */
	struct wd_ckpt *ck[COMPARE_MAX_RUNS];	/* NULL: that snapshot could not be opened */
};

/*
 * The threads that compare a step's tensors on the CPU: engine's own
 * (compute.threads, split inside a large tensor's sort), and as many
 * one-thread engines, one per worker, which take the step's tensors many
 * at once, holding at most budget bytes together (docs/daemon.md,
 * "Compute threads"). At most budget / 64 MiB workers; none on a GPU,
 * where every tensor goes through engine in turn. engine stays the
 * caller's. 0 or -ENOMEM.
 */
struct compare_workers;
int compare_workers_open(struct wd_engine *engine, uint64_t budget, struct compare_workers **out);
void compare_workers_close(struct compare_workers **w);
/* How many tensors w compares at once: 1 when it has no workers. */
size_t compare_workers_count(const struct compare_workers *w);

/*
 * The batch of study s at in->step: NULL (said in the log) when out of
 * memory. A tensor a run lacks, or that cannot be read, leaves its values
 * NaN. The rows and their bits do not depend on w's thread count.
 */
struct result_batch *compare_step(struct compare_workers *w, const struct cstudy *s,
				  const struct compare_input *in);

#endif
