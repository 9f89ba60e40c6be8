/*
 * pieces.h: the received pieces of a tensor being assembled from shards
 * (state.h's tensor_buf): sorted, disjoint ranges of elements, coalesced (a
 * shard that touches its neighbours merges with them, so shards sent in
 * order cost one range, not one each), each with the CRC-32 of its bytes,
 * combined as ranges merge (crc32_combine, in offset order): a complete
 * tensor's one range has the whole tensor's CRC, its identity, without a
 * second pass over its bytes. Their memory is outside the budget, so the
 * number of separate pieces is capped (MAX_PIECES). Depends on libc,
 * state.h, wire.h.
 */
#ifndef WD_PIECES_H
#define WD_PIECES_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

#define MAX_PIECES 65536

/* A tensor message's payload frames. */
struct payload {
	size_t n;
	const void *const *data;
	const size_t *len;
};

/* Where [b, e) goes: the index of the first range after it; -1 on an overlap. */
long pieces_slot(const struct tensor_buf *t, uint64_t b, uint64_t e);
/* Would [b, e) (no overlap, at its slot) make a new piece, rather than extend one? */
int pieces_is_new(const struct tensor_buf *t, size_t at, uint64_t b, uint64_t e);
/* Adds [b, e), whose bytes have CRC-32 crc, at its slot; 0, or -1 out of memory. */
int pieces_add(struct tensor_buf *t, size_t at, uint64_t b, uint64_t e, uint32_t crc);
/*
 * The elements t lacks: how many separate ranges, and the first of them
 * as [*b, *e) (when there is one): what names the rank that did not send.
 */
size_t pieces_gaps(const struct tensor_buf *t, uint64_t *b, uint64_t *e);
/* Copies the payload to elements from offset of t->data. */
void pieces_copy(struct tensor_buf *t, const struct payload *m, uint64_t offset);
/*
 * A shard [b, e) that overlaps what t has (a re-send, another rank's
 * copy): 1 with why when an overlapped element has other bytes (a
 * conflict; nothing taken); 0 when they are the same, after taking the
 * elements not yet received (t->covered grows); -1 out of memory.
 */
int pieces_overlap(struct tensor_buf *t, const struct payload *m, uint64_t b, uint64_t e,
		   char *why, size_t whylen);

#endif
