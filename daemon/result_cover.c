/* result_cover.c: a study's rows in the logged results (see result_cover.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "records.h"
#include "result_batch.h"
#include "result_cover.h"

static int add(struct result_cover *cv, int64_t step, const char *run, int label)
{
	const struct result_cover_pair *last = cv->n ? &cv->v[cv->n - 1] : NULL;

	if (last && last->step == step && last->label == label && !strcmp(last->run, run))
		return 0;	/* a run's next tensor row: noted already */
	struct result_cover_pair *v = wd_grow(cv->v, cv->n, &cv->cap, sizeof(*v), 64);
	if (!v)
		return -ENOMEM;
	cv->v = v;
	if (!(cv->v[cv->n].run = strdup(run)))
		return -ENOMEM;
	cv->v[cv->n].label = label;
	cv->v[cv->n++].step = step;
	return 0;
}

/* Has b a candidate's row? Its labels then cover the step's ratios. */
static int has_candidate(const struct result_batch *b)
{
	for (size_t k = 0; k < b->n_rows; k++)
		if (b->rows[k].role == ROLE_CANDIDATE)
			return 1;
	return 0;
}

int result_cover_build(struct result_cover *cv, char *const *payloads, size_t n, const char *study,
		       const char *baseline)
{
	char name[256];
	int64_t step;
	int r = 0;

	memset(cv, 0, sizeof(*cv));
	for (size_t i = 0; r == 0 && i < n; i++) {
		size_t len = strlen(payloads[i]);
		/* the study first, cheaply: most records are another study's */
		if (!record_result_study(payloads[i], len, name, sizeof(name), &step) || strcmp(name, study))
			continue;
		struct result_batch *b = record_result_decode(payloads[i], len);
		if (!b) {
			r = -ENOMEM;	/* it read as a result just above */
			break;
		}
		int same = !strcmp(b->baseline, baseline), labels = same && has_candidate(b);
		for (size_t k = 0; r == 0 && same && k < b->n_rows; k++)
			r = add(cv, b->step, b->rows[k].run, 0);
		for (size_t k = 0; r == 0 && labels && k < b->n_proxies; k++)
			r = add(cv, b->step, b->proxies[k], 1);
		result_batch_free(&b);
	}
	if (r < 0)
		result_cover_release(cv);
	return r;
}

static int has(const struct result_cover *cv, int64_t step, const char *run, int label)
{
	for (size_t i = 0; i < cv->n; i++)
		if (cv->v[i].step == step && cv->v[i].label == label && !strcmp(cv->v[i].run, run))
			return 1;
	return 0;
}

int result_cover_has(const struct result_cover *cv, int64_t step, const char *run)
{
	return has(cv, step, run, 0);
}

int result_cover_has_label(const struct result_cover *cv, int64_t step, const char *label)
{
	return has(cv, step, label, 1);
}

void result_cover_release(struct result_cover *cv)
{
	for (size_t i = 0; i < cv->n; i++)
		free(cv->v[i].run);
	free(cv->v);
	memset(cv, 0, sizeof(*cv));
}
