/*
 * test_run_reruns.c: the sessions of a run noted as having started over
 * from step 0 (daemon/state.c, struct run's reruns): each once, none for
 * session 0, and a full list gives way to a new session by dropping its
 * first entry with no conflict, never a re-run's (a review's: 64
 * `wdrift send --step 0` of one file left a later re-run unnoted).
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "state.h"

int main(void)
{
	struct run r;

	memset(&r, 0, sizeof(r));
	run_note_from_start(&r, 0, 0);
	CHECK(r.n_reruns == 0 && !run_rerun_of(&r, 0), "session 0 (a publisher that gives none): never noted");
	run_note_from_start(&r, 7, 0);
	run_note_from_start(&r, 7, 0);
	struct run_rerun *rr = run_rerun_of(&r, 7);
	CHECK(r.n_reruns == 1 && rr && rr->from == 0 && rr->conflict == RUN_NO_CONFLICT &&
	      rr->sent == RUN_NO_CONFLICT && !rr->said, "a session noted once, with no conflict and nothing sent");
	rr->conflict = 10;	/* a re-run */
	for (uint64_t s = 100; s < 100 + RUN_RERUNS_MAX - 1; s++)
		run_note_from_start(&r, s, 0);
	CHECK(r.n_reruns == RUN_RERUNS_MAX, "full: %u entries", r.n_reruns);
	run_note_from_start(&r, 999, 0);
	CHECK(r.n_reruns == RUN_RERUNS_MAX && run_rerun_of(&r, 999) && !run_rerun_of(&r, 100) &&
	      run_rerun_of(&r, 7) && run_rerun_of(&r, 7)->conflict == 10,
	      "full: the first session with no conflict (100) gives way, the re-run (7) stays");
	for (uint32_t i = 0; i < r.n_reruns; i++)
		r.reruns[i].conflict = 1;
	run_note_from_start(&r, 1000, 0);
	CHECK(r.n_reruns == RUN_RERUNS_MAX && !run_rerun_of(&r, 1000), "full of re-runs: a new one is not noted");
	free(r.reruns);
	return tap_done();
}
