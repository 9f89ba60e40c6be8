/*
 * alert_instances.h: one alert rule's instances, one per candidate run (and
 * tensor, for scope: tensors), found by (run, tensor) through a hash
 * index: a per-tensor rule on a model of 20,000 tensors has as many, and a
 * scan of them per row made each batch cost seconds on the main loop.
 * What an instance's fields mean is alerts.c's (docs/config.md, "Alerts").
 */
#ifndef WD_ALERT_INSTANCES_H
#define WD_ALERT_INSTANCES_H

#include <stddef.h>
#include <stdint.h>

enum inst_state { INACTIVE = 0, PENDING, FIRING };

struct instance {
	char *run, *tensor;	/* in the instance's own block; tensor NULL unless scope: tensors */
	int state;
	int64_t above;		/* consecutive snapshots above the threshold */
	int64_t step;
	/*
	 * Before the evaluation of `step`: a step is computed again when another
	 * run arrives at it, and that is the same snapshot, not one more.
	 */
	int evaluated, prev_state;
	int64_t prev_above;
	double value, since;	/* since: Unix time of the last transition */
	int dirty;		/* changed since the rule's last "alert" record */
	const char *reason;	/* why a resolution no value made, for its JSON; NULL: none (alerts.c) */
	int told;		/* its rule's command last heard it firing (1) or resolved (0) */
	/*
	 * Its latest transition (firing, resolved) as it was judged: the
	 * value, step and threshold then. The command's line of it says these
	 * (command_due), not a later evaluation's value, nor a threshold a
	 * reload set since: an ops trial's held line read "resolved, value
	 * 0.0035, threshold 0.003". has_trans 0: none yet (the latest stand in).
	 */
	int has_trans;
	double trans_value, trans_threshold;
	int64_t trans_step;
	struct instance *next;
};

/* Zeroed is empty. */
struct instances {
	struct instance *head;		/* newest first */
	struct instance **slots;	/* by (run, tensor): open addressing, load <= 1/2 */
	size_t cap, n;
};

/* The instance of (run, tensor), made (zeroed, INACTIVE) when new; NULL when out of memory. */
struct instance *instances_get(struct instances *s, const char *run, const char *tensor);
/* How many are in state. */
size_t instances_count(const struct instances *s, int state);
/* Drops every instance of run, or all of them when run is NULL; how many, and *firing of them. */
size_t instances_drop(struct instances *s, const char *run, size_t *firing);

#endif
