/*
 * test_config.c: the configuration loader. The shipped config/wdrift.yaml is
 * the built-in default, byte for byte and value for value; a full config
 * loads to the right struct and prints back to itself; every malformed
 * input is refused with FILE:LINE:COL: KEY: REASON; a failed load leaves
 * the previous config untouched; no input crashes it. Run from the
 * repository root (tests/run.sh does).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_find.h"
#include "harness.h"

#define GIB(n) ((uint64_t)(n) << 30)
#define MIB(n) ((uint64_t)(n) << 20)

/* Equal when they print the same: the printer writes every key. */
static int same(const struct wd_config *a, const struct wd_config *b)
{
	char *x = wd_config_print_string(a), *y = wd_config_print_string(b);
	int eq = x && y && !strcmp(x, y);

	free(x);
	free(y);
	return eq;
}

/* The same scalar keys: the printed configs agree up to their studies. */
static int same_keys(const struct wd_config *a, const struct wd_config *b)
{
	char *x = wd_config_print_string(a), *y = wd_config_print_string(b);
	char *xs = x ? strstr(x, "\nstudies:") : NULL, *ys = y ? strstr(y, "\nstudies:") : NULL;
	int eq = xs && ys && xs - x == ys - y && !strncmp(x, y, (size_t)(xs - x));

	free(x);
	free(y);
	return eq;
}

/* The shipped file's one study and alert: the ones `make demo` trains for. */
static int is_demo(const struct wd_config *c)
{
	const struct wd_config_study *s = c->n_studies == 1 ? &c->studies[0] : NULL;
	const struct wd_config_alert *a = c->n_alerts == 1 ? &c->alerts[0] : NULL;
	return s && a && !strcmp(s->name, "demo") && !strcmp(s->baseline, "base") &&
	       s->candidates.n == 1 && !strcmp(s->candidates.names[0], "fa") && s->proxies.n == 2 &&
	       !strcmp(s->proxies.v[0].label, "lowprec") && !strcmp(s->proxies.v[0].run, "lowprec") &&
	       !strcmp(s->proxies.v[1].label, "seed") && !strcmp(s->proxies.v[1].run, "seed2") &&
	       !strcmp(a->study, "demo") && a->metric == WD_METRIC_RATIO && !strcmp(a->proxy, "lowprec") &&
	       a->threshold == 1.0;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc(n + 1)) && fread(buf, 1, n, f) == (size_t)n) {
		buf[n] = 0;
		*len = n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static void test_defaults(void)
{
	struct wd_config d, c;
	char err[WD_CONFIG_ERR_MAX];
	static const char *const empty[] = { "", "\n", "# only a comment\n", "---\n", "~\n",
					     "---\n...\n", "listen:\nmemory: ~\nstudies:\nalerts: []\n" };

	wd_config_defaults(&d);
	CHECK(!strcmp(d.listen.ingest, "ipc://./run/ingest.sock") &&
	      !strcmp(d.listen.control, "ipc://./run/control.sock") &&
	      !strcmp(d.listen.events, "ipc://./run/events.sock"), "default endpoints under ./run/");
	CHECK(!d.listen.metrics && !d.metrics.per_tensor, "default: no /metrics endpoint, no per-tensor series");
	char host[64];
	int port = 0;
	CHECK(wd_config_hostport("[::1]:9464", host, sizeof(host), &port, err, sizeof(err)) == 0 &&
	      !strcmp(host, "::1") && port == 9464 &&
	      wd_config_hostport("localhost:65535", host, sizeof(host), &port, err, sizeof(err)) == 0 &&
	      !strcmp(host, "127.0.0.1") && port == 65535,
	      "listen.metrics: [::1]:9464 and localhost:65535 split into an address and a port");
	CHECK(!strcmp(d.storage.dir, "./var"), "default storage.dir ./var");
	CHECK(d.compute.backend == WD_BACKEND_AUTO, "default compute.backend auto");
	CHECK(d.compute.device == 0, "default compute.device 0");
	CHECK(d.memory.budget == GIB(4), "default memory.budget 4G = 4 * 2^30");
	CHECK(d.spool.retention.every == 1 && d.spool.retention.disk_budget == GIB(100),
	      "default retention: every 1, disk_budget 100G");
	CHECK(d.alignment.tolerance == 0, "default alignment.tolerance 0");
	CHECK(d.limits.max_message == GIB(1) && d.limits.max_name == 512 && d.limits.max_dims == 16 &&
	      d.limits.max_tensors == 100000 && d.limits.max_runs == 256 && d.limits.max_pending == 8,
	      "default limits");
	CHECK(d.log.level == WD_LOG_NOTICE, "default log.level notice");
	CHECK(d.n_studies == 0 && d.n_alerts == 0 && !d.arena, "no studies, no alerts, nothing owned");

	CHECK(wd_config_load_string("(default)", wd_config_default_yaml, &c, err, sizeof(err)) == 0,
	      "the embedded default loads: %s", err);
	CHECK(same_keys(&c, &d), "and every key in it is wd_config_defaults()'s");
	CHECK(is_demo(&c), "with the demo's study (base; fa; lowprec, seed2) and its ratio alert");
	CHECK(c.memory.budget == GIB(4) && !strcmp(c.source, "(default)"), "and says where it came from");
	wd_config_release(&c);
	CHECK(same(&c, &d) && !c.arena, "release leaves the defaults");

	for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
		int r = wd_config_load_string("e.yaml", empty[i], &c, err, sizeof(err));
		CHECK(r == 0 && same(&c, &d), "empty input #%zu gives the defaults %s", i, err);
		if (r == 0)
			wd_config_release(&c);
	}
}

static void test_shipped_file(void)
{
	struct wd_config d, c;
	char err[WD_CONFIG_ERR_MAX];
	size_t len = 0, line = 1, i;
	char *file = read_file("config/wdrift.yaml", &len);

	CHECK(file != NULL, "config/wdrift.yaml is readable from the repository root");
	if (!file)
		return;
	for (i = 0; i < len && file[i] == wd_config_default_yaml[i]; i++)
		line += file[i] == '\n';
	CHECK(i == len && len == strlen(wd_config_default_yaml),
	      "config/wdrift.yaml equals wd_config_default_yaml byte for byte (first difference: line %zu; "
	      "rebuild: the Makefile generates it from the file)", line);
	free(file);

	wd_config_defaults(&d);
	CHECK(wd_config_load("config/wdrift.yaml", &c, err, sizeof(err)) == 0,
	      "config/wdrift.yaml loads: %s", err);
	CHECK(same_keys(&c, &d) && is_demo(&c), "and every key in it is the built-in default; "
	      "its one study is the demo's");
	wd_config_release(&c);
}

static const char full_yaml[] =
	"listen:\n"
	"  ingest: tcp://*:5555\n"
	"  control: ipc:///run/wdrift/control.sock\n"
	"  events: inproc://events\n"
	"auth:\n"
	"  server_key: /etc/wdrift/server.key\n"
	"  clients:\n"
	"    trainer-a: \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n"
	"    ci.1: \"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID\"\n"
	"storage:\n"
	"  dir: /var/lib/wdrift\n"
	"compute:\n"
	"  backend: cuda\n"
	"  device: 3\n"
	"memory:\n"
	"  budget: 64G\n"
	"spool:\n"
	"  retention:\n"
	"    every: 10\n"
	"    disk_budget: 2T\n"
	"alignment:\n"
	"  tolerance: 5\n"
	"limits:\n"
	"  max_message: 2G\n"
	"  max_name: 1024\n"
	"  max_dims: 8\n"
	"  max_tensors: 5000\n"
	"  max_runs: 32\n"
	"  max_pending: 4\n"
	"log:\n"
	"  level: debug\n"
	"studies:\n"
	"  - name: llama-fa\n"
	"    baseline: llama-base\n"
	"    candidates: [llama-fa, llama-fa2]\n"
	"    proxies:\n"
	"      fp16: llama-fp16\n"
	"      seed: llama-seed2\n"
	"    synthetic_proxy: round:bf16\n"
	"  - name: gpt.small_1\n"
	"    baseline: \"gpt-base\"\n"
	"    candidates:\n"
	"      - gpt-fused\n"
	"alerts:\n"
	"  - name: fa-vs-fp16\n"
	"    study: llama-fa\n"
	"    metric: ratio\n"
	"    proxy: fp16\n"
	"    threshold: 0.5\n"
	"    for: 3\n"
	"    severity: critical\n"
	"    command: \"/usr/local/bin/page --team 'ml infra' # not a comment\"\n"
	"    command_min_interval: 300\n"
	"  - name: fa-round\n"
	"    study: llama-fa\n"
	"    metric: ratio\n"
	"    proxy: round:bf16\n"
	"    scope: median\n"
	"    threshold: 1\n"
	"  - name: attn\n"
	"    study: gpt.small_1\n"
	"    metric: w1\n"
	"    scope: tensors\n"
	"    tensors: \"layers.*.attention.*\"\n"
	"    threshold: 1e-3\n"
	"  - name: nan\n"
	"    study: gpt.small_1\n"
	"    metric: nonfinite\n"
	"    threshold: 0\n"
	"    severity: info\n"
	"  - name: stuck\n"
	"    study: llama-fa\n"
	"    metric: stalled\n"
	"    threshold: 600\n";

static void test_full(void)
{
	struct wd_config c, back;
	char err[WD_CONFIG_ERR_MAX];
	char *printed;

	if (wd_config_load_string("full.yaml", full_yaml, &c, err, sizeof(err))) {
		CHECK(0, "the full config loads: %s", err);
		return;
	}
	CHECK(1, "the full config loads");
	CHECK(!strcmp(c.listen.ingest, "tcp://*:5555") &&
	      !strcmp(c.listen.control, "ipc:///run/wdrift/control.sock") &&
	      !strcmp(c.listen.events, "inproc://events"), "endpoints: tcp, ipc, inproc");
	CHECK(!strcmp(c.auth.server_key, "/etc/wdrift/server.key") && c.auth.clients.n == 2 &&
	      !strcmp(c.auth.clients.v[0].name, "trainer-a") &&
	      !strcmp(c.auth.clients.v[0].key, "rq:rM>}U\?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7") &&
	      !strcmp(c.auth.clients.v[1].name, "ci.1") && !c.auth.allow_insecure,
	      "auth: server_key, two clients in file order");
	CHECK(!strcmp(c.storage.dir, "/var/lib/wdrift") && c.compute.backend == WD_BACKEND_CUDA &&
	      c.compute.device == 3, "storage.dir, compute.backend, compute.device");
	CHECK(c.memory.budget == GIB(64) && c.spool.retention.every == 10 &&
	      c.spool.retention.disk_budget == GIB(2048) && c.alignment.tolerance == 5,
	      "memory, spool, alignment");
	CHECK(c.limits.max_message == GIB(2) && c.limits.max_name == 1024 && c.limits.max_dims == 8 &&
	      c.limits.max_tensors == 5000 && c.limits.max_runs == 32 && c.limits.max_pending == 4 &&
	      c.log.level == WD_LOG_DEBUG, "limits, log.level");

	CHECK(c.n_studies == 2, "two studies (%zu)", c.n_studies);
	if (c.n_studies == 2) {
		const struct wd_config_study *s = &c.studies[0], *t = &c.studies[1];
		CHECK(!strcmp(s->name, "llama-fa") && !strcmp(s->baseline, "llama-base") &&
		      s->candidates.n == 2 && !strcmp(s->candidates.names[0], "llama-fa") &&
		      !strcmp(s->candidates.names[1], "llama-fa2"), "study 0: name, baseline, candidates");
		CHECK(s->proxies.n == 2 && !strcmp(s->proxies.v[0].label, "fp16") &&
		      !strcmp(s->proxies.v[0].run, "llama-fp16") && !strcmp(s->proxies.v[1].label, "seed") &&
		      !strcmp(s->proxies.v[1].run, "llama-seed2") &&
		      s->synthetic_proxy == WD_SYNTHETIC_BF16, "study 0: proxies in file order, round:bf16");
		CHECK(!strcmp(t->name, "gpt.small_1") && !strcmp(t->baseline, "gpt-base") &&
		      t->candidates.n == 1 && !strcmp(t->candidates.names[0], "gpt-fused") &&
		      t->proxies.n == 0 && t->synthetic_proxy == WD_SYNTHETIC_NONE,
		      "study 1: a quoted baseline, a block list, no proxies");
	}
	CHECK(c.n_alerts == 5, "five alerts (%zu)", c.n_alerts);
	if (c.n_alerts == 5) {
		const struct wd_config_alert *a = c.alerts;
		CHECK(!strcmp(a[0].name, "fa-vs-fp16") && a[0].study_index == 0 &&
		      a[0].metric == WD_METRIC_RATIO && !strcmp(a[0].proxy, "fp16") &&
		      a[0].scope == WD_SCOPE_MAX && a[0].threshold == 0.5 && a[0].for_count == 3 &&
		      a[0].severity == WD_SEVERITY_CRITICAL &&
		      !strcmp(a[0].command, "/usr/local/bin/page --team 'ml infra' # not a comment") &&
		      a[0].command_min_interval == 300, "alert 0: every key set");
		CHECK(!strcmp(a[1].proxy, "round:bf16") && a[1].scope == WD_SCOPE_MEDIAN &&
		      a[1].threshold == 1 && a[1].for_count == 1 && a[1].severity == WD_SEVERITY_WARNING &&
		      !a[1].command && a[1].command_min_interval == 60,
		      "alert 1: the synthetic proxy; defaults for for, severity, command_min_interval");
		CHECK(a[2].study_index == 1 && a[2].metric == WD_METRIC_W1 &&
		      a[2].scope == WD_SCOPE_TENSORS && !strcmp(a[2].tensors, "layers.*.attention.*") &&
		      a[2].threshold == 1e-3 && !a[2].proxy, "alert 2: scope tensors with a glob");
		CHECK(a[3].metric == WD_METRIC_NONFINITE && a[3].threshold == 0 &&
		      a[3].severity == WD_SEVERITY_INFO, "alert 3: nonfinite, threshold 0");
		CHECK(a[4].metric == WD_METRIC_STALLED && a[4].threshold == 600 && a[4].study_index == 0,
		      "alert 4: stalled, seconds");
		CHECK(!strcmp(wd_config_metric_name(a[0].metric), "ratio") &&
		      !strcmp(wd_config_scope_name(a[2].scope), "tensors") &&
		      !strcmp(wd_config_severity_name(a[0].severity), "critical") &&
		      !strcmp(wd_config_metric_name(99), "?"), "enum names as in the file");
	}

	printed = wd_config_print_string(&c);
	CHECK(printed && wd_config_load_string("printed", printed, &back, err, sizeof(err)) == 0,
	      "the printed config loads back: %s", err);
	if (printed && !err[0]) {
		CHECK(same(&c, &back), "and prints the same");
		CHECK(back.n_alerts == 5 && !strcmp(back.alerts[0].command, c.alerts[0].command) &&
		      back.alerts[2].threshold == 1e-3, "quoting and numbers survive the round trip");
		wd_config_release(&back);
	}
	CHECK(printed && strstr(printed, "  # bytes held for snapshots in flight (default 4G)\n  budget: 64G\n"),
	      "each key printed under a comment that says what it is and its default");
	free(printed);
	wd_config_release(&c);
}

/* Loads "memory:\n  budget: TEXT" and checks the value or the error. */
static void size_case(const char *text, uint64_t want, const char *why)
{
	struct wd_config c;
	char yaml[128], err[WD_CONFIG_ERR_MAX];
	int r;

	snprintf(yaml, sizeof(yaml), "memory:\n  budget: %s\nlimits:\n  max_message: 4K\n", text);
	r = wd_config_load_string("s.yaml", yaml, &c, err, sizeof(err));
	if (!why) {
		CHECK(r == 0 && c.memory.budget == want, "size '%s' = %llu %s", text,
		      (unsigned long long)want, err);
	} else {
		CHECK(r == -1 && !strncmp(err, "s.yaml:2:11: memory.budget: ", 28) && strstr(err, why),
		      "size '%s' refused: %s", text, err);
	}
	if (r == 0)
		wd_config_release(&c);
}

static void test_sizes(void)
{
	size_case("4G", GIB(4), NULL);
	size_case("512M", MIB(512), NULL);
	size_case("64M", MIB(64), NULL);
	size_case("65536K", MIB(64), NULL);
	size_case("4096M", GIB(4), NULL);
	size_case("4g", GIB(4), NULL);
	size_case("1T", GIB(1024), NULL);
	size_case("64T", GIB(65536), NULL);
	size_case("68719476736", GIB(64), NULL);
	size_case("\"8G\"", GIB(8), NULL);
	size_case("1.5G", 0, "bad size '1.5G'");
	size_case("63M", 0, "must be at least 64M (got 63M)");
	size_case("1000", 0, "must be at least 64M (got 1000)");
	size_case("65T", 0, "must be at most 64T");
	size_case("4GB", 0, "bad size '4GB'");
	size_case("4KiB", 0, "bad size '4KiB'");
	size_case("4 G", 0, "bad size '4 G'");
	size_case("-1G", 0, "bad size '-1G'");
	size_case("G", 0, "bad size 'G'");
	size_case("0x10M", 0, "bad size '0x10M'");
	size_case("99999999999999999999", 0, "must be at most 64T");
	size_case("18014398509481984K", 0, "must be at most 64T");	/* 2^54 K overflows */
	size_case("\"\"", 0, "bad size ''");
}

struct bound {
	const char *section, *key;
	long long min, max;
};

static void test_bounds(void)
{
	static const struct bound b[] = {
		{ "spool:\n  retention:\n    ", "every", 1, 1000000 },
		{ "alignment:\n  ", "tolerance", 0, 1000000 },
		{ "limits:\n  ", "max_name", 16, 65536 },
		{ "limits:\n  ", "max_dims", 1, 32 },
		{ "limits:\n  ", "max_tensors", 1, 10000000 },
		{ "limits:\n  ", "max_runs", 1, 65536 },
		{ "limits:\n  ", "max_pending", 1, 1024 },
	};

	for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++) {
		long long v[4] = { b[i].min, b[i].max, b[i].min - 1, b[i].max + 1 };
		for (int j = 0; j < 4; j++) {
			struct wd_config c;
			char yaml[128], err[WD_CONFIG_ERR_MAX], want[64];
			int r;
			snprintf(yaml, sizeof(yaml), "%s%s: %lld\n", b[i].section, b[i].key, v[j]);
			snprintf(want, sizeof(want), "must be between %lld and %lld (got %lld)",
				 b[i].min, b[i].max, v[j]);
			r = wd_config_load_string("b.yaml", yaml, &c, err, sizeof(err));
			if (j < 2)
				CHECK(r == 0, "%s = %lld accepted %s", b[i].key, v[j], err);
			else
				CHECK(r == -1 && strstr(err, want) && strstr(err, b[i].key),
				      "%s = %lld refused: %s", b[i].key, v[j], err);
			if (r == 0)
				wd_config_release(&c);
		}
	}
}

struct bad {
	const char *yaml;
	const char *where;	/* "LINE:COL: KEY: " after "t.yaml:" */
	const char *why;	/* a substring of the reason */
};

/* A study to hang alerts on. */
#define STUDY "studies:\n  - name: s\n    baseline: b\n    candidates: [c]\n" \
	      "    proxies:\n      fp16: p\n    synthetic_proxy: round:bf16\n"

static const struct bad bad[] = {
	/* unknown keys, with and without a near miss */
	{ "memory:\n  budjet: 4G\n", "2:3: memory.budjet: ",
	  "unknown key 'memory.budjet' (did you mean 'memory.budget'?)" },
	{ "memroy:\n  budget: 4G\n", "1:1: memroy: ", "unknown key 'memroy' (did you mean 'memory'?)" },
	{ "studeis: []\n", "1:1: studeis: ", "(did you mean 'studies'?)" },
	{ "limits:\n  budget: 4G\n", "2:3: limits.budget: ", "(did you mean 'memory.budget'?)" },
	{ "log:\n  level: info\n  colour: true\n", "3:3: log.colour: ", "unknown key 'log.colour'" },
	{ "memory.budget: 4G\n", "1:1: memory.budget: ", "keys nest: write 'budget' under 'memory'" },
	{ "<<: {}\n", "1:1: <<: ", "merge keys ('<<') are not supported" },
	/* wrong types */
	{ "memory: 4G\n", "1:9: memory: ", "expected a mapping (of budget), not a scalar" },
	{ "spool:\n  retention: 1\n", "2:14: spool.retention: ",
	  "expected a mapping (of every, disk_budget), not a scalar" },
	{ "memory:\n  budget: [4G]\n", "2:11: memory.budget: ", "expected a size such as 4G, not a list" },
	{ "log:\n  level: {a: 1}\n", "2:10: log.level: ", "expected a scalar, not a mapping" },
	{ "studies: {a: b}\n", "1:10: studies: ", "expected a list of studies, not a mapping" },
	{ "alerts: x\n", "1:9: alerts: ", "expected a list of alerts, not a scalar" },
	{ "studies:\n  - x\n", "2:5: studies[0]: ", "expected a mapping (one study), not a scalar" },
	{ "? [a]\n: b\n", "1:3: ", "a key must be a scalar, not a list" },
	{ "hello\n", "1:1: ", "expected a mapping of keys at the top, not a scalar" },
	{ "- a\n- b\n", "1:1: ", "expected a mapping of keys at the top, not a list" },
	/* bad values */
	{ "memory:\n  budget:\n", "2:10: memory.budget: ", "has no value (leave the key out for the default, 4G)" },
	{ "memory:\n  budget: 4X\n", "2:11: memory.budget: ", "bad size '4X'" },
	{ "compute:\n  backend: gpu\n", "2:12: compute.backend: ", "bad value 'gpu' (expected auto, cpu or cuda)" },
	{ "compute:\n  device: -1\n", "2:11: compute.device: ", "must be between 0 and 1023 (got -1)" },
	{ "compute:\n  device: gpu1\n", "2:11: compute.device: ", "bad integer 'gpu1'" },
	{ "compute:\n  device: 1.5\n", "2:11: compute.device: ", "bad integer '1.5'" },
	{ "compute:\n  device: 1024\n", "2:11: compute.device: ", "must be between 0 and 1023 (got 1024)" },
	{ "compute:\n  device:\n", "2:10: compute.device: ", "has no value (leave the key out for the default, 0)" },
	{ "log:\n  level: warn\n", "2:10: log.level: ",
	  "bad value 'warn' (expected err, warning, notice, info or debug)" },
	{ "listen:\n  ingest: http://x:80\n", "2:11: listen.ingest: ",
	  "expected ipc://PATH, tcp://HOST:PORT or inproc://NAME" },
	{ "listen:\n  ingest: tcp://host\n", "2:11: listen.ingest: ", "tcp:// needs HOST:PORT" },
	{ "listen:\n  control: tcp://*:70000\n", "2:12: listen.control: ", "the port must be 1 to 65535, or *" },
	{ "listen:\n  events: \"ipc:///tmp/a b\"\n", "2:11: listen.events: ", "contains a space" },
	{ "listen:\n  events: ipc://\n", "2:11: listen.events: ", "ipc:// needs a path" },
	{ "listen:\n  events: ipc://./run/events.sock/\n", "2:11: listen.events: ",
	  "ends in '/', but an ipc:// path names the socket file itself" },
	{ "listen:\n  events: tcp://127.0.0.1:5555/\n", "2:11: listen.events: ",
	  "ends in '/', but a tcp:// endpoint ends at its port" },
	{ "listen:\n  events: ipc:///aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	  "2:11: listen.events: ", "longer than 107 bytes" },
	{ "listen:\n  ingest: tcp://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:1\n",
	  "2:11: listen.ingest: ", "longer than 256 bytes" },
	{ "storage:\n  dir: \"\"\n", "2:8: storage.dir: ", "must not be empty" },
	/* listen.metrics: HOST:PORT (docs/metrics.md) */
	{ "listen:\n  metrics: 127.0.0.1:0\n", "2:12: listen.metrics: ", "the port must be 1 to 65535" },
	{ "listen:\n  metrics: 127.0.0.1:70000\n", "2:12: listen.metrics: ", "the port must be 1 to 65535" },
	{ "listen:\n  metrics: \":9464\"\n", "2:12: listen.metrics: ", "expected HOST:PORT" },
	{ "listen:\n  metrics: 9464\n", "2:12: listen.metrics: ", "expected HOST:PORT" },
	{ "listen:\n  metrics: prom.example.com:9464\n", "2:12: listen.metrics: ",
	  "the host must be an IPv4 address, [IPv6] or localhost" },
	{ "listen:\n  metrics: \"[::g]:9464\"\n", "2:12: listen.metrics: ", "'::g' is not an IPv6 address" },
	{ "metrics:\n  per_tensor: yes\n", "2:15: metrics.per_tensor: ", "expected true or false" },
	/* auth, and endpoints open to the network */
	{ "listen:\n  ingest: tcp://*:5555\n", "2:11: listen.ingest: ",
	  "'tcp://*:5555' takes connections from the network, and nothing authenticates them: "
	  "set auth.server_key and auth.clients (docs/security.md), or auth.allow_insecure: true" },
	{ "listen:\n  events: tcp://10.0.0.7:7002\n", "2:11: listen.events: ", "from the network" },
	{ "listen:\n  control: tcp://127.0.0.1.evil.com:7001\n", "2:12: listen.control: ", "from the network" },
	{ "listen:\n  control: tcp://eth0:7001\n", "2:12: listen.control: ", "from the network" },
	{ "auth:\n  clients:\n    a: \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n", "3:5: auth.clients: ",
	  "needs auth.server_key: without the daemon's key pair nothing is authenticated" },
	{ "auth:\n  server_key: k\n  clients:\n    a: short\n", "4:8: auth.clients.a: ",
	  "bad public key: expected 40 characters of Z85, as wdrift keygen prints (got 5 characters)" },
	{ "auth:\n  server_key: k\n  clients:\n    a: \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf \"\n", "4:8: auth.clients.a: ",
	  "bad public key: character 40 (' ') is not Z85" },
	/* the z85: prefix, as --server-key takes a key: the key after it (a trial's was refused) */
	{ "auth:\n  server_key: k\n  clients:\n    a: \"z85:rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n    b: \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n", "5:8: auth.clients.b: ",
	  "the same key as client 'a'" },
	{ "auth:\n  server_key: k\n  clients:\n    a: /etc/passwd\n", "4:8: auth.clients.a: ",
	  "bad public key: '/etc/passwd' is a file: auth.clients takes the key itself" },
	{ "auth:\n  server_key: k\n  clients:\n    a: \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n    b: \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n", "5:8: auth.clients.b: ",
	  "the same key as client 'a'" },
	{ "auth:\n  server_key: k\n  clients:\n    a: \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n    a: \"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID\"\n", "5:5: auth.clients.a: ",
	  "duplicate key 'a' (first at line 4)" },
	{ "auth:\n  server_key: k\n  clients:\n    \"a b\": \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n", "4:5: auth.clients.a b: ",
	  "bad name 'a b'" },
	{ "auth:\n  server_key: k\n  clients: [\"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"]\n", "3:12: auth.clients: ",
	  "expected a mapping of client names to public keys, not a list" },
	{ "auth:\n  server_key: k\n  clients:\n    a: [x]\n", "4:8: auth.clients.a: ",
	  "expected a public key (40 characters of Z85, from wdrift keygen), not a list" },
	{ "auth:\n  allow_insecure: yes\n", "2:19: auth.allow_insecure: ", "bad value 'yes' (expected true or false)" },
	{ "auth:\n  server_key:\n", "2:14: auth.server_key: ", "has no value" },
	{ "storage:\n  dir: \"a\\0b\"\n", "2:8: storage.dir: ", "contains a NUL character" },
	{ "limits:\n  max_dims: 33\n", "2:13: limits.max_dims: ", "must be between 1 and 32 (got 33)" },
	{ "limits:\n  max_name: 12abc\n", "2:13: limits.max_name: ", "bad integer '12abc'" },
	{ "limits:\n  pending_timeout: 10m\n", "2:20: limits.pending_timeout: ",
	  "bad integer '10m': a duration is whole seconds, with no unit (60, not 1m)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: 1\n    command: c\n"
	  "    command_min_interval: 0.5\n", "14:27: alerts[0].command_min_interval: ",
	  "bad integer '0.5': a duration is whole seconds" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: 1\n    command_timeout: 5\n",
	  "13:5: alerts[0].command_timeout: ", "key 'command_timeout' applies only with a command" },
	{ "limits:\n  max_runs: 99999999999999999999999\n", "2:13: limits.max_runs: ",
	  "must be between 1 and 65536 (got 99999999999999999999999)" },
	/* keys in conflict */
	{ "log:\n  level: notice\n  level: debug\n", "3:3: log.level: ", "duplicate key 'level' (first at line 2)" },
	{ "listen:\n  events: ipc://./run/ingest.sock\n", "2:11: listen.events: ",
	  "same endpoint as listen.ingest ('ipc://./run/ingest.sock')" },
	{ "listen:\n  control: inproc://x\n  ingest: inproc://x\n", "3:11: listen.ingest: ",
	  "same endpoint as listen.control" },
	{ "limits:\n  max_message: 8G\n", "2:16: limits.max_message: ",
	  "8G is more than memory.budget (4G, its default): limits.max_message must be at most "
	  "memory.budget" },
	{ "memory:\n  budget: 512M\n", "2:11: memory.budget: ",
	  "512M is less than limits.max_message (1G, its default): memory.budget must be at least "
	  "limits.max_message; set limits.max_message: 512M" },
	{ "limits:\n  max_message: 2G\nmemory:\n  budget: 512M\n", "4:11: memory.budget: ",
	  "512M is less than limits.max_message (2G): memory.budget must be at least limits.max_message" },
	/* studies */
	{ "studies:\n  - name: a\n    baseline: b\n", "2:5: studies[0]: ", "missing required key 'candidates'" },
	{ "studies:\n  - name: a\n    candidates: [c]\n", "2:5: studies[0]: ", "missing required key 'baseline'" },
	{ "studies:\n  - name: .hidden\n    baseline: b\n    candidates: [c]\n", "2:11: studies[0].name: ",
	  "bad name '.hidden'" },
	{ "studies:\n  - name: a\n    baselin: b\n", "3:5: studies[0].baselin: ",
	  "unknown key 'baselin' (did you mean 'baseline'?)" },
	{ STUDY "  - name: s\n    baseline: b\n    candidates: [d]\n", "8:11: studies[1].name: ",
	  "duplicate study name 's'" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c, b]\n", "4:21: studies[0].candidates[1]: ",
	  "run 'b' is both the baseline and a candidate" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c, d, c]\n", "4:24: studies[0].candidates[2]: ",
	  "run 'c' is listed twice (first at line 4)" },
	/* a tab in the indentation: libyaml's words alone do not say it (a trial) */
	{ "studies:\n  - name: a\n\tbaseline: b\n", "3:1: ", "(line 3 is indented with a tab: YAML indents with "
	  "spaces only)" },
	{ "log:\n\tlevel: info\n", "2:1: ", "syntax error: found character that cannot start any token (line 2 is "
	  "indented with a tab: YAML indents with spaces only)" },
	/* a CURVE key unquoted that starts with YAML syntax: said to quote it (a trial saw libyaml's words alone) */
	{ "auth:\n  server_key: k\n  clients:\n    a: *rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n", "4:11: ",
	  "(while scanning an alias at line 4 column 8); a value that starts with ! & * @ ` % | > [ { is read as YAML "
	  "syntax: quote it (a CURVE key: name: \"KEY\")" },
	{ "auth:\n  server_key: k\n  clients:\n    a: @rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n", "4:8: ",
	  "cannot start any token (while scanning for the next token at line 4 column 8); a value that starts with" },
	/* from a trial: accepted, and a second label for one run adds nothing but a second ratio */
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c]\n    proxies:\n      fp16: p\n"
	  "      seed: p\n", "7:13: studies[0].proxies.seed: ", "run 'p' is already proxy 'fp16' (line 6)" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: c\n", "4:17: studies[0].candidates: ",
	  "not a scalar (write [c] for one run)" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: []\n", "4:17: studies[0].candidates: ",
	  "must name at least one run" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c, [d]]\n", "4:21: studies[0].candidates[1]: ",
	  "expected a run name, not a list" },
	{ "studies:\n  - name: a\n    baseline: runs/b\n    candidates: [c]\n", "3:15: studies[0].baseline: ",
	  "bad run name 'runs/b': use 1 to 512 bytes (limits.max_name) of A-Z a-z 0-9 _ . : -" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c, ..]\n", "4:21: studies[0].candidates[1]: ",
	  "bad run name '..': '.' and '..' are not run names" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c]\n    proxies: {seed: '12345678901234567'}\n"
	  "limits:\n  max_name: 16\n", "5:21: studies[0].proxies.seed: ",
	  "bad run name '12345678901234567': use 1 to 16 bytes (limits.max_name)" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c]\n    proxies:\n      fp 16: x\n",
	  "6:7: studies[0].proxies.fp 16: ", "bad name 'fp 16'" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c]\n    proxies:\n      fp16: b\n",
	  "6:13: studies[0].proxies.fp16: ", "proxy run 'b' is the study's baseline" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c]\n    proxies: [x]\n",
	  "5:14: studies[0].proxies: ", "expected a mapping of proxy labels to run names, not a list" },
	{ "studies:\n  - name: a\n    baseline: b\n    candidates: [c]\n    synthetic_proxy: round:fp8\n",
	  "5:22: studies[0].synthetic_proxy: ", "bad value 'round:fp8' (expected round:bf16 or round:fp16)" },
	/* alerts */
	{ STUDY "alerts:\n  - name: x\n    study: sx\n    metric: w1\n    threshold: 1\n",
	  "10:12: alerts[0].study: ", "unknown study 'sx' (did you mean 's'?)" },
	{ "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: 1\n",
	  "3:12: alerts[0].study: ", "unknown study 's'" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: ratio\n    threshold: 1\n",
	  "9:5: alerts[0]: ", "missing required key 'proxy' (metric ratio divides by a proxy's W1)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: ratio\n    proxy: fp8\n    threshold: 1\n",
	  "12:12: alerts[0].proxy: ", "study 's' has no proxy 'fp8' (it has: fp16, round:bf16)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: ratio\n    proxy: round:fp16\n    threshold: 1\n",
	  "12:12: alerts[0].proxy: ", "has no proxy 'round:fp16' (did you mean 'round:bf16'? it has: fp16, "
	  "round:bf16)" },
	/* a proxy's typo gets a suggestion, as a study's does (a trial's 'sede' got none) */
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: ratio\n    proxy: fp61\n    threshold: 1\n",
	  "12:12: alerts[0].proxy: ", "study 's' has no proxy 'fp61' (did you mean 'fp16'? it has: fp16, round:bf16)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    proxy: fp16\n    threshold: 1\n",
	  "12:5: alerts[0].proxy: ", "key 'proxy' applies only to metric ratio" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: stalled\n    scope: max\n    threshold: 60\n",
	  "12:5: alerts[0].scope: ", "key 'scope' does not apply to metric stalled" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: stalled\n    threshold: 0\n",
	  "12:16: alerts[0].threshold: ", "must be more than 0 seconds for metric stalled" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    scope: tensors\n    threshold: 1\n",
	  "9:5: alerts[0]: ", "missing required key 'tensors' (scope tensors needs a glob)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    tensors: '*'\n    threshold: 1\n",
	  "12:5: alerts[0].tensors: ", "key 'tensors' applies only with scope: tensors" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: 1\n    command_min_interval: 5\n",
	  "13:5: alerts[0].command_min_interval: ", "key 'command_min_interval' applies only with a command" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: -1\n",
	  "12:16: alerts[0].threshold: ", "must be at least 0 (got -1)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: 1\n    for: 3s\n",
	  "13:10: alerts[0].for: ", "bad integer '3s': it counts results in a row, one a step, not time (3, not 3s)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: .inf\n",
	  "12:16: alerts[0].threshold: ", "bad number '.inf'" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: 1e999\n",
	  "12:16: alerts[0].threshold: ", "number '1e999' is out of range" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    treshold: 1\n",
	  "12:5: alerts[0].treshold: ", "unknown key 'treshold' (did you mean 'threshold'?)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: l2\n    threshold: 1\n",
	  "11:13: alerts[0].metric: ",
	  "bad value 'l2' (expected w1, ratio, max_abs_diff, rel_l2, nonfinite or stalled)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: 1\n    for: 0\n",
	  "13:10: alerts[0].for: ", "must be between 1 and 1000000 (got 0)" },
	{ STUDY "alerts:\n  - name: x\n    study: s\n    metric: w1\n    threshold: 1\n    severity: page\n",
	  "13:15: alerts[0].severity: ", "(expected info, warning or critical)" },
	{ STUDY "alerts:\n  - {name: x, study: s, metric: w1, threshold: 1}\n  - {name: x, study: s, metric: w1, threshold: 2}\n",
	  "10:12: alerts[1].name: ", "duplicate alert name 'x'" },
	/* YAML itself */
	{ "a: b: c\n", "1:5: ", "syntax error: mapping values are not allowed in this context" },
	{ "log: [info\n", "2:1: ", "syntax error: did not find expected ',' or ']' (while parsing a flow sequence at line 1 column 6)" },
	{ "log:\n  level: \"info\n", "3:1: ", "syntax error: found unexpected end of stream (while scanning a quoted scalar at line 2 column 10)" },
	{ "log:\n\tlevel: info\n", "2:1: ", "syntax error: found character that cannot start any token" },
	{ "log:\n  level: info\n---\nlog:\n  level: debug\n", "3:1: ", "a second document" },
	{ "memory: &m\n  budget: 8G\nlimits: *m\n", "3:9: limits: ", "aliases are not supported (*m)" },
	{ "log:\n  level: *undefined\n", "2:10: log.level: ", "aliases are not supported (*undefined)" },
	{ "*a\n", "1:1: ", "aliases are not supported (*a)" },
	{ "log:\n  level: \xff\n", "2:10: ", "bad text: invalid leading UTF-8 octet (0xFF)" },
	{ "log:\n  level: caf\xc3\n", "2:14: ", "bad text: invalid trailing UTF-8 octet (0x0A)" },
	{ "log:\n  level: caf\xc3", "2:13: ", "bad text: incomplete UTF-8 octet sequence" },
	{ "log:\n  level: \x01\n", "2:10: ", "bad text: control characters are not allowed (0x01)" },
};

/* Endpoints that need no auth: loopback ones, or the insecure switch. */
static void test_auth_ok(void)
{
	static const char *const ok[] = {
		"listen:\n  ingest: tcp://127.0.0.1:5555\n",
		"listen:\n  ingest: tcp://127.3.2.1:5555\n",
		"listen:\n  ingest: tcp://localhost:5555\n",
		"listen:\n  ingest: \"tcp://[::1]:5555\"\n",
		"listen:\n  ingest: tcp://lo:5555\n",
		"listen:\n  ingest: tcp://*:5555\nauth:\n  allow_insecure: true\n",
		"listen:\n  ingest: tcp://*:5555\nauth:\n  server_key: /k\n",
		"auth:\n  server_key: /k\n  clients:\n",
		"auth:\n  server_key: /k\n  clients: {}\n",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct wd_config c, back;
		char err[WD_CONFIG_ERR_MAX], *printed;
		int r = wd_config_load_string("t.yaml", ok[i], &c, err, sizeof(err));

		CHECK(r == 0, "auth ok #%zu loads: %s", i, r ? err : "");
		if (r)
			continue;
		printed = wd_config_print_string(&c);
		r = printed ? wd_config_load_string("p.yaml", printed, &back, err, sizeof(err)) : -1;
		CHECK(r == 0 && same(&c, &back), "and prints as YAML that loads back the same");
		if (r == 0)
			wd_config_release(&back);
		free(printed);
		wd_config_release(&c);
	}
}

static void test_errors(void)
{
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct wd_config c;
		char err[WD_CONFIG_ERR_MAX], want[256];
		int r;

		memset(&c, 0xa5, sizeof(c));
		r = wd_config_load_string("t.yaml", bad[i].yaml, &c, err, sizeof(err));
		snprintf(want, sizeof(want), "t.yaml:%s", bad[i].where);
		CHECK(r == -1 && !strncmp(err, want, strlen(want)) && strstr(err, bad[i].why) &&
		      !strchr(err, '\n'), "bad #%zu: want '%s...%s', got '%s'", i, want, bad[i].why,
		      r ? err : "(loaded)");
		if (r == 0)
			wd_config_release(&c);
	}
}

/*
 * A synthetic proxy takes a proxy's place in every drift row: 64 proxies
 * and a synthetic_proxy were accepted, and compute then left the 64th
 * proxy out, silently. 63 and a synthetic one is the most.
 */
static void test_proxy_limit(void)
{
	for (int n = 63; n <= 64; n++) {
		char yaml[8192], err[WD_CONFIG_ERR_MAX];
		struct wd_config c;
		int o = snprintf(yaml, sizeof(yaml), "studies:\n  - name: s\n    baseline: b\n"
				 "    candidates: [c]\n    synthetic_proxy: round:bf16\n    proxies:\n");
		for (int k = 0; k < n; k++)
			o += snprintf(yaml + o, sizeof(yaml) - o, "      p%d: r%d\n", k, k);
		int r = wd_config_load_string("p.yaml", yaml, &c, err, sizeof(err));
		if (n == 63)
			CHECK(r == 0, "63 proxies and a synthetic one are accepted (%s)", r ? err : "");
		else
			CHECK(r == -1 && strstr(err, "p.yaml:") &&
			      strstr(err, "64 proxies and a synthetic_proxy: at most 64 proxies in all"),
			      "64 proxies and a synthetic one are refused: '%s'", r ? err : "(loaded)");
		if (r == 0)
			wd_config_release(&c);
	}
}

/* Strings YAML would read as something else, or cannot write plain. */
static void test_strings(void)
{
	static const char yaml[] =
		"storage:\n  dir: \"null\"\n"
		STUDY
		"  - name: \"123\"\n    baseline: \"yes\"\n    candidates: [\"1e3\", \"true\", \"0x1f\", run:v2, .hidden, -x]\n"
		"alerts:\n"
		"  - name: a\n    study: s\n    metric: w1\n    threshold: 1\n    command: |\n"
		"      echo \"caf\xc3\xa9\" 'x' \\\n"
		"      \t>> /tmp/log: # not a comment\n"
		"  - name: b\n    study: \"123\"\n    metric: w1\n    scope: tensors\n"
		"    tensors: \"[ab]*: {x}\\N\\L\\P\\x01\"\n    threshold: 1\n";
	struct wd_config c, back;
	char err[WD_CONFIG_ERR_MAX], *p;

	if (wd_config_load_string("s.yaml", yaml, &c, err, sizeof(err))) {
		CHECK(0, "strings config loads: %s", err);
		return;
	}
	CHECK(!strcmp(c.storage.dir, "null") && !strcmp(c.studies[1].baseline, "yes") &&
	      !strcmp(c.studies[1].candidates.names[2], "0x1f"), "quoted null, yes, 0x1f are strings");
	CHECK(c.studies[1].candidates.n == 6 && !strcmp(c.studies[1].candidates.names[3], "run:v2") &&
	      !strcmp(c.studies[1].candidates.names[5], "-x"), "run names as the protocol has them: ':', leading '.' or '-'");
	CHECK(!strcmp(c.alerts[0].command, "echo \"caf\xc3\xa9\" 'x' \\\n\t>> /tmp/log: # not a comment\n"),
	      "a block scalar command keeps its lines, tab and '#'");
	p = wd_config_print_string(&c);
	CHECK(p && wd_config_load_string("printed", p, &back, err, sizeof(err)) == 0,
	      "printed strings load back: %s", err);
	if (p && !err[0]) {
		CHECK(same(&c, &back) && !strcmp(back.storage.dir, "null") &&
		      !strcmp(back.alerts[0].command, c.alerts[0].command) &&
		      !strcmp(back.alerts[1].tensors, c.alerts[1].tensors) &&
		      !strcmp(back.studies[1].name, "123"), "and are the same strings");
		wd_config_release(&back);
	}
	CHECK(p && strstr(p, "dir: \"null\"\n") && strstr(p, "- \"0x1f\"\n") && strstr(p, "\\N\\L\\P\\x01"),
	      "what would not read back plain is quoted and escaped");
	free(p);
	wd_config_release(&c);
}

/* A study name typed to a command: the nearest study, or, for a run's name, that it is a run. */
static void test_no_study(void)
{
	static const char yaml[] =
		"studies:\n"
		"  - name: fa\n    baseline: base\n    candidates: [fa]\n    proxies:\n      fp16: lowprec\n"
		"  - name: nv\n    baseline: base\n    candidates: [nvrun]\n";
	struct wd_config c;
	char err[WD_CONFIG_ERR_MAX], msg[600];

	if (wd_config_load_string("n.yaml", yaml, &c, err, sizeof(err))) {
		CHECK(0, "no-study config loads: %s", err);
		return;
	}
	wd_config_no_study(&c, "nb", msg, sizeof(msg));
	CHECK(!strcmp(msg, "no study 'nb'; did you mean 'nv'? (studies: fa, nv)"), "a typo: the nearest: '%s'", msg);
	wd_config_no_study(&c, "zzzzzz", msg, sizeof(msg));
	CHECK(!strcmp(msg, "no study 'zzzzzz' (studies: fa, nv)"), "nothing near: the list: '%s'", msg);
	wd_config_no_study(&c, "lowprec", msg, sizeof(msg));
	CHECK(!strcmp(msg, "no study 'lowprec': that is a run, proxy fp16 in study 'fa' (studies: fa, nv)"),
	      "a proxy's run: said to be a run, and whose: '%s'", msg);
	wd_config_no_study(&c, "nvrun", msg, sizeof(msg));
	CHECK(!strcmp(msg, "no study 'nvrun': that is a run, candidate in study 'nv' (studies: fa, nv)"),
	      "a candidate's run, not the near study 'nv': '%s'", msg);
	wd_config_no_study(&c, "base", msg, sizeof(msg));
	CHECK(!strcmp(msg, "no study 'base': that is a run, baseline in study 'fa' and 1 more (studies: fa, nv)"),
	      "a baseline two studies share: '%s'", msg);
	wd_config_release(&c);
}

/* A failed load leaves *out as it was; reload refuses restart-only keys. */
static void test_reload(void)
{
	struct wd_config cur, snap, next;
	char err[WD_CONFIG_ERR_MAX];
	char *before, *after;

	if (wd_config_load_string("full.yaml", full_yaml, &cur, err, sizeof(err))) {
		CHECK(0, "full config loads: %s", err);
		return;
	}
	memcpy(&snap, &cur, sizeof(cur));
	before = wd_config_print_string(&cur);
	CHECK(wd_config_load_string("bad.yaml", "log:\n  level: loud\n", &cur, err, sizeof(err)) == -1 &&
	      memcmp(&snap, &cur, sizeof(cur)) == 0, "a failed load leaves the old config untouched");
	CHECK(wd_config_load_string("bad.yaml", STUDY "alerts:\n  - name: a\n    study: zz\n    metric: w1\n    threshold: 1\n",
				    &cur, err, sizeof(err)) == -1 &&
	      memcmp(&snap, &cur, sizeof(cur)) == 0, "also when it fails in the last check");
	CHECK(wd_config_load("/nonexistent/wdrift.yaml", &cur, err, sizeof(err)) == -1 &&
	      memcmp(&snap, &cur, sizeof(cur)) == 0, "and when the file is missing");
	after = wd_config_print_string(&cur);
	CHECK(before && after && !strcmp(before, after), "and it still prints the same");
	free(before);
	free(after);

	/* the new config is loaded beside the running one, then checked */
	CHECK(wd_config_load_string("next.yaml",
				    "listen:\n  ingest: tcp://*:5555\n  control: ipc:///run/wdrift/control.sock\n"
				    "  events: inproc://events\nauth:\n  server_key: /etc/wdrift/server.key\n"
				    "storage:\n  dir: /var/lib/wdrift\n"
				    "compute:\n  backend: cuda\n  device: 3\nmemory:\n  budget: 64G\n"
				    "log:\n  level: info\n",
				    &next, err, sizeof(err)) == 0, "a new config loads beside the old: %s", err);
	CHECK(wd_config_reload_check(&cur, &next, err, sizeof(err)) == 0,
	      "reload may change log.level, limits, studies, alerts and auth.clients: %s", err);
	wd_config_release(&next);
	CHECK(wd_config_load_string("next.yaml", "log:\n  level: info\n", &next, err, sizeof(err)) == 0 &&
	      wd_config_reload_check(&cur, &next, err, sizeof(err)) == -1 &&
	      !strcmp(err, "next.yaml: listen.ingest: cannot change on reload (from 'tcp://*:5555' to "
		      "'ipc://./run/ingest.sock'): restart wdriftd to apply it"),
	      "reload may not change listen.ingest: %s", err);
	wd_config_release(&next);
	/* a key the file sets is named where, as every other error of the file (a trial) */
	CHECK(wd_config_load_string("next.yaml", "log:\n  level: info\nmemory:\n  budget: 8G\n", &next, err,
				    sizeof(err)) == 0 && (next.listen.ingest = cur.listen.ingest, 1) &&
	      (next.listen.control = cur.listen.control, 1) && (next.listen.events = cur.listen.events, 1) &&
	      (next.auth.server_key = cur.auth.server_key, 1) && (next.storage.dir = cur.storage.dir, 1) &&
	      (next.compute = cur.compute, 1) &&
	      wd_config_reload_check(&cur, &next, err, sizeof(err)) == -1 &&
	      !strncmp(err, "next.yaml:4:3: memory.budget: cannot change on reload", 53),
	      "a changed key the file sets: FILE:LINE:COL (%s)", err);
	wd_config_release(&next);
	CHECK(wd_config_load_string("next.yaml", full_yaml, &next, err, sizeof(err)) == 0 &&
	      (next.memory.budget = GIB(8), 1) &&
	      wd_config_reload_check(&cur, &next, err, sizeof(err)) == -1 &&
	      strstr(err, "memory.budget: cannot change on reload (from '64G' to '8G')"),
	      "nor memory.budget: %s", err);
	wd_config_release(&next);
	CHECK(wd_config_load_string("next.yaml", full_yaml, &next, err, sizeof(err)) == 0 &&
	      (next.compute.device = 0, 1) &&
	      wd_config_reload_check(&cur, &next, err, sizeof(err)) == -1 &&
	      strstr(err, "compute.device: cannot change on reload (from '3' to '0')"),
	      "nor compute.device: %s", err);
	wd_config_release(&next);
	CHECK(wd_config_load_string("next.yaml", full_yaml, &next, err, sizeof(err)) == 0 &&
	      (next.auth.server_key = "/etc/wdrift/other.key", 1) &&
	      wd_config_reload_check(&cur, &next, err, sizeof(err)) == -1 &&
	      strstr(err, "auth.server_key: cannot change on reload (from '/etc/wdrift/server.key' to "
		     "'/etc/wdrift/other.key')"), "nor auth.server_key: %s", err);
	wd_config_release(&next);
	wd_config_release(&cur);
}

static void write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd >= 0) {
		if (write(fd, data, len) != (ssize_t)len)
			perror("write");
		close(fd);
	}
}

/* Loads, and when it loads checks that the printout loads to the same. */
static int load_survives(const char *yaml, size_t len, int *loaded)
{
	static char path[] = "/tmp/wdrift-test-config-fuzz.yaml";
	struct wd_config c, back;
	char err[WD_CONFIG_ERR_MAX];
	int ok = 1;

	write_file(path, yaml, len);
	err[0] = 'x';
	if (wd_config_load(path, &c, err, sizeof(err)) == 0) {
		char *p = wd_config_print_string(&c);
		++*loaded;
		if (!p || wd_config_load_string("printed", p, &back, err, sizeof(err))) {
			printf("# printout does not load: %s\n", err);
			ok = 0;
		} else {
			ok = same(&c, &back);
			wd_config_release(&back);
		}
		free(p);
		wd_config_release(&c);
	} else if (strncmp(err, path, strlen(path)) || strchr(err, '\n')) {
		printf("# bad message: %s\n", err);
		ok = 0;
	}
	unlink(path);
	return ok;
}

static void test_robust(void)
{
	struct wd_config c;
	char err[WD_CONFIG_ERR_MAX], small[24];
	size_t n = strlen(full_yaml), bad_cuts = 0, bad_fuzz = 0;
	int loaded = 0;
	uint32_t seed = 12345;
	char *deep;

	/* nesting: refused at a fixed depth, never by the stack */
	deep = malloc(200004);
	if (deep) {
		memcpy(deep, "a: ", 3);
		memset(deep + 3, '[', 200000);
		deep[200003] = 0;
		CHECK(wd_config_load_string("d.yaml", deep, &c, err, sizeof(err)) == -1 &&
		      strstr(err, "nested more than 32 levels deep"), "200000 nested lists: %s", err);
		memset(deep + 3, '{', 200000);
		CHECK(wd_config_load_string("d.yaml", deep, &c, err, sizeof(err)) == -1 &&
		      strstr(err, "d.yaml:1:"), "200000 nested mappings: %s", err);
		free(deep);
	}

	/* a flat list of a million values: refused before it eats memory */
	deep = malloc(2 * 1100000 + 8);
	if (deep) {
		char *q = deep + 4;
		memcpy(deep, "x: [", 4);
		for (int i = 0; i < 1100000; i++, q += 2)
			memcpy(q, "1,", 2);
		strcpy(q, "]\n");
		CHECK(wd_config_load_string("n.yaml", deep, &c, err, sizeof(err)) == -1 &&
		      strstr(err, "more than 1048576 values: not a configuration"), "1.1M values: %s", err);
		free(deep);
	}

	/* a NUL byte in a file: libyaml refuses it as a control character */
	write_file("/tmp/wdrift-test-config-nul.yaml", "log:\n  level: in\0fo\n", 19);
	CHECK(wd_config_load("/tmp/wdrift-test-config-nul.yaml", &c, err, sizeof(err)) == -1 &&
	      !strcmp(err, "/tmp/wdrift-test-config-nul.yaml:2:12: bad text: control characters are not allowed (0x00)"),
	      "a NUL byte in the file: %s", err);
	unlink("/tmp/wdrift-test-config-nul.yaml");

	/* files that are not configurations */
	CHECK(wd_config_load("/nonexistent/w.yaml", &c, err, sizeof(err)) == -1 &&
	      !strcmp(err, "/nonexistent/w.yaml: cannot open: No such file or directory"), "missing file: %s", err);
	{	/* -c wdrift.yml beside wdrift.yaml (a trial's): the file meant is named */
		char d[] = "/tmp/wdrift-test-config-near-XXXXXX", yaml[64], yml[64], want[256];
		CHECK(mkdtemp(d) != NULL, "a temp dir: %s", strerror(errno));
		snprintf(yaml, sizeof(yaml), "%s/wdrift.yaml", d);
		snprintf(yml, sizeof(yml), "%s/wdrift.yml", d);
		write_file(yaml, "log:\n  level: info\n", 20);
		snprintf(want, sizeof(want), "%s: cannot open: No such file or directory; did you mean '%s'?", yml, yaml);
		CHECK(wd_config_load(yml, &c, err, sizeof(err)) == -1 && !strcmp(err, want), "a typo of the config "
		      "beside it: did you mean: %s", err);
		unlink(yaml);
		mkdir(yaml, 0700);	/* a directory of the near name is no file to suggest */
		CHECK(wd_config_load(yml, &c, err, sizeof(err)) == -1 && !strstr(err, "did you mean"),
		      "a directory of the near name: not suggested: %s", err);
		rmdir(yaml);
		rmdir(d);
	}
	CHECK(wd_config_load("/tmp", &c, err, sizeof(err)) == -1 &&
	      !strcmp(err, "/tmp: is a directory, not a configuration file"), "a directory: %s", err);
	{
		/*
		 * A FIFO with no writer: the open waited for one forever
		 * (red team, t28). The alarm makes a regression fail, not hang.
		 * A pipe with a writer (-c <(generate)) still reads.
		 */
		const char *fifo = "/tmp/wdrift-test-config-fifo.yaml";
		char dev[64];
		int pfd[2];

		unlink(fifo);
		alarm(10);
		CHECK(mkfifo(fifo, 0600) == 0 && wd_config_load(fifo, &c, err, sizeof(err)) == -1 &&
		      !strcmp(err, "/tmp/wdrift-test-config-fifo.yaml: a FIFO with no writer: nothing to "
			      "read, not a configuration file"), "a FIFO with no writer: %s", err);
		unlink(fifo);
		CHECK(pipe(pfd) == 0 && write(pfd[1], "log:\n  level: debug\n", 20) == 20 &&
		      close(pfd[1]) == 0, "a pipe with a configuration in it");
		snprintf(dev, sizeof(dev), "/dev/fd/%d", pfd[0]);
		struct wd_config piped;
		wd_config_defaults(&piped);
		CHECK(wd_config_load(dev, &piped, err, sizeof(err)) == 0, "a pipe with a writer reads: %s", err);
		wd_config_release(&piped);
		close(pfd[0]);
		alarm(0);
	}
	{
		int fd = open("/tmp/wdrift-test-config-big.yaml", O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int ok = fd >= 0 && ftruncate(fd, (16 << 20) + 1) == 0;
		if (fd >= 0)
			close(fd);
		CHECK(ok && wd_config_load("/tmp/wdrift-test-config-big.yaml", &c, err, sizeof(err)) == -1 &&
		      strstr(err, "larger than 16M"), "a file over 16M: %s", err);
		unlink("/tmp/wdrift-test-config-big.yaml");
	}

	/* anchors alone are harmless; a UTF-8 BOM and CRLF line ends are read */
	CHECK(wd_config_load_string("a.yaml", "memory:\n  budget: &b 8G\n", &c, err, sizeof(err)) == 0 &&
	      c.memory.budget == GIB(8), "an anchor without an alias is fine: %s", err);
	wd_config_release(&c);
	CHECK(wd_config_load_string("a.yaml", "\xef\xbb\xbflog:\r\n  level: debug\r\n", &c, err, sizeof(err)) == 0 &&
	      c.log.level == WD_LOG_DEBUG, "BOM and CRLF: %s", err);
	wd_config_release(&c);
	CHECK(wd_config_load_string("a.yaml", "log:\r\n  level: loud\r\n", &c, err, sizeof(err)) == -1 &&
	      !strncmp(err, "a.yaml:2:10: log.level: ", 24), "CRLF lines count once: %s", err);

	/* a small error buffer is cut, terminated; none at all is fine */
	CHECK(wd_config_load_string("t.yaml", "memory: 4G\n", &c, small, sizeof(small)) == -1 &&
	      strlen(small) == sizeof(small) - 1 && !strncmp(small, "t.yaml:1:9: memory: expe", 23),
	      "a short error buffer gets a cut message: '%s'", small);
	CHECK(wd_config_load_string("t.yaml", "memory: 4G\n", &c, NULL, 0) == -1, "and no buffer at all");
	CHECK(wd_config_load_string(NULL, NULL, &c, err, sizeof(err)) == 0, "NULL text is an empty file");
	wd_config_release(&c);

	/* user text in messages is escaped and clipped */
	CHECK(wd_config_load_string("t.yaml", "\"\\e[31mred\": 1\n", &c, err, sizeof(err)) == -1 &&
	      !strchr(err, 0x1b) && strstr(err, "\\x1b[31mred"), "control characters escaped: %s", err);
	{
		char yaml[2100] = "log:\n  level: ";
		memset(yaml + 14, 'k', 2000);
		strcpy(yaml + 2014, "\n");
		CHECK(wd_config_load_string("t.yaml", yaml, &c, err, sizeof(err)) == -1 &&
		      strlen(err) < 300 && strstr(err, "kkk...'"), "a 2000-byte value is clipped: %.80s", err);
	}

	/* every prefix of the full config, and random damage to it */
	for (size_t cut = 0; cut <= n; cut++)
		bad_cuts += !load_survives(full_yaml, cut, &loaded);
	CHECK(bad_cuts == 0, "each of %zu prefixes of the full config loads and round-trips, or fails with one line (%d loaded)",
	      n + 1, loaded);
	loaded = 0;
	for (int i = 0; i < 3000; i++) {
		char buf[sizeof(full_yaml)];
		memcpy(buf, full_yaml, n);
		for (int k = 0; k < 1 + i % 3; k++) {
			seed = seed * 1103515245u + 12345u;
			size_t at = (seed >> 8) % n;
			seed = seed * 1103515245u + 12345u;
			/* often a byte the grammar cares about, sometimes any */
			static const char pick[] = " :-[]{}#&*!|>'\"%@`,?\n\t0.1eGK";
			buf[at] = (seed >> 16) & 1 ? pick[(seed >> 17) % (sizeof(pick) - 1)] : (char)(seed >> 20);
		}
		bad_fuzz += !load_survives(buf, n, &loaded);
	}
	CHECK(bad_fuzz == 0, "3000 damaged copies load and round-trip, or fail with one line (%d loaded)", loaded);
}

/* The control endpoint named in a file, as peek finds it; "" when it finds none (-1). */
static void peek(const char *text, char *ep, size_t size)
{
	char path[] = "/tmp/wdrift-test-peek-XXXXXX";
	int fd = mkstemp(path);

	ep[0] = 0;
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		CHECK(0, "a temp file for peek");
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	if (wd_config_peek_control(path, ep, size) < 0)
		ep[0] = 0;
	unlink(path);
}

/*
 * A file the CLI cannot load still names its control socket, so that the
 * user can ask the daemon that runs the config before it: a YAML syntax
 * error too (a trial's refused reload left status with nothing to ask).
 */
static void test_peek_control(void)
{
	char ep[600];

	peek("listen:\n  control: ipc:///srv/w/control.sock\nstudies: [\n", ep, sizeof(ep));
	CHECK(!strcmp(ep, "ipc:///srv/w/control.sock"), "a syntax error after listen: its control (%s)", ep);
	peek("studies: {\nlisten:\n  ingest: tcp://*:5555   # ingest\n  control: \"tcp://127.0.0.1:5556\"  # here\n",
	     ep, sizeof(ep));
	CHECK(!strcmp(ep, "tcp://127.0.0.1:5556"), "quoted, with a comment after it (%s)", ep);
	peek("storage:\n  control: ipc:///not/this.sock\nlisten:\n\tingest: ipc:///i.sock\nx: [\n", ep, sizeof(ep));
	CHECK(strstr(ep, "control.sock") && !strstr(ep, "not/this"),
	      "a control: under another key is not listen's: the default (%s)", ep);
	peek("listen:\n  control:\nx: [\n", ep, sizeof(ep));
	CHECK(!ep[0], "an empty control: none named");
	peek("listen:\n  control: ipc:///valid.sock\n", ep, sizeof(ep));
	CHECK(!strcmp(ep, "ipc:///valid.sock"), "valid YAML, as before (%s)", ep);
}

int main(void)
{
	test_defaults();
	test_shipped_file();
	test_full();
	test_sizes();
	test_bounds();
	test_errors();
	test_proxy_limit();
	test_auth_ok();
	test_strings();
	test_no_study();
	test_reload();
	test_robust();
	test_peek_control();
	return tap_done();
}
