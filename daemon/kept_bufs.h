/*
 * kept_bufs.h: ingest's freed tensor buffers, kept for the next
 * snapshot's tensors of the same size, within memory.budget.
 *
 * Every step of a run brings the same tensors again. A buffer freed
 * after its snapshot is stored and taken by the next of the same size
 * saves that tensor's page faults: glibc gives a large buffer back to the
 * kernel when freed, and the next malloc faults each 4 KiB page in again
 * on the main loop (a VM's fault is dear: docs/performance.md).
 *
 * The kept bytes count against memory.budget beside the reserved ones:
 * ingest_make_room frees kept buffers before it drops any snapshot, and
 * leaves reserved + kept + what it made room for within the budget (a
 * tensor's bookkeeping, which grows with its shards without asking for
 * room, aside, as before). Main thread only.
 */
#ifndef WD_KEPT_BUFS_H
#define WD_KEPT_BUFS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Smaller buffers glibc keeps in its heap and hands out again itself
 * (below its mmap threshold); keeping them would only cost a scan.
 */
#define KEPT_MIN_BYTES (256u << 10)
#define KEPT_MAX 4096		/* buffers at most */

/*
 * Kept this long with none taken or kept, they are all given back: a
 * daemon whose runs have ended does not sit on memory.budget. Long enough
 * for the time between two snapshots of a run.
 */
#define KEPT_IDLE_S 600.0

struct kept_bufs {
	struct kept_buf {
		void *p;
		uint64_t size;
	} *v;				/* oldest first */
	size_t n, cap;
	uint64_t bytes;			/* their sizes' sum */
	uint64_t reused, freed;		/* buffers taken again (the caller counts); given back to libc */
	double last_use;		/* monotonic seconds: the last buffer taken or kept */
};

/* A kept buffer of exactly size bytes (the newest), no longer kept; or NULL. */
void *kept_take(struct kept_bufs *k, uint64_t size, double now);

/* Frees them all when none was taken or kept for KEPT_IDLE_S; 1 when it did. */
int kept_idle(struct kept_bufs *k, double now);

/*
 * Keeps p, of size bytes, when it is at least KEPT_MIN_BYTES and at most
 * room; frees it otherwise (or when KEPT_MAX are kept). p may be NULL.
 */
void kept_put(struct kept_bufs *k, void *p, uint64_t size, uint64_t room, double now);

/* Frees kept buffers, oldest first, until at most keep bytes are kept. */
void kept_shed(struct kept_bufs *k, uint64_t keep);

/* Frees them all, and the list. */
void kept_release(struct kept_bufs *k);

#endif
