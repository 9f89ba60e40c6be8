/*
 * publisher_snapshot.c: a snapshot being built on the caller's thread,
 * between wd_publisher_begin and wd_publisher_commit: each tensor (or the
 * block of one that this rank holds) copied once and cut into shards
 * contiguous in the flattened whole, and the distinct names the commit
 * counts. What the daemon would refuse for good is refused here, in words,
 * before anything is queued. Nothing here touches the socket.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "publisher_internal.h"
#include "grow.h"

static void tensor_release(struct pub_tensor *t)
{
	free(t->name);
	free(t->data);
	free(t->shard);
	free(t->crc);
}

void pub_snapshot_free(struct pub_snapshot *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		tensor_release(&s->t[i]);
	free(s->t);
	free(s->names);
	free(s);
}

void pub_building_discard(struct wd_publisher *p)
{
	struct pub_snapshot *b = p->building;

	if (b && b->commit_refused) {
		p->unqueued++;
		p->unqueued_step = b->step;
		snprintf(p->unqueued_why, sizeof(p->unqueued_why), "%s", p->commit_refusal);
	}
	pub_snapshot_free(b);
	p->building = NULL;
}

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;	/* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/*
 * Counts t[i]'s name once however many calls add pieces of it (the commit
 * says how many distinct tensors the snapshot has), and adds its elements
 * to the name's first entry. 0, or -ENOMEM.
 */
static int names_add(struct pub_snapshot *s, size_t i)
{
	if (2 * (s->n_names + 1) > s->names_cap) {
		size_t cap = s->names_cap ? 2 * s->names_cap : 64;
		size_t *nn = calloc(cap, sizeof(*nn));
		if (!nn)
			return -ENOMEM;
		for (size_t k = 0; k < s->names_cap; k++) {
			if (!s->names[k])
				continue;
			size_t at = name_hash(s->t[s->names[k] - 1].name) & (cap - 1);
			while (nn[at])
				at = (at + 1) & (cap - 1);
			nn[at] = s->names[k];
		}
		free(s->names);
		s->names = nn;
		s->names_cap = cap;
	}
	size_t at = name_hash(s->t[i].name) & (s->names_cap - 1);
	for (; s->names[at]; at = (at + 1) & (s->names_cap - 1))
		if (!strcmp(s->t[s->names[at] - 1].name, s->t[i].name)) {
			s->t[s->names[at] - 1].name_covered += s->t[i].count;
			s->t[s->names[at] - 1].name_entries++;
			return 0;
		}
	s->names[at] = i + 1;
	s->t[i].name_covered = s->t[i].count;
	s->t[i].name_entries = 1;
	s->n_names++;
	return 0;
}

/* The first entry of name in s, or NULL. */
static const struct pub_tensor *names_find(const struct pub_snapshot *s, const char *name)
{
	if (!s->names_cap)
		return NULL;
	for (size_t at = name_hash(name) & (s->names_cap - 1); s->names[at]; at = (at + 1) & (s->names_cap - 1))
		if (!strcmp(s->t[s->names[at] - 1].name, name))
			return &s->t[s->names[at] - 1];
	return NULL;
}

/*
 * A second piece of a tensor already in the snapshot must say what the
 * first said: its dtype, total and shape (a trial's second 'a' as bf16 or
 * of 32 elements was said only at commit, as "48 of its 16 elements").
 */
static int check_same(const struct pub_snapshot *s, const char *name, enum wd_dtype dtype,
		      const uint64_t *shape, int ndims, uint64_t total)
{
	const struct pub_tensor *t = names_find(s, name);
	char was[200], now[200];

	if (!t)
		return 0;
	int same_shape = t->ndims == (shape ? ndims : 1);
	for (int d = 0; same_shape && d < t->ndims; d++)
		same_shape = t->shape[d] == (shape ? shape[d] : total);
	if (t->dtype == dtype && t->total == total && same_shape)
		return 0;
	wd_shape_text(t->shape, t->ndims, was, sizeof(was));
	if (shape)
		wd_shape_text(shape, ndims, now, sizeof(now));
	else
		snprintf(now, sizeof(now), "[%llu]", (unsigned long long)total);
	return pub_error(-EINVAL, "tensor '%s' is in this snapshot already as %s %s of %llu elements; this "
			 "piece says %s %s of %llu (each piece of a tensor says the same dtype and whole shape)",
			 PUB_CLIP(name), wd_dtype_name(t->dtype), was, (unsigned long long)t->total,
			 wd_dtype_name(dtype), now, (unsigned long long)total);
}

int wd_publisher_begin(struct wd_publisher *p, int64_t step)
{
	PUB_NEED(p);
	if (step < 0)
		return pub_error(-EINVAL, "step %lld: steps are integers >= 0", (long long)step);
	pub_building_discard(p);
	p->building = calloc(1, sizeof(*p->building));
	if (!p->building)
		return pub_error(-ENOMEM, "out of memory");
	p->building->step = step;
	/*
	 * A run's steps go up: one this publisher passed is a step count that
	 * went back (an epoch's, reset), whose other content the daemon
	 * refuses as a conflict (a trial's job heard "a re-run?" of itself).
	 * Said once; the snapshot is still sent (the same content is a
	 * duplicate, acked).
	 */
	if (step < p->top_step && !p->back_said) {	/* the same step again: a retry, or the last saved twice */
		p->back_said = 1;
		wd_log(WD_LOG_WARNING, "publisher: run '%s': step %lld begun after step %lld: a run's steps go up, "
		       "and the daemon refuses other content at a step it has as a conflict (does the job's step "
		       "count go back, an epoch's reset? give each snapshot the global step)", p->run,
		       (long long)step, (long long)p->top_step);
	}
	if (step > p->top_step)
		p->top_step = step;
	return 0;
}

/*
 * Appends a tensor entry of n_shards shards and count elements to the
 * snapshot being built, its data still to be filled; NULL with the error
 * set.
 */
static struct pub_tensor *tensor_add(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
				     const uint64_t *shape, int ndims, uint64_t total,
				     uint64_t count, size_t n_shards)
{
	struct pub_snapshot *b = p->building;
	size_t esize = wd_dtype_size(dtype);
	struct pub_tensor *grown = wd_grow(b->t, b->n, &b->cap, sizeof(*grown), 16);

	if (!grown) {
		pub_error(-ENOMEM, "out of memory");
		return NULL;
	}
	b->t = grown;
	struct pub_tensor *t = &b->t[b->n];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	t->data = malloc(count ? count * esize : 1);
	t->shard = malloc(n_shards * sizeof(*t->shard));
	t->crc = malloc(n_shards * sizeof(*t->crc));
	if (!t->name || !t->data || !t->shard || !t->crc) {
		tensor_release(t);
		pub_error(-ENOMEM, "tensor '%s': out of memory for %llu bytes", PUB_CLIP(name),
			  (unsigned long long)(count * esize));
		return NULL;
	}
	t->dtype = dtype;
	t->ndims = shape ? ndims : 1;
	for (int d = 0; d < t->ndims; d++)
		t->shape[d] = shape ? shape[d] : total;
	t->total = total;
	t->n_shards = n_shards;
	t->count = count;
	if (names_add(b, b->n) < 0) {
		tensor_release(t);
		pub_error(-ENOMEM, "out of memory");
		return NULL;
	}
	b->n++;
	b->bytes += count * esize;
	return t;
}

static int check_tensor_args(const struct wd_publisher *p, const char *name, enum wd_dtype dtype,
			     int ndims)
{
	PUB_NEED(p);
	if (!p->building)
		return pub_error(-EINVAL, "no snapshot begun: wd_publisher_begin first");
	char why[64];

	if (!name || !*name || strlen(name) > WIRE_NAME_MAX)
		return pub_error(-EINVAL, "tensor name must be 1 to %d bytes", WIRE_NAME_MAX);
	long at = wire_name_control(name);
	if (at >= 0)	/* the daemon would refuse it: bad_field */
		return pub_error(-EINVAL, "tensor name '%s' has a control character at byte %ld",
				 PUB_CLIP(name), at);
	if (wire_name_rule(name, why, sizeof(why)) < 0)	/* the daemon would refuse it: bad_name */
		return pub_error(-EINVAL, "tensor name '%s' cannot be stored: %s (a name is an HDF5 "
				 "path: parts split by '/', none empty, '.' or '..')", PUB_CLIP(name), why);
	if (!wd_dtype_size(dtype))
		return pub_error(-EINVAL, "tensor '%s': dtype %d is not one of f32, f64, f16, bf16",
				 PUB_CLIP(name), (int)dtype);
	if (ndims < 0 || ndims > WIRE_MAX_DIMS)
		return pub_error(-EINVAL, "tensor '%s': %d dimensions; 0 to %d", PUB_CLIP(name), ndims,
				 WIRE_MAX_DIMS);
	return 0;
}

/*
 * A piece refused while a snapshot is being built spoils it: sent without
 * the piece, it would be stored short of a tensor, or of part of one, and
 * nothing would say so (a trial's C job: the commit and close returned 0,
 * and drift showed the tensor absent). pub_snapshot_check refuses its
 * commit, which close then says and counts; as Python's publish() sends
 * nothing of a snapshot with a refused tensor. Returns r.
 */
static int piece_refused(struct wd_publisher *p, int r)
{
	if (r < 0 && p && p->building && !p->building->pieces_refused++)
		snprintf(p->building->piece_refusal, sizeof(p->building->piece_refusal), "%s", wd_last_error());
	return r;
}

static int tensor_piece(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
			const void *data, const uint64_t *shape, int ndims, uint64_t offset,
			uint64_t count, uint64_t total)
{
	size_t esize = wd_dtype_size(dtype);
	int r = check_tensor_args(p, name, dtype, ndims);

	if (r < 0)
		return r;
	if (!total || offset > total || count > total - offset)
		return pub_error(-EINVAL, "tensor '%s': shard [%llu, +%llu) of %llu elements is not "
				 "inside the tensor", PUB_CLIP(name), (unsigned long long)offset,
				 (unsigned long long)count, (unsigned long long)total);
	if (count && !data)
		return pub_error(-EINVAL, "tensor '%s': no data (NULL) for %llu elements", PUB_CLIP(name),
				 (unsigned long long)count);
	if (!shape && ndims > 1)
		return pub_error(-EINVAL, "tensor '%s': shape is NULL with %d dimensions (NULL is 1-D of "
				 "total: ndims 0 or 1)", PUB_CLIP(name), ndims);
	if (shape) {
		uint64_t held = 1;
		int over = 0;
		for (int d = 0; d < ndims; d++) {
			over |= shape[d] && held > UINT64_MAX / shape[d];
			held *= shape[d];
		}
		if (over || held != total) {
			char text[200];
			wd_shape_text(shape, ndims, text, sizeof(text));
			return pub_error(-EINVAL, "tensor '%s': shape %s holds %s%llu elements, and total is %llu",
					 PUB_CLIP(name), text, over ? "more than " : "",
					 (unsigned long long)(over ? UINT64_MAX : held), (unsigned long long)total);
		}
	}
	if ((r = check_same(p->building, name, dtype, shape, ndims, total)) < 0)
		return r;
	struct pub_tensor *t = tensor_add(p, name, dtype, shape, ndims, total, count, 1);
	if (!t)
		return -ENOMEM;
	if (count)	/* data may be NULL for none */
		memcpy(t->data, data, count * esize);	/* the one copy the caller pays for */
	t->shard[0][0] = offset;
	t->shard[0][1] = count;
	return 0;
}

int wd_publisher_tensor(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
			const void *data, const uint64_t *shape, int ndims, uint64_t offset,
			uint64_t count, uint64_t total)
{
	return piece_refused(p, tensor_piece(p, name, dtype, data, shape, ndims, offset, count, total));
}

static int block_piece(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
		       const void *data, const uint64_t *shape, const uint64_t *start,
		       const uint64_t *local, int ndims)
{
	size_t esize = wd_dtype_size(dtype);
	uint64_t total = 1, count = 1;
	int r = check_tensor_args(p, name, dtype, ndims);

	if (r < 0)
		return r;
	if (ndims && (!shape || !start || !local))
		return pub_error(-EINVAL, "tensor '%s': shape, start and local are needed", PUB_CLIP(name));
	for (int d = 0; d < ndims; d++) {
		if (!shape[d] || start[d] > shape[d] || local[d] > shape[d] - start[d])
			return pub_error(-EINVAL, "tensor '%s': dimension %d: block [%llu, +%llu) is "
					 "not inside [0, %llu)", PUB_CLIP(name), d, (unsigned long long)start[d],
					 (unsigned long long)local[d], (unsigned long long)shape[d]);
		if (total > UINT64_MAX / 2 / esize / shape[d])
			return pub_error(-EINVAL, "tensor '%s': too many elements", PUB_CLIP(name));
		total *= shape[d];
		count *= local[d];
	}
	if (count && !data)
		return pub_error(-EINVAL, "tensor '%s': no data (NULL) for %llu elements", PUB_CLIP(name),
				 (unsigned long long)count);
	if ((r = check_same(p->building, name, dtype, shape, ndims, total)) < 0)
		return r;
	/*
	 * Dimensions past `inner` are whole, so each index of the dimensions
	 * before it starts one contiguous run of local[inner] * (their extent).
	 */
	int inner = ndims - 1;
	while (inner > 0 && start[inner] == 0 && local[inner] == shape[inner])
		inner--;
	uint64_t run = 1, runs = 1;
	for (int d = ndims - 1; d >= 0; d--) {
		if (d >= inner)
			run *= local[d];
		else
			runs *= local[d];
	}
	if (!count)
		runs = 1, run = 0;	/* this rank holds nothing of it: still named, for the commit */
	if (runs > PUB_MAX_SHARDS)
		return pub_error(-E2BIG, "tensor '%s': this block is %llu pieces in the flattened "
				 "tensor; at most %d (send a block of whole rows)", PUB_CLIP(name),
				 (unsigned long long)runs, PUB_MAX_SHARDS);
	struct pub_tensor *t = tensor_add(p, name, dtype, shape, ndims, total, count, (size_t)runs);
	if (!t)
		return -ENOMEM;
	if (count)	/* data may be NULL for an empty block */
		memcpy(t->data, data, count * esize);	/* the one copy: the runs are in its order */
	uint64_t idx[WIRE_MAX_DIMS] = { 0 };
	for (uint64_t k = 0; k < runs; k++) {
		uint64_t flat = 0;	/* row-major index of the run's first element in the whole */
		for (int d = 0; d < ndims; d++)
			flat = flat * shape[d] + start[d] + (d < inner ? idx[d] : 0);
		t->shard[k][0] = count ? flat : 0;
		t->shard[k][1] = run;
		for (int d = inner - 1; d >= 0; d--) {	/* the next index of the outer dimensions */
			if (++idx[d] < local[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Refuses a snapshot that names a tensor and a group of it ("a" and
 * "a/b"): the daemon could store only one (bad_name). Each '/'-prefix of
 * each name is looked up in the sorted names.
 */
static int check_groups(const struct pub_snapshot *s)
{
	const char **v = malloc((s->n_names ? s->n_names : 1) * sizeof(*v));
	size_t n = 0;
	int r = 0;

	if (!v)
		return pub_error(-ENOMEM, "out of memory");
	for (size_t k = 0; k < s->names_cap; k++)
		if (s->names[k])
			v[n++] = s->t[s->names[k] - 1].name;
	qsort(v, n, sizeof(*v), by_name);
	for (size_t i = 0; i < n && !r; i++)
		for (const char *sl = strchr(v[i], '/'); sl && !r; sl = strchr(sl + 1, '/')) {
			char group[WIRE_NAME_MAX + 1];
			const char *key = group;
			snprintf(group, sizeof(group), "%.*s", (int)(sl - v[i]), v[i]);
			if (bsearch(&key, v, n, sizeof(*v), by_name))
				r = pub_error(-EINVAL, "tensors '%s' and '%s' cannot both be in one "
					      "snapshot: a name is an HDF5 path, and '%s' would be a group "
					      "and a tensor", PUB_CLIP(group), PUB_CLIP(v[i]), PUB_CLIP(group));
		}
	free(v);
	return r;
}

struct piece {
	size_t first;		/* the index of its name's first entry */
	uint64_t off, n;
};

static int by_place(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/*
 * Refuses elements given twice by the pieces of one tensor: the same
 * piece added twice made the counts add up to the whole, and the daemon,
 * which stores each element once, answered `incomplete` to every send of
 * it (a trial's job re-sent it for ever). The pieces of one call never
 * overlap; those of names added more than once are sorted and compared.
 */
static int check_pieces(const struct pub_snapshot *s)
{
	size_t n = 0, k = 0;
	int r = 0;

	for (size_t i = 0; i < s->n; i++) {
		const struct pub_tensor *f = names_find(s, s->t[i].name);
		if (f->name_entries > 1)
			n += s->t[i].n_shards;
	}
	if (!n)
		return 0;
	struct piece *v = malloc(n * sizeof(*v));
	if (!v)
		return pub_error(-ENOMEM, "out of memory");
	for (size_t i = 0; i < s->n; i++) {
		const struct pub_tensor *f = names_find(s, s->t[i].name);
		for (size_t j = 0; f->name_entries > 1 && j < s->t[i].n_shards; j++)
			if (s->t[i].shard[j][1])
				v[k++] = (struct piece){ (size_t)(f - s->t), s->t[i].shard[j][0], s->t[i].shard[j][1] };
	}
	qsort(v, k, sizeof(*v), by_place);
	for (size_t i = 1; i < k && !r; i++)
		if (v[i].first == v[i - 1].first && v[i - 1].off + v[i - 1].n > v[i].off) {
			uint64_t end = v[i - 1].off + v[i - 1].n < v[i].off + v[i].n ? v[i - 1].off + v[i - 1].n
										    : v[i].off + v[i].n;
			r = pub_error(-EINVAL, "tensor '%s': elements [%llu, %llu) are in two pieces of this "
				      "snapshot; each element goes once (a piece added twice?)",
				      PUB_CLIP(s->t[v[i].first].name), (unsigned long long)v[i].off,
				      (unsigned long long)end);
		}
	free(v);
	return r;
}

int wd_publisher_block(struct wd_publisher *p, const char *name, enum wd_dtype dtype,
		       const void *data, const uint64_t *shape, const uint64_t *start,
		       const uint64_t *local, int ndims)
{
	return piece_refused(p, block_piece(p, name, dtype, data, shape, start, local, ndims));
}

int pub_snapshot_check(const struct wd_publisher *p, const struct pub_snapshot *s)
{
	int r;

	if (s->pieces_refused)	/* piece_refused */
		return pub_error(-EINVAL, "snapshot of step %lld: %llu tensor piece%s refused while it was "
				 "built (the first: %s); sent, it would be stored without %s: begin it again",
				 (long long)s->step, (unsigned long long)s->pieces_refused,
				 s->pieces_refused == 1 ? "" : "s", s->piece_refusal,
				 s->pieces_refused == 1 ? "it" : "them");

	if (!s->n_names)	/* the daemon would refuse it: bad_field, tensors 0 */
		return pub_error(-EINVAL, "snapshot of step %lld has no tensor: add each with "
				 "wd_publisher_tensor or wd_publisher_block before the commit", (long long)s->step);
	if ((r = check_pieces(s)) < 0)
		return r;
	if (p->opts.ranks == 1) {	/* no other rank will bring what is missing */
		for (size_t k = 0; k < s->names_cap; k++) {
			const struct pub_tensor *t = s->names[k] ? &s->t[s->names[k] - 1] : NULL;
			if (t && t->name_covered != t->total)
				return pub_error(-EINVAL, "tensor '%s': the snapshot holds %llu of its %llu "
						 "elements; with ranks = 1 every tensor is whole (a sharded job "
						 "gives each rank's publisher ranks = the number of ranks)", PUB_CLIP(t->name),
						 (unsigned long long)t->name_covered,
						 (unsigned long long)t->total);
		}
	}
	return check_groups(s);
}
