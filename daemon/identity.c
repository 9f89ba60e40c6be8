/* identity.c: a durable snapshot's content, compactly (see identity.h). */
#include <stdlib.h>
#include <string.h>

#include "identity.h"
#include "state.h"

/* FNV-1a, 64-bit: stable across runs and builds, which the WAL needs. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

uint64_t identity_name_hash(const char *name)
{
	return fnv(0xcbf29ce484222325ULL, name, strlen(name));
}

uint64_t identity_shape_hash(int ndims, const uint64_t *shape)
{
	uint64_t h = fnv(0xcbf29ce484222325ULL, &ndims, sizeof(ndims));
	for (int i = 0; i < ndims; i++)
		h = fnv(h, &shape[i], sizeof(shape[i]));
	return h;
}

static int by_hash(const void *a, const void *b)
{
	uint64_t x = ((const struct tensor_id *)a)->name_hash, y = ((const struct tensor_id *)b)->name_hash;
	return x < y ? -1 : x > y;
}

static struct snap_id *alloc_id(size_t n)
{
	struct snap_id *id = malloc(sizeof(*id) + n * sizeof(id->t[0]));
	if (id)
		id->n = n;
	return id;
}

struct snap_id *identity_of_snapshot(const struct snapshot *snap)
{
	struct snap_id *id = alloc_id(snap->n_tensors);

	if (!id)
		return NULL;
	for (size_t i = 0; i < snap->n_tensors; i++) {
		const struct tensor_buf *t = &snap->tensors[i];
		id->t[i] = (struct tensor_id){ identity_name_hash(t->name),
					       identity_shape_hash(t->ndims, t->shape),
					       t->n_ranges ? t->crcs[0] : 0, (uint8_t)t->dtype };
	}
	qsort(id->t, id->n, sizeof(id->t[0]), by_hash);
	return id;
}

const struct tensor_id *identity_find(const struct snap_id *id, uint64_t name_hash)
{
	size_t lo = 0, hi = id->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (id->t[mid].name_hash < name_hash)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < id->n && id->t[lo].name_hash == name_hash ? &id->t[lo] : NULL;
}

size_t identity_apart(const struct snap_id *base, const struct snap_id *id, size_t *extra, uint64_t *reshaped)
{
	size_t n = 0;

	*extra = 0;
	for (size_t i = 0, j = 0; j < id->n;) {	/* both sorted by name_hash */
		if (i == base->n || id->t[j].name_hash < base->t[i].name_hash) {
			++*extra;
			j++;
		} else if (base->t[i].name_hash < id->t[j].name_hash) {
			i++;	/* one it lacks: an absent row says it */
		} else {
			if (base->t[i].shape_hash != id->t[j].shape_hash && reshaped)
				reshaped[n] = id->t[j].name_hash;
			n += base->t[i].shape_hash != id->t[j].shape_hash;
			i++;
			j++;
		}
	}
	return n;
}

json_t *identity_content_json(const struct snapshot *snap)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < snap->n_tensors; i++) {
		const struct tensor_buf *t = &snap->tensors[i];
		json_t *dims = json_array();
		for (int k = 0; dims && k < t->ndims; k++)
			json_array_append_new(dims, json_integer((json_int_t)t->shape[k]));
		json_t *e = json_pack("[s,s,o,I]", t->name, wd_dtype_name(t->dtype), dims,
				      (json_int_t)(t->n_ranges ? t->crcs[0] : 0));
		if (!e || json_array_append_new(a, e) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

struct snap_id *identity_from_json(const json_t *content)
{
	size_t n = json_array_size(content);
	struct snap_id *id = json_is_array(content) ? alloc_id(n) : NULL;

	for (size_t i = 0; id && i < n; i++) {
		const json_t *e = json_array_get(content, i), *dims = json_array_get(e, 2);
		const char *name = json_string_value(json_array_get(e, 0));
		const char *dt = json_string_value(json_array_get(e, 1));
		json_t *crc = json_array_get(e, 3);
		enum wd_dtype dtype;
		uint64_t shape[WIRE_MAX_DIMS];
		size_t nd = json_array_size(dims);
		if (!name || !dt || wd_dtype_parse(dt, &dtype) < 0 || !json_is_array(dims) ||
		    nd > WIRE_MAX_DIMS || !json_is_integer(crc)) {
			free(id);
			return NULL;
		}
		for (size_t k = 0; k < nd; k++)
			shape[k] = (uint64_t)json_integer_value(json_array_get(dims, k));
		id->t[i] = (struct tensor_id){ identity_name_hash(name),
					       identity_shape_hash((int)nd, shape),
					       (uint32_t)json_integer_value(crc), (uint8_t)dtype };
	}
	if (id)
		qsort(id->t, id->n, sizeof(id->t[0]), by_hash);
	return id;
}
