/*
 * study_data.h: what `wdrift report` and `wdrift export` read: a study's
 * drift log from disk (not from the daemon, so they work while it runs and
 * after it stopped), and the study's definition and alert rules from the
 * daemon's config.
 *
 * The log is STORAGE.DIR/drift/STUDY.h5, with a relative storage.dir taken
 * from the current directory (as the CLI takes relative ipc:// endpoints);
 * --log FILE names it instead, and then the config is optional.
 */
#ifndef WD_STUDY_DATA_H
#define WD_STUDY_DATA_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"
#include "driftlog.h"

struct study_data {
	const char *name;			/* the study */
	struct wd_config cfg;			/* defaults when no config was read */
	const char *config_path;		/* NULL: none read */
	int log_given;				/* --log FILE: a log of any daemon's, not asked of this one */
	const struct wd_config_study *study;	/* NULL: not in the config */
	char log_path[4096];
	struct driftlog log;
};

/* The command line that report and export share. */
struct study_args {
	const char *study, *config, *log, *out;	/* STUDY, -c, --log, -o */
	int json, csv;
};

/*
 * Parses STUDY [-o FILE] [-c FILE | --log FILE] [--json], and --csv when
 * with_csv. Returns -1 to go on; else the exit code, after --help or a
 * usage error was printed.
 */
int study_args_parse(int argc, char **argv, const char *usage, int with_csv, struct study_args *o);

/*
 * The rest of report and export, once their own checks of o are done:
 * loads the study, writes it to o->out (whole or not at all, stdout for
 * none or "-") with write, which returns 0 or -1 when out of memory.
 * Returns the exit code, after printing any error.
 */
int study_data_output(const struct study_args *o,
		      int (*write)(FILE *f, const struct study_data *sd, const struct study_args *o));

/*
 * The daemon's `drift STUDY` reply (its latest step) for the study of sd,
 * asked of the daemon of sd's config: what the drift log does not hold,
 * such as why a run is not compared (a step that expired, names unlike
 * the baseline's, a re-run refused). NULL with why when it is not asked
 * (--log FILE: a log the config's daemon may not have written), cannot
 * be, does not answer, or refuses. json_decref it.
 */
struct json_t;
struct json_t *study_data_daemon_drift(const struct study_data *sd, char *why, size_t len);

/* Returns 0, or -1 with err naming the file, key or dataset. */
int study_data_load(struct study_data *sd, const char *study, const char *config,
		    const char *log, char *err, size_t errlen);
void study_data_release(struct study_data *sd);

/*
 * The metrics each drift-log row holds, in column order. export's CSV and
 * JSON and the report's tensor tables list them from here: a metric the
 * log gains is one more entry here, not one more column in each writer.
 */
struct study_metric {
	const char *key;	/* CSV column and JSON member: "max_abs_diff" */
	const char *title;	/* a table's heading: "max |a−b|" */
	size_t offset;		/* of its double in struct driftlog_disk_row */
};
#define STUDY_N_METRICS 3
extern const struct study_metric study_metrics[STUDY_N_METRICS];

static inline double study_metric_of(const struct driftlog_disk_row *r, const struct study_metric *m)
{
	return *(const double *)(const void *)((const char *)r + m->offset);
}

/* "candidate" or "proxy"; "mean", "median", "max" or "tensor". */
const char *study_role_name(int role);
const char *study_kind_name(int kind);

#endif
