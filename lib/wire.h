/*
 * wire.h: the wdrift protocol, version 1 (docs/protocol.md): parsing and
 * building the JSON header of every message, and the payload checksum.
 * Shared by the daemon (decoding) and publishers (encoding). Transport is
 * the caller's: this module sees bytes, not sockets.
 *
 * A parse never trusts its input: every field is checked for presence,
 * type and range, and a failure names the field in a wire_error that the
 * daemon sends back as it is.
 */
#ifndef WD_WIRE_H
#define WD_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "wdrift.h"

#define WIRE_VERSION 1
#define WIRE_MAX_HEADER (64u << 10)	/* bytes of frame 0 */
#define WIRE_MAX_FRAME (64u << 20)	/* bytes of one payload frame */
#define WIRE_MAX_DIMS 64		/* hard cap; the config sets a lower one */
#define WIRE_NAME_MAX 4096		/* hard cap on names; ditto */
#define WIRE_NOTICE_MAX 1024		/* a welcome's notice (a run in no study) */

enum wire_type {
	WIRE_HELLO, WIRE_TENSOR, WIRE_COMMIT, WIRE_PING,	/* publisher to daemon */
	WIRE_WELCOME, WIRE_ACK, WIRE_ERROR, WIRE_PONG,	/* daemon to publisher */
};

/* Error codes, as protocol.md lists them. */
enum wire_code {
	WIRE_OK = 0,
	WIRE_BAD_FRAME, WIRE_BAD_VERSION, WIRE_BAD_FIELD, WIRE_BAD_FRAMES,
	WIRE_BAD_CHECKSUM, WIRE_CONFLICT, WIRE_TOO_LARGE, WIRE_OVER_WINDOW,
	WIRE_TOO_MANY, WIRE_INCOMPLETE, WIRE_INTERNAL, WIRE_BAD_NAME,
	WIRE_CODE_COUNT
};

/* "bad_field", ...: the code's name on the wire. */
const char *wire_code_name(enum wire_code c);

/*
 * The storage rule of a tensor name (protocol.md, "Tensor names"): a
 * snapshot is one HDF5 file and a name is the path of its dataset, so
 * '/' separates parts, and no part may be empty, "." or "..". 0, or -1
 * with why saying which rule name breaks.
 */
int wire_name_rule(const char *name, char *why, size_t len);
/*
 * The byte at which name has its first control character (C0, DEL, or C1
 * in UTF-8, which a terminal obeys), or -1: a tensor name has none. The
 * daemon refuses such a name (bad_field), the publisher before sending it.
 */
long wire_name_control(const char *name);

/*
 * Whether two names of one snapshot cannot both be stored: one is a group
 * of the other ("a" and "a/b"). 1 when they clash.
 */
int wire_names_clash(const char *a, const char *b);

/* What the receiver enforces beyond the hard caps (from the config). */
struct wire_limits {
	size_t max_name;	/* bytes of a run or tensor name */
	int max_dims;
	uint64_t max_message;	/* payload bytes of one tensor message */
};

/* The longest reason an error reply carries, in bytes. */
#define WIRE_REASON_MAX 255

/* A parse or validation failure: what goes into the error reply. */
struct wire_error {
	enum wire_code code;
	char field[32];		/* "" when the whole header is at fault */
	char reason[WIRE_REASON_MAX + 1];
};

/*
 * A decoded header. Strings point into the struct's own storage, so a
 * header outlives the frame it came from.
 */
struct wire_header {
	enum wire_type type;
	char run[WIRE_NAME_MAX + 1];
	char name[WIRE_NAME_MAX + 1];	/* tensor */
	int64_t step;			/* -1 when absent (hello, ping) */
	enum wd_dtype dtype;
	int ndims;
	uint64_t shape[WIRE_MAX_DIMS];
	uint64_t offset, count, total;	/* tensor shard */
	uint32_t crc32;
	uint64_t tensors;		/* commit, ack */
	uint64_t ranks;			/* commit: publishers sharing the snapshot (>= 1; 1 when absent) */
	int64_t rank;			/* commit: the sender's, 0 to ranks - 1; -1 when absent */
	uint64_t session;		/* tensor, commit: the publisher's, for its life (nonzero); 0 when absent */
	/* daemon to publisher */
	uint64_t window, bytes;
	uint64_t max_message;		/* WIRE_WELCOME: payload bytes of one message; 0: not said */
	char notice[WIRE_NOTICE_MAX + 1];	/* WIRE_WELCOME, WIRE_ACK, WIRE_PONG: for the job's user; "" when none */
	int duplicate;
	struct wire_error error;	/* WIRE_ERROR: the daemon's error */
};

/*
 * Parses frame 0 of a message from a publisher (hello, tensor, commit,
 * ping) or from the daemon (welcome, ack, error, pong). Returns 0, or -1
 * with err filled. On failure, whatever fields were read before it (run,
 * step, name) are still in *h, for the error reply to echo.
 */
int wire_parse(const void *frame, size_t len, const struct wire_limits *lim,
	       struct wire_header *h, struct wire_error *err);

/*
 * Checks a tensor's payload: frames[i] bytes each, data the frames in
 * order (may be NULL to check sizes only). Returns 0 or -1 with err.
 */
int wire_check_payload(const struct wire_header *h, const size_t *frame_len,
		       const void *const *frame, size_t n_frames,
		       struct wire_error *err);

/*
 * Builds frame 0 for h (its type decides the fields) into a new
 * NUL-terminated string the caller frees; NULL on out of memory.
 */
char *wire_build(const struct wire_header *h);

#endif
