/*
 * config.h: wdriftd's configuration (docs/config.md), loaded from YAML.
 * Shared by wdriftd and the CLI (which reads its endpoints): common/.
 *
 * Every scalar key lives in one table in config.c, with its type, bounds,
 * default and place in struct wd_config; parsing, defaults, printing and the
 * reload check are written once over that table. Studies and alerts are
 * lists of mappings, checked field by field the same way and then against
 * each other (an alert names a study, a ratio alert one of its proxies).
 *
 * Errors are one line in the caller's buffer, "FILE:LINE:COL: KEY: REASON"
 * (line and column 1-based, of the offending node; KEY the dotted path such
 * as studies[1].proxies.fp16). Where no key applies (a YAML syntax error, a
 * file that cannot be read) that part is left out.
 *
 * The loader is config_load.c, its checks across keys config_check.c, the
 * printer config_print.c; only yaml_doc.c includes yaml.h. This header
 * depends on libc and wdrift.h.
 */
#ifndef WD_DAEMON_CONFIG_H
#define WD_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wdrift.h"	/* enum wd_backend, WD_LOG_* */

/* Big enough for any message the loader writes. */
#define WD_CONFIG_ERR_MAX 1024

/* A study's runs, at most: compute sizes its per-step arrays by these. */
#define CONFIG_MAX_CANDIDATES 256
#define CONFIG_MAX_PROXIES 64

enum wd_alert_metric {
	WD_METRIC_W1 = 0,
	WD_METRIC_RATIO,		/* W1(candidate) / W1(proxy) */
	WD_METRIC_MAX_ABS_DIFF,
	WD_METRIC_REL_L2,
	WD_METRIC_NONFINITE,		/* NaN + Inf count of the candidate */
	WD_METRIC_STALLED,		/* seconds since the study's last snapshot */
};

/* How an alert reduces a snapshot's tensors to one number. */
enum wd_alert_scope {
	WD_SCOPE_MAX = 0,
	WD_SCOPE_MEDIAN,
	WD_SCOPE_MEAN,			/* weighted by element count */
	WD_SCOPE_TENSORS,		/* each tensor matching a glob, on its own */
};

enum wd_severity { WD_SEVERITY_INFO = 0, WD_SEVERITY_WARNING, WD_SEVERITY_CRITICAL };

/* A study's synthetic proxy: its baseline rounded to a 16-bit format. */
enum wd_synthetic { WD_SYNTHETIC_NONE = 0, WD_SYNTHETIC_BF16, WD_SYNTHETIC_FP16 };

struct wd_config_runs {
	size_t n;
	const char **names;
};

struct wd_config_proxy {
	const char *label;		/* "fp16", "seed", ... */
	const char *run;
};

struct wd_config_proxies {
	size_t n;
	struct wd_config_proxy *v;
};

struct wd_config_study {
	const char *name;
	const char *baseline;
	struct wd_config_runs candidates;	/* at least one */
	struct wd_config_proxies proxies;	/* in file order; may be empty */
	int synthetic_proxy;			/* enum wd_synthetic */
};

struct wd_config_alert {
	const char *name;
	const char *study;
	size_t study_index;		/* into wd_config.studies */
	int metric;			/* enum wd_alert_metric */
	const char *proxy;		/* ratio: a proxy label or "round:bf16"/"round:fp16"; else NULL */
	int scope;			/* enum wd_alert_scope; not for stalled */
	const char *tensors;		/* scope tensors: the glob; else NULL */
	double threshold;		/* fires above it; stalled: seconds */
	int64_t for_count;		/* key "for": consecutive snapshots */
	int severity;			/* enum wd_severity */
	const char *command;		/* NULL: none */
	int64_t command_min_interval;	/* seconds */
	int64_t command_timeout;	/* seconds a run may take before it is killed */
};

/* auth.clients: who may connect under CURVE, by name. */
struct wd_config_client {
	const char *name;
	const char *key;		/* public key, 40 characters of Z85 */
};

struct wd_config_clients {
	size_t n;
	struct wd_config_client *v;
};

struct wd_arena;

/*
 * The effective configuration. Strings and arrays belong to the config
 * (to its arena, or are static for defaults): never free them one by one,
 * and copy what must outlive wd_config_release().
 */
#define WD_CONFIG_FIELDS 32	/* at least the field table's N_CFG (config.c checks) */

struct wd_config {
	struct {
		const char *ingest, *control, *events;	/* ZeroMQ endpoints */
		const char *metrics;		/* HOST:PORT of /metrics; NULL: off */
	} listen;
	struct {
		const char *server_key;		/* key pair file; NULL: no CURVE */
		struct wd_config_clients clients;	/* may change on reload */
		bool allow_insecure;		/* network TCP without CURVE */
	} auth;
	struct {
		const char *dir;
	} storage;
	struct {
		int backend;			/* enum wd_backend */
		int64_t device;			/* CUDA device index */
		int64_t threads;		/* CPU engine threads; 0: the cores available */
	} compute;
	struct {
		uint64_t budget;		/* bytes */
	} memory;
	struct {
		struct {
			int64_t every;		/* keep every K-th step */
			uint64_t disk_budget;	/* bytes */
		} retention;
	} spool;
	struct {
		int64_t tolerance;		/* steps; 0: exact match */
	} alignment;
	struct {
		uint64_t max_message;		/* bytes */
		int64_t max_name;		/* bytes */
		int64_t max_dims;
		int64_t max_tensors;		/* per snapshot */
		int64_t max_runs;
		int64_t max_pending;		/* snapshots per run */
		int64_t pending_timeout;	/* seconds a snapshot may idle unfinished */
		uint64_t min_rate;		/* bytes/s a partial snapshot must take to keep
						   its memory when the budget is full */
	} limits;
	struct {
		int level;			/* WD_LOG_ERR .. WD_LOG_DEBUG */
	} log;
	struct {
		bool per_tensor;		/* /metrics: a series per tensor too */
	} metrics;
	struct wd_config_study *studies;
	size_t n_studies;
	struct wd_config_alert *alerts;
	size_t n_alerts;
	const char *source;			/* the file name, or "(built-in)" */
	/*
	 * Where the file sets each key of the field table (config_table.h),
	 * 1-based; 0: not in the file (its default). For the messages about
	 * a value, such as a reload's "cannot change", which name FILE:LINE:COL
	 * as the loader's do.
	 */
	struct { int line, col; } at[WD_CONFIG_FIELDS];
	struct wd_arena *arena;			/* owns the above; private */
};

/* config/wdrift.yaml, byte for byte: the shipped default (a unit test checks). */
extern const char wd_config_default_yaml[];

/* Sets every key to its default: no studies, no alerts. Allocates nothing. */
void wd_config_defaults(struct wd_config *c);

/*
 * Loads a configuration file. All or nothing: on success *out is
 * overwritten (not released first: load into a fresh struct, then release
 * the old one); on failure *out is untouched and err holds one line, as
 * above. A missing key takes its default; an empty file gives the defaults.
 * Returns 0 or -1.
 */
int wd_config_load(const char *path, struct wd_config *out, char *err, size_t errlen);

/* The same from a string; name stands for the file name in errors. */
int wd_config_load_string(const char *name, const char *yaml, struct wd_config *out,
			  char *err, size_t errlen);

/* Frees what c holds, and leaves the defaults in it. */
void wd_config_release(struct wd_config *c);

/*
 * Refuses a reload that changes a key that needs a restart (listen.*,
 * auth.server_key, auth.allow_insecure, storage.dir, compute.backend,
 * compute.device, compute.threads, memory.budget): returns -1 with err naming
 * the first such key, else 0. Called with the running config and the new
 * one, after the new one loaded.
 */
int wd_config_reload_check(const struct wd_config *cur, const struct wd_config *next,
			   char *err, size_t errlen);

/*
 * Writes the effective configuration as YAML that loads back to the same
 * config, every scalar key with a comment saying what it is.
 */
void wd_config_print(FILE *f, const struct wd_config *c);
/* The same, into a new string (free it); NULL when out of memory. */
char *wd_config_print_string(const struct wd_config *c);

/*
 * The first listen.* endpoint that takes connections from the network (a
 * tcp:// endpoint whose host is not a loopback one), or NULL; *key gets
 * its key name.
 */
const char *wd_config_network_endpoint(const struct wd_config *c, const char **key);

/*
 * Splits listen.metrics's HOST:PORT (HOST an IPv4 address, [IPv6] or
 * localhost) into host (the address, without brackets; localhost as
 * 127.0.0.1) and port. 0, or -1 with why. host and port may be NULL.
 */
int wd_config_hostport(const char *s, char *host, size_t hostlen, int *port, char *why, size_t size);

/*
 * Whether s is an endpoint wdrift can use (ipc://PATH, tcp://HOST:PORT,
 * inproc://NAME, within their limits): 0, or -1 with why ("bad endpoint
 * 'S': ..."). The config's listen.* and the CLI's --endpoint share it.
 * A port may be * (the system picks one) in what is bound; for a connect
 * (connect: 1) the port's error does not offer it, and the caller says
 * why a * there, a port or a host, cannot be connected to.
 */
int wd_config_check_endpoint(const char *s, char *why, size_t size);
int wd_config_check_endpoint_as(const char *s, int connect, char *why, size_t size);

/* Names as written in the file: "ratio", "tensors", "critical". */
const char *wd_config_metric_name(int metric);
const char *wd_config_scope_name(int scope);
const char *wd_config_severity_name(int severity);
/*
 * The synthetic proxy's name, "round:bf16" or "round:fp16", which is also
 * the run its rows carry in results and the drift log; NULL for none.
 */
const char *wd_config_synthetic_label(int synthetic);

/*
 * The one definition of a complete step: a step of study st is complete
 * when every run named here has rows at it (the daemon's drift replies
 * and alert catch-up, and the report, all ask this). The runs are the
 * candidates, the trained proxies' runs, then the synthetic proxy's
 * label; at most max go into names; returns how many did.
 */
#define WD_STUDY_STEP_RUNS_MAX (CONFIG_MAX_CANDIDATES + CONFIG_MAX_PROXIES)
size_t wd_study_step_runs(const struct wd_config_study *st, const char **names, size_t max);
/*
 * run's part in study st: "baseline", "candidate" or "proxy" (with
 * *label its proxy label, when label is given), or NULL when st does not
 * name it.
 */
const char *wd_study_role(const struct wd_config_study *st, const char *run, const char **label);
/*
 * The one wording of a study name that cfg does not have, for every command
 * that takes one (the daemon's drift reply, export, report): "no study
 * 'nb'; did you mean 'nv'? (studies: fa, nv)". Into out (len bytes).
 */
void wd_config_no_study(const struct wd_config *cfg, const char *study, char *out, size_t len);
/*
 * The run whose rows a study's proxy label stands for: a trained proxy's
 * run, or the synthetic proxy's label itself (its rows' run); NULL when st
 * has no proxy of that label.
 */
const char *wd_study_proxy_run(const struct wd_config_study *st, const char *label);
/* The first study of cfg that names run (wd_study_role), or NULL when none does. */
const struct wd_config_study *wd_config_study_naming(const struct wd_config *cfg, const char *run);

#endif
