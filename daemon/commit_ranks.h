/*
 * commit_ranks.h: which ranks of a sharded snapshot have committed, from
 * the commits that give "rank" (docs/protocol.md, "Several ranks"). A
 * commit without it counts only as a connection that waits: a rank whose
 * ack timed out commits again on a new one, so "every rank committed"
 * could not be told from that, and a snapshot whose ranks all committed
 * but sent overlapping pieces (each the same half, a trial's mistake)
 * waited limits.pending_timeout to be refused; and a dead rank was found
 * only from the offsets its part would have had. With ranks given, both
 * are said: at once, and by number. Depends on state.h.
 */
#ifndef WD_COMMIT_RANKS_H
#define WD_COMMIT_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

/*
 * Notes that rank (of ranks) committed snap, from the publisher's session
 * (0: none given): 0; 1 when that rank had committed from another session
 * (two ranks of a job given the same rank, or a job restarted before its
 * step expired), the first such time for that rank; -EINVAL when an earlier
 * ranked commit of it said another number of ranks (nothing noted);
 * -ENOMEM.
 */
int commit_ranks_note(struct snapshot *snap, uint64_t rank, uint64_t ranks, uint64_t session);
/* Did ranked commits of ranks come for snap, and none from rank? */
int commit_ranks_lacks(const struct snapshot *snap, uint64_t rank, uint64_t ranks);
/* Has every rank committed (by ranked commits)? */
int commit_ranks_all(const struct snapshot *snap);
/*
 * Into buf: "rank 2 of 3" or "ranks 2, 5-7 (4 of 8)", the ranks that have
 * not committed; "" and 0 when every one has, or no commit gave its rank.
 */
size_t commit_ranks_not_yet(const struct snapshot *snap, char *buf, size_t len);
/*
 * Into buf: "rank 2 of 3 never committed" (or "ranks 2, 5-7 (4 of 8) ..."),
 * then, when a rank committed from two sessions, "; rank 1 committed by 2
 * publishers (...)", for an expiry's reason; "" and 0 when no commit gave
 * its rank.
 */
size_t commit_ranks_missing(const struct snapshot *snap, char *buf, size_t len);
/*
 * Into buf: "from ranks 0, 1 of 3 (not yet: 2)", and "; rank 1 committed
 * by 2 publishers" inside the brackets when one was, for status; "" and 0
 * as above.
 */
size_t commit_ranks_seen(const struct snapshot *snap, char *buf, size_t len);
/* Into buf: "rank 1 committed by 2 publishers" (", others too"); "" and 0 when no rank was. */
size_t commit_ranks_twice(const struct snapshot *snap, char *buf, size_t len);
/* Sessions of senders of one snapshot that commit_ranks_part tracks, at most. */
#define COMMIT_PARTS_MAX 4096
/*
 * Notes that session (0: none given: nothing noted) sent snap a part
 * (committed 0) or its commit (1).
 */
void commit_ranks_part(struct snapshot *snap, uint64_t session, int committed);
/*
 * Has a publisher sent snap parts and not committed it yet? Then every
 * rank the commits count has committed, and one more is still to come:
 * ranks that disagree on their number (a rank's WORLD_SIZE mistyped,
 * larger), where "every rank committed" refused the step before the last
 * rank's commit came (a review).
 */
int commit_ranks_parts_pending(const struct snapshot *snap);
/* Frees what commit_ranks_note and commit_ranks_part kept (snapshot_empty calls it). */
void commit_ranks_free(struct snapshot *snap);

#endif
