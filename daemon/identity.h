/*
 * identity.h: what identifies a durable snapshot's content (DESIGN.md,
 * invariant 7), so that a (run, step) sent again is told apart: the same
 * content is a harmless duplicate, other content a conflict. Per tensor: a
 * 64-bit hash of its name, its dtype, a 64-bit hash of its shape and the
 * CRC-32 of all its bytes; 24 bytes a tensor, so 300 tensors by 1000 steps
 * hold about 7 MB. Names are not kept: a conflict names the tensor of the
 * message that differs, which the caller has.
 *
 * Kept durable in the WAL's "snapshot" record as "content" (storage.md);
 * records written before it have none, and their steps cannot be checked.
 * Depends on libc and jansson; the snapshots it reads are state.h's (the
 * query thread hashes names here, and holds nothing of the main thread's).
 */
#ifndef WD_IDENTITY_H
#define WD_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>


struct snapshot;

struct tensor_id {
	uint64_t name_hash, shape_hash;
	uint32_t crc;
	uint8_t dtype;
};

/* One durable snapshot's content; t sorted by name_hash. */
struct snap_id {
	size_t n;
	struct tensor_id t[];
};

uint64_t identity_name_hash(const char *name);
uint64_t identity_shape_hash(int ndims, const uint64_t *shape);

/*
 * The identity of an assembled snapshot (every tensor complete, so its one
 * range's CRC is the whole tensor's); NULL on out of memory.
 */
struct snap_id *identity_of_snapshot(const struct snapshot *snap);

/* The tensor named name_hash in id, or NULL. */
const struct tensor_id *identity_find(const struct snap_id *id, uint64_t name_hash);

/*
 * Of run snapshot id against its baseline's base: how many of its tensors
 * base lacks (into *extra: no row holds them), and those that base has in
 * another shape, whose max|d| and rel L2 pair elements in storage order
 * (a transpose: meaningless): how many, and (reshaped not NULL, room for
 * id->n) their name hashes, ascending. O(base + id).
 */
size_t identity_apart(const struct snap_id *base, const struct snap_id *id, size_t *extra, uint64_t *reshaped);

/*
 * "content" of a WAL snapshot record: [[name, dtype, [dims], crc32], ...],
 * from an assembled snapshot; NULL on out of memory.
 */
json_t *identity_content_json(const struct snapshot *snap);

/* The identity from a record's "content"; NULL when absent or malformed. */
struct snap_id *identity_from_json(const json_t *content);

#endif
