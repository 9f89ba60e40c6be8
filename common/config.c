/*
 * config.c: the configuration's tables (config_table.h): every key with
 * its type, bounds, default and place in struct wd_config, and the codec
 * that turns a key's text into its value and back. Also what is read off
 * a loaded config: defaults, release, names of enum values, the network
 * endpoint, the reload check. Loading is in config_load.c, the checks
 * across keys in config_check.c, printing in config_print.c.
 *
 * Depends on libc, wdrift.h (for its enums), lib/error.h and lib/units.h.
 */
#include <assert.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "arena.h"
#include "config_table.h"
#include "error.h"
#include "units.h"

#define IPC_PATH_MAX 107	/* sizeof(sun_path) - 1: zmq refuses longer */
#define ENDPOINT_MAX 256	/* a DNS name is at most 253 */

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


#define KIB(n) ((int64_t)(n) << 10)
#define MIB(n) ((int64_t)(n) << 20)
#define GIB(n) ((int64_t)(n) << 30)
#define TIB(n) ((int64_t)(n) << 40)
#define CF(m) offsetof(struct wd_config, m)

static int config_check_hostport(const char *s, char *why, size_t size);


/*
 * Every scalar key of the top level, grouped by section: the printer
 * relies on the order. Defaults here must equal config/wdrift.yaml (a unit
 * test loads the file and compares).
 */
const struct field cfg_fields[] = {
	{ .name = "listen.ingest", .type = T_ENDPOINT, .flags = F_RESTART,
	  .off = CF(listen.ingest), .def = "ipc://./run/ingest.sock",
	  .doc = "ZeroMQ endpoint where training runs publish snapshots" },
	{ .name = "listen.control", .type = T_ENDPOINT, .flags = F_RESTART,
	  .off = CF(listen.control), .def = "ipc://./run/control.sock",
	  .doc = "ZeroMQ endpoint for the wdrift CLI's requests" },
	{ .name = "listen.events", .type = T_ENDPOINT, .flags = F_RESTART,
	  .off = CF(listen.events), .def = "ipc://./run/events.sock",
	  .doc = "ZeroMQ endpoint that publishes drift results and alerts" },
	{ .name = "listen.metrics", .type = T_STRING, .flags = F_RESTART,
	  .off = CF(listen.metrics), .max = 64, .check = config_check_hostport,
	  .doc = "HOST:PORT of the Prometheus /metrics endpoint (docs/metrics.md), such as 127.0.0.1:9464; unset: off" },
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
	{ .name = "compute.threads", .type = T_INT, .flags = F_RESTART,
	  .off = CF(compute.threads), .def = "0", .min = 0, .max = 256,
	  .doc = "threads of the CPU engine, 0 to 256; 0: the cores available to the daemon" },
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
	{ .name = "limits.pending_timeout", .type = T_INT, .flags = F_SECONDS,
	  .off = CF(limits.pending_timeout), .def = "600", .min = 1, .max = 86400,
	  .doc = "seconds an uncommitted or incomplete snapshot may idle before it is dropped" },
	{ .name = "log.level", .type = T_ENUM,
	  .off = CF(log.level), .def = "notice", .vals = level_vals,
	  .doc = "least important messages logged: err, warning, notice, info or debug" },
	{ .name = "metrics.per_tensor", .type = T_BOOL,
	  .off = CF(metrics.per_tensor), .def = "false",
	  .doc = "/metrics also has each tensor's W1 and ratios (one series per tensor, run and proxy)" },
};

#define SF(m) offsetof(struct wd_config_study, m)
const struct field study_fields[] = {
	{ .name = "name", .type = T_NAME, .flags = F_REQUIRED, .off = SF(name) },
	{ .name = "baseline", .type = T_RUN, .flags = F_REQUIRED, .off = SF(baseline) },
	{ .name = "candidates", .type = T_RUNS, .flags = F_REQUIRED, .off = SF(candidates) },
	{ .name = "proxies", .type = T_PROXIES, .off = SF(proxies) },
	{ .name = "synthetic_proxy", .type = T_ENUM, .off = SF(synthetic_proxy),
	  .vals = synthetic_vals },
};

#define AF(m) offsetof(struct wd_config_alert, m)
const struct field alert_fields[] = {
	{ .name = "name", .type = T_NAME, .flags = F_REQUIRED, .off = AF(name) },
	{ .name = "study", .type = T_NAME, .flags = F_REQUIRED, .off = AF(study) },
	{ .name = "metric", .type = T_ENUM, .flags = F_REQUIRED, .off = AF(metric),
	  .vals = metric_vals },
	{ .name = "proxy", .type = T_STRING, .off = AF(proxy), .max = MAX_NAME },
	{ .name = "scope", .type = T_ENUM, .off = AF(scope), .def = "max", .vals = scope_vals },
	{ .name = "tensors", .type = T_STRING, .off = AF(tensors), .max = 4096 },
	{ .name = "threshold", .type = T_DOUBLE, .flags = F_REQUIRED, .off = AF(threshold),
	  .dmin = 0, .dmax = DBL_MAX },
	{ .name = "for", .type = T_INT, .flags = F_COUNT, .off = AF(for_count), .def = "1",
	  .min = 1, .max = 1000000 },
	{ .name = "severity", .type = T_ENUM, .off = AF(severity), .def = "warning",
	  .vals = severity_vals },
	{ .name = "command", .type = T_STRING, .off = AF(command), .max = 8192 },
	{ .name = "command_min_interval", .type = T_INT, .flags = F_SECONDS, .off = AF(command_min_interval),
	  .def = "60", .min = 0, .max = 86400 },
	{ .name = "command_timeout", .type = T_INT, .flags = F_SECONDS, .off = AF(command_timeout),
	  .def = "60", .min = 1, .max = 86400 },
};

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

const char *wd_config_synthetic_label(int synthetic)
{
	return enum_name(synthetic_vals, synthetic);
}

size_t wd_study_step_runs(const struct wd_config_study *st, const char **names, size_t max)
{
	size_t n = 0;
	const char *synthetic = wd_config_synthetic_label(st->synthetic_proxy);

	for (size_t k = 0; k < st->candidates.n && n < max; k++)
		names[n++] = st->candidates.names[k];
	for (size_t k = 0; k < st->proxies.n && n < max; k++)
		names[n++] = st->proxies.v[k].run;
	if (synthetic && n < max)
		names[n++] = synthetic;
	return n;
}

const char *wd_study_role(const struct wd_config_study *st, const char *run, const char **label)
{
	if (!strcmp(st->baseline, run))
		return "baseline";
	for (size_t k = 0; k < st->candidates.n; k++)
		if (!strcmp(st->candidates.names[k], run))
			return "candidate";
	for (size_t k = 0; k < st->proxies.n; k++)
		if (!strcmp(st->proxies.v[k].run, run)) {
			if (label)
				*label = st->proxies.v[k].label;
			return "proxy";
		}
	return NULL;
}

const char *wd_study_proxy_run(const struct wd_config_study *st, const char *label)
{
	const char *synthetic = wd_config_synthetic_label(st->synthetic_proxy);

	for (size_t k = 0; k < st->proxies.n; k++)
		if (!strcmp(st->proxies.v[k].label, label))
			return st->proxies.v[k].run;
	return synthetic && !strcmp(synthetic, label) ? synthetic : NULL;
}

const struct wd_config_study *wd_config_study_naming(const struct wd_config *cfg, const char *run)
{
	for (size_t i = 0; i < cfg->n_studies; i++)
		if (wd_study_role(&cfg->studies[i], run, NULL))
			return &cfg->studies[i];
	return NULL;
}

const struct field *config_field_find(const struct field *tab, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(tab[i].name, name))
			return &tab[i];
	return NULL;
}

size_t config_key_index(const char *name)
{
	const struct field *f = config_field_find(cfg_fields, N_CFG, name);

	assert(f);
	return f - cfg_fields;
}

/* ---- values: text to struct and back ---------------------------------------- */


/*
 * Copies s for a message: at most max bytes of it, control characters
 * escaped, "..." when cut. User text never reaches a log unescaped.
 */
const char *config_clip(char *buf, size_t size, const char *s, size_t max)
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

/* Decimal, optional sign, nothing else. 0, -EINVAL or -ERANGE. */
static int parse_int(const char *s, int64_t *out)
{
	uint64_t v;
	int neg = *s == '-', r;

	if (*s == '-' || *s == '+')
		s++;
	r = wd_parse_digits(&s, &v);
	if (r)
		return r;
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

/*
 * listen.metrics: HOST:PORT, HOST an IPv4 address, an IPv6 one in
 * brackets, or localhost; no other names, so that starting never waits on
 * DNS and the address bound is the one written. Port 1 to 65535.
 */
int wd_config_hostport(const char *s, char *host, size_t hostlen, int *port, char *why, size_t size)
{
	const char *colon = strrchr(s, ':');
	char q[96], h[64];
	unsigned char addr[16];
	int64_t p;
	size_t len;

	config_clip(q, sizeof(q), s, 60);
	if (!colon || colon == s)
		return wd_error(why, size, "bad address '%s': expected HOST:PORT, such as 127.0.0.1:9464", q);
	len = colon - s;
	if (parse_int(colon + 1, &p) || !is_digit(colon[1]) || p < 1 || p > 65535)
		return wd_error(why, size, "bad address '%s': the port must be 1 to 65535", q);
	if (s[0] == '[' && len >= 2 && s[len - 1] == ']') {
		if (len - 2 >= sizeof(h))
			return wd_error(why, size, "bad address '%s': not an IPv6 address", q);
		memcpy(h, s + 1, len - 2);
		h[len - 2] = 0;
		if (inet_pton(AF_INET6, h, addr) != 1)
			return wd_error(why, size, "bad address '%s': '%s' is not an IPv6 address", q, h);
	} else {
		if (len >= sizeof(h))
			return wd_error(why, size, "bad address '%s': not an IPv4 address", q);
		memcpy(h, s, len);
		h[len] = 0;
		if (!strcmp(h, "localhost"))
			snprintf(h, sizeof(h), "127.0.0.1");
		else if (inet_pton(AF_INET, h, addr) != 1)
			return wd_error(why, size, "bad address '%s': the host must be an IPv4 address, "
					"[IPv6] or localhost (no other names)", q);
	}
	if (host && hostlen)
		snprintf(host, hostlen, "%s", h);
	if (port)
		*port = (int)p;
	return 0;
}

static int config_check_hostport(const char *s, char *why, size_t size)
{
	return wd_config_hostport(s, NULL, 0, NULL, why, size);
}

int wd_config_check_endpoint(const char *s, char *why, size_t size)
{
	return wd_config_check_endpoint_as(s, 0, why, size);
}

int wd_config_check_endpoint_as(const char *s, int connect, char *why, size_t size)
{
	const char *rest, *colon;
	char q[96];

	config_clip(q, sizeof(q), s, 60);
	if (strlen(s) > ENDPOINT_MAX)
		return wd_error(why, size, "bad endpoint '%s': longer than %d bytes", q, ENDPOINT_MAX);
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return wd_error(why, size, "bad endpoint '%s': contains a space or a control character", q);
	if (!strncmp(s, "ipc://", 6)) {
		rest = s + 6;
		if (!*rest)
			return wd_error(why, size, "bad endpoint '%s': ipc:// needs a path", q);
		/* the client's words, with its did-you-mean: wd_hs_trailing_slash ('@': an abstract name may end so) */
		if (rest[0] != '@' && rest[strlen(rest) - 1] == '/')
			return wd_error(why, size, "bad endpoint '%s': ends in '/', but an ipc:// path names the "
					"socket file itself, not a directory (ipc://DIR/NAME.sock, as in wdriftd's listen.*)", q);
		if (strlen(rest) > IPC_PATH_MAX)
			return wd_error(why, size, "bad endpoint '%s': ipc path longer than %d bytes (the limit of a unix socket address)",
					q, IPC_PATH_MAX);
		return 0;
	}
	if (!strncmp(s, "tcp://", 6)) {
		int64_t port;
		rest = s + 6;
		colon = strrchr(rest, ':');
		if (!colon || colon == rest)
			return wd_error(why, size, "bad endpoint '%s': tcp:// needs HOST:PORT", q);
		if (s[strlen(s) - 1] == '/')
			return wd_error(why, size, "bad endpoint '%s': ends in '/', but a tcp:// endpoint ends at "
					"its port", q);
		if (strcmp(colon + 1, "*") &&
		    (parse_int(colon + 1, &port) || !is_digit(colon[1]) || port < 1 || port > 65535))
			return wd_error(why, size, "bad endpoint '%s': the port must be 1 to 65535%s", q,
					connect ? "" : ", or *");
		return 0;
	}
	if (!strncmp(s, "inproc://", 9)) {
		if (!s[9])
			return wd_error(why, size, "bad endpoint '%s': inproc:// needs a name", q);
		return 0;
	}
	return wd_error(why, size, "bad endpoint '%s': expected ipc://PATH, tcp://HOST:PORT or inproc://NAME", q);
}

/*
 * Names of studies, alerts and proxy labels: they become file names
 * (drift/STUDY.h5), HDF5 strings and CLI arguments, so no '/', no leading
 * '.' or '-'.
 */
int config_check_name(const char *s, char *why, size_t size)
{
	size_t len = strlen(s);
	int ok = len >= 1 && len <= MAX_NAME && (is_alnum(s[0]) || s[0] == '_');

	for (size_t i = 1; ok && i < len; i++)
		ok = is_alnum(s[i]) || strchr("_.-", s[i]);
	if (ok)
		return 0;
	return wd_error(why, size, "bad name '%s': use 1 to %d of A-Z a-z 0-9 _ . -, starting with a letter, a digit or _",
			CLIP(s), MAX_NAME);
}

/*
 * Run names as docs/protocol.md has them: 1 to limits.max_name bytes of
 * [A-Za-z0-9_.:-]. "." and ".." would name directories, not runs.
 */
int config_check_run(const char *s, int64_t max, char *why, size_t size)
{
	size_t len = strlen(s);
	int ok = len >= 1 && (int64_t)len <= max;

	for (size_t i = 0; ok && i < len; i++)
		ok = is_alnum(s[i]) || strchr("_.:-", s[i]);
	if (!ok)
		return wd_error(why, size, "bad run name '%s': use 1 to %lld bytes (limits.max_name) of A-Z a-z 0-9 _ . : -",
				CLIP(s), (long long)max);
	if (!strcmp(s, ".") || !strcmp(s, ".."))
		return wd_error(why, size, "bad run name '%s': '.' and '..' are not run names", s);
	return 0;
}

/*
 * Parses text as field f into the struct at base, checking bounds. String
 * types keep the pointer: text must live as long as the struct. Returns 0,
 * or -1 with the reason in why. Not for T_RUN, T_RUNS and T_PROXIES, which
 * need the loader (see load_field).
 */
int config_value_parse(const struct field *f, const char *text, void *base,
		       char *why, size_t size)
{
	void *p = (char *)base + f->off;
	char a[32], b[32], c[32];

	switch (f->type) {
	case T_STRING:
		if (!*text)
			return wd_error(why, size, "must not be empty");
		if (f->max && strlen(text) > (size_t)f->max)
			return wd_error(why, size, "longer than %lld bytes", (long long)f->max);
		if (f->check && f->check(text, why, size))
			return -1;
		*(const char **)p = text;
		return 0;
	case T_ENDPOINT:
		if (wd_config_check_endpoint(text, why, size))
			return -1;
		*(const char **)p = text;
		return 0;
	case T_NAME:
		if (config_check_name(text, why, size))
			return -1;
		*(const char **)p = text;
		return 0;
	case T_SIZE: {
		uint64_t v = 0;
		int r = wd_parse_size(text, &v);
		if (r == -EINVAL)
			return wd_error(why, size, "bad size '%s': expected a whole number of bytes with an optional suffix K, M, G or T (powers of 1024), such as 1536M",
					CLIP(text));
		if (r || v > (uint64_t)f->max)
			return wd_error(why, size, "must be at most %s (got %s)",
					wd_format_size(a, sizeof(a), f->max), CLIP(text));
		if (v < (uint64_t)f->min)
			return wd_error(why, size, "must be at least %s (got %s)",
					wd_format_size(a, sizeof(a), f->min), wd_format_size(b, sizeof(b), v));
		*(uint64_t *)p = v;
		return 0;
	}
	case T_INT: {
		int64_t v = 0;
		int r = parse_int(text, &v);
		if (r == -EINVAL)	/* "30s", "1m", "0.5": the unit is said, not guessed at (a trial's) */
			return wd_error(why, size, "bad integer '%s'%s", CLIP(text), f->flags & F_SECONDS ?
					": a duration is whole seconds, with no unit (60, not 1m)" : f->flags & F_COUNT ?
					": it counts results in a row, one a step, not time (3, not 3s)" : "");
		if (r || v < f->min || v > f->max)
			return wd_error(why, size, "must be between %lld and %lld (got %s)",
					(long long)f->min, (long long)f->max, CLIP(text));
		*(int64_t *)p = v;
		return 0;
	}
	case T_DOUBLE: {
		double v = 0;
		int r = parse_double(text, &v);
		if (r == -EINVAL)
			return wd_error(why, size, "bad number '%s'", CLIP(text));
		if (r)
			return wd_error(why, size, "number '%s' is out of range", CLIP(text));
		if (v < f->dmin && f->dmax == DBL_MAX)	/* not "between 0 and 1.7976931348623157e+308" */
			return wd_error(why, size, "must be at least %s (got %s)", format_double(a, sizeof(a), f->dmin),
					format_double(c, sizeof(c), v));
		if (v < f->dmin || v > f->dmax)
			return wd_error(why, size, "must be between %s and %s (got %s)",
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
		return wd_error(why, size, "bad value '%s' (expected %s)", CLIP(text), list);
	}
	case T_BOOL:
		if (strcmp(text, "true") && strcmp(text, "false"))
			return wd_error(why, size, "bad value '%s' (expected true or false)", CLIP(text));
		*(bool *)p = !strcmp(text, "true");
		return 0;
	case T_RUN:
	case T_RUNS:
	case T_PROXIES:
	case T_CLIENTS:
		break;
	}
	assert(!"value_parse on a type load_field handles");
	return wd_error(why, size, "internal error");
}

/*
 * The value of field f at base as the file would write it, in buf or a
 * string of the config; NULL when the field is unset (an optional string,
 * an enum out of its table such as WD_SYNTHETIC_NONE). Not for lists.
 */
const char *config_value_text(const struct field *f, const void *base, char *buf, size_t size)
{
	const void *p = (const char *)base + f->off;

	switch (f->type) {
	case T_STRING:
	case T_ENDPOINT:
	case T_NAME:
	case T_RUN:
		return *(const char *const *)p;
	case T_SIZE:
		return wd_format_size(buf, size, *(const uint64_t *)p);
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

void config_set_default(const struct field *f, void *base)
{
	char why[256];
	int r;

	if (!f->def)
		return;
	r = config_value_parse(f, f->def, base, why, sizeof(why));
	assert(r == 0 && "a default in the table is out of its own bounds");
	(void)r;
}

void wd_config_defaults(struct wd_config *c)
{
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < N_CFG; i++)
		config_set_default(&cfg_fields[i], c);
	c->source = "(built-in)";
}

void wd_config_release(struct wd_config *c)
{
	wd_arena_free(c->arena);
	wd_config_defaults(c);
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

_Static_assert(N_CFG <= WD_CONFIG_FIELDS, "struct wd_config's at[] holds every field");

int wd_config_reload_check(const struct wd_config *cur, const struct wd_config *next,
			   char *err, size_t errlen)
{
	for (size_t i = 0; i < N_CFG; i++) {
		const struct field *f = &cfg_fields[i];
		char a[64], b[64];
		const char *x, *y;

		if (!(f->flags & F_RESTART))
			continue;
		x = config_value_text(f, cur, a, sizeof(a));
		y = config_value_text(f, next, b, sizeof(b));
		x = x ? x : "(unset)";
		y = y ? y : "(unset)";
		char where[32] = "";	/* FILE:LINE:COL, as every other error of the file (a trial) */
		if (next->at[i].line)
			snprintf(where, sizeof(where), ":%d:%d", next->at[i].line, next->at[i].col);
		if (strcmp(x, y))
			return wd_error(err, errlen,
					"%s%s: %s: cannot change on reload (from '%s' to '%s'): restart wdriftd to "
					"apply it", next->source, where, f->name, CLIP(x), CLIP(y));
	}
	return 0;
}

