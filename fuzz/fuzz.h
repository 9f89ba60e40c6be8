/*
 * fuzz.h: what every fuzz target shares (docs/reliability.md). A target is
 * one function, LLVMFuzzerTestOneInput, that feeds one input to one parser
 * and checks what must hold of any input: no crash, no leak, no undefined
 * behaviour, and the target's own invariants (FUZZ_ASSERT).
 *
 * `make fuzz` links each target with libFuzzer, ASan and UBSan (clang);
 * `make check` links it with replay.c instead and runs it over the
 * checked-in corpus, fuzz/corpus/TARGET/, with the usual compiler.
 */
#ifndef WD_FUZZ_H
#define WD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the parser: abort, which both libFuzzer and replay report. */
#define FUZZ_ASSERT(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
		abort(); \
	} \
} while (0)

#endif
