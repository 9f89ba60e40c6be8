/*
 * names.h: the tensor names of one snapshot being assembled, indexed. A
 * snapshot may hold tens of thousands of tensors (MoE models), so a shard
 * finds its tensor by hash, not by a scan; and since the snapshot becomes
 * one HDF5 file whose datasets the names are paths of, a name that is a
 * group of another ("a" and "a/b") is refused when it arrives, not when
 * the file is written (protocol.md, "Tensor names"). Depends on libc.
 */
#ifndef WD_NAMES_H
#define WD_NAMES_H

#include <stddef.h>
#include <stdint.h>

/* Names and their groups (each proper prefix ending before a '/'). */
struct names {
	struct name_slot *slots;
	size_t cap, used;
};

/* The tensor index that add gave name; -1 when it has none. */
long names_find(const struct names *x, const char *name);

/*
 * Whether name can join the snapshot: 0, or -1 with why naming the tensor
 * it clashes with (it is that tensor's group, or that tensor is its group).
 */
int names_check(const struct names *x, const char *name, char *why, size_t len);

/*
 * Adds name (checked) as tensor index i, and its groups. name must stay
 * valid, unchanged, until names_free. 0, or -ENOMEM (x unchanged).
 */
int names_add(struct names *x, const char *name, size_t i);

void names_free(struct names *x);

#endif
