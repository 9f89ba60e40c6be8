/*
 * pieces.c: the received pieces of a tensor being assembled (see pieces.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32.h"
#include "pieces.h"

/* Where [b, e) goes: the index of the first range after it; -1 on an overlap. */
long pieces_slot(const struct tensor_buf *t, uint64_t b, uint64_t e)
{
	size_t lo = 0, hi = t->n_ranges;
	while (lo < hi) {	/* the first range that begins at or after e */
		size_t mid = (lo + hi) / 2;
		if (t->ranges[mid][0] < e)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && t->ranges[lo - 1][1] > b)
		return -1;	/* the range before it reaches into [b, e) */
	return (long)lo;
}

/* Would [b, e) (no overlap) make a new piece, rather than extend one? */
int pieces_is_new(const struct tensor_buf *t, size_t at, uint64_t b, uint64_t e)
{
	return !(at > 0 && t->ranges[at - 1][1] == b) && !(at < t->n_ranges && t->ranges[at][0] == e);
}

/*
 * Adds [b, e), whose bytes have CRC-32 crc, at its slot; 0, or -1 out of
 * memory. Each range keeps the CRC of its bytes, combined as ranges merge
 * (crc32_combine, in offset order), so a complete tensor's one range has
 * the whole tensor's CRC without reading its bytes again: its identity.
 */
int pieces_add(struct tensor_buf *t, size_t at, uint64_t b, uint64_t e, uint32_t crc)
{
	uint64_t es = wd_dtype_size(t->dtype);
	int left = at > 0 && t->ranges[at - 1][1] == b;
	int right = at < t->n_ranges && t->ranges[at][0] == e;

	if (left && right) {
		uint32_t c = wd_crc32_combine(t->crcs[at - 1], crc, (e - b) * es);
		t->crcs[at - 1] = wd_crc32_combine(c, t->crcs[at], (t->ranges[at][1] - e) * es);
		t->ranges[at - 1][1] = t->ranges[at][1];
		memmove(t->ranges + at, t->ranges + at + 1, (t->n_ranges - at - 1) * sizeof(*t->ranges));
		memmove(t->crcs + at, t->crcs + at + 1, (t->n_ranges - at - 1) * sizeof(*t->crcs));
		t->n_ranges--;
	} else if (left) {
		t->crcs[at - 1] = wd_crc32_combine(t->crcs[at - 1], crc, (e - b) * es);
		t->ranges[at - 1][1] = e;
	} else if (right) {
		t->crcs[at] = wd_crc32_combine(crc, t->crcs[at], (t->ranges[at][1] - e) * es);
		t->ranges[at][0] = b;
	} else {
		size_t n = t->n_ranges;
		if ((n & (n - 1)) == 0) {	/* capacity: the next power of two */
			uint64_t (*nr)[2] = realloc(t->ranges, (n ? 2 * n : 1) * sizeof(*nr));
			if (!nr)
				return -1;
			t->ranges = nr;
			uint32_t *nc = realloc(t->crcs, (n ? 2 * n : 1) * sizeof(*nc));
			if (!nc)
				return -1;
			t->crcs = nc;
		}
		memmove(t->ranges + at + 1, t->ranges + at, (n - at) * sizeof(*t->ranges));
		memmove(t->crcs + at + 1, t->crcs + at, (n - at) * sizeof(*t->crcs));
		t->ranges[at][0] = b;
		t->ranges[at][1] = e;
		t->crcs[at] = crc;
		t->n_ranges++;
	}
	return 0;
}

/* Compares (cmp) or copies (dst) n bytes of m's payload from byte skip. */
static int payload_bytes(const struct payload *m, uint64_t skip, const unsigned char *cmp,
			 unsigned char *dst, uint64_t n)
{
	for (size_t i = 0; i < m->n && n > 0; i++) {
		if (skip >= m->len[i]) {
			skip -= m->len[i];
			continue;
		}
		uint64_t k = m->len[i] - skip < n ? m->len[i] - skip : n;
		const unsigned char *src = (const unsigned char *)m->data[i] + skip;
		if (cmp && memcmp(cmp, src, k))
			return 1;
		if (dst)
			memcpy(dst, src, k), dst += k;
		if (cmp)
			cmp += k;
		n -= k;
		skip = 0;
	}
	return 0;
}

/*
 * See pieces.h: the overlapped elements compared, then the parts not yet
 * received taken, each with its CRC computed here.
 */
int pieces_overlap(struct tensor_buf *t, const struct payload *m, uint64_t b, uint64_t e,
		   char *why, size_t whylen)
{
	size_t es = wd_dtype_size(t->dtype);
	uint64_t gaps[64][2];
	unsigned char *data = t->data;
	size_t n_gaps = 0;

	uint64_t at = b;	/* the ranges are sorted: walk those that meet [b, e) */
	for (size_t i = 0; i < t->n_ranges && t->ranges[i][0] < e; i++) {
		uint64_t rb = t->ranges[i][0], re = t->ranges[i][1];
		if (re <= b)
			continue;
		uint64_t ob = rb > b ? rb : b, oe = re < e ? re : e;
		if (payload_bytes(m, (ob - b) * es, data + ob * es, NULL, (oe - ob) * es)) {
			snprintf(why, whylen, "shard of '%.120s' overlaps elements [%llu, %llu) already "
				 "received, with other bytes", t->name, (unsigned long long)ob,
				 (unsigned long long)oe);
			return 1;
		}
		if (ob > at && n_gaps < 64)
			gaps[n_gaps][0] = at, gaps[n_gaps++][1] = ob;
		at = oe;
	}
	if (at < e && n_gaps < 64)	/* more gaps than that: the rest stays missing */
		gaps[n_gaps][0] = at, gaps[n_gaps++][1] = e;
	for (size_t g = 0; g < n_gaps; g++) {
		uint64_t gb = gaps[g][0], ge = gaps[g][1];
		long slot = pieces_slot(t, gb, ge);
		if (slot < 0)
			continue;
		payload_bytes(m, (gb - b) * es, NULL, data + gb * es, (ge - gb) * es);
		if (pieces_add(t, (size_t)slot, gb, ge, wd_crc32(0, data + gb * es, (ge - gb) * es)) < 0) {
			snprintf(why, whylen, "out of memory");
			return -1;
		}
		t->covered += ge - gb;
	}
	return 0;
}

void pieces_copy(struct tensor_buf *t, const struct payload *m, uint64_t offset)
{
	size_t es = wd_dtype_size(t->dtype);
	uint64_t n = 0;
	for (size_t i = 0; i < m->n; i++)
		n += m->len[i];
	payload_bytes(m, 0, NULL, (unsigned char *)t->data + offset * es, n);
}

size_t pieces_gaps(const struct tensor_buf *t, uint64_t *b, uint64_t *e)
{
	uint64_t at = 0;	/* the end of the ranges before */
	size_t n = 0;

	for (size_t i = 0; i <= t->n_ranges; i++) {
		uint64_t next = i < t->n_ranges ? t->ranges[i][0] : t->total;
		if (next > at && !n++) {
			*b = at;
			*e = next;
		}
		if (i < t->n_ranges)
			at = t->ranges[i][1];
	}
	return n;
}
