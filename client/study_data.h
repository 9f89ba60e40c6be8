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

#include "config.h"
#include "driftlog.h"

struct study_data {
	const char *name;			/* the study */
	struct wd_config cfg;			/* defaults when no config was read */
	const char *config_path;		/* NULL: none read */
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

/* Returns 0, or -1 with err naming the file, key or dataset. */
int study_data_load(struct study_data *sd, const char *study, const char *config,
		    const char *log, char *err, size_t errlen);
void study_data_release(struct study_data *sd);

/* "candidate" or "proxy"; "mean", "median", "max" or "tensor". */
const char *study_role_name(int role);
const char *study_kind_name(int kind);

#endif
