/* study_data.c: a study's drift log and definition (see study_data.h). */
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "daemon_client.h"
#include "error.h"
#include "relpath.h"
#include "study_data.h"

static int on_opt(int c, const char *arg, void *ctx)
{
	struct study_args *o = ctx;
	switch (c) {
	case 'o': o->out = arg; return 0;
	case 'l': o->log = arg; return 0;
	case 'C': o->csv = 1; return 0;
	}
	return 1;
}

int study_args_parse(int argc, char **argv, const char *usage, int with_csv, struct study_args *o)
{
	static const struct option extra[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "log", required_argument, NULL, 'l' },
		{ "csv", no_argument, NULL, 'C' },	/* last: left out without with_csv */
		{ 0 },
	};
	struct option opts[4];
	struct dc_args a = { 0 };

	memcpy(opts, extra, sizeof(opts));
	if (!with_csv)
		opts[2] = (struct option){ 0 };
	memset(o, 0, sizeof(*o));
	a.no_endpoint = 1;	/* refused below, as not applying, whatever its value */
	int r = dc_args(argc, argv, &a, usage, opts, on_opt, o);
	if (r < 0)
		return cli_opts_exit(r);
	if (a.t.control)
		return cli_usage_error("%s reads the drift log, not the daemon: --endpoint does not apply",
				       cli_cmd);
	if (argc - r != 1)
		return cli_usage_error("expected one STUDY, got %d arguments", argc - r);
	o->study = argv[r];
	o->config = a.t.config;
	o->json = a.json;
	return -1;
}

/*
 * The storage directory of the daemon of config, as it resolved it (its
 * `status`), into out: 0, or -1 when it does not answer. A relative
 * storage.dir is the daemon's, from the directory it started in, which the
 * CLI cannot know otherwise. -2 when it answered without one (an older
 * wdriftd, or a refusal).
 */
static int daemon_storage(const char *config, char *out, size_t len)
{
	struct dc_target t = { .config = config };
	char err[512], *reply = NULL;
	int rc = -2;

	if (dc_resolve(&t, err, sizeof(err)) < 0 ||
	    dc_request(&t, "{\"v\":1,\"cmd\":\"status\"}", &reply, err, sizeof(err)) < 0)
		return -1;
	json_t *o = json_loads(reply, 0, NULL);
	const char *dir = json_string_value(json_object_get(o, "storage"));
	if (dir && dir[0] == '/' && (size_t)snprintf(out, len, "%s", dir) < len)
		rc = 0;
	json_decref(o);
	free(reply);
	return rc;
}

/*
 * The latest step with results of study, as the daemon says (`studies`):
 * >= 0, or -1 when it has none, does not answer or does not know it.
 */
static long long daemon_latest(const char *config, const char *study)
{
	struct dc_target t = { .config = config };
	char err[512], *reply = NULL;
	long long latest = -1;
	size_t i;
	json_t *s;

	if (dc_resolve(&t, err, sizeof(err)) < 0 ||
	    dc_request(&t, "{\"v\":1,\"cmd\":\"studies\"}", &reply, err, sizeof(err)) < 0)
		return -1;
	json_t *o = json_loads(reply, 0, NULL);
	json_array_foreach(json_object_get(o, "studies"), i, s)
		if (!strcmp(json_string_value(json_object_get(s, "name")) ?: "", study) &&
		    json_is_integer(json_object_get(s, "latest")))
			latest = json_integer_value(json_object_get(s, "latest"));
	json_decref(o);
	free(reply);
	return latest;
}

/*
 * The drift log of study under a relative storage.dir: the daemon's, when
 * it answers; else this directory's, said on stderr, since a project run
 * from another directory (a trial) has its own ./var, whose log would pass
 * for this one's.
 */
static void relative_log(struct study_data *sd, const char *study)
{
	char dir[PATH_MAX], cwd[PATH_MAX];
	int r = daemon_storage(sd->config_path, dir, sizeof(dir));

	if (r == 0) {
		snprintf(sd->log_path, sizeof(sd->log_path), "%.3800s/drift/%.200s.h5", dir, study);
		return;
	}
	snprintf(sd->log_path, sizeof(sd->log_path), "%s/drift/%s.h5", sd->cfg.storage.dir, study);
	if (!getcwd(cwd, sizeof(cwd)))
		snprintf(cwd, sizeof(cwd), ".");
	fprintf(stderr, "wdrift %s: storage.dir '%s' in %s is relative to the directory wdriftd started in, "
		"and wdriftd %s: reading %s/%s from this directory (--log FILE reads another)\n", cli_cmd,
		sd->cfg.storage.dir, sd->config_path, r == -1 ? "is not answering to say which" :
		"answered without saying which", cwd,
		wd_path_rest(sd->log_path));	/* not DIR/./var */
}

json_t *study_data_daemon_drift(const struct study_data *sd, char *why, size_t len)
{
	struct dc_target t = { .config = sd->config_path };
	char err[1024], *reply = NULL;

	/* --log: another daemon's log, maybe, though WDRIFT_CONFIG or /etc gives a config (a review's) */
	if (sd->log_given || !sd->config_path)
		return wd_error(why, len, "Not asked of wdriftd (--log FILE: a drift log of any daemon's)"), NULL;
	json_t *req = json_pack("{s:i,s:s,s:s}", "v", 1, "cmd", "drift", "study", sd->name);
	char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (!text || dc_resolve(&t, err, sizeof(err)) < 0) {
		free(text);
		return wd_error(why, len, "wdriftd could not be asked (%s)", text ? err : "out of memory"), NULL;
	}
	int r = dc_request(&t, text, &reply, err, sizeof(err));
	free(text);
	if (r < 0)
		return wd_error(why, len, "wdriftd did not answer (%s)", err), NULL;
	json_t *o = json_loads(reply, 0, NULL);
	free(reply);
	if (!json_is_true(json_object_get(o, "ok"))) {
		const char *e = json_string_value(json_object_get(o, "error"));
		wd_error(why, len, "wdriftd answered: %s", e ? e : "not a reply this version reads");
		json_decref(o);
		return NULL;
	}
	return o;
}

int study_data_load(struct study_data *sd, const char *study, const char *config,
		    const char *log, char *err, size_t errlen)
{
	char cerr[WD_CONFIG_ERR_MAX];

	memset(sd, 0, sizeof(*sd));
	sd->name = study;
	sd->log_given = log != NULL;
	if (dc_config_load(config, &sd->cfg, "--log FILE", cerr, sizeof(cerr)) == 0)
		sd->config_path = dc_config_path(config);
	else if (!log || config)	/* --log alone needs no config; -c FILE must load */
		return wd_error(err, errlen, "%s", cerr);
	for (size_t i = 0; i < sd->cfg.n_studies; i++)
		if (!strcmp(sd->cfg.studies[i].name, study))
			sd->study = &sd->cfg.studies[i];
	if (!sd->study && !log) {
		/* worded as the daemon's drift reply words it (one owner) */
		char why[600];
		wd_config_no_study(&sd->cfg, study, why, sizeof(why));
		snprintf(err, errlen, "%s: %s", sd->config_path, why);
		study_data_release(sd);
		return -1;
	}
	if (log)
		snprintf(sd->log_path, sizeof(sd->log_path), "%s", log);
	else if (sd->cfg.storage.dir[0] != '/' && sd->config_path)
		relative_log(sd, study);
	else
		snprintf(sd->log_path, sizeof(sd->log_path), "%s/drift/%s.h5", sd->cfg.storage.dir, study);
	if (access(sd->log_path, F_OK) != 0 && !log) {
		/* the daemon has results: the file went (a trial's read as "none computed yet") */
		long long latest = sd->config_path ? daemon_latest(sd->config_path, study) : -1;
		if (latest >= 0)
			wd_error(err, errlen, "%s: the drift log of study '%s' is not there, though wdriftd has "
				 "results for it (the latest at step %lld): removed? wdriftd writes it again from its "
				 "write-ahead log with the study's next result, or at its next start", sd->log_path,
				 study, latest);
		else
			wd_error(err, errlen, "%s: no drift log for study '%s' yet (no comparison has been "
				 "computed, or storage.dir in %s is relative to another directory: give --log FILE)",
				 sd->log_path, study, sd->config_path);
		study_data_release(sd);
		return -1;
	}
	if (driftlog_read(sd->log_path, &sd->log, err, errlen) < 0) {
		study_data_release(sd);
		return -1;
	}
	/* --log of another study's log: the page would pair this study's config with its rows (a trial's) */
	size_t ours = 0;
	for (size_t i = 0; sd->study && i < sd->log.n_runs; i++)
		ours += wd_study_role(sd->study, sd->log.runs[i], NULL) != NULL;
	if (sd->study && log && sd->log.n_runs && !ours)
		cli_warning("%s holds runs (%s%s) of which study '%s' in %s names none: another study's drift "
			    "log? Its rows are read as this study's", log, sd->log.runs[0],
			    sd->log.n_runs > 1 ? ", …" : "", study, sd->config_path);
	return 0;
}

int study_data_output(const struct study_args *o,
		      int (*write)(FILE *f, const struct study_data *sd, const struct study_args *o))
{
	struct study_data sd;
	char err[4096], tmp[4200];

	if (study_data_load(&sd, o->study, o->config, o->log, err, sizeof(err)) < 0)
		return cli_error("%s", err);
	FILE *f = cli_out_open(o->out, tmp, sizeof(tmp));
	if (!f) {
		study_data_release(&sd);
		return EXIT_FAIL;
	}
	int r = write(f, &sd, o);
	long long first = -1, last = -1;
	size_t steps = 0;
	for (size_t i = 0; i < sd.log.n_rows; i++) {	/* rows are in step order */
		long long step = (long long)dl_row(&sd.log, i)->step;
		steps += !i || step != last;
		first = i ? first : step;
		last = step;
	}
	study_data_release(&sd);
	if (r < 0) {
		cli_out_abort(f, tmp);
		return cli_error("out of memory");
	}
	int to_file = f != stdout && tmp[0];	/* a regular file, renamed into place */
	r = cli_out_commit(f, o->out, tmp);
	/* a file written says so (a trial's "did it work?"); standard output speaks for itself */
	if (r == EXIT_OK && to_file && !steps)
		cli_note("wrote %s: study '%s' has no results yet", o->out, o->study);
	else if (r == EXIT_OK && to_file)
		cli_note("wrote %s: study '%s', %zu step%s (%lld to %lld)", o->out, o->study, steps,
			 steps == 1 ? "" : "s", first, last);
	return r;
}

void study_data_release(struct study_data *sd)
{
	driftlog_release(&sd->log);
	wd_config_release(&sd->cfg);
	sd->study = NULL;
	sd->config_path = NULL;
}

const struct study_metric study_metrics[STUDY_N_METRICS] = {
	{ "w1", "W1", offsetof(struct driftlog_disk_row, w1) },
	{ "max_abs_diff", "max |a−b|", offsetof(struct driftlog_disk_row, max_abs_diff) },
	{ "rel_l2", "rel L2", offsetof(struct driftlog_disk_row, rel_l2) },
};

const char *study_role_name(int role)
{
	return role == 1 ? "candidate" : role == 2 ? "proxy" : "?";
}

const char *study_kind_name(int kind)
{
	static const char *const k[] = { "tensor", "mean", "median", "max" };
	return kind >= 0 && kind <= 3 ? k[kind] : "?";
}
