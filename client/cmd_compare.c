/*
 * cmd_compare.c: `wdrift compare`, the engine on checkpoint files, with no
 * daemon. Tensors are read and compared one name at a time, so memory holds
 * one tensor of each file, not whole checkpoints. The files are the user's:
 * each is read by a resource-limited child process (ckpt_sandbox.h).
 */
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "ckpt_sandbox.h"
#include "cli.h"
#include "compare_result.h"
#include "drift.h"

static const char usage_text[] =
"usage: wdrift compare BASELINE.h5 CANDIDATE.h5 [--proxy [LABEL=]FILE]...\n"
"                      [--round-proxy bf16|fp16] [--layers GLOB]...\n"
"                      [--engine auto|cpu|cuda] [--device N] [--json]\n"
"                      [--skip-other] [--timings] [--threads N]\n"
"\n"
"Per-layer drift of a candidate checkpoint from a baseline, in the context of\n"
"proxy runs, computed exactly by the wdrift engine. Tensors are matched by\n"
"name (the dataset's path without the leading '/').\n"
"\n"
"For each tensor: W1, the Wasserstein-1 distance between the baseline's and\n"
"the candidate's finite values (as scipy.stats.wasserstein_distance); when\n"
"the element counts match, max|a-b| and the relative L2 ||a-b||/||a||;\n"
"NaN/+Inf/-Inf counts; and for each proxy, W1(baseline, proxy) and the\n"
"ratio W1(baseline, candidate) / W1(baseline, proxy).\n"
"\n"
"options:\n"
"  --proxy [LABEL=]FILE   add a proxy run (a low-precision run, another seed);\n"
"                         LABEL defaults to the file name without extension\n"
"  --round-proxy FMT      add the synthetic proxy 'round:FMT': the baseline\n"
"                         rounded to bf16 or fp16 (nearest even). A weaker\n"
"                         bound than a trained proxy run\n"
"  --layers GLOB          compare only tensors whose name matches GLOB\n"
"                         (fnmatch; '*' also matches '.' and '/'); repeatable;\n"
"                         a GLOB that matches no tensor of either file is an error\n"
"  --skip-other           leave out tensors whose element type is not a float\n"
"                         (an integer counter such as num_batches_tracked, a\n"
"                         string) or that have no element, listed as skipped;\n"
"                         without it they are an error\n"
"  --engine auto|cpu|cuda where to compute (default auto: CUDA when a device\n"
"                         is present, else the CPU); results are the same\n"
"  --device N             the CUDA device to use (default 0); a device that\n"
"                         does not exist fails with --engine cuda, and runs\n"
"                         on the CPU with auto\n"
"  --threads N            threads of the CPU engine, 0 to 256 (default 0: the\n"
"                         cores available to this process); every count\n"
"                         gives the same results, bit for bit\n"
"  --json                 print one JSON object (schema: docs/compare.md)\n"
"  --timings              also print where the time went: the engine, waiting\n"
"                         for the file readers, starting them (docs/compare.md)\n"
"  -h, --help             show this help\n"
"\n"
"Checkpoint files are HDF5: f16, f32, f64, or bf16 (docs/checkpoints.md).\n"
"Names present in only one of baseline and candidate are listed as unmatched;\n"
"files with no name in common are an error, naming a prefix such as 'module.'\n"
"that one side's names have.\n"
"Each file is read by a child process with limits: WDRIFT_CKPT_TIMEOUT\n"
"seconds per step (default 60; a tensor gets 1 s more per 32 MiB) and\n"
"WDRIFT_CKPT_MEMORY bytes (default half the machine's memory).\n"
"\n"
"exit status: 0 success; 1 bad input (the message names the file and the\n"
"dataset), files with no tensor name in common (without --layers), a\n"
"--layers GLOB that matches no tensor, --skip-other leaving nothing to\n"
"compare, --engine cuda with no device to run it, a reader that timed out,\n"
"went over its memory limit or crashed, or out of memory; 2 usage error\n"
"(docs/compare.md has the whole list).\n";

struct options {
	const char *base_path, *cand_path;
	struct compare_proxy *proxies;
	size_t n_proxies;
	const char **globs;
	size_t n_globs;
	int json, timings;
	int skip_other;		/* --skip-other */
	enum wd_backend backend;
	int device;		/* CUDA device index */
	int threads;		/* CPU engine threads; 0: the cores available */
	struct wd_sandbox_limits lim;
};

static char *file_stem(const char *path)
{
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	const char *dot = strrchr(b, '.');
	size_t len = dot && dot != b ? (size_t)(dot - b) : strlen(b);
	return strndup(b, len);
}

static int add_proxy(struct options *o, const char *arg, int round_to)
{
	struct compare_proxy p = { .round_to = round_to };
	const char *eq = strchr(arg, '=');

	if (round_to >= 0) {
		p.label = strdup(round_to == WD_BF16 ? "round:bf16" : "round:fp16");
	} else if (eq && eq != arg && !memchr(arg, '/', (size_t)(eq - arg)) &&
		   access(arg, F_OK) != 0) {
		p.label = strndup(arg, (size_t)(eq - arg));
		p.path = eq + 1;
	} else {
		p.label = file_stem(arg);
		p.path = arg;
	}
	if (p.path && !p.path[0]) {
		free(p.label);
		return cli_usage_error("--proxy '%s': no file", arg);
	}
	for (size_t i = 0; i < o->n_proxies; i++)
		if (!strcmp(o->proxies[i].label, p.label)) {
			const struct compare_proxy *q = &o->proxies[i];
			int r;
			if (round_to >= 0 && q->round_to >= 0)	/* bf16 and bfloat16 are one format */
				r = cli_usage_error("--round-proxy %s: that format is asked for already",
						    arg);
			else if (round_to >= 0)
				r = cli_usage_error("--round-proxy %s: its label '%s' is taken by --proxy "
						    "'%s'", arg, p.label, q->path);
			else if (eq && p.path == eq + 1)	/* the user named it */
				r = cli_usage_error("proxy label '%s' given twice (for '%s' and '%s'); "
						    "each proxy needs a label of its own", p.label,
						    q->path ? q->path : "--round-proxy", p.path);
			else
				r = cli_usage_error("proxy label '%s' given twice (for '%s' and '%s'); "
						    "name them with LABEL=FILE", p.label,
						    q->path ? q->path : "--round-proxy", p.path);
			free(p.label);
			return r;
		}
	o->proxies = realloc(o->proxies, (o->n_proxies + 1) * sizeof(p));
	o->proxies[o->n_proxies++] = p;
	return 0;
}

/* One option of `wdrift compare` into *ctx (struct options): 0, or cli_usage_error's status. */
/* A count of decimal digits only, 0 to max, into *out: 0, or -1 (strtol alone would take "-1", " 1", "+1"). */
static int parse_count(const char *arg, long max, int *out)
{
	long v;

	errno = 0;
	v = strtol(arg, NULL, 10);
	if (!arg[0] || arg[strspn(arg, "0123456789")] || errno || v > max)
		return -1;
	*out = (int)v;
	return 0;
}

static int on_option(int c, const char *arg, void *ctx)
{
	struct options *o = ctx;

	switch (c) {
	case 'p':
		return add_proxy(o, arg, -1);
	case 'r':
		if (!strcmp(arg, "bf16") || !strcmp(arg, "bfloat16"))
			return add_proxy(o, arg, WD_BF16);
		if (!strcmp(arg, "fp16") || !strcmp(arg, "f16"))
			return add_proxy(o, arg, WD_F16);
		return cli_usage_error("--round-proxy '%s': expected bf16 or fp16", arg);
	case 'l':
		o->globs = realloc(o->globs, (o->n_globs + 1) * sizeof(*o->globs));
		o->globs[o->n_globs++] = arg;	/* in argv, which outlives the options */
		return 0;
	case 'j':
		o->json = 1;
		return 0;
	case 't':
		o->timings = 1;
		return 0;
	case 'S':
		o->skip_other = 1;
		return 0;
	case 'e':
		if (wd_backend_parse(arg, &o->backend))
			return cli_usage_error("--engine '%s': expected auto, cpu or cuda", arg);
		return 0;
	case 'T':
		if (parse_count(arg, 256, &o->threads) < 0)
			return cli_usage_error("--threads '%s': expected a thread count, 0 to 256", arg);
		return 0;
	case 'd':
		if (parse_count(arg, 1023, &o->device) < 0)
			return cli_usage_error("--device '%s': expected a device index, 0 to 1023", arg);
		return 0;
	}
	return cli_usage_error("unknown option '%c'", c);	/* a table entry without a case */
}

/* The options and files of `wdrift compare`: 0, or a negative return for cli_opts_exit. */
/*
 * A rounded proxy whose baseline has values out of its format's range
 * (fp16's 65504): they round to +-Inf, which W1 leaves out, so the proxy's
 * W1 measures their loss, not rounding, and every ratio against it is
 * tiny (a trial's were 1e-5, and nothing said why).
 */
static void overflow_warning(const struct options *o)
{
	for (size_t k = 0; k < o->n_proxies; k++) {
		const struct compare_proxy *px = &o->proxies[k];
		if (px->round_to < 0 || !px->overflow)
			continue;
		cli_warning("%s: %llu value%s of the baseline %s out of %s's range (the first in '%s'): rounded, "
			    "%s +-Inf, which W1[%s] leaves out, so it measures %s loss, not rounding, and ratios "
			    "against it mean little; round:bf16 has fp32's range", px->label,
			    (unsigned long long)px->overflow, px->overflow == 1 ? "" : "s",
			    px->overflow == 1 ? "is" : "are", px->round_to == WD_F16 ? "fp16" : "bf16",
			    px->overflow_first, px->overflow == 1 ? "it is" : "they are", px->label,
			    px->overflow == 1 ? "its" : "their");
	}
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "proxy", required_argument, NULL, 'p' },
		{ "round-proxy", required_argument, NULL, 'r' },
		{ "layers", required_argument, NULL, 'l' },
		{ "json", no_argument, NULL, 'j' },
		{ "timings", no_argument, NULL, 't' },
		{ "engine", required_argument, NULL, 'e' },
		{ "device", required_argument, NULL, 'd' },
		{ "threads", required_argument, NULL, 'T' },
		{ "skip-other", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	char err[256];
	int first = cli_opts(argc, argv, ":h", longopts, usage_text, on_option, o);

	if (first < 0)
		return first;
	if (argc - first != 2)
		return -cli_usage_error("expected BASELINE.h5 and CANDIDATE.h5, got %d file%s",
					argc - first, argc - first == 1 ? "" : "s");
	if (wd_sandbox_limits_env(&o->lim, err, sizeof(err)) < 0)
		return -cli_usage_error("%s", err);
	o->base_path = argv[first];
	o->cand_path = argv[first + 1];
	return 0;
}

/*
 * The same file as baseline and candidate (a link, or a path typed twice)
 * gives zero drift everywhere, which would read as a result: said once on
 * stderr beside the result (a user may mean it, as a check). A command
 * that fails says only why.
 */
static void same_file_warning(const char *a, const char *b)
{
	struct stat sa, sb;

	if (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino)
		cli_warning("'%s' and '%s' are the same file: every tensor's drift will be 0", a, b);
}

/*
 * A --layers glob that matches no tensor of either file: most likely a
 * typo, and an empty table would hide it. 0, or cli_error's status naming
 * the glob and a few of the names there are.
 */
static int globs_match(const struct options *o, const struct wd_ckpt *bl, const struct wd_ckpt *cl)
{
	const struct wd_ckpt *lists[2] = { bl, cl };
	int r = 0;

	for (size_t g = 0; g < o->n_globs; g++) {
		char names[512] = "";
		size_t used = 0, shown = 0, n = wd_ckpt_count(bl);	/* distinct names */
		int hit = 0;

		for (int k = 0; k < 2 && !hit; k++)
			for (size_t i = 0; i < wd_ckpt_count(lists[k]) && !hit; i++)
				hit = !fnmatch(o->globs[g], wd_ckpt_entry(lists[k], i)->name, 0);
		if (hit)
			continue;
		for (size_t i = 0; i < wd_ckpt_count(cl); i++)
			n += wd_ckpt_find(bl, wd_ckpt_entry(cl, i)->name) < 0;
		for (int k = 0; k < 2 && shown < 3; k++)
			for (size_t i = 0; i < wd_ckpt_count(lists[k]) && shown < 3; i++) {
				const char *name = wd_ckpt_entry(lists[k], i)->name;
				int w;
				if (k == 1 && wd_ckpt_find(bl, name) >= 0)
					continue;	/* named already */
				w = snprintf(names + used, sizeof(names) - used, "%s'%.100s'",
					     shown ? ", " : "", name);
				if (w < 0 || (size_t)w >= sizeof(names) - used)
					break;
				used += (size_t)w;
				shown++;
			}
		/* every glob that matches nothing, so that two typos need one run */
		r = cli_error("--layers '%s' matches no tensor of '%s' or '%s' (%zu name%s between "
			      "them%s%s)", o->globs[g], o->base_path, o->cand_path, n, n == 1 ? "" : "s",
			      shown ? ", such as " : "", names);
	}
	return r;
}

/*
 * Whether name is other with a prefix that ends a path component ('.' or
 * '/'): "module.w" is "w" with "module." (a DDP-wrapped model's
 * state_dict). The prefix goes in pre.
 */
static int prefixed(const char *name, const char *other, char *pre, size_t len)
{
	size_t n = strlen(name), k = strlen(other);

	if (n <= k || strcmp(name + n - k, other) || (name[n - k - 1] != '.' && name[n - k - 1] != '/'))
		return 0;
	snprintf(pre, len, "%.*s", (int)(n - k) > 100 ? 100 : (int)(n - k), name);
	return 1;
}

/* What the prefix suggests, said the same way wherever names differ by one. */
#define WRAPPED_HINT "a wrapped model's state_dict (DistributedDataParallel's 'module.', " \
		     "torch.compile's '_orig_mod.')? Save both the same way"

/*
 * How many of the names only in the baseline (b) are names only in the
 * candidate (c) with a prefix, or the other way round, as the first such
 * pair has it: the prefix into pre, *cand whether the candidate's names
 * carry it, and the pair. At most 256 x 4096 names are tried.
 */
static size_t prefixed_pairs(const char *const *b, size_t nb, const char *const *c, size_t nc, char *pre,
			     size_t len, int *cand, const char **pb, const char **pc)
{
	size_t pairs = 0;
	char one[128];

	pre[0] = 0;
	*cand = 0;
	for (size_t i = 0; i < nb && i < 256; i++)
		for (size_t j = 0; j < nc && j < 4096; j++) {
			int in_c = prefixed(c[j], b[i], one, sizeof(one));
			if (!in_c && !prefixed(b[i], c[j], one, sizeof(one)))
				continue;
			if (!pre[0]) {
				snprintf(pre, len, "%s", one);
				*cand = in_c;
				*pb = b[i];
				*pc = c[j];
			}
			pairs += in_c == *cand && !strcmp(one, pre);
			break;
		}
	return pairs;
}

/*
 * The names in one file only, when some of them are the other file's
 * with a prefix (a few layers saved from a wrapped model): a sentence for
 * the unmatched list, or NULL.
 */
static char *unmatched_hint(const struct compare_result *res)
{
	char pre[128], *out;
	const char *b, *c;
	int cand;
	size_t n = prefixed_pairs((const char *const *)res->only_base, res->n_only_base,
				  (const char *const *)res->only_cand, res->n_only_cand, pre, sizeof(pre), &cand, &b, &c);

	if (!n || asprintf(&out, "%zu name%s only in the %s %s the %s's with '%s' before %s ('%.100s', "
			   "'%.100s'): " WRAPPED_HINT, n, n == 1 ? "" : "s", cand ? "candidate" : "baseline",
			   n == 1 ? "is" : "are", cand ? "baseline" : "candidate", pre, n == 1 ? "it" : "them",
			   b, c) < 0)
		return NULL;
	return out;
}

/*
 * Files with no tensor name in common, without --layers: nothing would be
 * compared, and a table of unmatched names exiting 0 passed for a result
 * in a trial. Most often one side's names carry a wrapper's prefix
 * ("module." from DistributedDataParallel, "_orig_mod." from
 * torch.compile), which the error names; else it gives a name of each.
 * A file with no tensor at all is said as such. 0, or cli_error's status.
 */
static int names_in_common(const struct options *o, const struct wd_ckpt *bl, const struct wd_ckpt *cl)
{
	size_t nb = wd_ckpt_count(bl), nc = wd_ckpt_count(cl);
	char pre[128] = "", hint[400] = "";

	if (o->n_globs)
		return 0;
	if (!nb || !nc)	/* a file written before its tensors, or the wrong one */
		return cli_error("'%s' holds no tensor (no dataset), so nothing can be compared",
				 !nb ? o->base_path : o->cand_path);
	for (size_t i = 0; i < nb; i++)
		if (wd_ckpt_find(cl, wd_ckpt_entry(bl, i)->name) >= 0)
			return 0;
	/* a prefix on one side: as the unmatched names' note finds it (prefixed_pairs) */
	const char **bn = malloc(nb * sizeof(*bn)), **cn = malloc(nc * sizeof(*cn)), *b, *c;
	int cand;
	for (size_t i = 0; bn && i < nb; i++)
		bn[i] = wd_ckpt_entry(bl, i)->name;
	for (size_t j = 0; cn && j < nc; j++)
		cn[j] = wd_ckpt_entry(cl, j)->name;
	if (bn && cn && prefixed_pairs(bn, nb, cn, nc, pre, sizeof(pre), &cand, &b, &c))
		snprintf(hint, sizeof(hint), ": the %s's names are the %s's with '%s' before them ('%.100s', "
			 "'%.100s'): " WRAPPED_HINT, cand ? "candidate" : "baseline", cand ? "baseline" : "candidate",
			 pre, b, c);
	free(bn);
	free(cn);
	if (!hint[0])
		snprintf(hint, sizeof(hint), " (the baseline has '%.100s', the candidate '%.100s'): "
			 "checkpoints of different models?", wd_ckpt_entry(bl, 0)->name,
			 wd_ckpt_entry(cl, 0)->name);
	return cli_error("'%s' (%zu tensor%s) and '%s' (%zu) have no tensor name in common, so nothing "
			 "can be compared%s", o->base_path, nb, nb == 1 ? "" : "s", o->cand_path, nc, hint);
}

static int selected(const struct options *o, const char *name)
{
	if (!o->n_globs)
		return 1;
	for (size_t i = 0; i < o->n_globs; i++)
		if (!fnmatch(o->globs[i], name, 0))
			return 1;
	return 0;
}

/* Adds the time since *t0 to *sum and restarts *t0: one phase of --timings. */
static void lap(double *t0, double *sum)
{
	double t = cli_now();

	*sum += t - *t0;
	*t0 = t;
}

/* Starts the read of tensor i of b in its reader child: 0, or cli_error's status. */
static int request(struct wd_ckpt_box *b, size_t i)
{
	char err[WD_CKPT_ERR_MAX];

	return wd_ckpt_box_request(b, i, err) < 0 ? cli_error("%s", err) : 0;
}

/* Collects tensor i of b, requested before: *view holds its data, which m maps until wd_tensor_map_release. */
static int collect(struct wd_ckpt_box *b, size_t i, struct wd_tensor_map *m, struct wd_view *view,
		   struct compare_timings *tm)
{
	const struct wd_ckpt_entry *en = wd_ckpt_entry(wd_ckpt_box_listing(b), i);
	char err[WD_CKPT_ERR_MAX];
	double t0 = cli_now();
	int r;

	r = wd_ckpt_box_collect(b, m, err);
	lap(&t0, &tm->read_wait);
	if (r < 0)
		return cli_error("%s", err);
	*view = (struct wd_view){ en->dtype, m->data, en->numel };
	return 0;
}

/*
 * 0 when m's file was not cut short while it was read; else cli_error's
 * status, naming the file and the dataset: what was computed from m is
 * not to be printed (ckpt_sandbox.h, wd_tensor_map_intact).
 */
static int intact(const struct wd_tensor_map *m)
{
	char err[WD_CKPT_ERR_MAX];

	return wd_tensor_map_intact(m, err) < 0 ? cli_error("%s", err) : 0;
}

/* The error of preparing tensor i of b: cli_error's status. */
static int prepare_failed(struct wd_ckpt_box *b, size_t i, int r)
{
	return cli_error("'%s': dataset '%s': cannot prepare: %s", wd_ckpt_path(wd_ckpt_box_listing(b)),
			 wd_ckpt_entry(wd_ckpt_box_listing(b), i)->name, strerror(-r));
}

/*
 * Collects tensor i of b, requested before, and prepares it; on success
 * *view holds its data, which m maps until wd_tensor_map_release.
 */
static int load_prepared(struct wd_engine *e, struct wd_ckpt_box *b, size_t i,
			 struct wd_tensor_map *m, struct wd_view *view, struct wd_prepared **p,
			 struct compare_timings *tm)
{
	double t0;
	int r;

	if ((r = collect(b, i, m, view, tm)))
		return r;
	t0 = cli_now();
	/* KEEP_RAW: the element-wise pass then runs where the data already is. */
	r = wd_prepare(e, view, WD_PREP_KEEP_RAW, p);
	lap(&t0, &tm->engine);
	return r < 0 ? prepare_failed(b, i, r) : 0;
}

/*
 * W1 of the baseline against one proxy, for one tensor: a trained proxy's
 * tensor of that name, or the baseline rounded (wd_drift_rounded_w1).
 */
static int proxy_w1(struct wd_engine *e, struct compare_proxy *px,
		    struct wd_ckpt_box *ck, const char *name,
		    const struct wd_view *base_view, const struct wd_prepared *base,
		    double *w1, struct compare_timings *tm)
{
	struct wd_prepared *pp = NULL;
	struct wd_tensor_map m = { 0 };
	struct wd_view v = { 0 };
	double t0 = cli_now();
	int r;

	if (px->round_to >= 0) {
		struct wd_nonfinite over;
		r = wd_drift_rounded_w1(e, base, base_view, (enum wd_dtype)px->round_to, w1, &over);
		px->overflow_now = over.posinf + over.neginf;	/* counted once the tensor is done */
		lap(&t0, &tm->engine);
		if (r == -ENOMEM)
			return cli_error("out of memory rounding '%s'", name);
		if (r && r != -EIO)
			return cli_error("cannot prepare '%s': %s", name, strerror(-r));
		return r;
	}
	const struct wd_ckpt *pl = wd_ckpt_box_listing(ck);
	long idx = wd_ckpt_find(pl, name);
	if (idx < 0) {
		char pre[128], hint[512] = "";
		for (size_t i = 0; i < wd_ckpt_count(pl) && !hint[0]; i++) {
			const char *have = wd_ckpt_entry(pl, i)->name;
			int more = prefixed(have, name, pre, sizeof(pre));
			if (more || prefixed(name, have, pre, sizeof(pre)))
				snprintf(hint, sizeof(hint), "; it has '%.100s', the name %s '%s': " WRAPPED_HINT,
					 have, more ? "with" : "without", pre);
		}
		return cli_error("'%s': proxy '%s' has no tensor '%s' (the baseline has it)%s", px->path,
				 px->label, name, hint);
	}
	const struct wd_ckpt_entry *pe = wd_ckpt_entry(pl, (size_t)idx);
	if (pe->problem[0] && pe->skippable)	/* a trial read no way round it */
		return cli_error("'%s': proxy '%s': dataset '%s': %s (--skip-other leaves out the baseline's and "
				 "the candidate's tensors, not a proxy's: a tensor compared needs each proxy's as "
				 "floats; leave it out with --layers)", px->path, px->label, name, pe->problem);
	if ((r = request(ck, (size_t)idx)) || (r = load_prepared(e, ck, (size_t)idx, &m, &v, &pp, tm))) {
		int cut = intact(&m);	/* a prepare that failed on a cut file: the cut says why */
		wd_tensor_map_release(&m);
		return cut ? cut : r;
	}
	t0 = cli_now();
	r = wd_w1(e, base, pp, w1);
	wd_prepared_free(&pp);
	lap(&t0, &tm->engine);
	int cut = intact(&m);
	wd_tensor_map_release(&m);
	return cut ? cut : r == -EIO ? -EIO : 0;
}

/*
 * Tensor bi of the baseline against tensor ci of the candidate and against
 * every proxy. 0; -EIO when the device failed (the caller retries on the
 * CPU); or cli_error's status. Both files' children read at once; the two
 * tensors are then prepared as one batch.
 */
/* "(32, 64)" into out (len bytes). */
static void shape_said(const struct wd_ckpt_entry *en, char *out, size_t len)
{
	size_t at = (size_t)snprintf(out, len, "(");
	for (int d = 0; d < en->rank && at < len; d++)
		at += (size_t)snprintf(out + at, len - at, "%s%llu", d ? ", " : "", (unsigned long long)en->dims[d]);
	if (at < len)
		snprintf(out + at, len - at, "%s", en->rank == 1 ? ",)" : ")");
}

/*
 * Two tensors of one name with as many elements and other shapes (a
 * transposed weight, a flattened one): W1 does not look at shapes, but
 * max|a-b|, rel L2 and n_diff pair the elements in row-major order, which a
 * table alone did not say (a trial); or with other element counts, where
 * those three are not computed. The note, or NULL.
 */
static char *shape_note(const struct wd_ckpt_entry *b, const struct wd_ckpt_entry *c)
{
	char bs[256], cs[256], *note = NULL;

	/* other counts: the three are '-' in the table, which alone did not say why (a trial) */
	if (b->numel != c->numel) {
		if (asprintf(&note, "element counts %llu and %llu differ: max|a-b|, rel L2 and n_diff need equal "
			     "counts (-); W1 compares the two distributions as they are",
			     (unsigned long long)b->numel, (unsigned long long)c->numel) < 0)
			return NULL;
		return note;
	}
	if (b->rank == c->rank && !memcmp(b->dims, c->dims, (size_t)b->rank * sizeof(b->dims[0])))
		return NULL;
	shape_said(b, bs, sizeof(bs));
	shape_said(c, cs, sizeof(cs));
	if (asprintf(&note, "shapes %s and %s differ: max|a-b|, rel L2 and n_diff pair the elements in "
		     "row-major order", bs, cs) < 0)
		return NULL;
	return note;
}

static int compare_layer(struct wd_engine *e, const struct options *o,
			 struct wd_ckpt_box *base, struct wd_ckpt_box *cand,
			 struct wd_ckpt_box **pck, size_t bi, size_t ci,
			 struct layer_result *lr, struct compare_timings *tm)
{
	struct wd_view bv = { 0 }, cv = { 0 };
	struct wd_tensor_map bm = { 0 }, cm = { 0 };
	struct wd_prepared *bp = NULL, *cp = NULL;
	const struct wd_ckpt_entry *be = wd_ckpt_entry(wd_ckpt_box_listing(base), bi);
	struct wd_summary summaries[2];
	double t0;
	int r;

	lr->name = strdup(be->name);
	lr->shape_note = shape_note(be, wd_ckpt_entry(wd_ckpt_box_listing(cand), ci));
	lr->proxy_w1 = calloc(o->n_proxies + 1, sizeof(double));
	lr->ratio = calloc(o->n_proxies + 1, sizeof(double));
	if ((r = request(base, bi)) || (r = request(cand, ci)) ||
	    (r = collect(base, bi, &bm, &bv, tm)) || (r = collect(cand, ci, &cm, &cv, tm)))
		goto out;
	/*
	 * Both at once, as a batch: on two threads, two large tensors are
	 * then sorted side by side, one per thread, instead of each split
	 * over the threads in turn (docs/engine.md, "Batches"). KEEP_RAW: the
	 * element-wise pass then runs where the data already is.
	 */
	t0 = cli_now();
	struct wd_view views[2] = { bv, cv };
	struct wd_prepared *pair[2];
	if (wd_prepare_many(e, views, 2, WD_PREP_KEEP_RAW, pair) == 0) {
		bp = pair[0];
		cp = pair[1];
	} else if ((r = wd_prepare(e, &bv, WD_PREP_KEEP_RAW, &bp)) < 0) {	/* which one: each alone says */
		r = prepare_failed(base, bi, r);
	} else if ((r = wd_prepare(e, &cv, WD_PREP_KEEP_RAW, &cp)) < 0) {
		r = prepare_failed(cand, ci, r);
	}	/* else both went alone, where together they did not fit: go on */
	lap(&t0, &tm->engine);
	if (r)
		goto out;
	lr->numel = bv.numel;
	lr->dtype = bv.dtype;
	lr->dtype_cand = cv.dtype;
	t0 = cli_now();
	r = wd_drift_measure(e, bp, &bv, cp, &cv, summaries, &lr->drift);
	lap(&t0, &tm->engine);
	if (r)
		goto out;	/* the device failed: the caller retries on the CPU */
	lr->base = summaries[0];
	lr->cand = summaries[1];
	/* one tensor of each file in memory: the candidate's goes before the proxies' come */
	wd_prepared_free(&cp);
	if ((r = intact(&cm)))
		goto out;
	wd_tensor_map_release(&cm);
	for (size_t k = 0; k < o->n_proxies; k++)
		if ((r = proxy_w1(e, &o->proxies[k], pck[k], be->name, &bv, bp, &lr->proxy_w1[k], tm)))
			goto out;
	/* the rounded proxies read the baseline's raw values too */
	if ((r = intact(&bm)))
		goto out;
	wd_drift_ratios(lr->drift.w1, lr->proxy_w1, o->n_proxies, lr->ratio);
	for (size_t k = 0; k < o->n_proxies; k++) {	/* not before: a device failure tries the tensor again */
		struct compare_proxy *px = &o->proxies[k];
		if (px->round_to >= 0 && px->overflow_now && !px->overflow)
			snprintf(px->overflow_first, sizeof(px->overflow_first), "%s", be->name);
		px->overflow += px->round_to >= 0 ? px->overflow_now : 0;
		px->overflow_now = 0;
	}
out:
	t0 = cli_now();
	wd_prepared_free(&bp);
	wd_prepared_free(&cp);
	lap(&t0, &tm->engine);
	wd_tensor_map_release(&bm);
	wd_tensor_map_release(&cm);
	return r;
}

static void layer_release(struct layer_result *lr);

static int push_name(char ***list, size_t *n, const char *name)
{
	*list = realloc(*list, (*n + 1) * sizeof(char *));
	(*list)[(*n)++] = strdup(name);
	return 0;
}

/*
 * A tensor whose element type is not a float in either file (an integer
 * counter such as BatchNorm's num_batches_tracked): with --skip-other it
 * is listed as skipped, -1; without, an error naming it and the option
 * (a trial's int64 counter failed a whole compare, with no way round it
 * but listing every other tensor with --layers), cli_error's status. 0
 * for a tensor both files hold as floats (or with a problem of another
 * kind, which reading it says).
 */
static int skippable(const struct options *o, struct compare_result *res, const struct wd_ckpt_entry *b,
		       const struct wd_ckpt_entry *c)
{
	const struct wd_ckpt_entry *bad = b->skippable ? b : c->skippable ? c : NULL;
	const char *where = b->skippable && c->skippable ? "both" : b->skippable ? "the baseline" :
			    "the candidate";

	/* a file's own mistake (a bf16 attribute on the wrong type) is never skipped: reading it says */
	if (!bad || (b->problem[0] && !b->skippable) || (c->problem[0] && !c->skippable))
		return 0;
	if (!o->skip_other)
		return cli_error("'%s': dataset '%s': %s (--skip-other leaves out tensors that are not floats, "
				 "and empty ones)",
				 b->skippable ? o->base_path : o->cand_path, bad->name, bad->problem);
	char *why = NULL, *name = strdup(bad->name);
	struct compare_skipped *v = realloc(res->skipped, (res->n_skipped + 1) * sizeof(*v));
	if (asprintf(&why, "%s (in %s)", bad->problem, where) < 0)
		why = NULL;
	if (!v || !name || !why) {
		free(why);
		free(name);
		if (v)
			res->skipped = v;
		return cli_error("out of memory listing the skipped tensors");
	}
	res->skipped = v;
	res->skipped[res->n_skipped].name = name;
	res->skipped[res->n_skipped++].why = why;
	return -1;
}

static int run_compare(const struct options *o, struct compare_result *res)
{
	struct wd_ckpt_box *base = NULL, *cand = NULL, **pck = NULL;
	const struct wd_ckpt *bl, *cl;
	struct wd_engine *e = NULL;
	struct compare_timings *tm = &res->timings;
	char err[WD_CKPT_ERR_MAX];
	double t0 = cli_now();
	int r = EXIT_FAIL;

	/*
	 * Every reader child starts here, before the engine (and CUDA) does;
	 * all of them first, so that they list side by side, then each
	 * listing is taken in turn: the first file in this order that fails
	 * is the one named.
	 */
	pck = calloc(o->n_proxies + 1, sizeof(*pck));
	if (wd_ckpt_box_start(o->base_path, &o->lim, &base, err) < 0 ||
	    wd_ckpt_box_start(o->cand_path, &o->lim, &cand, err) < 0) {
		cli_error("%s", err);
		goto out;
	}
	for (size_t k = 0; k < o->n_proxies; k++)
		if (o->proxies[k].path && wd_ckpt_box_start(o->proxies[k].path, &o->lim, &pck[k], err) < 0) {
			cli_error("%s", err);
			goto out;
		}
	if (wd_ckpt_box_listed(base, err) < 0 || wd_ckpt_box_listed(cand, err) < 0) {
		cli_error("%s", err);
		goto out;
	}
	for (size_t k = 0; k < o->n_proxies; k++)
		if (pck[k] && wd_ckpt_box_listed(pck[k], err) < 0) {
			cli_error("%s", err);
			goto out;
		}
	bl = wd_ckpt_box_listing(base);
	cl = wd_ckpt_box_listing(cand);
	lap(&t0, &tm->open);
	if ((r = globs_match(o, bl, cl)) || (r = names_in_common(o, bl, cl)))
		goto out;
	r = wd_engine_open_device(o->backend, o->device, &e);
	lap(&t0, &tm->engine);
	if (r < 0) {
		static const char *const names[] = { "auto", "cpu", "cuda" };
		/* -ENODEV: the library has said why on the line before (no driver, no such device) */
		r = cli_error("cannot start the engine (--engine %s --device %d): %s", names[o->backend],
			      o->device, r == -ENODEV ? "not available here, as said above; --engine cpu (or "
			      "auto) compares on the CPU" : strerror(-r));
		goto out;
	}
	wd_engine_set_threads(e, o->threads);
	res->engine = strdup(wd_engine_describe(e));
	res->layers = calloc(wd_ckpt_count(bl) + 1, sizeof(*res->layers));
	for (size_t i = 0; i < wd_ckpt_count(bl); i++) {
		const char *name = wd_ckpt_entry(bl, i)->name;
		long ci;
		if (!selected(o, name))
			continue;
		ci = wd_ckpt_find(cl, name);
		if (ci < 0) {
			push_name(&res->only_base, &res->n_only_base, name);
			continue;
		}
		if ((r = skippable(o, res, wd_ckpt_entry(bl, i), wd_ckpt_entry(cl, (size_t)ci))) > 0)
			goto out;
		if (r < 0) {	/* skipped, and listed */
			r = 0;
			continue;
		}
		struct layer_result *lr = &res->layers[res->n_layers++];
		r = compare_layer(e, o, base, cand, pck, i, (size_t)ci, lr, tm);
		if (r == -EIO) {	/* the engine fell back to the CPU: once more */
			layer_release(lr);
			r = compare_layer(e, o, base, cand, pck, i, (size_t)ci, lr, tm);
		}
		if (r) {
			r = r < 0 ? cli_error("'%s': tensor '%s': the engine failed: %s",
					      o->base_path, name, strerror(-r)) : r;
			goto out;
		}
	}
	for (size_t i = 0; i < wd_ckpt_count(cl); i++) {
		const char *name = wd_ckpt_entry(cl, i)->name;
		if (selected(o, name) && wd_ckpt_find(bl, name) < 0)
			push_name(&res->only_cand, &res->n_only_cand, name);
	}
	res->unmatched_hint = unmatched_hint(res);
	if (!res->n_layers && res->n_skipped) {	/* a trial's exited 0 with an empty table */
		r = cli_error("nothing compared: --skip-other left out every tensor selected (%zu, such as '%s': %s)",
			      res->n_skipped, res->skipped[0].name, res->skipped[0].why);
		goto out;
	}
	r = EXIT_OK;
out:
	wd_engine_close(&e);
	wd_ckpt_box_close(&base);
	wd_ckpt_box_close(&cand);
	for (size_t k = 0; k < o->n_proxies; k++)
		wd_ckpt_box_close(&pck[k]);
	free(pck);
	return r;
}

static void layer_release(struct layer_result *lr)
{
	free(lr->name);
	free(lr->shape_note);
	free(lr->proxy_w1);
	free(lr->ratio);
	memset(lr, 0, sizeof(*lr));
}

static void result_release(struct compare_result *res)
{
	for (size_t i = 0; i < res->n_layers; i++)
		layer_release(&res->layers[i]);
	free(res->layers);
	for (size_t i = 0; i < res->n_only_base; i++)
		free(res->only_base[i]);
	for (size_t i = 0; i < res->n_only_cand; i++)
		free(res->only_cand[i]);
	free(res->only_base);
	free(res->only_cand);
	free(res->unmatched_hint);
	for (size_t i = 0; i < res->n_skipped; i++) {
		free(res->skipped[i].name);
		free(res->skipped[i].why);
	}
	free(res->skipped);
	free((char *)res->engine);
}

int cmd_compare(int argc, char **argv)
{
	struct options o = { 0 };
	struct compare_result res = { 0 };
	double t0 = cli_now();
	int r;

	r = parse_args(argc, argv, &o);
	if (r < 0) {
		r = cli_opts_exit(r);
	} else {
		res.baseline = o.base_path;
		res.candidate = o.cand_path;
		res.proxies = o.proxies;
		res.n_proxies = o.n_proxies;
		res.timings.on = o.timings;
		r = run_compare(&o, &res);
	}
	if (!r && res.engine) {
		same_file_warning(o.base_path, o.cand_path);
		overflow_warning(&o);
		res.timings.total = cli_now() - t0;
		if (o.json) {
			r = compare_print_json(&res);
		} else {
			compare_print_table(&res);
			if (o.timings)
				compare_print_timings(&res.timings);
		}
	}
	result_release(&res);
	for (size_t k = 0; k < o.n_proxies; k++)
		free(o.proxies[k].label);
	free(o.proxies);
	free(o.globs);
	return r;
}
