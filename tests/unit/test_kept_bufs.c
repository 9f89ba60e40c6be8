/*
 * test_kept_bufs.c: ingest's kept tensor buffers (daemon/kept_bufs.c): a
 * buffer comes back only for its exact size, the newest first; nothing
 * under KEPT_MIN_BYTES, beyond the room given or past KEPT_MAX is kept;
 * shedding frees the oldest first; all are given back after KEPT_IDLE_S
 * with none taken or kept; the counts say what happened. Under
 * ASan and valgrind, a buffer freed twice or never shows.
 */
#include <stdlib.h>

#include "harness.h"
#include "kept_bufs.h"

#define MiB (1ull << 20)

int main(void)
{
	struct kept_bufs k = { 0 };
	void *a = malloc(MiB), *b = malloc(MiB), *c = malloc(2 * MiB);

	CHECK(kept_take(&k, MiB, 1) == NULL, "nothing kept: nothing taken");
	kept_put(&k, a, MiB, 8 * MiB, 1);
	kept_put(&k, b, MiB, 8 * MiB, 1);
	kept_put(&k, c, 2 * MiB, 8 * MiB, 1);
	CHECK(k.n == 3 && k.bytes == 4 * MiB, "three kept, 4 MiB (%zu, %llu)", k.n,
	      (unsigned long long)k.bytes);
	CHECK(kept_take(&k, 3 * MiB, 1) == NULL && kept_take(&k, MiB / 2, 1) == NULL,
	      "no buffer for another size, larger or smaller");
	CHECK(kept_take(&k, MiB, 1) == b && k.bytes == 3 * MiB,
	      "the newest of the size comes back, no longer kept");
	kept_put(&k, b, MiB, 3 * MiB, 1);	/* 3 MiB held, room for 3 more */
	CHECK(k.n == 3 && k.bytes == 4 * MiB, "put back within the room");

	void *small = malloc(KEPT_MIN_BYTES - 1), *big = malloc(4 * MiB);
	kept_put(&k, small, KEPT_MIN_BYTES - 1, 64 * MiB, 1);
	kept_put(&k, big, 4 * MiB, 4 * MiB - 1, 1);
	kept_put(&k, NULL, MiB, 64 * MiB, 1);
	CHECK(k.n == 3 && k.bytes == 4 * MiB,
	      "not kept (freed): under KEPT_MIN_BYTES, larger than the room, NULL");

	kept_shed(&k, 3 * MiB);	/* the oldest, a, goes */
	CHECK(k.n == 2 && k.bytes == 3 * MiB && k.freed == 1 && kept_take(&k, MiB, 1) == b,
	      "shedding frees the oldest first, down to what may be kept");
	free(b);
	kept_shed(&k, 0);
	CHECK(k.n == 0 && k.bytes == 0 && k.freed == 2, "shed to nothing");

	for (int i = 0; i < KEPT_MAX + 3; i++)
		kept_put(&k, malloc(KEPT_MIN_BYTES), KEPT_MIN_BYTES, (uint64_t)-1, 1);
	CHECK(k.n == KEPT_MAX && k.bytes == (uint64_t)KEPT_MAX * KEPT_MIN_BYTES,
	      "at most KEPT_MAX kept (%zu)", k.n);
	CHECK(!kept_idle(&k, 1 + KEPT_IDLE_S - 1) && k.n == KEPT_MAX, "kept while used within KEPT_IDLE_S");
	CHECK(kept_idle(&k, 1 + KEPT_IDLE_S) && k.n == 0 && k.bytes == 0,
	      "none taken or kept for KEPT_IDLE_S: all given back");
	void *d = malloc(MiB);
	kept_put(&k, d, MiB, MiB, 1000);
	CHECK(!kept_idle(&k, 1000 + KEPT_IDLE_S / 2) && kept_take(&k, MiB, 1000 + KEPT_IDLE_S / 2) == d,
	      "a buffer kept after a long idle time is not given back at once");
	kept_put(&k, d, MiB, MiB, 1000 + KEPT_IDLE_S / 2);
	kept_release(&k);
	CHECK(k.n == 0 && k.bytes == 0 && k.v == NULL, "released: nothing kept, no list");
	return tap_done();
}
