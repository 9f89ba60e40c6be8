/*
 * commit_ranks.c: which ranks of a sharded snapshot committed
 * (commit_ranks.h): a bit per rank, kept only once a commit gives its rank.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commit_ranks.h"

#define LIST_RUNS_MAX 8	/* runs of ranks written out; the rest counted */

static int has(const struct snapshot *snap, uint64_t k)
{
	return snap->ranked[k / 8] >> (k % 8) & 1;
}

int commit_ranks_lacks(const struct snapshot *snap, uint64_t rank, uint64_t ranks)
{
	return snap->ranked && snap->ranks_of == ranks && rank < ranks && !has(snap, rank);
}

int commit_ranks_note(struct snapshot *snap, uint64_t rank, uint64_t ranks, uint64_t session)
{
	if (snap->ranked && snap->ranks_of != ranks)
		return -EINVAL;
	if (!snap->ranked) {
		if (!(snap->ranked = calloc((size_t)(ranks + 7) / 8, 1)))
			return -ENOMEM;
		snap->ranks_of = ranks;
		snap->twice_rank = -1;
	}
	if (!has(snap, rank)) {
		/*
		 * Its session beside it, in the order ranks came: as many as
		 * commits wait (WAITERS_MAX), where a slot per rank would take
		 * 8 bytes for each of up to 2^20 ranks.
		 */
		if (snap->n_rank_sessions == snap->cap_rank_sessions) {
			size_t cap = snap->cap_rank_sessions ? 2 * snap->cap_rank_sessions : 8;
			struct rank_session *v = realloc(snap->rank_sessions, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			snap->rank_sessions = v;
			snap->cap_rank_sessions = cap;
		}
		snap->rank_sessions[snap->n_rank_sessions++] = (struct rank_session){ rank, session };
		snap->ranked[rank / 8] |= (uint8_t)(1u << (rank % 8));
		snap->n_ranked++;
		return 0;
	}
	/*
	 * The same rank again: the same publisher on a new connection (its ack
	 * timed out), or another publisher that says it is this rank. Marked
	 * with the session ~0 once told apart, so that each rank counts once.
	 */
	struct rank_session *seen = snap->rank_sessions;
	while (seen->rank != rank)	/* there: has() says it was noted */
		seen++;
	if (!session || !seen->session || seen->session == session || seen->session == ~(uint64_t)0)
		return 0;
	seen->session = ~(uint64_t)0;
	if (snap->twice_rank < 0)
		snap->twice_rank = (int64_t)rank;
	snap->n_twice++;
	return 1;
}

int commit_ranks_all(const struct snapshot *snap)
{
	return snap->ranked && snap->n_ranked == snap->ranks_of;
}

/* The ranks that have (want 1) or have not (0) committed, as "0, 2-5, 7": how many. */
static uint64_t list(const struct snapshot *snap, int want, char *buf, size_t len, size_t *at)
{
	uint64_t n = 0, runs = 0;

	for (uint64_t k = 0; k < snap->ranks_of; k++) {
		if (has(snap, k) != want)
			continue;
		uint64_t end = k;
		while (end + 1 < snap->ranks_of && has(snap, end + 1) == want)
			end++;
		n += end - k + 1;
		if (runs++ < LIST_RUNS_MAX && *at < len) {
			/* "3", "3, 4", "3-7" */
			int w = snprintf(buf + *at, len - *at, end == k ? "%s%llu" : end == k + 1 ? "%s%llu, %llu"
					 : "%s%llu-%llu", runs > 1 ? ", " : "", (unsigned long long)k,
					 (unsigned long long)end);
			*at += w > 0 ? (size_t)w : 0;
		} else if (runs == LIST_RUNS_MAX + 1 && *at < len) {
			int w = snprintf(buf + *at, len - *at, ", ...");
			*at += w > 0 ? (size_t)w : 0;
		}
		k = end;
	}
	return n;
}

/* "rank 1 committed by 2 publishers" (", others too" when more ranks were), for both sayings below. */
static void twice_phrase(const struct snapshot *snap, char *buf, size_t len)
{
	snprintf(buf, len, "rank %lld committed by 2 publishers%s", (long long)snap->twice_rank,
		 snap->n_twice > 1 ? ", others too" : "");
}

size_t commit_ranks_twice(const struct snapshot *snap, char *buf, size_t len)
{
	buf[0] = 0;
	if (!snap->ranked || !snap->n_twice)
		return 0;
	twice_phrase(snap, buf, len);
	return strlen(buf);
}

size_t commit_ranks_not_yet(const struct snapshot *snap, char *buf, size_t len)
{
	char ranks[200];
	size_t at = 0;

	buf[0] = 0;
	if (!snap->ranked)
		return 0;
	uint64_t n = list(snap, 0, ranks, sizeof(ranks), &at);
	if (!n)
		return 0;
	int w = n == 1 ? snprintf(buf, len, "rank %s of %llu", ranks, (unsigned long long)snap->ranks_of)
		: snprintf(buf, len, "ranks %s (%llu of %llu)", ranks, (unsigned long long)n,
			   (unsigned long long)snap->ranks_of);
	return w > 0 ? ((size_t)w < len ? (size_t)w : len - 1) : 0;
}

size_t commit_ranks_missing(const struct snapshot *snap, char *buf, size_t len)
{
	size_t used = commit_ranks_not_yet(snap, buf, len);

	if (!used)
		return 0;
	int w = snprintf(buf + used, len - used, " never committed");
	used += w > 0 ? (size_t)w : 0;
	/* a rank that two publishers claimed: the likelier cause than a dead rank */
	if (snap->n_twice && used < len) {
		char twice[64];
		twice_phrase(snap, twice, sizeof(twice));
		/* short: a reply's reason is cut at 255 bytes, and what the snapshot lacks follows */
		w = snprintf(buf + used, len - used, "; %s (same rank= twice?)", twice);
		used += w > 0 ? (size_t)w : 0;
	}
	return used < len ? used : len - 1;
}

size_t commit_ranks_seen(const struct snapshot *snap, char *buf, size_t len)
{
	char seen[200], not_yet[200];
	size_t a = 0, b = 0;

	buf[0] = 0;
	if (!snap->ranked)
		return 0;
	uint64_t n = list(snap, 1, seen, sizeof(seen), &a);
	list(snap, 0, not_yet, sizeof(not_yet), &b);
	char twice[64] = "";
	if (snap->n_twice)
		twice_phrase(snap, twice, sizeof(twice));
	int w = snprintf(buf, len, "from rank%s %s of %llu%s%s%s%s%s%s", n == 1 ? "" : "s", seen,
			 (unsigned long long)snap->ranks_of, b || twice[0] ? " (" : "", b ? "not yet: " : "",
			 b ? not_yet : "", b && twice[0] ? "; " : "", twice, b || twice[0] ? ")" : "");
	return w > 0 ? (size_t)w : 0;
}

void commit_ranks_part(struct snapshot *snap, uint64_t session, int committed)
{
	if (!session || snap->parts_full)
		return;
	for (size_t i = 0; i < snap->n_parts; i++)
		if (snap->parts[i].session == session) {
			snap->parts[i].committed |= committed;
			return;
		}
	if (snap->n_parts == snap->cap_parts) {
		size_t cap = snap->cap_parts ? 2 * snap->cap_parts : 8;
		struct part_session *v = cap > COMMIT_PARTS_MAX ? NULL : realloc(snap->parts, cap * sizeof(*v));
		if (!v) {	/* not tracked: "every rank committed" is the commits' alone, as before */
			snap->parts_full = 1;
			return;
		}
		snap->parts = v;
		snap->cap_parts = cap;
	}
	snap->parts[snap->n_parts++] = (struct part_session){ session, committed };
}

int commit_ranks_parts_pending(const struct snapshot *snap)
{
	for (size_t i = 0; !snap->parts_full && i < snap->n_parts; i++)
		if (!snap->parts[i].committed)
			return 1;
	return 0;
}

void commit_ranks_free(struct snapshot *snap)
{
	free(snap->parts);
	snap->parts = NULL;
	snap->n_parts = snap->cap_parts = 0;
	snap->parts_full = 0;
	free(snap->ranked);
	free(snap->rank_sessions);
	snap->ranked = NULL;
	snap->rank_sessions = NULL;
	snap->n_rank_sessions = snap->cap_rank_sessions = 0;
	snap->ranks_of = snap->n_ranked = snap->n_twice = 0;
	snap->twice_rank = -1;
}
