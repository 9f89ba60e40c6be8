/*
 * config.c: wdriftd's configuration loader. The only file that includes
 * yaml.h; depends on libc, libyaml and wdrift.h (for its enums) only.
 *
 * Loading runs in three steps:
 *   1. libyaml's event parser builds a small tree of scalars, lists and
 *      mappings, each node with its line and column (aliases are kept as
 *      nodes, so that step 2 can refuse them with the key they sit under);
 *   2. the tree is walked against the field tables below, which say for
 *      every key its type, bounds, default and place in the struct: the
 *      scalar keys first, then studies (run names depend on
 *      limits.max_name), then alerts;
 *   3. what one key alone cannot check: studies against alerts, endpoints
 *      against each other.
 * The result is built in a scratch struct with its own arena, and copied
 * to the caller only when every step passed.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "config.h"
#include "keys.h"	/* wd_key_is_z85 */

#define MAX_FILE (16u << 20)	/* a bigger file is surely a mistake */
#define MAX_DEPTH 32		/* the schema needs 4 levels */
#define MAX_NODES (1u << 20)	/* the largest legal config has about 430000 */
#define MAX_NAME 128		/* study, alert, run names and proxy labels */
#define MAX_STUDIES 1024
#define MAX_ALERTS 1024
#define MAX_CANDIDATES CONFIG_MAX_CANDIDATES
#define MAX_PROXIES CONFIG_MAX_PROXIES
#define MAX_CLIENTS 65536
#define IPC_PATH_MAX 107	/* sizeof(sun_path) - 1: zmq refuses longer */
#define ENDPOINT_MAX 256	/* a DNS name is at most 253 */

/* ---- arena: everything a config owns, freed at once ---------------------- */

struct wd_config_arena {
	struct wd_config_arena *next;
	size_t used, cap;
	max_align_t mem[];
};

#define ARENA_BLOCK 16384

/* Returns zeroed memory, or NULL when out of memory. */
static void *arena_alloc(struct wd_config_arena **a, size_t size)
{
	const size_t align = _Alignof(max_align_t);
	struct wd_config_arena *b = *a;
	void *p;

	if (size > SIZE_MAX / 4)
		return NULL;
	size = size ? (size + align - 1) & ~(align - 1) : align;
	if (!b || b->cap - b->used < size) {
		size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->cap = cap;
		b->used = 0;
		b->next = *a;
		*a = b;
	}
	p = (char *)b->mem + b->used;
	b->used += size;
	memset(p, 0, size);
	return p;
}

static char *arena_strndup(struct wd_config_arena **a, const char *s, size_t len)
{
	char *d = arena_alloc(a, len + 1);

	if (d)
		memcpy(d, s, len);
	return d;
}

static void arena_free(struct wd_config_arena *a)
{
	while (a) {
		struct wd_config_arena *next = a->next;
		free(a);
		a = next;
	}
}

/* ---- the tables ----------------------------------------------------------- */

struct enum_val {
	const char *name;
	int value;
};

static const struct enum_val backend_vals[] = {
	{ "auto", WD_BACKEND_AUTO }, { "cpu", WD_BACKEND_CPU }, { "cuda", WD_BACKEND_CUDA },
	{ NULL, 0 }
};
static const struct enum_val level_vals[] = {
	{ "err", WD_LOG_ERR }, { "warning", WD_LOG_WARNING }, { "notice", WD_LOG_NOTICE },
	{ "info", WD_LOG_INFO }, { "debug", WD_LOG_DEBUG }, { NULL, 0 }
};
static const struct enum_val metric_vals[] = {
	{ "w1", WD_METRIC_W1 }, { "ratio", WD_METRIC_RATIO },
	{ "max_abs_diff", WD_METRIC_MAX_ABS_DIFF }, { "rel_l2", WD_METRIC_REL_L2 },
	{ "nonfinite", WD_METRIC_NONFINITE }, { "stalled", WD_METRIC_STALLED }, { NULL, 0 }
};
static const struct enum_val scope_vals[] = {
	{ "max", WD_SCOPE_MAX }, { "median", WD_SCOPE_MEDIAN }, { "mean", WD_SCOPE_MEAN },
	{ "tensors", WD_SCOPE_TENSORS }, { NULL, 0 }
};
static const struct enum_val severity_vals[] = {
	{ "info", WD_SEVERITY_INFO }, { "warning", WD_SEVERITY_WARNING },
	{ "critical", WD_SEVERITY_CRITICAL }, { NULL, 0 }
};
/* WD_SYNTHETIC_NONE has no name: it is what leaving the key out gives. */
static const struct enum_val synthetic_vals[] = {
	{ "round:bf16", WD_SYNTHETIC_BF16 }, { "round:fp16", WD_SYNTHETIC_FP16 }, { NULL, 0 }
};

enum ftype {
	T_STRING,	/* const char *, non-empty, at most max bytes when max > 0 */
	T_ENDPOINT,	/* const char *: ipc://, tcp:// or inproc:// */
	T_NAME,		/* const char *: [A-Za-z0-9_][A-Za-z0-9_.-]*, MAX_NAME bytes */
	T_RUN,		/* const char *: a run name, as the protocol defines it */
	T_SIZE,		/* uint64_t bytes: digits and K, M, G or T */
	T_INT,		/* int64_t in [min, max] */
	T_DOUBLE,	/* double, finite, in [dmin, dmax] */
	T_ENUM,		/* int, one of vals */
	T_BOOL,		/* bool: true or false */
	T_RUNS,		/* struct wd_config_runs: a list of run names */
	T_PROXIES,	/* struct wd_config_proxies: a mapping label -> run */
	T_CLIENTS,	/* struct wd_config_clients: a mapping name -> public key */
};

/* What a value of each type is, for "expected X, not Y". */
static const char *const type_desc[] = {
	[T_STRING] = "a string", [T_ENDPOINT] = "a ZeroMQ endpoint", [T_NAME] = "a name",
	[T_RUN] = "a run name",
	[T_SIZE] = "a size such as 4G", [T_INT] = "an integer", [T_DOUBLE] = "a number",
	[T_ENUM] = "a scalar", [T_BOOL] = "true or false",
	[T_RUNS] = "a list of run names", [T_PROXIES] = "a mapping of proxy labels to run names",
	[T_CLIENTS] = "a mapping of client names to public keys",
};

#define F_REQUIRED 1u	/* no default: the key must be there */
#define F_RESTART 2u	/* a reload may not change it */

struct field {
	const char *name;	/* dotted, for the top-level table */
	enum ftype type;
	unsigned flags;
	size_t off;		/* into the struct the table describes */
	const char *def;	/* default, as written in the file; NULL: zero */
	int64_t min, max;	/* T_INT, T_SIZE; max length for T_STRING */
	double dmin, dmax;	/* T_DOUBLE */
	const struct enum_val *vals;	/* T_ENUM */
	const char *doc;	/* one line, printed above the key */
};

#define KIB(n) ((int64_t)(n) << 10)
#define MIB(n) ((int64_t)(n) << 20)
#define GIB(n) ((int64_t)(n) << 30)
#define TIB(n) ((int64_t)(n) << 40)
#define CF(m) offsetof(struct wd_config, m)

/*
 * Every scalar key of the top level, grouped by section: the printer
 * relies on the order. Defaults here must equal config/wdrift.yaml (a unit
 * test loads the file and compares).
 */
static const struct field cfg_fields[] = {
	{ .name = "listen.ingest", .type = T_ENDPOINT, .flags = F_RESTART,
	  .off = CF(listen.ingest), .def = "ipc://./run/ingest.sock",
	  .doc = "ZeroMQ endpoint where training runs publish snapshots" },
	{ .name = "listen.control", .type = T_ENDPOINT, .flags = F_RESTART,
	  .off = CF(listen.control), .def = "ipc://./run/control.sock",
	  .doc = "ZeroMQ endpoint for the wdrift CLI's requests" },
	{ .name = "listen.events", .type = T_ENDPOINT, .flags = F_RESTART,
	  .off = CF(listen.events), .def = "ipc://./run/events.sock",
	  .doc = "ZeroMQ endpoint that publishes drift results and alerts" },
	{ .name = "auth.server_key", .type = T_STRING, .flags = F_RESTART,
	  .off = CF(auth.server_key), .max = 4096,
	  .doc = "the daemon's CURVE key pair file (wdrift keygen); unset: no authentication" },
	{ .name = "auth.clients", .type = T_CLIENTS, .off = CF(auth.clients),
	  .doc = "client public keys allowed to connect, by name" },
	{ .name = "auth.allow_insecure", .type = T_BOOL, .flags = F_RESTART,
	  .off = CF(auth.allow_insecure), .def = "false",
	  .doc = "allow tcp:// endpoints open to the network without CURVE" },
	{ .name = "storage.dir", .type = T_STRING, .flags = F_RESTART,
	  .off = CF(storage.dir), .def = "./var", .max = 1024,
	  .doc = "directory of the spool, the drift log and the write-ahead log" },
	{ .name = "compute.backend", .type = T_ENUM, .flags = F_RESTART,
	  .off = CF(compute.backend), .def = "auto", .vals = backend_vals,
	  .doc = "drift engine: auto, cpu or cuda" },
	{ .name = "compute.device", .type = T_INT, .flags = F_RESTART,
	  .off = CF(compute.device), .def = "0", .min = 0, .max = 1023,
	  .doc = "CUDA device the engine runs on, 0 to 1023" },
	{ .name = "memory.budget", .type = T_SIZE, .flags = F_RESTART,
	  .off = CF(memory.budget), .def = "4G", .min = MIB(64), .max = TIB(64),
	  .doc = "bytes held for snapshots in flight" },
	{ .name = "spool.retention.every", .type = T_INT,
	  .off = CF(spool.retention.every), .def = "1", .min = 1, .max = 1000000,
	  .doc = "keep baseline and proxy snapshots only at every K-th step" },
	{ .name = "spool.retention.disk_budget", .type = T_SIZE,
	  .off = CF(spool.retention.disk_budget), .def = "100G", .min = MIB(64),
	  .max = TIB(1024), .doc = "bytes of disk the spool may use" },
	{ .name = "alignment.tolerance", .type = T_INT,
	  .off = CF(alignment.tolerance), .def = "0", .min = 0, .max = 1000000,
	  .doc = "steps a compared snapshot may be away from the baseline's" },
	{ .name = "limits.max_message", .type = T_SIZE,
	  .off = CF(limits.max_message), .def = "1G", .min = KIB(4), .max = TIB(64),
	  .doc = "largest message accepted, in bytes" },
	{ .name = "limits.max_name", .type = T_INT,
	  .off = CF(limits.max_name), .def = "512", .min = 16, .max = 65536,
	  .doc = "longest tensor name, in bytes" },
	{ .name = "limits.max_dims", .type = T_INT,
	  .off = CF(limits.max_dims), .def = "16", .min = 1, .max = 32,
	  .doc = "most dimensions of a tensor" },
	{ .name = "limits.max_tensors", .type = T_INT,
	  .off = CF(limits.max_tensors), .def = "100000", .min = 1, .max = 10000000,
	  .doc = "most tensors in one snapshot" },
	{ .name = "limits.max_runs", .type = T_INT,
	  .off = CF(limits.max_runs), .def = "256", .min = 1, .max = 65536,
	  .doc = "most runs known at once" },
	{ .name = "limits.max_pending", .type = T_INT,
	  .off = CF(limits.max_pending), .def = "8", .min = 1, .max = 1024,
	  .doc = "most snapshots of one run waiting to be compared" },
	{ .name = "limits.min_rate", .type = T_SIZE,
	  .off = CF(limits.min_rate), .def = "1M", .min = 1, .max = TIB(1),
	  .doc = "bytes per second below which a partly received snapshot gives up its memory when the budget is full" },
	{ .name = "limits.pending_timeout", .type = T_INT,
	  .off = CF(limits.pending_timeout), .def = "600", .min = 1, .max = 86400,
	  .doc = "seconds an uncommitted or incomplete snapshot may idle before it is dropped" },
	{ .name = "log.level", .type = T_ENUM,
	  .off = CF(log.level), .def = "notice", .vals = level_vals,
	  .doc = "least important messages logged: err, warning, notice, info or debug" },
};
#define N_CFG (sizeof(cfg_fields) / sizeof(cfg_fields[0]))

#define SF(m) offsetof(struct wd_config_study, m)
static const struct field study_fields[] = {
	{ .name = "name", .type = T_NAME, .flags = F_REQUIRED, .off = SF(name) },
	{ .name = "baseline", .type = T_RUN, .flags = F_REQUIRED, .off = SF(baseline) },
	{ .name = "candidates", .type = T_RUNS, .flags = F_REQUIRED, .off = SF(candidates) },
	{ .name = "proxies", .type = T_PROXIES, .off = SF(proxies) },
	{ .name = "synthetic_proxy", .type = T_ENUM, .off = SF(synthetic_proxy),
	  .vals = synthetic_vals },
};
#define N_STUDY (sizeof(study_fields) / sizeof(study_fields[0]))
enum { S_NAME, S_BASELINE, S_CANDIDATES, S_PROXIES, S_SYNTHETIC };

#define AF(m) offsetof(struct wd_config_alert, m)
static const struct field alert_fields[] = {
	{ .name = "name", .type = T_NAME, .flags = F_REQUIRED, .off = AF(name) },
	{ .name = "study", .type = T_NAME, .flags = F_REQUIRED, .off = AF(study) },
	{ .name = "metric", .type = T_ENUM, .flags = F_REQUIRED, .off = AF(metric),
	  .vals = metric_vals },
	{ .name = "proxy", .type = T_STRING, .off = AF(proxy), .max = MAX_NAME },
	{ .name = "scope", .type = T_ENUM, .off = AF(scope), .def = "max", .vals = scope_vals },
	{ .name = "tensors", .type = T_STRING, .off = AF(tensors), .max = 4096 },
	{ .name = "threshold", .type = T_DOUBLE, .flags = F_REQUIRED, .off = AF(threshold),
	  .dmin = 0, .dmax = DBL_MAX },
	{ .name = "for", .type = T_INT, .off = AF(for_count), .def = "1",
	  .min = 1, .max = 1000000 },
	{ .name = "severity", .type = T_ENUM, .off = AF(severity), .def = "warning",
	  .vals = severity_vals },
	{ .name = "command", .type = T_STRING, .off = AF(command), .max = 8192 },
	{ .name = "command_min_interval", .type = T_INT, .off = AF(command_min_interval),
	  .def = "60", .min = 0, .max = 86400 },
};
#define N_ALERT (sizeof(alert_fields) / sizeof(alert_fields[0]))
enum { A_NAME, A_STUDY, A_METRIC, A_PROXY, A_SCOPE, A_TENSORS, A_THRESHOLD, A_FOR,
       A_SEVERITY, A_COMMAND, A_INTERVAL };

static const char *enum_name(const struct enum_val *v, int value)
{
	for (; v->name; v++)
		if (v->value == value)
			return v->name;
	return NULL;
}

static const char *or_unknown(const char *name)
{
	return name ? name : "?";
}

const char *wd_config_metric_name(int metric)
{
	return or_unknown(enum_name(metric_vals, metric));
}

const char *wd_config_scope_name(int scope)
{
	return or_unknown(enum_name(scope_vals, scope));
}

const char *wd_config_severity_name(int severity)
{
	return or_unknown(enum_name(severity_vals, severity));
}

/* ---- values: text to struct and back ---------------------------------------- */

static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_alnum(int c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/*
 * Copies s for a message: at most max bytes of it, control characters
 * escaped, "..." when cut. User text never reaches a log unescaped.
 */
static const char *clip(char *buf, size_t size, const char *s, size_t max)
{
	size_t o = 0, i;

	for (i = 0; s[i] && i < max && o + 5 < size; i++) {
		unsigned char c = s[i];
		if (c < 0x20 || c == 0x7f || c == '\\')
			o += snprintf(buf + o, size - o, c == '\\' ? "\\\\" : "\\x%02x", c);
		else
			buf[o++] = c;
	}
	if (s[i] && o + 4 <= size) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = 0;
	return buf;
}
#define CLIP(s) clip((char[96]){ 0 }, 96, (s), 60)

/* Writes the reason for a bad value into why; returns -1. */
__attribute__((format(printf, 3, 4)))
static int reason(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return -1;
}

/* "4G", "1536M", "100" for bytes: the largest suffix that is exact. */
static const char *format_size(char *buf, size_t size, uint64_t v)
{
	static const char suffix[] = "TGMK";

	for (int i = 0, shift = 40; shift > 0; i++, shift -= 10)
		if (v && !(v & ((UINT64_C(1) << shift) - 1))) {
			snprintf(buf, size, "%llu%c", (unsigned long long)(v >> shift), suffix[i]);
			return buf;
		}
	snprintf(buf, size, "%llu", (unsigned long long)v);
	return buf;
}

/* The shortest text that reads back as the same double. */
static const char *format_double(char *buf, size_t size, double v)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	return buf;
}

/* Digits with an optional K, M, G or T (either case). 0, -EINVAL or -ERANGE. */
static int parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	int shift = 0;

	if (!is_digit(*s))
		return -EINVAL;
	for (; is_digit(*s); s++) {
		unsigned d = *s - '0';
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	switch (*s) {
	case 'K': case 'k': shift = 10; break;
	case 'M': case 'm': shift = 20; break;
	case 'G': case 'g': shift = 30; break;
	case 'T': case 't': shift = 40; break;
	case 0: break;
	default: return -EINVAL;
	}
	if (shift && *++s)
		return -EINVAL;
	if (v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

/* Decimal, optional sign, nothing else. 0, -EINVAL or -ERANGE. */
static int parse_int(const char *s, int64_t *out)
{
	uint64_t v = 0;
	int neg = *s == '-';

	if (*s == '-' || *s == '+')
		s++;
	if (!is_digit(*s))
		return -EINVAL;
	for (; is_digit(*s); s++) {
		unsigned d = *s - '0';
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (*s)
		return -EINVAL;
	if (v > (uint64_t)INT64_MAX + neg)
		return -ERANGE;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

/*
 * [-+]digits[.digits][e[-+]digits], or with the digits after the point
 * only: what people write and %g prints; not strtod's inf, nan or hex.
 * (wdriftd never calls setlocale(), so strtod's point is '.'.)
 */
static int parse_double(const char *s, double *out)
{
	const char *p = s;
	int digits = 0;
	char *end;

	if (*p == '-' || *p == '+')
		p++;
	for (; is_digit(*p); p++)
		digits++;
	if (*p == '.')
		for (p++; is_digit(*p); p++)
			digits++;
	if (!digits)
		return -EINVAL;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '-' || *p == '+')
			p++;
		if (!is_digit(*p))
			return -EINVAL;
		while (is_digit(*p))
			p++;
	}
	if (*p)
		return -EINVAL;
	*out = strtod(s, &end);
	return isfinite(*out) ? 0 : -ERANGE;
}

static int check_endpoint(const char *s, char *why, size_t size)
{
	const char *rest, *colon;
	char q[96];

	clip(q, sizeof(q), s, 60);
	if (strlen(s) > ENDPOINT_MAX)
		return reason(why, size, "bad endpoint '%s': longer than %d bytes", q, ENDPOINT_MAX);
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return reason(why, size, "bad endpoint '%s': contains a space or a control character", q);
	if (!strncmp(s, "ipc://", 6)) {
		rest = s + 6;
		if (!*rest)
			return reason(why, size, "bad endpoint '%s': ipc:// needs a path", q);
		if (strlen(rest) > IPC_PATH_MAX)
			return reason(why, size, "bad endpoint '%s': ipc path longer than %d bytes (the limit of a unix socket address)",
				      q, IPC_PATH_MAX);
		return 0;
	}
	if (!strncmp(s, "tcp://", 6)) {
		int64_t port;
		rest = s + 6;
		colon = strrchr(rest, ':');
		if (!colon || colon == rest)
			return reason(why, size, "bad endpoint '%s': tcp:// needs HOST:PORT", q);
		if (strcmp(colon + 1, "*") &&
		    (parse_int(colon + 1, &port) || !is_digit(colon[1]) || port < 1 || port > 65535))
			return reason(why, size, "bad endpoint '%s': the port must be 1 to 65535, or *", q);
		return 0;
	}
	if (!strncmp(s, "inproc://", 9)) {
		if (!s[9])
			return reason(why, size, "bad endpoint '%s': inproc:// needs a name", q);
		return 0;
	}
	return reason(why, size, "bad endpoint '%s': expected ipc://PATH, tcp://HOST:PORT or inproc://NAME", q);
}

/*
 * Names of studies, alerts and proxy labels: they become file names
 * (drift/STUDY.h5), HDF5 strings and CLI arguments, so no '/', no leading
 * '.' or '-'.
 */
static int check_name(const char *s, char *why, size_t size)
{
	size_t len = strlen(s);
	int ok = len >= 1 && len <= MAX_NAME && (is_alnum(s[0]) || s[0] == '_');

	for (size_t i = 1; ok && i < len; i++)
		ok = is_alnum(s[i]) || strchr("_.-", s[i]);
	if (ok)
		return 0;
	return reason(why, size, "bad name '%s': use 1 to %d of A-Z a-z 0-9 _ . -, starting with a letter, a digit or _",
		      CLIP(s), MAX_NAME);
}

/*
 * Run names as docs/protocol.md has them: 1 to limits.max_name bytes of
 * [A-Za-z0-9_.:-]. "." and ".." would name directories, not runs.
 */
static int check_run(const char *s, int64_t max, char *why, size_t size)
{
	size_t len = strlen(s);
	int ok = len >= 1 && (int64_t)len <= max;

	for (size_t i = 0; ok && i < len; i++)
		ok = is_alnum(s[i]) || strchr("_.:-", s[i]);
	if (!ok)
		return reason(why, size, "bad run name '%s': use 1 to %lld bytes (limits.max_name) of A-Z a-z 0-9 _ . : -",
			      CLIP(s), (long long)max);
	if (!strcmp(s, ".") || !strcmp(s, ".."))
		return reason(why, size, "bad run name '%s': '.' and '..' are not run names", s);
	return 0;
}

/*
 * Parses text as field f into the struct at base, checking bounds. String
 * types keep the pointer: text must live as long as the struct. Returns 0,
 * or -1 with the reason in why. Not for T_RUN, T_RUNS and T_PROXIES, which
 * need the loader (see load_field).
 */
static int value_parse(const struct field *f, const char *text, void *base,
		       char *why, size_t size)
{
	void *p = (char *)base + f->off;
	char a[32], b[32], c[32];

	switch (f->type) {
	case T_STRING:
		if (!*text)
			return reason(why, size, "must not be empty");
		if (f->max && strlen(text) > (size_t)f->max)
			return reason(why, size, "longer than %lld bytes", (long long)f->max);
		*(const char **)p = text;
		return 0;
	case T_ENDPOINT:
		if (check_endpoint(text, why, size))
			return -1;
		*(const char **)p = text;
		return 0;
	case T_NAME:
		if (check_name(text, why, size))
			return -1;
		*(const char **)p = text;
		return 0;
	case T_SIZE: {
		uint64_t v = 0;
		int r = parse_size(text, &v);
		if (r == -EINVAL)
			return reason(why, size, "bad size '%s': expected a whole number of bytes with an optional suffix K, M, G or T (powers of 1024), such as 1536M",
				      CLIP(text));
		if (r || v > (uint64_t)f->max)
			return reason(why, size, "must be at most %s (got %s)",
				      format_size(a, sizeof(a), f->max), CLIP(text));
		if (v < (uint64_t)f->min)
			return reason(why, size, "must be at least %s (got %s)",
				      format_size(a, sizeof(a), f->min), format_size(b, sizeof(b), v));
		*(uint64_t *)p = v;
		return 0;
	}
	case T_INT: {
		int64_t v = 0;
		int r = parse_int(text, &v);
		if (r == -EINVAL)
			return reason(why, size, "bad integer '%s'", CLIP(text));
		if (r || v < f->min || v > f->max)
			return reason(why, size, "must be between %lld and %lld (got %s)",
				      (long long)f->min, (long long)f->max, CLIP(text));
		*(int64_t *)p = v;
		return 0;
	}
	case T_DOUBLE: {
		double v = 0;
		int r = parse_double(text, &v);
		if (r == -EINVAL)
			return reason(why, size, "bad number '%s'", CLIP(text));
		if (r)
			return reason(why, size, "number '%s' is out of range", CLIP(text));
		if (v < f->dmin || v > f->dmax)
			return reason(why, size, "must be between %s and %s (got %s)",
				      format_double(a, sizeof(a), f->dmin),
				      format_double(b, sizeof(b), f->dmax),
				      format_double(c, sizeof(c), v));
		*(double *)p = v;
		return 0;
	}
	case T_ENUM: {
		char list[200] = "";
		size_t o = 0;
		for (const struct enum_val *v = f->vals; v->name; v++) {
			if (!strcmp(v->name, text)) {
				*(int *)p = v->value;
				return 0;
			}
			o += snprintf(list + o, sizeof(list) - o, "%s%s", o ? (v[1].name ? ", " : " or ") : "",
				      v->name);
			if (o >= sizeof(list))
				o = sizeof(list) - 1;
		}
		return reason(why, size, "bad value '%s' (expected %s)", CLIP(text), list);
	}
	case T_BOOL:
		if (strcmp(text, "true") && strcmp(text, "false"))
			return reason(why, size, "bad value '%s' (expected true or false)", CLIP(text));
		*(bool *)p = !strcmp(text, "true");
		return 0;
	case T_RUN:
	case T_RUNS:
	case T_PROXIES:
	case T_CLIENTS:
		break;
	}
	assert(!"value_parse on a type load_field handles");
	return reason(why, size, "internal error");
}

/*
 * The value of field f at base as the file would write it, in buf or a
 * string of the config; NULL when the field is unset (an optional string,
 * an enum out of its table such as WD_SYNTHETIC_NONE). Not for lists.
 */
static const char *value_text(const struct field *f, const void *base, char *buf, size_t size)
{
	const void *p = (const char *)base + f->off;

	switch (f->type) {
	case T_STRING:
	case T_ENDPOINT:
	case T_NAME:
	case T_RUN:
		return *(const char *const *)p;
	case T_SIZE:
		return format_size(buf, size, *(const uint64_t *)p);
	case T_INT:
		snprintf(buf, size, "%lld", (long long)*(const int64_t *)p);
		return buf;
	case T_DOUBLE:
		return format_double(buf, size, *(const double *)p);
	case T_ENUM:
		return enum_name(f->vals, *(const int *)p);
	case T_BOOL:
		return *(const bool *)p ? "true" : "false";
	case T_RUNS:
	case T_PROXIES:
	case T_CLIENTS:
		break;
	}
	return NULL;
}

static void set_default(const struct field *f, void *base)
{
	char why[256];
	int r;

	if (!f->def)
		return;
	r = value_parse(f, f->def, base, why, sizeof(why));
	assert(r == 0 && "a default in the table is out of its own bounds");
	(void)r;
}

void wd_config_defaults(struct wd_config *c)
{
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < N_CFG; i++)
		set_default(&cfg_fields[i], c);
	c->source = "(built-in)";
}

void wd_config_release(struct wd_config *c)
{
	arena_free(c->arena);
	wd_config_defaults(c);
}

/* ---- the YAML tree ----------------------------------------------------------- */

enum ykind { Y_SCALAR, Y_SEQ, Y_MAP, Y_ALIAS };

struct ynode {
	enum ykind kind;
	int line, col;		/* 1-based */
	int plain;		/* a scalar written without quotes */
	size_t len;		/* bytes of text, which may hold a NUL */
	char *text;		/* scalar; alias: the anchor's name */
	size_t n;		/* children: items, or keys and values in turn */
	struct ynode *child, *last, *next;
};

struct loader {
	const char *name;		/* for messages */
	const unsigned char *text;
	size_t len;
	char *err;
	size_t errlen;
	struct wd_config_arena *tree;	/* the tree: freed after loading */
	struct wd_config_arena *keep;	/* what the config keeps */
	size_t nodes;			/* in the tree, against MAX_NODES */
	int64_t max_run;		/* limits.max_name, for run names */
	const struct ynode *studies, *alerts;	/* their keys, read last */
	char path[256];			/* dotted path of the node being read */
	size_t pathlen;
	const struct ynode **alert_where;	/* N_ALERT key nodes per alert */
};

static int vfail(struct loader *L, int line, int col, const char *fmt, va_list ap)
{
	char why[768];

	vsnprintf(why, sizeof(why), fmt, ap);
	if (!L->err || !L->errlen)
		return -1;
	if (line && L->pathlen)
		snprintf(L->err, L->errlen, "%s:%d:%d: %s: %s", L->name, line, col, L->path, why);
	else if (line)
		snprintf(L->err, L->errlen, "%s:%d:%d: %s", L->name, line, col, why);
	else if (L->pathlen)
		snprintf(L->err, L->errlen, "%s: %s: %s", L->name, L->path, why);
	else
		snprintf(L->err, L->errlen, "%s: %s", L->name, why);
	return -1;
}

/* Fails at line:col (0: no position) with the current path; returns -1. */
__attribute__((format(printf, 4, 5)))
static int fail_pos(struct loader *L, int line, int col, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vfail(L, line, col, fmt, ap);
	va_end(ap);
	return r;
}

/* Fails at node n with the current path; returns -1. */
__attribute__((format(printf, 3, 4)))
static int fail_at(struct loader *L, const struct ynode *n, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vfail(L, n ? n->line : 0, n ? n->col : 0, fmt, ap);
	va_end(ap);
	return r;
}

static int oom(struct loader *L)
{
	return fail_pos(L, 0, 0, "out of memory");
}

static size_t path_key(struct loader *L, const char *key)
{
	size_t old = L->pathlen;
	char q[96];

	snprintf(L->path + old, sizeof(L->path) - old, "%s%s", old ? "." : "",
		 clip(q, sizeof(q), key, 60));
	L->pathlen = strlen(L->path);
	return old;
}

static size_t path_index(struct loader *L, size_t i)
{
	size_t old = L->pathlen;

	snprintf(L->path + old, sizeof(L->path) - old, "[%zu]", i);
	L->pathlen = strlen(L->path);
	return old;
}

static void path_pop(struct loader *L, size_t old)
{
	L->path[old] = 0;
	L->pathlen = old;
}

/* Line and column of a byte offset, as libyaml counts them (characters). */
static void offset_pos(const struct loader *L, size_t off, int *line, int *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < off && i < L->len; i++) {
		unsigned char c = L->text[i];
		if (c == '\n' || (c == '\r' && (i + 1 >= L->len || L->text[i + 1] != '\n'))) {
			++*line;
			*col = 1;
		} else if ((c & 0xc0) != 0x80 && c != '\r') {
			++*col;
		}
	}
}

static int yaml_fail(struct loader *L, const yaml_parser_t *p)
{
	const char *problem = p->problem ? p->problem : "unknown error";
	int line, col;

	switch (p->error) {
	case YAML_MEMORY_ERROR:
		return oom(L);
	case YAML_READER_ERROR:
		/* Reader errors carry a byte offset, not a mark. */
		offset_pos(L, p->problem_offset, &line, &col);
		if (p->problem_value != -1)
			return fail_pos(L, line, col, "bad text: %s (0x%02X)", problem, p->problem_value);
		return fail_pos(L, line, col, "bad text: %s", problem);
	default:
		line = (int)p->problem_mark.line + 1;
		col = (int)p->problem_mark.column + 1;
		if (p->context)
			return fail_pos(L, line, col, "syntax error: %s (%s at line %d column %d)",
					problem, p->context, (int)p->context_mark.line + 1,
					(int)p->context_mark.column + 1);
		return fail_pos(L, line, col, "syntax error: %s", problem);
	}
}

/*
 * Builds the node that event ev starts, reading the events of its children.
 * Consumes ev. Returns 0, or -1 with the error set.
 */
static int tree_build(struct loader *L, yaml_parser_t *p, yaml_event_t *ev, int depth,
		      struct ynode **out)
{
	struct ynode *n = arena_alloc(&L->tree, sizeof(*n));
	yaml_event_type_t end;
	int r = 0;

	if (!n) {
		yaml_event_delete(ev);
		return oom(L);
	}
	n->line = (int)ev->start_mark.line + 1;
	n->col = (int)ev->start_mark.column + 1;
	*out = n;
	if (++L->nodes > MAX_NODES) {
		yaml_event_delete(ev);
		return fail_at(L, n, "more than %u values: not a configuration", MAX_NODES);
	}
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		n->kind = Y_SCALAR;
		n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		n->len = ev->data.scalar.length;
		n->text = arena_strndup(&L->tree, (const char *)ev->data.scalar.value, n->len);
		yaml_event_delete(ev);
		return n->text ? 0 : oom(L);
	case YAML_ALIAS_EVENT:
		n->kind = Y_ALIAS;
		n->text = arena_strndup(&L->tree, (const char *)ev->data.alias.anchor,
					strlen((const char *)ev->data.alias.anchor));
		yaml_event_delete(ev);
		return n->text ? 0 : oom(L);
	case YAML_SEQUENCE_START_EVENT:
	case YAML_MAPPING_START_EVENT:
		break;
	default: {	/* the parser gives nothing else here */
		int type = ev->type;
		yaml_event_delete(ev);
		return fail_at(L, n, "syntax error: unexpected YAML event %d", type);
	}
	}
	n->kind = ev->type == YAML_SEQUENCE_START_EVENT ? Y_SEQ : Y_MAP;
	end = n->kind == Y_SEQ ? YAML_SEQUENCE_END_EVENT : YAML_MAPPING_END_EVENT;
	yaml_event_delete(ev);
	if (depth >= MAX_DEPTH)
		return fail_at(L, n, "nested more than %d levels deep", MAX_DEPTH);
	while (r == 0) {
		yaml_event_t c;
		struct ynode *child = NULL;

		if (!yaml_parser_parse(p, &c))
			return yaml_fail(L, p);
		if (c.type == end) {
			yaml_event_delete(&c);
			break;
		}
		r = tree_build(L, p, &c, depth + 1, &child);
		if (r == 0) {
			if (n->last)
				n->last->next = child;
			else
				n->child = child;
			n->last = child;
			n->n++;
		}
	}
	return r;
}

/* Parses the text into *root (NULL for an empty stream). 0 or -1. */
static int tree_parse(struct loader *L, struct ynode **root)
{
	yaml_parser_t p;
	yaml_event_t ev;
	int r = -1;

	*root = NULL;
	if (!yaml_parser_initialize(&p))
		return oom(L);
	yaml_parser_set_input_string(&p, L->text, L->len);
	if (!yaml_parser_parse(&p, &ev))	/* stream start */
		goto yerr;
	yaml_event_delete(&ev);
	if (!yaml_parser_parse(&p, &ev))
		goto yerr;
	if (ev.type == YAML_STREAM_END_EVENT) {
		yaml_event_delete(&ev);
		r = 0;
		goto out;
	}
	yaml_event_delete(&ev);			/* document start */
	if (!yaml_parser_parse(&p, &ev))
		goto yerr;
	if (tree_build(L, &p, &ev, 0, root))
		goto out;
	if (!yaml_parser_parse(&p, &ev))	/* document end */
		goto yerr;
	yaml_event_delete(&ev);
	if (!yaml_parser_parse(&p, &ev))
		goto yerr;
	if (ev.type == YAML_DOCUMENT_START_EVENT)
		fail_pos(L, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1,
			 "a second document: a configuration is one document");
	else
		r = 0;
	yaml_event_delete(&ev);
	goto out;
yerr:
	yaml_fail(L, &p);
out:
	yaml_parser_delete(&p);
	return r;
}

/* ---- walking the tree against the tables ------------------------------------ */

static int is_null(const struct ynode *n)
{
	return n->kind == Y_SCALAR && n->plain &&
	       (!n->len || !strcmp(n->text, "~") || !strcmp(n->text, "null") ||
		!strcmp(n->text, "Null") || !strcmp(n->text, "NULL"));
}

static const char *kind_desc(const struct ynode *n)
{
	switch (n->kind) {
	case Y_SEQ: return "a list";
	case Y_MAP: return "a mapping";
	case Y_ALIAS: return "an alias";
	case Y_SCALAR: break;
	}
	return is_null(n) ? "an empty value" : "a scalar";
}

static int alias_fail(struct loader *L, const struct ynode *n)
{
	return fail_at(L, n, "aliases are not supported (*%s): write the value out", CLIP(n->text));
}

/* Checks that n is of the kind wanted; what names it in the message. */
static int expect(struct loader *L, const struct ynode *n, enum ykind kind, const char *what)
{
	if (n->kind == Y_ALIAS)
		return alias_fail(L, n);
	if (n->kind != kind || (kind == Y_SCALAR && is_null(n)))
		return fail_at(L, n, "expected %s, not %s", what, kind_desc(n));
	return 0;
}

/* Checks a scalar for a NUL that C strings would cut off at. */
static int check_nul(struct loader *L, const struct ynode *n)
{
	if (strlen(n->text) != n->len)
		return fail_at(L, n, "contains a NUL character");
	return 0;
}

/*
 * Checks key k of mapping map and pushes it on the path (*old says where to
 * pop back to). Keys are scalars, without NUL, not "<<", not repeated.
 */
static int map_key(struct loader *L, const struct ynode *map, const struct ynode *k, size_t *old)
{
	if (k->kind == Y_ALIAS)
		return alias_fail(L, k);
	if (k->kind != Y_SCALAR)
		return fail_at(L, k, "a key must be a scalar, not %s", kind_desc(k));
	*old = path_key(L, k->text);
	if (check_nul(L, k))
		return -1;
	if (!strcmp(k->text, "<<"))
		return fail_at(L, k, "merge keys ('<<') are not supported");
	for (const struct ynode *p = map->child; p != k; p = p->next->next)
		if (p->kind == Y_SCALAR && !strcmp(p->text, k->text))
			return fail_at(L, k, "duplicate key '%s' (first at line %d)", CLIP(k->text), p->line);
	return 0;
}

/* Optimal string alignment distance (a swap of neighbours costs 1). */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[3][65], *pp = d[0], *p = d[1], *c = d[2];

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		p[j] = j;
	for (size_t i = 1; i <= la; i++) {
		c[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t v = p[j - 1] + (a[i - 1] != b[j - 1]);
			if (p[j] + 1 < v) v = p[j] + 1;
			if (c[j - 1] + 1 < v) v = c[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			c[j] = v;
		}
		size_t *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[lb];
}

struct suggest {
	const char *typed;
	const char *best;	/* points into a table: not NUL-terminated at blen */
	size_t blen, bestd;
};

/* Considers candidate cand[0..len) for the key typed. */
static void suggest_try(struct suggest *s, const char *cand, size_t len)
{
	size_t d = edit_distance(s->typed, strlen(s->typed), cand, len);
	size_t limit = len <= 4 ? 1 : len <= 10 ? 2 : 3;

	if (d && d <= limit && d < s->bestd) {
		s->best = cand;
		s->blen = len;
		s->bestd = d;
	}
}

static int unknown_key(struct loader *L, const struct ynode *k, const char *typed,
		       struct suggest *s)
{
	if (s->best)
		return fail_at(L, k, "unknown key '%s' (did you mean '%.*s'?)", CLIP(typed),
			       (int)s->blen, s->best);
	return fail_at(L, k, "unknown key '%s'", CLIP(typed));
}

/* A suggestion among the dotted names of the top level, for full. */
static void suggest_top(struct suggest *s, const char *full)
{
	const char *leaf = strrchr(full, '.');

	s->typed = full;
	s->bestd = SIZE_MAX;
	suggest_try(s, "studies", 7);
	suggest_try(s, "alerts", 6);
	for (size_t i = 0; i < N_CFG; i++) {
		const char *name = cfg_fields[i].name;
		for (const char *dot = strchr(name, '.'); dot; dot = strchr(dot + 1, '.'))
			suggest_try(s, name, dot - name);
		suggest_try(s, name, strlen(name));
	}
	/* No near miss: maybe the right key in the wrong section. */
	leaf = leaf ? leaf + 1 : full;
	for (size_t i = 0; !s->best && i < N_CFG; i++) {
		const char *name = cfg_fields[i].name;
		if (!strcmp(strrchr(name, '.') + 1, leaf)) {
			s->best = name;
			s->blen = strlen(name);
		}
	}
}

static const struct field *field_find(const struct field *tab, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(tab[i].name, name))
			return &tab[i];
	return NULL;
}

/* The keys directly under section, "every, disk_budget", into buf. */
static const char *section_keys(const char *section, char *buf, size_t size)
{
	size_t sl = strlen(section), o = 0;

	buf[0] = 0;
	for (size_t i = 0; i < N_CFG; i++) {
		const char *name = cfg_fields[i].name, *sub, *dot;
		size_t len;
		if (strncmp(name, section, sl) || name[sl] != '.')
			continue;
		sub = name + sl + 1;
		dot = strchr(sub, '.');
		len = dot ? (size_t)(dot - sub) : strlen(sub);
		/* sections are contiguous in the table: skip a repeat of the last */
		if (o >= len && !strncmp(buf + o - len, sub, len) && (o == len || buf[o - len - 1] == ' '))
			continue;
		o += snprintf(buf + o, size - o, "%s%.*s", o ? ", " : "", (int)len, sub);
		if (o >= size)
			break;
	}
	return buf;
}

static int is_section(const char *full)
{
	size_t len = strlen(full);

	for (size_t i = 0; i < N_CFG; i++)
		if (!strncmp(cfg_fields[i].name, full, len) && cfg_fields[i].name[len] == '.')
			return 1;
	return 0;
}

static int load_scalar(struct loader *L, const struct field *f, const struct ynode *v, void *base)
{
	char why[512];
	const char *text;

	if (v->kind == Y_SCALAR && is_null(v)) {
		if (f->def)
			return fail_at(L, v, "has no value (leave the key out for the default, %s)", f->def);
		return fail_at(L, v, "has no value");
	}
	if (expect(L, v, Y_SCALAR, type_desc[f->type]) || check_nul(L, v))
		return -1;
	text = v->text;
	if (f->type == T_STRING || f->type == T_ENDPOINT || f->type == T_NAME) {
		text = arena_strndup(&L->keep, v->text, v->len);
		if (!text)
			return oom(L);
	}
	if (value_parse(f, text, base, why, sizeof(why)))
		return fail_at(L, v, "%s", why);
	return 0;
}

/* A run name: a scalar that passes check_run, copied into the config. */
static int load_run(struct loader *L, const struct ynode *v, const char **out)
{
	char why[512];

	if (v->kind == Y_SCALAR && is_null(v))
		return fail_at(L, v, "has no value");
	if (expect(L, v, Y_SCALAR, "a run name") || check_nul(L, v))
		return -1;
	if (check_run(v->text, L->max_run, why, sizeof(why)))
		return fail_at(L, v, "%s", why);
	*out = arena_strndup(&L->keep, v->text, v->len);
	return *out ? 0 : oom(L);
}

static int load_runs(struct loader *L, const struct ynode *v, struct wd_config_runs *runs)
{
	const struct ynode *it;
	size_t i = 0;

	if (v->kind == Y_SCALAR && !is_null(v))
		return fail_at(L, v, "expected a list of run names, not a scalar (write [%s] for one run)",
			       CLIP(v->text));
	if (is_null(v) || (v->kind == Y_SEQ && v->n == 0))
		return fail_at(L, v, "must name at least one run");
	if (expect(L, v, Y_SEQ, "a list of run names"))
		return -1;
	if (v->n > MAX_CANDIDATES)
		return fail_at(L, v, "%zu runs: at most %d", v->n, MAX_CANDIDATES);
	runs->names = arena_alloc(&L->keep, v->n * sizeof(*runs->names));
	if (!runs->names)
		return oom(L);
	for (it = v->child; it; it = it->next, i++) {
		size_t old = path_index(L, i);
		if (load_run(L, it, &runs->names[i]))
			return -1;
		for (const struct ynode *p = v->child; p != it; p = p->next)
			if (!strcmp(p->text, it->text))
				return fail_at(L, it, "run '%s' is listed twice (first at line %d)",
					       runs->names[i], p->line);
		path_pop(L, old);
	}
	runs->n = v->n;
	return 0;
}

static int load_proxies(struct loader *L, const struct ynode *v, struct wd_config_proxies *px)
{
	char why[512];
	size_t i = 0;

	if (is_null(v))
		return 0;
	if (expect(L, v, Y_MAP, "a mapping of proxy labels to run names"))
		return -1;
	if (v->n / 2 > MAX_PROXIES)
		return fail_at(L, v, "%zu proxies: at most %d", v->n / 2, MAX_PROXIES);
	px->v = arena_alloc(&L->keep, (v->n / 2 + 1) * sizeof(*px->v));
	if (!px->v)
		return oom(L);
	for (const struct ynode *k = v->child; k; k = k->next->next, i++) {
		size_t old;
		if (map_key(L, v, k, &old))
			return -1;
		if (check_name(k->text, why, sizeof(why)))
			return fail_at(L, k, "%s", why);
		px->v[i].label = arena_strndup(&L->keep, k->text, k->len);
		if (!px->v[i].label)
			return oom(L);
		if (load_run(L, k->next, &px->v[i].run))
			return -1;
		path_pop(L, old);
	}
	px->n = i;
	return 0;
}

/* auth.clients: names to distinct public keys. */
static int load_clients(struct loader *L, const struct ynode *v, struct wd_config_clients *cl)
{
	char why[512];
	size_t i = 0;

	if (is_null(v))
		return 0;
	if (expect(L, v, Y_MAP, type_desc[T_CLIENTS]))
		return -1;
	if (v->n / 2 > MAX_CLIENTS)
		return fail_at(L, v, "%zu clients: at most %d", v->n / 2, MAX_CLIENTS);
	cl->v = arena_alloc(&L->keep, (v->n / 2 + 1) * sizeof(*cl->v));
	if (!cl->v)
		return oom(L);
	for (const struct ynode *k = v->child; k; k = k->next->next, i++) {
		const struct ynode *kv = k->next;
		size_t old;
		if (map_key(L, v, k, &old))
			return -1;
		if (check_name(k->text, why, sizeof(why)))
			return fail_at(L, k, "%s", why);
		if (expect(L, kv, Y_SCALAR, "a public key (40 characters of Z85, from wdrift keygen)") ||
		    check_nul(L, kv))
			return -1;
		if (!wd_key_is_z85(kv->text))
			return fail_at(L, kv, "bad public key: expected 40 characters of Z85, as "
				       "wdrift keygen prints (got %zu characters)", strlen(kv->text));
		for (size_t j = 0; j < i; j++)
			if (!strcmp(cl->v[j].key, kv->text))
				return fail_at(L, kv, "the same key as client '%s'", cl->v[j].name);
		cl->v[i].name = arena_strndup(&L->keep, k->text, k->len);
		cl->v[i].key = arena_strndup(&L->keep, kv->text, kv->len);
		if (!cl->v[i].name || !cl->v[i].key)
			return oom(L);
		path_pop(L, old);
	}
	cl->n = i;
	return 0;
}

static int load_field(struct loader *L, const struct field *f, const struct ynode *v, void *base)
{
	switch (f->type) {
	case T_RUN:
		return load_run(L, v, (const char **)((char *)base + f->off));
	case T_RUNS:
		return load_runs(L, v, (struct wd_config_runs *)((char *)base + f->off));
	case T_PROXIES:
		return load_proxies(L, v, (struct wd_config_proxies *)((char *)base + f->off));
	case T_CLIENTS:
		return load_clients(L, v, (struct wd_config_clients *)((char *)base + f->off));
	default:
		return load_scalar(L, f, v, base);
	}
}

/*
 * Reads mapping map as one item of a list (a study, an alert) against the
 * table tab: where[i] is set to the key node of field i when present;
 * fields left out take their defaults, or fail when required.
 */
static int walk_item(struct loader *L, const struct ynode *map, const struct field *tab,
		     size_t ntab, void *base, const struct ynode **where)
{
	for (const struct ynode *k = map->child; k; k = k->next->next) {
		const struct field *f;
		size_t old;

		if (map_key(L, map, k, &old))
			return -1;
		f = field_find(tab, ntab, k->text);
		if (!f) {
			struct suggest s = { .typed = k->text, .bestd = SIZE_MAX };
			for (size_t i = 0; i < ntab; i++)
				suggest_try(&s, tab[i].name, strlen(tab[i].name));
			return unknown_key(L, k, k->text, &s);
		}
		where[f - tab] = k;
		if (load_field(L, f, k->next, base))
			return -1;
		path_pop(L, old);
	}
	for (size_t i = 0; i < ntab; i++) {
		if (where[i])
			continue;
		if (tab[i].flags & F_REQUIRED)
			return fail_at(L, map, "missing required key '%s'", tab[i].name);
		set_default(&tab[i], base);
	}
	return 0;
}

/* The value of key node k (where[] holds keys, errors point at values). */
static const struct ynode *value_of(const struct ynode *k) { return k->next; }

static int study_check(struct loader *L, struct wd_config *c, size_t idx,
		       const struct ynode **w)
{
	const struct wd_config_study *s = &c->studies[idx];
	const struct ynode *it;
	size_t old, i;

	for (i = 0; i < idx; i++)
		if (!strcmp(c->studies[i].name, s->name)) {
			path_key(L, "name");
			return fail_at(L, value_of(w[S_NAME]), "duplicate study name '%s'",
				       s->name);
		}
	old = path_key(L, "candidates");
	for (i = 0, it = value_of(w[S_CANDIDATES])->child; it; it = it->next, i++)
		if (!strcmp(s->candidates.names[i], s->baseline)) {
			path_index(L, i);
			return fail_at(L, it, "run '%s' is both the baseline and a candidate",
				       s->baseline);
		}
	path_pop(L, old);
	if (!w[S_PROXIES])
		return 0;
	if (s->synthetic_proxy != WD_SYNTHETIC_NONE && s->proxies.n + 1 > MAX_PROXIES) {
		/* the synthetic proxy takes a proxy's place in every drift row */
		path_key(L, "proxies");
		return fail_at(L, value_of(w[S_PROXIES]),
			       "%zu proxies and a synthetic_proxy: at most %d proxies in all",
			       s->proxies.n, MAX_PROXIES);
	}
	old = path_key(L, "proxies");
	for (i = 0, it = value_of(w[S_PROXIES])->child; i < s->proxies.n; it = it->next->next, i++)
		if (!strcmp(s->proxies.v[i].run, s->baseline)) {
			path_key(L, s->proxies.v[i].label);
			return fail_at(L, it->next, "proxy run '%s' is the study's baseline: it would drift by 0",
				       s->baseline);
		}
	path_pop(L, old);
	return 0;
}

/*
 * The opening checks of a top-level list (studies, alerts): 0 when it is
 * absent or null, 1 when it is a list of at most max items, -1 (reported)
 * otherwise.
 */
static int list_of(struct loader *L, const struct ynode *v, int max, const char *what)
{
	char want[32];

	if (is_null(v))
		return 0;
	snprintf(want, sizeof(want), "a list of %s", what);
	if (expect(L, v, Y_SEQ, want))
		return -1;
	if (v->n > (size_t)max)
		return fail_at(L, v, "%zu %s: at most %d", v->n, what, max);
	return 1;
}

static int walk_studies(struct loader *L, const struct ynode *v, struct wd_config *c)
{
	const struct ynode *it;
	size_t i = 0;

	int r = list_of(L, v, MAX_STUDIES, "studies");
	if (r <= 0)
		return r;
	c->studies = arena_alloc(&L->keep, (v->n + 1) * sizeof(*c->studies));
	if (!c->studies)
		return oom(L);
	for (it = v->child; it; it = it->next, i++) {
		const struct ynode *where[N_STUDY] = { 0 };
		size_t old = path_index(L, i);

		if (expect(L, it, Y_MAP, "a mapping (one study)") ||
		    walk_item(L, it, study_fields, N_STUDY, &c->studies[i], where) ||
		    study_check(L, c, i, where))
			return -1;
		path_pop(L, old);
	}
	c->n_studies = v->n;
	return 0;
}

/* Why key i of alert a does not apply to it, or NULL when it does. */
static const char *alert_misfit(const struct wd_config_alert *a, size_t i)
{
	switch (i) {
	case A_PROXY:
		return a->metric == WD_METRIC_RATIO ? NULL : "applies only to metric ratio";
	case A_SCOPE:
	case A_FOR:
		return a->metric != WD_METRIC_STALLED ? NULL :
			"does not apply to metric stalled (it watches time, not snapshots)";
	case A_TENSORS:
		return a->metric != WD_METRIC_STALLED && a->scope == WD_SCOPE_TENSORS ? NULL :
			"applies only with scope: tensors";
	case A_INTERVAL:
		return a->command ? NULL : "applies only with a command";
	}
	return NULL;
}

static int alert_check(struct loader *L, struct wd_config *c, size_t idx,
		       const struct ynode *map, const struct ynode **w)
{
	const struct wd_config_alert *a = &c->alerts[idx];

	for (size_t i = 0; i < N_ALERT; i++) {
		const char *why = w[i] ? alert_misfit(a, i) : NULL;
		if (why) {
			path_key(L, alert_fields[i].name);
			return fail_at(L, w[i], "key '%s' %s", alert_fields[i].name, why);
		}
	}
	if (a->metric == WD_METRIC_RATIO && !a->proxy)
		return fail_at(L, map, "missing required key 'proxy' (metric ratio divides by a proxy's W1)");
	if (a->metric != WD_METRIC_STALLED && a->scope == WD_SCOPE_TENSORS && !a->tensors)
		return fail_at(L, map, "missing required key 'tensors' (scope tensors needs a glob)");
	if (a->metric == WD_METRIC_STALLED && a->threshold <= 0) {
		path_key(L, "threshold");
		return fail_at(L, value_of(w[A_THRESHOLD]), "must be more than 0 seconds for metric stalled");
	}
	for (size_t i = 0; i < idx; i++)
		if (!strcmp(c->alerts[i].name, a->name)) {
			path_key(L, "name");
			return fail_at(L, value_of(w[A_NAME]), "duplicate alert name '%s'", a->name);
		}
	return 0;
}

static int walk_alerts(struct loader *L, const struct ynode *v, struct wd_config *c)
{
	const struct ynode *it;
	size_t i = 0;

	int r = list_of(L, v, MAX_ALERTS, "alerts");
	if (r <= 0)
		return r;
	c->alerts = arena_alloc(&L->keep, (v->n + 1) * sizeof(*c->alerts));
	L->alert_where = arena_alloc(&L->tree, (v->n + 1) * N_ALERT * sizeof(*L->alert_where));
	if (!c->alerts || !L->alert_where)
		return oom(L);
	for (it = v->child; it; it = it->next, i++) {
		const struct ynode **where = &L->alert_where[i * N_ALERT];
		size_t old = path_index(L, i);

		if (expect(L, it, Y_MAP, "a mapping (one alert)") ||
		    walk_item(L, it, alert_fields, N_ALERT, &c->alerts[i], where) ||
		    alert_check(L, c, i, it, where))
			return -1;
		path_pop(L, old);
	}
	c->n_alerts = v->n;
	return 0;
}

/*
 * Reads the mapping of a section of the top level: section is its dotted
 * name ("" for the top itself, "spool.retention"). where[i] gets the key
 * node of cfg_fields[i] when the file sets it.
 */
static int walk_section(struct loader *L, const struct ynode *map, const char *section,
			struct wd_config *c, const struct ynode **where)
{
	for (const struct ynode *k = map->child; k; k = k->next->next) {
		const struct ynode *v = k->next;
		const struct field *f;
		char full[160], keys[160];
		size_t old;
		int r;

		if (map_key(L, map, k, &old))
			return -1;
		/* A dotted key is not a path: "memory.budget: 4G" would dodge
		 * the duplicate check against "memory: {budget: 8G}". */
		if (strchr(k->text, '.') ||
		    snprintf(full, sizeof(full), "%s%s%s", section, *section ? "." : "", k->text) >=
		    (int)sizeof(full))
			full[0] = 0;
		if (!*section && !strcmp(k->text, "studies")) {
			L->studies = k;	/* read once limits.max_name is known */
			r = 0;
		} else if (!*section && !strcmp(k->text, "alerts")) {
			L->alerts = k;
			r = 0;
		} else if ((f = field_find(cfg_fields, N_CFG, full))) {
			where[f - cfg_fields] = k;
			r = load_field(L, f, v, c);
		} else if (*full && is_section(full)) {
			if (is_null(v))
				r = 0;	/* "memory:" with nothing under it: the defaults */
			else if (v->kind == Y_MAP)
				r = walk_section(L, v, full, c, where);
			else if (v->kind == Y_ALIAS)
				r = alias_fail(L, v);
			else
				r = fail_at(L, v, "expected a mapping (of %s), not %s",
					    section_keys(full, keys, sizeof(keys)), kind_desc(v));
		} else if (!*section && strchr(k->text, '.') &&
			   field_find(cfg_fields, N_CFG, k->text)) {
			const char *dot = strrchr(k->text, '.');
			r = fail_at(L, k, "unknown key '%s' (keys nest: write '%s' under '%.*s')",
				    CLIP(k->text), dot + 1, (int)(dot - k->text), k->text);
		} else {
			struct suggest s = { 0 };
			suggest_top(&s, *full ? full : k->text);
			r = unknown_key(L, k, *full ? full : k->text, &s);
		}
		if (r)
			return -1;
		path_pop(L, old);
	}
	return 0;
}

static void set_path(struct loader *L, const char *path)
{
	snprintf(L->path, sizeof(L->path), "%s", path);
	L->pathlen = strlen(L->path);
}

/* An error at the top-level key i, at its value when the file sets it. */
__attribute__((format(printf, 4, 5)))
static int fail_key(struct loader *L, const struct ynode **where, size_t i, const char *fmt, ...)
{
	va_list ap;
	int r;

	set_path(L, cfg_fields[i].name);
	va_start(ap, fmt);
	r = vfail(L, where[i] ? where[i]->next->line : 0, where[i] ? where[i]->next->col : 0,
		  fmt, ap);
	va_end(ap);
	return r;
}

/* Of two keys in conflict, the one the file sets last (the one to blame). */
static size_t later(const struct ynode **where, size_t a, size_t b)
{
	if (!where[a])
		return b;
	if (!where[b])
		return a;
	return where[a]->line > where[b]->line ||
	       (where[a]->line == where[b]->line && where[a]->col > where[b]->col) ? a : b;
}

static size_t cfg_index(const char *name)
{
	const struct field *f = field_find(cfg_fields, N_CFG, name);

	assert(f);
	return f - cfg_fields;
}

/* What one key alone cannot check, on the top level. */
static int check_top(struct loader *L, const struct wd_config *c, const struct ynode **where)
{
	const char *names[3] = { "listen.ingest", "listen.control", "listen.events" };
	const char *eps[3] = { c->listen.ingest, c->listen.control, c->listen.events };
	char a[32], b[32];

	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (!strcmp(eps[i], eps[j])) {
				size_t x = cfg_index(names[i]), y = cfg_index(names[j]);
				size_t blame = later(where, x, y);
				return fail_key(L, where, blame, "same endpoint as %s ('%s')",
						cfg_fields[blame == x ? y : x].name, CLIP(eps[i]));
			}
	const char *key, *ep = wd_config_network_endpoint(c, &key);
	if (ep && !c->auth.server_key && !c->auth.allow_insecure)
		return fail_key(L, where, cfg_index(key), "'%s' takes connections from the network, "
				"and nothing authenticates them: set auth.server_key and auth.clients "
				"(docs/security.md), or auth.allow_insecure: true", CLIP(ep));
	if (c->auth.clients.n && !c->auth.server_key)
		return fail_key(L, where, cfg_index("auth.clients"), "needs auth.server_key: "
				"without the daemon's key pair nothing is authenticated");
	if (c->limits.max_message > c->memory.budget) {
		size_t x = cfg_index("limits.max_message"), y = cfg_index("memory.budget");
		format_size(a, sizeof(a), c->limits.max_message);
		format_size(b, sizeof(b), c->memory.budget);
		if (later(where, x, y) == x)
			return fail_key(L, where, x, "%s is more than memory.budget (%s)", a, b);
		return fail_key(L, where, y, "%s is less than limits.max_message (%s)", b, a);
	}
	return 0;
}

/* tcp://HOST:PORT with HOST a loopback address or name. */
static int is_loopback_tcp(const char *ep)
{
	const char *host = ep + 6, *colon = strrchr(host, ':');
	size_t len;

	if (strncmp(ep, "tcp://", 6) || !colon)
		return 0;
	len = colon - host;
	if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
		host++;
		len -= 2;
	}
	if ((len == 9 && !strncmp(host, "localhost", 9)) || (len == 3 && !strncmp(host, "::1", 3)) ||
	    (len == 2 && !strncmp(host, "lo", 2)))
		return 1;
	if (len < 4 || strncmp(host, "127.", 4))
		return 0;
	for (size_t i = 4; i < len; i++)
		if (!is_digit(host[i]) && host[i] != '.')
			return 0;
	return 1;
}

const char *wd_config_network_endpoint(const struct wd_config *c, const char **key)
{
	const char *names[3] = { "listen.ingest", "listen.control", "listen.events" };
	const char *eps[3] = { c->listen.ingest, c->listen.control, c->listen.events };

	for (int i = 0; i < 3; i++)
		if (!strncmp(eps[i], "tcp://", 6) && !is_loopback_tcp(eps[i])) {
			if (key)
				*key = names[i];
			return eps[i];
		}
	return NULL;
}

/* Alerts name studies and proxies: checked once both lists are read. */
static int resolve_alerts(struct loader *L, struct wd_config *c)
{
	for (size_t i = 0; i < c->n_alerts; i++) {
		struct wd_config_alert *a = &c->alerts[i];
		const struct ynode **w = &L->alert_where[i * N_ALERT];
		const struct wd_config_study *s = NULL;
		const char *synth;
		char have[400];
		size_t o = 0, j;

		for (j = 0; j < c->n_studies && !s; j++)
			if (!strcmp(c->studies[j].name, a->study))
				s = &c->studies[a->study_index = j];
		if (!s) {
			struct suggest sg = { .typed = a->study, .bestd = SIZE_MAX };
			for (j = 0; j < c->n_studies; j++)
				suggest_try(&sg, c->studies[j].name, strlen(c->studies[j].name));
			set_path(L, "alerts");
			path_index(L, i);
			path_key(L, "study");
			if (sg.best)
				return fail_at(L, value_of(w[A_STUDY]), "unknown study '%s' (did you mean '%.*s'?)",
					       a->study, (int)sg.blen, sg.best);
			return fail_at(L, value_of(w[A_STUDY]), "unknown study '%s'", a->study);
		}
		if (a->metric != WD_METRIC_RATIO)
			continue;
		synth = enum_name(synthetic_vals, s->synthetic_proxy);
		if (synth && !strcmp(a->proxy, synth))
			continue;
		for (j = 0; j < s->proxies.n; j++)
			if (!strcmp(s->proxies.v[j].label, a->proxy))
				break;
		if (j < s->proxies.n)
			continue;
		have[0] = 0;
		for (j = 0; j < s->proxies.n && o < sizeof(have); j++)
			o += snprintf(have + o, sizeof(have) - o, "%s%s", o ? ", " : "", s->proxies.v[j].label);
		if (synth && o < sizeof(have))
			snprintf(have + o, sizeof(have) - o, "%s%s", o ? ", " : "", synth);
		set_path(L, "alerts");
		path_index(L, i);
		path_key(L, "proxy");
		if (!have[0])
			return fail_at(L, value_of(w[A_PROXY]), "study '%s' has no proxy: give it proxies or a synthetic_proxy",
				       s->name);
		return fail_at(L, value_of(w[A_PROXY]), "study '%s' has no proxy '%s' (it has: %s)",
			       s->name, CLIP(a->proxy), have);
	}
	return 0;
}

/* Loads text[0..len) under name into *out, all or nothing. */
static int load_buffer(const char *name, const char *text, size_t len, struct wd_config *out,
		       char *err, size_t errlen)
{
	struct loader L = {
		.name = name, .text = (const unsigned char *)text, .len = len,
		.err = err, .errlen = errlen,
	};
	const struct ynode *where[N_CFG] = { 0 };
	struct ynode *root;
	struct wd_config c;
	int r = -1;

	if (err && errlen)
		err[0] = 0;
	wd_config_defaults(&c);
	if (tree_parse(&L, &root))
		goto out;
	if (root && !is_null(root)) {
		if (root->kind == Y_ALIAS) {
			alias_fail(&L, root);
			goto out;
		}
		if (root->kind != Y_MAP) {
			fail_at(&L, root, "expected a mapping of keys at the top, not %s", kind_desc(root));
			goto out;
		}
		if (walk_section(&L, root, "", &c, where))
			goto out;
		L.max_run = c.limits.max_name;
		if (L.studies) {
			set_path(&L, "studies");
			if (walk_studies(&L, L.studies->next, &c))
				goto out;
		}
		if (L.alerts) {
			set_path(&L, "alerts");
			if (walk_alerts(&L, L.alerts->next, &c))
				goto out;
		}
		set_path(&L, "");
	}
	if (check_top(&L, &c, where) || resolve_alerts(&L, &c))
		goto out;
	c.source = arena_strndup(&L.keep, name, strlen(name));
	if (!c.source) {
		oom(&L);
		goto out;
	}
	c.arena = L.keep;
	L.keep = NULL;
	*out = c;
	r = 0;
out:
	arena_free(L.tree);
	arena_free(L.keep);
	return r;
}

int wd_config_load_string(const char *name, const char *yaml, struct wd_config *out,
			  char *err, size_t errlen)
{
	if (!name)
		name = "(string)";
	if (!yaml)
		yaml = "";
	return load_buffer(name, yaml, strlen(yaml), out, err, errlen);
}

__attribute__((format(printf, 3, 4)))
static int file_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int wd_config_load(const char *path, struct wd_config *out, char *err, size_t errlen)
{
	size_t len = 0, cap = 65536;
	char *buf = NULL;
	struct stat st;
	int fd, r = -1;

	/*
	 * O_NONBLOCK, then back to blocking reads: a named FIFO with no writer
	 * would otherwise hang the open (wdriftd -c, and every wdrift -c) for
	 * good. A pipe that has a writer, as -c <(generate) gives, still reads
	 * to its end; one with none reads nothing, refused below.
	 */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return file_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		file_fail(err, errlen, "%s: is a directory, not a configuration file", path);
		goto out;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	for (;;) {
		ssize_t n;
		if (!buf || len == cap) {
			char *nb;
			if (buf)
				cap *= 2;
			nb = realloc(buf, cap);
			if (!nb) {
				file_fail(err, errlen, "%s: out of memory", path);
				goto out;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			file_fail(err, errlen, "%s: cannot read: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0 && !len && S_ISFIFO(st.st_mode)) {
			file_fail(err, errlen, "%s: a FIFO with no writer: nothing to read, not a "
				  "configuration file", path);
			goto out;
		}
		if (n == 0)
			break;
		len += n;
		if (len > MAX_FILE) {
			file_fail(err, errlen, "%s: larger than %uM: not a configuration file",
				  path, MAX_FILE >> 20);
			goto out;
		}
	}
	r = load_buffer(path, buf, len, out, err, errlen);
out:
	free(buf);
	close(fd);
	return r;
}

/* ---- reload and printing ---------------------------------------------------- */

int wd_config_reload_check(const struct wd_config *cur, const struct wd_config *next,
			   char *err, size_t errlen)
{
	for (size_t i = 0; i < N_CFG; i++) {
		const struct field *f = &cfg_fields[i];
		char a[64], b[64];
		const char *x, *y;

		if (!(f->flags & F_RESTART))
			continue;
		x = value_text(f, cur, a, sizeof(a));
		y = value_text(f, next, b, sizeof(b));
		x = x ? x : "(unset)";
		y = y ? y : "(unset)";
		if (strcmp(x, y))
			return file_fail(err, errlen,
					 "%s: %s: cannot change on reload (from '%s' to '%s'): restart wdriftd to apply it",
					 next->source, f->name, CLIP(x), CLIP(y));
	}
	return 0;
}

/* True when s reads back as the same string written plain in YAML. */
static int plain_ok(const char *s)
{
	static const char *const special[] = {
		"null", "true", "false", "yes", "no", "on", "off", "y", "n", ".inf", ".nan", NULL
	};
	size_t len = strlen(s);

	if (!len || !(is_alnum(s[0]) || s[0] == '.' || s[0] == '/' || s[0] == '_'))
		return 0;
	/* numbers, and what YAML 1.1 would read as one, stay strings */
	if (is_digit(s[0]) || (strchr("+-.", s[0]) && is_digit(s[1])))
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!is_alnum(s[i]) && !strchr("._/-:+@=%", s[i]))
			return 0;
	if (s[len - 1] == ':')
		return 0;
	for (int i = 0; special[i]; i++)
		if (!strcasecmp(s, special[i]))
			return 0;
	return 1;
}

static void print_string(FILE *f, const char *s)
{
	if (plain_ok(s)) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = s[0], c1 = c ? s[1] : 0, c2 = c1 ? s[2] : 0;

		if (c == '"' || c == '\\') {
			fprintf(f, "\\%c", c);
		} else if (c == '\n') {
			fputs("\\n", f);
		} else if (c == '\t') {
			fputs("\\t", f);
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(f, "\\x%02X", c);
		} else if (c == 0xc2 && c1 == 0x85) {
			fputs("\\N", f);	/* NEL, LS and PS are line breaks to YAML */
			s++;
		} else if (c == 0xe2 && c1 == 0x80 && (c2 == 0xa8 || c2 == 0xa9)) {
			fputs(c2 == 0xa8 ? "\\L" : "\\P", f);
			s += 2;
		} else {
			fputc(c, f);
		}
	}
	fputc('"', f);
}

static void print_value(FILE *f, const struct field *fd, const void *base)
{
	char buf[64];
	const char *t = value_text(fd, base, buf, sizeof(buf));

	if (fd->type == T_STRING || fd->type == T_ENDPOINT || fd->type == T_NAME ||
	    fd->type == T_RUN)
		print_string(f, t);
	else
		fputs(t, f);
}

/* One item of a list; field i is left out when misfit(base, i) says why. */
static void print_item(FILE *f, const struct field *tab, size_t n, const void *base,
		       const char *(*misfit)(const void *base, size_t i))
{
	const char *lead = "  - ";

	for (size_t i = 0; i < n; i++) {
		const struct field *fd = &tab[i];
		const void *p = (const char *)base + fd->off;
		char buf[64];

		if (misfit && misfit(base, i))
			continue;
		if (fd->type == T_RUNS) {
			const struct wd_config_runs *r = p;
			fprintf(f, "%s%s:\n", lead, fd->name);
			for (size_t j = 0; j < r->n; j++) {
				fputs("      - ", f);
				print_string(f, r->names[j]);
				fputc('\n', f);
			}
		} else if (fd->type == T_PROXIES) {
			const struct wd_config_proxies *px = p;
			if (!px->n)
				continue;
			fprintf(f, "%s%s:\n", lead, fd->name);
			for (size_t j = 0; j < px->n; j++) {
				fputs("      ", f);
				print_string(f, px->v[j].label);
				fputs(": ", f);
				print_string(f, px->v[j].run);
				fputc('\n', f);
			}
		} else {
			if (!value_text(fd, base, buf, sizeof(buf)))
				continue;
			fprintf(f, "%s%s: ", lead, fd->name);
			print_value(f, fd, base);
			fputc('\n', f);
		}
		lead = "    ";
	}
}

static const char *alert_misfit_v(const void *base, size_t i)
{
	return alert_misfit(base, i);
}

void wd_config_print(FILE *f, const struct wd_config *c)
{
	const char *prev = "";
	char buf[64];

	for (size_t i = 0; i < N_CFG; i++) {
		const struct field *fd = &cfg_fields[i];
		const char *name = fd->name, *seg = name, *pseg = prev;
		int depth = 0;

		/* Skip the sections this key shares with the previous one... */
		for (;;) {
			const char *d1 = strchr(seg, '.'), *d2 = strchr(pseg, '.');
			if (!d1 || !d2 || d1 - seg != d2 - pseg || strncmp(seg, pseg, d1 - seg))
				break;
			seg = d1 + 1;
			pseg = d2 + 1;
			depth++;
		}
		/* ...and open the ones it does not. */
		for (const char *d; (d = strchr(seg, '.')); seg = d + 1, depth++)
			fprintf(f, "%s%*s%.*s:\n", depth == 0 && i ? "\n" : "", 2 * depth, "",
				(int)(d - seg), seg);
		fprintf(f, "%*s# %s (default %s)\n", 2 * depth, "", fd->doc,
			fd->def ? fd->def : "none");
		if (fd->type == T_CLIENTS) {
			const struct wd_config_clients *cl = &c->auth.clients;
			fprintf(f, "%*s%s:%s\n", 2 * depth, "", seg, cl->n ? "" : " {}");
			for (size_t j = 0; j < cl->n; j++) {
				fprintf(f, "%*s", 2 * depth + 2, "");
				print_string(f, cl->v[j].name);
				fputs(": ", f);
				print_string(f, cl->v[j].key);
				fputc('\n', f);
			}
		} else if (!value_text(fd, c, buf, sizeof(buf))) {
			fprintf(f, "%*s# %s: (unset)\n", 2 * depth, "", seg);
		} else {
			fprintf(f, "%*s%s: ", 2 * depth, "", seg);
			print_value(f, fd, c);
			fputc('\n', f);
		}
		prev = name;
	}
	fputs(c->n_studies ? "\nstudies:\n" : "\nstudies: []\n", f);
	for (size_t i = 0; i < c->n_studies; i++)
		print_item(f, study_fields, N_STUDY, &c->studies[i], NULL);
	fputs(c->n_alerts ? "\nalerts:\n" : "\nalerts: []\n", f);
	for (size_t i = 0; i < c->n_alerts; i++)
		print_item(f, alert_fields, N_ALERT, &c->alerts[i], alert_misfit_v);
}

char *wd_config_print_string(const struct wd_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	wd_config_print(f, c);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
