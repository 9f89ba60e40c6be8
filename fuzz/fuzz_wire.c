/*
 * fuzz_wire.c: the ingest frame decoder (lib/wire.c): frame 0 of every
 * message a publisher sends. Any input parses or is refused with a code;
 * what parses builds back into a frame that parses to the same header.
 */
#include <string.h>

#include "fuzz.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct wire_limits lim = { 512, 16, 1u << 30 };
	struct wire_header h, again;
	struct wire_error err;

	memset(&h, 0, sizeof(h));
	if (wire_parse(data, size, &lim, &h, &err) < 0) {
		FUZZ_ASSERT(err.code > 0 && err.code < WIRE_CODE_COUNT);
		FUZZ_ASSERT(memchr(err.reason, 0, sizeof(err.reason)) != NULL);
		return 0;
	}
	char *frame = wire_build(&h);
	if (!frame)
		return 0;
	memset(&again, 0, sizeof(again));
	int rc = wire_parse(frame, strlen(frame), &lim, &again, &err);
	if (rc < 0)
		fprintf(stderr, "rebuilt frame refused: %s: %s\n", frame, err.reason);
	FUZZ_ASSERT(rc == 0);
	FUZZ_ASSERT(again.type == h.type && !strcmp(again.run, h.run));
	/* hello and welcome carry no step: one in the input is ignored by build */
	if (h.type != WIRE_HELLO && h.type != WIRE_WELCOME)
		FUZZ_ASSERT(again.step == h.step);
	if (h.type == WIRE_TENSOR) {
		FUZZ_ASSERT(!strcmp(again.name, h.name) && again.dtype == h.dtype && again.ndims == h.ndims);
		FUZZ_ASSERT(again.offset == h.offset && again.count == h.count && again.total == h.total);
	}
	free(frame);
	return 0;
}
