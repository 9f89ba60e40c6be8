/*
 * test_name_match.c: a run's tensor names against its baseline's
 * (daemon/name_match.c), on listings as the spool's files give them
 * (wd_ckpt_adopt sorts them in natural order): the counts and the first
 * of each side in that order, layers.9 before layers.10 on both sides;
 * the prefix that one side's names carry, ending in '.' ("layernorm" is
 * not "norm" with a prefix); nothing said when they match;
 * empty listings.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "name_match.h"

static struct wd_ckpt *listing(const char *const *names, size_t n)
{
	struct wd_ckpt_entry *e = calloc(n + 1, sizeof(*e));
	struct wd_ckpt *c = NULL;

	for (size_t i = 0; i < n; i++) {
		e[i].name = strdup(names[i]);
		e[i].dtype = WD_F32;
		e[i].numel = 4;
		e[i].rank = 1;
		e[i].dims[0] = 4;
	}
	if (wd_ckpt_adopt("test.h5", e, n, &c) < 0)
		abort();
	return c;
}

int main(void)
{
	static const char *const base_names[] = { "layers.10.w", "layers.9.w", "norm" };
	static const char *const wrapped[] = { "module.layers.10.w", "module.layers.9.w", "module.norm" };
	static const char *const partial[] = { "layers.9.w", "layers.10.w", "zz.extra", "aa.extra" };
	static const char *const shorter[] = { "w", "norm" };
	static const char *const longer[] = { "model.w", "model.norm" };
	static const char *const layernorm[] = { "layers.10.w", "layers.9.w", "layernorm" };
	struct wd_ckpt *base = listing(base_names, 3), *same = listing(base_names, 3);
	struct wd_ckpt *wrap = listing(wrapped, 3), *part = listing(partial, 4), *none = listing(NULL, 0);
	struct wd_ckpt *sb = listing(longer, 2), *sr = listing(shorter, 2), *ln = listing(layernorm, 3);
	struct name_match m;
	char say[1024];

	name_match_count(base, same, &m);
	name_match_say(&m, base, same, say, sizeof(say));
	CHECK(m.n_base == 3 && m.n_run == 3 && !m.lacking && !m.extra && !m.lacking_first && !say[0],
	      "the same names: nothing lacking or extra, nothing said ('%s')", say);

	name_match_count(base, wrap, &m);
	name_match_say(&m, base, wrap, say, sizeof(say));
	CHECK(m.lacking == 3 && m.extra == 3 && !strcmp(m.lacking_first, "layers.9.w") &&
	      !strcmp(m.extra_first, "module.layers.9.w"),
	      "a wrapped run: all lacking, all extra, the first in natural order (%s, %s)",
	      m.lacking_first, m.extra_first);
	CHECK(strstr(say, "has none of the baseline's 3 tensors") && strstr(say, "prefix 'module.'") &&
	      strstr(say, "its names carry"), "... said with the run's prefix: %s", say);
	CHECK(!name_match_baseline_clause(say), "... the run's prefix: not laid on the baseline (%s)", say);

	name_match_count(base, part, &m);
	name_match_say(&m, base, part, say, sizeof(say));
	CHECK(m.lacking == 1 && m.extra == 2 && !strcmp(m.lacking_first, "norm") &&
	      !strcmp(m.extra_first, "aa.extra") && strstr(say, "lacks 1 of the baseline's 3 tensors") &&
	      strstr(say, "has 2 that the baseline lacks") && !strstr(say, "prefix"),
	      "a partial match: both counts, the first of each, no prefix: %s", say);

	name_match_count(sb, sr, &m);
	name_match_say(&m, sb, sr, say, sizeof(say));
	CHECK(m.lacking == 2 && m.extra == 2 && strstr(say, "the baseline's names carry a prefix 'model.'"),
	      "the baseline's names carry the prefix: %s", say);
	CHECK(name_match_baseline_clause(say) && !strncmp(name_match_baseline_clause(say), "; the baseline's names carry a "
							  "prefix 'model.'", 45),
	      "... and the clause that lays it on the baseline is found: %s", say);

	name_match_count(base, ln, &m);
	name_match_say(&m, base, ln, say, sizeof(say));
	CHECK(m.lacking == 1 && m.extra == 1 && !strstr(say, "prefix"),
	      "'layernorm' is not 'norm' with a prefix 'layer': %s", say);

	name_match_count(base, none, &m);
	name_match_say(&m, base, none, say, sizeof(say));
	CHECK(m.lacking == 3 && !m.extra && !m.extra_first &&
	      !strcmp(say, "has none of the baseline's 3 tensors, so it has no drift here"),
	      "an empty run: none, and no example of its names: %s", say);

	name_match_count(none, base, &m);
	name_match_say(&m, none, base, say, sizeof(say));
	CHECK(!m.lacking && m.extra == 3 && strstr(say, "has 3 tensors that the baseline lacks"),
	      "an empty baseline: the run's are extra: %s", say);

	wd_ckpt_close(&base);
	wd_ckpt_close(&same);
	wd_ckpt_close(&wrap);
	wd_ckpt_close(&part);
	wd_ckpt_close(&none);
	wd_ckpt_close(&sb);
	wd_ckpt_close(&sr);
	wd_ckpt_close(&ln);
	/* the notice's fit: the way out whole, the names before it cut (a review's: a fixed width lost it) */
	{
		char said[1200], out[200];
		const char *hint = "; its names carry a prefix 'module.' that the baseline's lack: publish them alike";
		memset(said, 'x', 900);
		snprintf(said + 900, sizeof(said) - 900, "%s", hint);
		name_match_fit(out, sizeof(out), "run 'fa' ", said, "; see drift");
		size_t n = strlen(out), want = strlen(hint) + strlen("; see drift");
		CHECK(n == sizeof(out) - 1 && !strncmp(out, "run 'fa' xxx", 12) && strstr(out, "x…; its names carry") &&
		      n > want && !strcmp(out + n - want, "; its names carry a prefix 'module.' that the baseline's "
						 "lack: publish them alike; see drift"),
		      "a long note: cut before its clause, marked, the clause and tail whole (%s)", out);
		name_match_fit(out, sizeof(out), "run 'fa' ", "has none; the baseline's names carry a prefix 'm.'", ".");
		CHECK(!strcmp(out, "run 'fa' has none; the baseline's names carry a prefix 'm.'."),
		      "one that fits: as it is (%s)", out);
		memset(said, 'y', 900);
		said[900] = 0;
		name_match_fit(out, sizeof(out), "h ", said, " t");
		n = strlen(out);
		CHECK(n == sizeof(out) - 1 && !strcmp(out + n - strlen("y… t"), "y… t"), "no clause: the note cut, the tail whole (%s)",
		      out);
		name_match_fit(out, 20, "a head longer than the buffer ", said, " t");
		CHECK(strlen(out) == 19, "no room at all: cut where it falls, within the buffer (%s)", out);
	}
return tap_done();
}
