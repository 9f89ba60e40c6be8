/*
 * test_wire.c: protocol v1 headers: every message type round-trips, and
 * every malformed header is refused with the code and field protocol.md
 * promises, without crashing.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32.h"
#include "harness.h"
#include "wire.h"

static const struct wire_limits lim = { .max_name = 512, .max_dims = 16, .max_message = 1u << 30 };

static void roundtrip(void)
{
	struct wire_header h, back;
	struct wire_error err;

	memset(&h, 0, sizeof(h));
	h.type = WIRE_TENSOR;
	snprintf(h.run, sizeof(h.run), "llama-fa");
	snprintf(h.name, sizeof(h.name), "layers.3.attention.wq.weight");
	h.step = 1200;
	h.dtype = WD_BF16;
	h.ndims = 2;
	h.shape[0] = 64;
	h.shape[1] = 32;
	h.offset = 1024;
	h.count = 1024;
	h.total = 2048;
	h.crc32 = 4000000000u;
	char *s = wire_build(&h);
	CHECK(s && wire_parse(s, strlen(s), &lim, &back, &err) == 0, "tensor round-trips (%s)", err.reason);
	CHECK(back.type == WIRE_TENSOR && !strcmp(back.run, "llama-fa") && back.step == 1200 &&
	      !strcmp(back.name, h.name) && back.dtype == WD_BF16 && back.ndims == 2 &&
	      back.shape[1] == 32 && back.offset == 1024 && back.count == 1024 &&
	      back.total == 2048 && back.crc32 == 4000000000u, "tensor fields survive");
	free(s);

	/* a sharded job's commit: its ranks, and this sender's rank */
	memset(&h, 0, sizeof(h));
	h.type = WIRE_COMMIT;
	h.step = 3;
	snprintf(h.run, sizeof(h.run), "llama-fa");
	h.tensors = 291;
	h.ranks = 8;
	h.rank = 5;
	s = wire_build(&h);
	CHECK(s && wire_parse(s, strlen(s), &lim, &back, &err) == 0 && back.ranks == 8 && back.rank == 5,
	      "a commit's ranks and rank round-trip (%s)", s ? s : "");
	free(s);
	h.session = 0x123456789abcdefull;
	s = wire_build(&h);
	CHECK(s && wire_parse(s, strlen(s), &lim, &back, &err) == 0 && back.session == h.session,
	      "a commit's session round-trips (%s)", s ? s : "");
	free(s);
	h.session = 0;
	h.rank = -1;
	s = wire_build(&h);
	CHECK(s && wire_parse(s, strlen(s), &lim, &back, &err) == 0 && back.ranks == 8 && back.rank == -1 &&
	      !strstr(s, "\"rank\""), "a commit whose rank is not said has none (%s)", s ? s : "");
	free(s);

	static const enum wire_type types[] = { WIRE_HELLO, WIRE_COMMIT, WIRE_PING, WIRE_WELCOME,
						 WIRE_ACK, WIRE_ERROR, WIRE_PONG };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		memset(&h, 0, sizeof(h));
		h.type = types[i];
		h.step = 7;
		snprintf(h.run, sizeof(h.run), "base");
		h.tensors = 291;
		h.bytes = 123;
		h.window = 1 << 20;
		h.duplicate = 1;
		snprintf(h.notice, sizeof(h.notice), "run 'base' belongs to no study");
		h.error.code = WIRE_BAD_CHECKSUM;
		snprintf(h.error.field, sizeof(h.error.field), "crc32");
		snprintf(h.error.reason, sizeof(h.error.reason), "payload crc32 is 1");
		s = wire_build(&h);
		int r = s ? wire_parse(s, strlen(s), &lim, &back, &err) : -1;
		CHECK(r == 0 && back.type == types[i], "type %d round-trips: %s", (int)types[i], s ? s : "");
		if (types[i] == WIRE_COMMIT)
			CHECK(back.ranks == 1 && back.rank == -1 && !back.session && !strstr(s, "rank") &&
			      !strstr(s, "session"),
			      "a commit of one publisher says no ranks and no rank");
		if (types[i] == WIRE_ACK)
			CHECK(back.tensors == 291 && back.bytes == 123 && back.duplicate && back.step == 7,
			      "ack fields survive");
		if (types[i] == WIRE_ERROR)
			CHECK(back.error.code == WIRE_BAD_CHECKSUM && !strcmp(back.error.field, "crc32"),
			      "error fields survive");
		if (types[i] == WIRE_WELCOME)
			CHECK(back.window == 1 << 20 && !strcmp(back.notice, h.notice),
			      "welcome window and notice survive");
		else if (types[i] == WIRE_ACK)	/* two jobs in one run: said to each job's user */
			CHECK(!strcmp(back.notice, h.notice), "an ack's notice survives");
		else if (types[i] == WIRE_PONG)	/* unasked: two ranks given one rank */
			CHECK(!strcmp(back.notice, h.notice), "a pong's notice survives");
		else
			CHECK(!back.notice[0] && !strstr(s, "notice"), "only a welcome, an ack and a pong have a notice");
		free(s);
	}
}

#define T(x) "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,\"name\":\"w\",\"dtype\":\"f32\"," x "}"
#define OK_REST "\"shape\":[2,3],\"offset\":0,\"count\":6,\"total\":6,\"crc32\":5"

static void malformed(void)
{
	static const struct { const char *frame; enum wire_code code; const char *field, *says; } cases[] = {
		{ "", WIRE_BAD_FRAME, "", "not JSON" },
		{ "{\"v\":1,", WIRE_BAD_FRAME, "", "not JSON" },
		{ "[1,2]", WIRE_BAD_FRAME, "", "JSON object" },
		{ "\"hello\"", WIRE_BAD_FRAME, "", "not JSON" },
		{ "{\"type\":\"ping\"}", WIRE_BAD_VERSION, "v", "missing" },
		{ "{\"v\":1,\"type\":\"welcome\",\"run\":\"r\",\"window\":1,\"notice\":7}", WIRE_BAD_FIELD,
		  "notice", "must be a string" },
		{ "{\"v\":1,\"type\":\"ack\",\"run\":\"r\",\"step\":1,\"tensors\":1,\"notice\":[]}", WIRE_BAD_FIELD,
		  "notice", "must be a string" },
		{ "{\"v\":1,\"type\":\"pong\",\"notice\":false}", WIRE_BAD_FIELD, "notice", "must be a string" },
		{ "{\"v\":2,\"type\":\"ping\"}", WIRE_BAD_VERSION, "v", "not 1" },
		{ "{\"v\":\"1\",\"type\":\"ping\"}", WIRE_BAD_VERSION, "v", "not an integer" },
		{ "{\"v\":1}", WIRE_BAD_FIELD, "type", "missing" },
		{ "{\"v\":1,\"type\":7}", WIRE_BAD_FIELD, "type", "string" },
		{ "{\"v\":1,\"type\":\"tensors\"}", WIRE_BAD_FIELD, "type", "unknown message type" },
		{ "{\"v\":1,\"v\":1,\"type\":\"ping\"}", WIRE_BAD_FRAME, "", "duplicate" },
		{ "{\"v\":1,\"type\":\"hello\"}", WIRE_BAD_FIELD, "run", "missing" },
		{ "{\"v\":1,\"type\":\"hello\",\"run\":\"\"}", WIRE_BAD_FIELD, "run", "1 to 512" },
		{ "{\"v\":1,\"type\":\"hello\",\"run\":\"a b\"}", WIRE_BAD_FIELD, "run", "' ' at byte 1" },
		{ "{\"v\":1,\"type\":\"hello\",\"run\":\"a/b\"}", WIRE_BAD_FIELD, "run", "allowed" },
		{ "{\"v\":1,\"type\":\"hello\",\"run\":\"..\"}", WIRE_BAD_FIELD, "run", "may not be '..'" },
		{ "{\"v\":1,\"type\":\"hello\",\"run\":\".\"}", WIRE_BAD_FIELD, "run", "may not be '.'" },
		{ "{\"v\":1,\"type\":\"hello\",\"run\":\"a\\u0000b\"}", WIRE_BAD_FRAME, "", "not JSON" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"tensors\":3}", WIRE_BAD_FIELD, "step", "missing" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":-1,\"tensors\":3}", WIRE_BAD_FIELD, "step", "outside" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1.5,\"tensors\":3}", WIRE_BAD_FIELD, "step", "integer" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":\"1\",\"tensors\":3}", WIRE_BAD_FIELD, "step", "integer" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1}", WIRE_BAD_FIELD, "tensors", "missing" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1,\"tensors\":0}", WIRE_BAD_FIELD, "tensors", "outside" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1,\"tensors\":1,\"ranks\":4,\"rank\":4}", WIRE_BAD_FIELD, "rank", "0 to ranks - 1 (3)" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1,\"tensors\":1,\"rank\":1}", WIRE_BAD_FIELD, "rank", "0 to ranks - 1 (0)" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1,\"tensors\":1,\"ranks\":4,\"rank\":-1}", WIRE_BAD_FIELD, "rank", "0 to ranks - 1" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1,\"tensors\":1,\"ranks\":4,\"rank\":\"2\"}", WIRE_BAD_FIELD, "rank", "integer" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1,\"tensors\":1,\"ranks\":4,\"rank\":1048576}", WIRE_BAD_FIELD, "rank", "outside" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1,\"tensors\":1,\"session\":0}", WIRE_BAD_FIELD, "session", "outside" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":1,\"tensors\":1,\"session\":\"7\"}", WIRE_BAD_FIELD, "session", "integer" },
		{ "{\"v\":1,\"type\":\"commit\",\"run\":\"r\",\"step\":99999999999999999999,\"tensors\":1}", WIRE_BAD_FRAME, "", "not JSON" },
		{ T(OK_REST ",\"x\":1}") + 0, WIRE_BAD_FRAME, "", "not JSON" },
		{ "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,\"dtype\":\"f32\"," OK_REST "}", WIRE_BAD_FIELD, "name", "missing" },
		{ "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,\"name\":\"\",\"dtype\":\"f32\"," OK_REST "}", WIRE_BAD_FIELD, "name", "1 to 512" },
		{ "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,\"name\":\"a\\tb\",\"dtype\":\"f32\"," OK_REST "}", WIRE_BAD_FIELD, "name", "control character" },
		{ "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,\"name\":\"w\",\"dtype\":\"f8\"," OK_REST "}", WIRE_BAD_FIELD, "dtype", "unknown dtype 'f8'" },
		{ "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,\"name\":\"w\",\"dtype\":\"float32\"," OK_REST "}", WIRE_BAD_FIELD, "dtype", "unknown dtype" },
		{ T("\"offset\":0,\"count\":6,\"total\":6,\"crc32\":5"), WIRE_BAD_FIELD, "shape", "missing" },
		{ T("\"shape\":6,\"offset\":0,\"count\":6,\"total\":6,\"crc32\":5"), WIRE_BAD_FIELD, "shape", "array" },
		{ T("\"shape\":[2,-3],\"offset\":0,\"count\":6,\"total\":6,\"crc32\":5"), WIRE_BAD_FIELD, "shape", "[1]" },
		{ T("\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],\"offset\":0,\"count\":1,\"total\":1,\"crc32\":5"), WIRE_BAD_FIELD, "shape", "17 dimensions" },
		{ T("\"shape\":[4294967296,4294967296,4],\"offset\":0,\"count\":1,\"total\":1,\"crc32\":5"), WIRE_BAD_FIELD, "shape", "overflows" },
		{ T("\"shape\":[2,3],\"offset\":0,\"count\":6,\"total\":7,\"crc32\":5"), WIRE_BAD_FIELD, "total", "holds 6" },
		{ T("\"shape\":[0],\"offset\":0,\"count\":1,\"total\":0,\"crc32\":5"), WIRE_BAD_FIELD, "total", "outside" },
		{ T("\"shape\":[2,3],\"offset\":4,\"count\":3,\"total\":6,\"crc32\":5"), WIRE_BAD_FIELD, "count", "runs past" },
		{ T("\"shape\":[2,3],\"offset\":0,\"count\":0,\"total\":6,\"crc32\":5"), WIRE_BAD_FIELD, "count", "outside" },
		{ T("\"shape\":[2,3],\"offset\":0,\"count\":6,\"total\":6"), WIRE_BAD_FIELD, "crc32", "missing" },
		{ T("\"shape\":[2,3],\"offset\":0,\"count\":6,\"total\":6,\"crc32\":4294967296"), WIRE_BAD_FIELD, "crc32", "outside" },
		{ T("\"shape\":[2,3],\"offset\":0,\"count\":6,\"total\":6,\"crc32\":-1"), WIRE_BAD_FIELD, "crc32", "outside" },
		{ T("\"shape\":[1073741824],\"offset\":0,\"count\":1073741824,\"total\":1073741824,\"crc32\":5"), WIRE_TOO_LARGE, "count", "send it in shards" },
	};
	struct wire_header h;
	struct wire_error err;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *f = cases[i].frame;
		int r = wire_parse(f, strlen(f), &lim, &h, &err);
		CHECK(r == -1 && err.code == cases[i].code && !strcmp(err.field, cases[i].field) &&
		      strstr(err.reason, cases[i].says),
		      "case %zu refused as %s/%s: got %s/%s '%s'", i, wire_code_name(cases[i].code),
		      cases[i].field, wire_code_name(err.code), err.field, err.reason);
	}
	/* Fields read before the failure are kept for the reply to echo. */
	const char *bad = T("\"shape\":[2,3],\"offset\":0,\"count\":6,\"total\":7,\"crc32\":5");
	wire_parse(bad, strlen(bad), &lim, &h, &err);
	CHECK(!strcmp(h.run, "r") && h.step == 1 && !strcmp(h.name, "w"), "error echoes run, step, name");
	/* Oversized header. */
	size_t big = WIRE_MAX_HEADER + 1;
	char *huge = malloc(big);
	memset(huge, ' ', big);
	CHECK(wire_parse(huge, big, &lim, &h, &err) == -1 && err.code == WIRE_BAD_FRAME &&
	      strstr(err.reason, "over"), "header over 64 KiB refused: %s", err.reason);
	free(huge);
	/* Random bytes never crash the parser. */
	unsigned char junk[512];
	uint64_t x = 42;
	int crashed = 0;
	for (int k = 0; k < 2000; k++) {
		size_t n = (size_t)(k % 512);
		for (size_t j = 0; j < n; j++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			junk[j] = (unsigned char)(x >> 56);
		}
		if (k % 3 == 0 && n > 8)
			memcpy(junk, "{\"v\":1,\"", 8);
		crashed |= wire_parse(junk, n, &lim, &h, &err) == 0 && h.type > WIRE_PONG;
	}
	CHECK(!crashed, "2000 random frames parsed without a crash");
}

static void payload(void)
{
	struct wire_header h = { .type = WIRE_TENSOR, .dtype = WD_F32, .count = 6 };
	struct wire_error err;
	float data[6] = { 1, 2, 3, 4, 5, 6 };
	const void *frames[2] = { data, data + 4 };
	size_t lens[2] = { 16, 8 };

	h.crc32 = wd_crc32(0, data, sizeof(data));
	CHECK(wd_crc32(0, "123456789", 9) == 0xcbf43926u, "crc32 check value of '123456789'");
	CHECK(wire_check_payload(&h, lens, frames, 2, &err) == 0, "payload in two frames checks");
	lens[1] = 4;
	CHECK(wire_check_payload(&h, lens, frames, 2, &err) == -1 && err.code == WIRE_BAD_FRAMES &&
	      !strcmp(err.field, "frames") && strstr(err.reason, "20 bytes in 2 frames"),
	      "short payload: %s", err.reason);
	lens[1] = 8;
	CHECK(wire_check_payload(&h, lens, frames, 0, &err) == -1 && err.code == WIRE_BAD_FRAMES,
	      "no payload frame: %s", err.reason);
	h.crc32 ^= 1;
	CHECK(wire_check_payload(&h, lens, frames, 2, &err) == -1 && err.code == WIRE_BAD_CHECKSUM &&
	      !strcmp(err.field, "crc32"), "checksum mismatch: %s", err.reason);
	size_t huge[1] = { (size_t)WIRE_MAX_FRAME + 4 };
	h.count = huge[0] / 4;
	CHECK(wire_check_payload(&h, huge, NULL, 1, &err) == -1 && err.code == WIRE_BAD_FRAME,
	      "frame over 64 MiB: %s", err.reason);
}

/*
 * Names a snapshot's HDF5 file cannot hold apart: refused as bad_name at
 * the tensor frame (issue 11: '.' was accepted, then failed at the commit
 * as 'internal', and the publisher re-sent it forever).
 */
static void names(void)
{
	static const char *const bad[] = { ".", "/", "..", "/w", "w/", "a//b", "./x", "a/./b",
					   "a/..", "../a", "a/b/" };
	static const char *const good[] = { "w", "layers.0.attn.wq.weight", "a/b", "a.b/c..d",
					    "..a", "a..", "x/.y", "€/ü" };
	struct wire_header h;
	struct wire_error err;
	char frame[512], why[64];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(frame, sizeof(frame), "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,"
			 "\"name\":\"%s\",\"dtype\":\"f32\",\"shape\":[1],\"offset\":0,\"count\":1,"
			 "\"total\":1,\"crc32\":0}", bad[i]);
		int r = wire_parse(frame, strlen(frame), &lim, &h, &err);
		CHECK(r < 0 && err.code == WIRE_BAD_NAME && !strcmp(err.field, "name") &&
		      strstr(err.reason, "HDF5 path") && !strcmp(wire_code_name(err.code), "bad_name"),
		      "name '%s' refused: %s", bad[i], err.reason);
		CHECK(wire_name_rule(bad[i], why, sizeof(why)) < 0, "rule refuses '%s': %s", bad[i], why);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK(wire_name_rule(good[i], why, sizeof(why)) == 0, "rule takes '%s'", good[i]);
	static const char *const c1[] = { "a\xc2\x9b" "2J", "\xc2\x9d" "0;x", "\xc2\x80" };
	for (size_t i = 0; i < sizeof(c1) / sizeof(c1[0]); i++) {
		snprintf(frame, sizeof(frame), "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,"
			 "\"name\":\"%s\",\"dtype\":\"f32\",\"shape\":[1],\"offset\":0,\"count\":1,"
			 "\"total\":1,\"crc32\":0}", c1[i]);
		int r = wire_parse(frame, strlen(frame), &lim, &h, &err);
		CHECK(r < 0 && err.code == WIRE_BAD_FIELD && strstr(err.reason, "control character"),
		      "a C1 control character (U+0080-U+009F) in a name: %s", err.reason);
	}
	snprintf(frame, sizeof(frame), "{\"v\":1,\"type\":\"tensor\",\"run\":\"r\",\"step\":1,"
		 "\"name\":\"\xc2\xa0\xc3\xa9\",\"dtype\":\"f32\",\"shape\":[1],\"offset\":0,"
		 "\"count\":1,\"total\":1,\"crc32\":0}");
	CHECK(wire_parse(frame, strlen(frame), &lim, &h, &err) == 0, "U+00A0 and U+00E9 are not control "
	      "characters: %s", err.reason);
	CHECK(wire_names_clash("a", "a/b") && wire_names_clash("a/b/c", "a/b") &&
	      !wire_names_clash("a", "ab/c") && !wire_names_clash("a/b", "a/c") &&
	      !wire_names_clash("a", "a"), "clash: a group and its member only");
}

int main(void)
{
	roundtrip();
	malformed();
	payload();
	names();
	return tap_done();
}
