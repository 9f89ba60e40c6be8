/*
 * wire.c: protocol v1 headers (docs/protocol.md), through jansson, and the
 * check of a payload against its CRC-32 (crc32.c). The only libwdrift file
 * that includes jansson.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "crc32.h"
#include "wire.h"

static const char *const code_names[WIRE_CODE_COUNT] = {
	[WIRE_OK] = "ok",
	[WIRE_BAD_FRAME] = "bad_frame", [WIRE_BAD_VERSION] = "bad_version",
	[WIRE_BAD_FIELD] = "bad_field", [WIRE_BAD_FRAMES] = "bad_frames",
	[WIRE_BAD_CHECKSUM] = "bad_checksum", [WIRE_CONFLICT] = "conflict",
	[WIRE_TOO_LARGE] = "too_large", [WIRE_OVER_WINDOW] = "over_window",
	[WIRE_TOO_MANY] = "too_many", [WIRE_INCOMPLETE] = "incomplete",
	[WIRE_INTERNAL] = "internal", [WIRE_BAD_NAME] = "bad_name",
};

static const char *const type_names[] = {
	[WIRE_HELLO] = "hello", [WIRE_TENSOR] = "tensor", [WIRE_COMMIT] = "commit",
	[WIRE_PING] = "ping", [WIRE_WELCOME] = "welcome", [WIRE_ACK] = "ack",
	[WIRE_ERROR] = "error", [WIRE_PONG] = "pong",
};
#define N_TYPES (sizeof(type_names) / sizeof(type_names[0]))

const char *wire_code_name(enum wire_code c)
{
	return (unsigned)c < WIRE_CODE_COUNT ? code_names[c] : "?";
}

/* Fills err and returns -1. */
static int fail(struct wire_error *err, enum wire_code code, const char *field,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int fail(struct wire_error *err, enum wire_code code, const char *field,
		const char *fmt, ...)
{
	va_list ap;

	err->code = code;
	snprintf(err->field, sizeof(err->field), "%s", field);
	va_start(ap, fmt);
	vsnprintf(err->reason, sizeof(err->reason), fmt, ap);
	va_end(ap);
	return -1;
}

/* An integer field in [min, max]; absent is an error when required. */
static int get_int(json_t *o, const char *key, int required, int64_t min, int64_t max,
		   int64_t *out, struct wire_error *err)
{
	json_t *v = json_object_get(o, key);

	if (!v) {
		if (required)
			return fail(err, WIRE_BAD_FIELD, key, "'%s' is missing", key);
		return 0;
	}
	if (!json_is_integer(v))
		return fail(err, WIRE_BAD_FIELD, key, "'%s' must be an integer", key);
	json_int_t x = json_integer_value(v);
	if (x < min || x > max)
		return fail(err, WIRE_BAD_FIELD, key, "'%s' is %lld, outside [%lld, %lld]", key,
			    (long long)x, (long long)min, (long long)max);
	*out = x;
	return 0;
}

static int get_uint(json_t *o, const char *key, int required, uint64_t min, uint64_t max,
		    uint64_t *out, struct wire_error *err)
{
	int64_t x = (int64_t)min;
	int r = get_int(o, key, required, (int64_t)min, (int64_t)max, &x, err);
	*out = (uint64_t)x;
	return r;
}

/* A run name: [A-Za-z0-9_.:-], 1 to max bytes. */
static int check_run(const char *s, size_t max, struct wire_error *err)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return fail(err, WIRE_BAD_FIELD, "run", "run name must be 1 to %zu bytes, not %zu", max, n);
	if (!strcmp(s, ".") || !strcmp(s, ".."))	/* a run name becomes a directory */
		return fail(err, WIRE_BAD_FIELD, "run", "run name may not be '%s'", s);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
		    !strchr("_.:-", c))
			return fail(err, WIRE_BAD_FIELD, "run",
				    "run name has '%c' at byte %zu (allowed: A-Z a-z 0-9 _ . : -)",
				    c >= 0x20 && c < 0x7f ? c : '?', i);
	}
	return 0;
}

int wire_name_rule(const char *name, char *why, size_t len)
{
	const char *p = name;

	if (*name == '/') {
		snprintf(why, len, "it starts with '/'");
		return -1;
	}
	for (;;) {	/* one part of the path each turn */
		size_t n = strcspn(p, "/");
		if (n == 0) {
			snprintf(why, len, p[0] ? "it has '//'" : "it ends with '/'");
			return -1;
		}
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) {
			snprintf(why, len, "it has a part '%.*s'", (int)n, p);
			return -1;
		}
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

int wire_names_clash(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la == lb)
		return 0;
	const char *s = la < lb ? a : b, *l = la < lb ? b : a;
	size_t n = la < lb ? la : lb;
	return !strncmp(s, l, n) && l[n] == '/';
}

long wire_name_control(const char *s)
{
	for (size_t i = 0; s[i]; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f ||
		    /* C1 (U+0080-U+009F): a terminal takes CSI and OSC from it */
		    ((unsigned char)s[i] == 0xc2 && (unsigned char)s[i + 1] >= 0x80 &&
		     (unsigned char)s[i + 1] <= 0x9f))
			return (long)i;
	return -1;
}

/*
 * A tensor name: 1 to max bytes, no control characters (jansson checked
 * UTF-8), and storable (wire_name_rule).
 */
static int check_name(const char *s, size_t max, struct wire_error *err)
{
	size_t n = strlen(s);
	char why[64];

	if (n == 0 || n > max)
		return fail(err, WIRE_BAD_FIELD, "name", "tensor name must be 1 to %zu bytes, not %zu",
			    max, n);
	long at = wire_name_control(s);
	if (at >= 0)
		return fail(err, WIRE_BAD_FIELD, "name",
			    "tensor name has a control character at byte %ld", at);
	if (wire_name_rule(s, why, sizeof(why)) < 0)
		return fail(err, WIRE_BAD_NAME, "name", "tensor name '%.120s' cannot be stored: %s "
			    "(a name is an HDF5 path: parts split by '/', none empty, '.' or '..')", s, why);
	return 0;
}

static int get_string(json_t *o, const char *key, char *out, size_t size,
		      struct wire_error *err)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return fail(err, WIRE_BAD_FIELD, key, "'%s' is missing", key);
	if (!json_is_string(v))
		return fail(err, WIRE_BAD_FIELD, key, "'%s' must be a string", key);
	if (json_string_length(v) >= size)
		return fail(err, WIRE_BAD_FIELD, key, "'%s' is %zu bytes, more than %zu", key,
			    json_string_length(v), size - 1);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int parse_tensor(json_t *o, const struct wire_limits *lim, struct wire_header *h,
			struct wire_error *err)
{
	char dtype[16];
	json_t *shape;
	uint64_t prod = 1;
	int64_t crc;

	if (get_string(o, "name", h->name, sizeof(h->name), err) ||
	    check_name(h->name, lim->max_name, err))
		return -1;
	if (get_string(o, "dtype", dtype, sizeof(dtype), err))
		return -1;
	if (strcmp(dtype, "f32") && strcmp(dtype, "f64") && strcmp(dtype, "f16") &&
	    strcmp(dtype, "bf16"))
		return fail(err, WIRE_BAD_FIELD, "dtype",
			    "unknown dtype '%s' (expected f32, f64, f16 or bf16)", dtype);
	wd_dtype_parse(dtype, &h->dtype);
	shape = json_object_get(o, "shape");
	if (!shape)
		return fail(err, WIRE_BAD_FIELD, "shape", "'shape' is missing");
	if (!json_is_array(shape))
		return fail(err, WIRE_BAD_FIELD, "shape", "'shape' must be an array of integers");
	if ((int)json_array_size(shape) > lim->max_dims || json_array_size(shape) > WIRE_MAX_DIMS)
		return fail(err, WIRE_BAD_FIELD, "shape", "'shape' has %zu dimensions, more than %d",
			    json_array_size(shape), lim->max_dims);
	h->ndims = (int)json_array_size(shape);
	for (int d = 0; d < h->ndims; d++) {
		json_t *v = json_array_get(shape, (size_t)d);
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return fail(err, WIRE_BAD_FIELD, "shape",
				    "'shape'[%d] must be an integer >= 0", d);
		h->shape[d] = (uint64_t)json_integer_value(v);
		if (h->shape[d] && prod > UINT64_MAX / h->shape[d])
			return fail(err, WIRE_BAD_FIELD, "shape", "'shape' overflows 64 bits");
		prod *= h->shape[d];
	}
	if (get_uint(o, "total", 1, 1, INT64_MAX, &h->total, err) ||
	    get_uint(o, "offset", 1, 0, INT64_MAX, &h->offset, err) ||
	    get_uint(o, "count", 1, 1, INT64_MAX, &h->count, err) ||
	    get_int(o, "crc32", 1, 0, UINT32_MAX, &crc, err))
		return -1;
	h->crc32 = (uint32_t)crc;
	if (prod != h->total)
		return fail(err, WIRE_BAD_FIELD, "total",
			    "'total' is %llu but 'shape' holds %llu elements",
			    (unsigned long long)h->total, (unsigned long long)prod);
	if (h->offset > h->total || h->count > h->total - h->offset)
		return fail(err, WIRE_BAD_FIELD, "count",
			    "shard [%llu, %llu + %llu) runs past 'total' %llu",
			    (unsigned long long)h->offset, (unsigned long long)h->offset,
			    (unsigned long long)h->count, (unsigned long long)h->total);
	/* count < 2^63 and size <= 8: guard the product before taking it */
	uint64_t bytes = h->count > UINT64_MAX / 8 ? UINT64_MAX : h->count * wd_dtype_size(h->dtype);
	if (bytes > lim->max_message)
		return fail(err, WIRE_TOO_LARGE, "count",
			    "payload of %llu bytes is over the limit of %llu; send it in shards",
			    (unsigned long long)bytes, (unsigned long long)lim->max_message);
	return 0;
}

static int parse_error_reply(json_t *o, struct wire_header *h)
{
	const char *code = json_string_value(json_object_get(o, "code"));
	const char *field = json_string_value(json_object_get(o, "field"));
	const char *reason = json_string_value(json_object_get(o, "reason"));

	h->error.code = WIRE_INTERNAL;
	for (int c = 1; code && c < WIRE_CODE_COUNT; c++)
		if (!strcmp(code, code_names[c]))
			h->error.code = (enum wire_code)c;
	snprintf(h->error.field, sizeof(h->error.field), "%s", field ? field : "");
	snprintf(h->error.reason, sizeof(h->error.reason), "%s", reason ? reason : "");
	return 0;
}

int wire_parse(const void *frame, size_t len, const struct wire_limits *lim,
	       struct wire_header *h, struct wire_error *err)
{
	json_error_t jerr;
	json_t *o = NULL;
	char type[16];
	int64_t v = 0;
	int r = -1;

	memset(h, 0, sizeof(*h));
	h->step = -1;
	err->code = WIRE_OK;
	err->field[0] = err->reason[0] = 0;
	if (len > WIRE_MAX_HEADER)
		return fail(err, WIRE_BAD_FRAME, "", "header frame of %zu bytes is over %u",
			    len, WIRE_MAX_HEADER);
	o = json_loadb(frame, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!o)
		return fail(err, WIRE_BAD_FRAME, "", "header is not JSON: %s (at byte %d)",
			    jerr.text, jerr.position);
	if (!json_is_object(o)) {
		fail(err, WIRE_BAD_FRAME, "", "header must be a JSON object");
		goto out;
	}
	json_t *jv = json_object_get(o, "v");
	if (!jv || !json_is_integer(jv) || (v = json_integer_value(jv)) != WIRE_VERSION) {
		fail(err, WIRE_BAD_VERSION, "v", "protocol version %s; this daemon speaks 1",
		     !jv ? "is missing" : json_is_integer(jv) ? "is not 1" : "is not an integer");
		goto out;
	}
	if (get_string(o, "type", type, sizeof(type), err))
		goto out;
	size_t t;
	for (t = 0; t < N_TYPES && strcmp(type, type_names[t]); t++)
		;
	if (t == N_TYPES) {
		fail(err, WIRE_BAD_FIELD, "type", "unknown message type '%s'", type);
		goto out;
	}
	h->type = (enum wire_type)t;
	if (h->type == WIRE_PING || h->type == WIRE_PONG) {
		/* a pong may come unasked, with a notice for the job's user (protocol.md) */
		r = h->type == WIRE_PONG && json_object_get(o, "notice") &&
		    get_string(o, "notice", h->notice, sizeof(h->notice), err) ? -1 : 0;
		goto out;
	}
	/* Every other message names its run; read it first so errors can echo it. */
	if (h->type != WIRE_ERROR &&
	    (get_string(o, "run", h->run, sizeof(h->run), err) ||
	     check_run(h->run, lim->max_name, err)))
		goto out;
	if (json_object_get(o, "step") &&
	    get_int(o, "step", 0, 0, INT64_MAX, &h->step, err))
		goto out;
	switch (h->type) {
	case WIRE_TENSOR:
	case WIRE_COMMIT:
	case WIRE_ACK:
		if (h->step < 0) {
			fail(err, WIRE_BAD_FIELD, "step", "'step' is missing");
			goto out;
		}
		break;
	default:
		break;
	}
	switch (h->type) {
	case WIRE_TENSOR: {
		int64_t session = 0;
		if (parse_tensor(o, lim, h, err) || get_int(o, "session", 0, 1, INT64_MAX, &session, err))
			goto out;
		h->session = (uint64_t)session;
		break;
	}
	case WIRE_COMMIT: {
		int64_t session = 0;	/* absent: 0, which a publisher never sends */
		h->ranks = 1;
		h->rank = -1;
		if (get_uint(o, "tensors", 1, 1, INT64_MAX, &h->tensors, err) ||
		    get_uint(o, "ranks", 0, 1, 1u << 20, &h->ranks, err) ||
		    get_int(o, "rank", 0, -1, (1 << 20) - 1, &h->rank, err) ||
		    get_int(o, "session", 0, 1, INT64_MAX, &session, err))
			goto out;
		h->session = (uint64_t)session;
		if (json_object_get(o, "rank") && (h->ranks <= 1 || h->rank < 0 || (uint64_t)h->rank >= h->ranks)) {
			fail(err, WIRE_BAD_FIELD, "rank", "'rank' must be an integer from 0 to ranks - 1 (%llu)",
			     (unsigned long long)h->ranks - 1);
			goto out;
		}
		break;
	}
	case WIRE_WELCOME:
		if (get_uint(o, "window", 1, 1, INT64_MAX, &h->window, err) ||
		    get_uint(o, "max_message", 0, 0, INT64_MAX, &h->max_message, err) ||
		    (json_object_get(o, "notice") &&
		     get_string(o, "notice", h->notice, sizeof(h->notice), err)))
			goto out;
		break;
	case WIRE_ACK:
		if (get_uint(o, "tensors", 1, 1, INT64_MAX, &h->tensors, err) ||
		    get_uint(o, "bytes", 0, 0, INT64_MAX, &h->bytes, err) ||
		    (json_object_get(o, "notice") &&
		     get_string(o, "notice", h->notice, sizeof(h->notice), err)))
			goto out;
		h->duplicate = json_is_true(json_object_get(o, "duplicate"));
		break;
	case WIRE_ERROR: {
		const char *run = json_string_value(json_object_get(o, "run"));
		const char *name = json_string_value(json_object_get(o, "name"));
		snprintf(h->run, sizeof(h->run), "%s", run ? run : "");
		snprintf(h->name, sizeof(h->name), "%s", name ? name : "");
		parse_error_reply(o, h);
		break;
	}
	default:
		break;
	}
	r = 0;
out:
	json_decref(o);
	return r;
}

int wire_check_payload(const struct wire_header *h, const size_t *frame_len,
		       const void *const *frame, size_t n_frames, struct wire_error *err)
{
	uint64_t want = h->count * wd_dtype_size(h->dtype), got = 0;
	uint32_t crc = 0;

	for (size_t i = 0; i < n_frames; i++) {
		if (frame_len[i] > WIRE_MAX_FRAME)
			return fail(err, WIRE_BAD_FRAME, "frames",
				    "payload frame %zu is %zu bytes, over %u", i + 1, frame_len[i],
				    WIRE_MAX_FRAME);
		got += frame_len[i];
	}
	if (got != want || n_frames == 0)
		return fail(err, WIRE_BAD_FRAMES, "frames",
			    "payload is %llu bytes in %zu frames; count %llu x %zu bytes is %llu",
			    (unsigned long long)got, n_frames, (unsigned long long)h->count,
			    wd_dtype_size(h->dtype), (unsigned long long)want);
	if (!frame)
		return 0;
	for (size_t i = 0; i < n_frames; i++)
		crc = wd_crc32(crc, frame[i], frame_len[i]);
	if (crc != h->crc32)
		return fail(err, WIRE_BAD_CHECKSUM, "crc32",
			    "payload crc32 is %u, the header says %u", crc, h->crc32);
	return 0;
}

char *wire_build(const struct wire_header *h)
{
	json_t *o = json_pack("{s:i,s:s}", "v", WIRE_VERSION, "type", type_names[h->type]);
	json_t *shape;
	char *s;

	if (!o)
		return NULL;
	if (h->run[0])
		json_object_set_new(o, "run", json_string(h->run));
	if (h->step >= 0 && h->type != WIRE_HELLO && h->type != WIRE_WELCOME)
		json_object_set_new(o, "step", json_integer(h->step));
	switch (h->type) {
	case WIRE_TENSOR:
		shape = json_array();
		for (int d = 0; d < h->ndims; d++)
			json_array_append_new(shape, json_integer((json_int_t)h->shape[d]));
		json_object_set_new(o, "name", json_string(h->name));
		json_object_set_new(o, "dtype", json_string(wd_dtype_name(h->dtype)));
		json_object_set_new(o, "shape", shape);
		json_object_set_new(o, "offset", json_integer((json_int_t)h->offset));
		json_object_set_new(o, "count", json_integer((json_int_t)h->count));
		json_object_set_new(o, "total", json_integer((json_int_t)h->total));
		json_object_set_new(o, "crc32", json_integer((json_int_t)h->crc32));
		if (h->session)
			json_object_set_new(o, "session", json_integer((json_int_t)h->session));
		break;
	case WIRE_COMMIT:
		json_object_set_new(o, "tensors", json_integer((json_int_t)h->tensors));
		if (h->ranks > 1)
			json_object_set_new(o, "ranks", json_integer((json_int_t)h->ranks));
		if (h->ranks > 1 && h->rank >= 0)
			json_object_set_new(o, "rank", json_integer((json_int_t)h->rank));
		if (h->session)
			json_object_set_new(o, "session", json_integer((json_int_t)h->session));
		break;
	case WIRE_WELCOME:
		json_object_set_new(o, "window", json_integer((json_int_t)h->window));
		json_object_set_new(o, "max_frame", json_integer(WIRE_MAX_FRAME));
		if (h->max_message)
			json_object_set_new(o, "max_message", json_integer((json_int_t)h->max_message));
		if (h->notice[0])
			json_object_set_new(o, "notice", json_string(h->notice));
		break;
	case WIRE_ACK:
		json_object_set_new(o, "tensors", json_integer((json_int_t)h->tensors));
		json_object_set_new(o, "bytes", json_integer((json_int_t)h->bytes));
		json_object_set_new(o, "duplicate", json_boolean(h->duplicate));
		if (h->notice[0])
			json_object_set_new(o, "notice", json_string(h->notice));
		break;
	case WIRE_PONG:
		if (h->notice[0])
			json_object_set_new(o, "notice", json_string(h->notice));
		break;
	case WIRE_ERROR:
		json_object_set_new(o, "code", json_string(wire_code_name(h->error.code)));
		json_object_set_new(o, "field", json_string(h->error.field));
		json_object_set_new(o, "reason", json_string(h->error.reason));
		if (h->name[0])
			json_object_set_new(o, "name", json_string(h->name));
		break;
	default:
		break;
	}
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}
