/*
 * test_commit_ranks.c: which ranks of a sharded snapshot committed
 * (daemon/commit_ranks.c): each counted once, whatever the connection; a
 * rank committed from two publishers' sessions told apart (the same rank=
 * given to two ranks), once per rank; a publisher without a session never
 * taken for a second one; and what status and an expiry say of them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "commit_ranks.h"
#include "harness.h"

int main(void)
{
	struct snapshot s;
	char buf[512];

	memset(&s, 0, sizeof(s));
	CHECK(commit_ranks_missing(&s, buf, sizeof(buf)) == 0 && !buf[0] &&
	      commit_ranks_seen(&s, buf, sizeof(buf)) == 0, "no ranked commit: nothing to say");
	CHECK(commit_ranks_note(&s, 1, 3, 11) == 0 && commit_ranks_note(&s, 2, 3, 22) == 0, "ranks 1 and 2");
	CHECK(commit_ranks_note(&s, 1, 3, 11) == 0 && s.n_ranked == 2 && !s.n_twice,
	      "rank 1 again, the same session (a new connection after an ack timeout): once");
	CHECK(commit_ranks_note(&s, 2, 4, 22) == -EINVAL, "another count of ranks: refused, nothing noted");
	commit_ranks_seen(&s, buf, sizeof(buf));
	CHECK(!strcmp(buf, "from ranks 1, 2 of 3 (not yet: 0)"), "status: seen and not yet (%s)", buf);
	CHECK(commit_ranks_note(&s, 1, 3, 33) == 1 && s.n_twice == 1 && s.twice_rank == 1,
	      "rank 1 from another session: told apart");
	CHECK(commit_ranks_note(&s, 1, 3, 44) == 0 && s.n_twice == 1, "a third session on rank 1: counted once");
	CHECK(commit_ranks_note(&s, 2, 3, 0) == 0 && s.n_twice == 1, "no session given: never a second publisher");
	CHECK(!commit_ranks_all(&s), "rank 0 never committed: not all");
	commit_ranks_seen(&s, buf, sizeof(buf));
	CHECK(!strcmp(buf, "from ranks 1, 2 of 3 (not yet: 0; rank 1 committed by 2 publishers)"),
	      "status: the rank committed twice, in the brackets (%s)", buf);
	size_t n = commit_ranks_missing(&s, buf, sizeof(buf));
	CHECK(n == strlen(buf) && !strcmp(buf, "rank 0 of 3 never committed; rank 1 committed by 2 publishers "
					   "(same rank= twice?)"), "expiry: both said (%s)", buf);
	n = commit_ranks_missing(&s, buf, 20);
	CHECK(n < 20 && strlen(buf) == n, "a short buffer: cut, and the length says so (%zu, %s)", n, buf);
	CHECK(commit_ranks_not_yet(&s, buf, sizeof(buf)) == strlen("rank 0 of 3") && !strcmp(buf, "rank 0 of 3"),
	      "a lag's ranks: the one not yet (%s)", buf);
	CHECK(commit_ranks_note(&s, 0, 3, 55) == 0 && commit_ranks_all(&s), "rank 0 too: all");
	CHECK(commit_ranks_not_yet(&s, buf, sizeof(buf)) == 0 && !buf[0], "every rank: no lag to say");
	commit_ranks_free(&s);
	CHECK(!s.ranked && !s.n_ranked && !s.n_twice && s.twice_rank == -1, "freed, counts reset");

	/* a session given by one commit of a rank and not by the other: not told apart */
	memset(&s, 0, sizeof(s));
	CHECK(commit_ranks_note(&s, 0, 2, 0) == 0 && commit_ranks_note(&s, 0, 2, 7) == 0 && !s.n_twice,
	      "a rank first without a session, then with one: not two publishers");
	commit_ranks_free(&s);

	/* several not yet: listed and counted, as the lag line says them */
	memset(&s, 0, sizeof(s));
	for (uint64_t k = 0; k < 8; k++)
		if (k != 1 && k != 4 && k != 5)
			commit_ranks_note(&s, k, 8, 100 + k);
	CHECK(commit_ranks_not_yet(&s, buf, sizeof(buf)) > 0 && !strcmp(buf, "ranks 1, 4, 5 (3 of 8)"),
	      "three ranks not yet (%s)", buf);
	commit_ranks_free(&s);
	return tap_done();
}
