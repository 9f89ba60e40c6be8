/*
 * name_match.c: a run's tensor names against its baseline's (see
 * name_match.h).
 */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "name_match.h"

void name_match_count(const struct wd_ckpt *base, const struct wd_ckpt *run, struct name_match *m)
{
	size_t i = 0, j = 0;

	memset(m, 0, sizeof(*m));
	m->n_base = wd_ckpt_count(base);
	m->n_run = wd_ckpt_count(run);
	while (i < m->n_base || j < m->n_run) {
		const char *b = i < m->n_base ? wd_ckpt_entry(base, i)->name : NULL;
		const char *r = j < m->n_run ? wd_ckpt_entry(run, j)->name : NULL;
		int c = !b ? 1 : !r ? -1 : strverscmp(b, r);
		if (c < 0) {
			if (!m->lacking++)
				m->lacking_first = b;
			i++;
		} else if (c > 0) {
			if (!m->extra++)
				m->extra_first = r;
			j++;
		} else {
			const struct wd_ckpt_entry *eb = wd_ckpt_entry(base, i), *er = wd_ckpt_entry(run, j);
			int same = eb->rank == er->rank;
			for (int d = 0; same && d < eb->rank; d++)
				same = eb->dims[d] == er->dims[d];
			int counted = !same && !eb->problem[0] && !er->problem[0];
			size_t *n = eb->numel == er->numel ? &m->relaid : &m->reshaped;
			/* the first reshaped one is said, else the first relaid one */
			if (counted && !(*n)++ && (n == &m->reshaped || !m->reshaped)) {
				m->reshaped_base = eb;
				m->reshaped_run = er;
			}
			i++;
			j++;
		}
	}
}

void name_match_say_shapes(const struct name_match *m, char *buf, size_t len)
{
	char b[160], r[160];
	size_t n = m->reshaped ? m->reshaped : m->relaid;

	buf[0] = 0;
	if (!n)
		return;
	wd_shape_text(m->reshaped_base->dims, m->reshaped_base->rank, b, sizeof(b));
	wd_shape_text(m->reshaped_run->dims, m->reshaped_run->rank, r, sizeof(r));
	if (m->reshaped)
		snprintf(buf, len, "has %zu of the baseline's tensors in another shape, of another count of "
			 "elements ('%.200s' %s, where the baseline's is %s%s): W1 compares their values, but "
			 "max|d| and rel L2 need as many elements, and are empty for %s", n, m->reshaped_run->name,
			 r, b, n > 1 ? ", the first" : "", n > 1 ? "them" : "it");
	else
		snprintf(buf, len, "has %zu of the baseline's tensors in another shape of as many elements "
			 "('%.200s' %s, where the baseline's is %s%s): W1 compares their values, but max|d| and "
			 "rel L2 pair the elements in storage order, which another layout (a transpose) makes "
			 "meaningless", n, m->reshaped_run->name, r, b, n > 1 ? ", the first" : "");
}

/*
 * The name in c that is name with a prefix before it, as one side's names
 * carry ("module.", "_orig_mod.", "model/"): the prefix, into buf. 0, or -1
 * when no name of c is name after a prefix that ends in '.' or '/' (a
 * run's "layernorm" is not "norm" with a prefix "layer").
 */
static int prefix_of(const struct wd_ckpt *c, const char *name, char *buf, size_t len)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < wd_ckpt_count(c); i++) {
		const char *x = wd_ckpt_entry(c, i)->name;
		size_t m = strlen(x);
		if (m > n && !strcmp(x + m - n, name) && (x[m - n - 1] == '.' || x[m - n - 1] == '/')) {
			snprintf(buf, len, "%.*s", (int)(m - n) > 64 ? 64 : (int)(m - n), x);
			return 0;
		}
	}
	return -1;
}

#define BASELINE_PREFIX "the baseline's names carry a prefix"

#define RUN_PREFIX "its names carry a prefix"

const char *name_match_baseline_clause(const char *said)
{
	return said ? strstr(said, "; " BASELINE_PREFIX) : NULL;
}

void name_match_fit(char *out, size_t len, const char *head, const char *said, const char *tail)
{
	const char *hint = name_match_baseline_clause(said);
	size_t hl = strlen(head), tl = strlen(tail), body, at;

	if (!len)
		return;
	if (!hint)
		hint = strstr(said, "; " RUN_PREFIX);
	if (!hint)
		hint = said + strlen(said);
	body = (size_t)(hint - said);
	if (hl + tl + strlen(hint) + 4 >= len) {	/* no room to keep it whole: cut where it falls */
		snprintf(out, len, "%s%s%s", head, said, tail);
		return;
	}
	size_t room = len - 1 - hl - tl - strlen(hint);
	const char *cut = body > room ? "…" : "";
	if (body > room)
		body = room - 3;	/* room >= 4: the mark's 3 bytes */
	at = (size_t)snprintf(out, len, "%s", head);
	snprintf(out + at, len - at, "%.*s%s%s%s", (int)body, said, cut, hint, tail);
}

/* The prefix hint, "" when neither side's first unmatched name explains it. */
static void hint(const struct name_match *m, const struct wd_ckpt *base, const struct wd_ckpt *run,
		 char *buf, size_t len)
{
	char pre[72];

	*buf = 0;
	if (m->lacking_first && prefix_of(run, m->lacking_first, pre, sizeof(pre)) == 0)
		snprintf(buf, len, "; " RUN_PREFIX " '%s' that the baseline's lack (a wrapped "
			 "model: DDP, FSDP or torch.compile?): publish every run's tensors under the same names "
			 "(wdrift.attach publishes the model a wrapper holds)",
			 pre);
	else if (m->extra_first && prefix_of(base, m->extra_first, pre, sizeof(pre)) == 0)
		snprintf(buf, len, "; " BASELINE_PREFIX " '%s' that the compared run's names lack (a wrapped "
			 "model: DDP, FSDP or torch.compile?): publish every run's tensors under the same names "
			 "(wdrift.attach publishes the model a wrapper holds)",
			 pre);
}

void name_match_say(const struct name_match *m, const struct wd_ckpt *base, const struct wd_ckpt *run,
		    char *buf, size_t len)
{
	char why[384];

	*buf = 0;
	if (!m->lacking && !m->extra)
		return;
	hint(m, base, run, why, sizeof(why));
	if (m->lacking && m->lacking == m->n_base && !m->extra_first)
		snprintf(buf, len, "has none of the baseline's %zu tensors, so it has no drift here", m->n_base);
	else if (m->lacking && m->lacking == m->n_base)
		snprintf(buf, len, "has none of the baseline's %zu tensors: its %zu are named otherwise "
			 "('%.160s', where the baseline has '%.160s'), so it has no drift here%s", m->n_base,
			 m->n_run, m->extra_first ? m->extra_first : "", m->lacking_first, why);
	else if (m->lacking && m->extra)
		snprintf(buf, len, "lacks %zu of the baseline's %zu tensors (the first: '%.160s'), which have "
			 "no drift, and has %zu that the baseline lacks (the first: '%.160s'), which are not "
			 "compared%s", m->lacking, m->n_base, m->lacking_first, m->extra, m->extra_first, why);
	else if (m->lacking)
		snprintf(buf, len, "lacks %zu of the baseline's %zu tensors (the first: '%.160s'), which have "
			 "no drift", m->lacking, m->n_base, m->lacking_first);
	else
		snprintf(buf, len, "has %zu tensor%s that the baseline lacks (the first: '%.160s'), which %s "
			 "not compared%s", m->extra, m->extra == 1 ? "" : "s", m->extra_first,
			 m->extra == 1 ? "is" : "are", why);
}
