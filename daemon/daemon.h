/*
 * daemon.h: wdriftd's one struct, what main.c's loop holds: the config,
 * the state, the threads' handles and the sockets. Only main.c and the
 * handlers it calls on its thread (reconfigure.c) see it; the other
 * modules get the parts they need.
 */
#ifndef WDRIFT_DAEMON_H
#define WDRIFT_DAEMON_H

#include <limits.h>
#include <stdint.h>

#include <jansson.h>

#include "alerts.h"
#include "auth.h"
#include "compute.h"
#include "config.h"
#include "config_find.h"
#include "control.h"
#include "events.h"
#include "ingest.h"
#include "metrics_http.h"
#include "peers.h"
#include "config_file.h"
#include "recover.h"
#include "socket_file.h"
#include "spool.h"
#include "state.h"
#include "wal.h"

struct daemon {
	const char *config_path;	/* NULL: the built-in default */
	struct wd_config_found found;	/* where config_path came from */
	struct wd_config cfg;
	struct state st;
	struct wal *wal;
	struct spool *spool;
	struct compute *compute;
	struct alerts *alerts;
	struct wd_engine *engine;
	struct recovery rec;		/* what the WAL's replay found, until handed on */
	struct events events;
	struct ingest ix;
	struct control ctl;
	void *zctx, *ingest_sock, *control_sock;
	struct socket_file socket_files[3];	/* ingest, control, events: removed at a clean stop */
	struct auth *auth;		/* NULL: no CURVE */
	struct peers *peers;		/* the ingest socket's connections */
	struct metrics_http *metrics;	/* listen.metrics; NULL: off */
	struct config_file cfile;	/* the file beside the config that runs: status */
	char storage[PATH_MAX];		/* storage.dir, absolute: what status says */
	char storage_note[4 * PATH_MAX];	/* a new storage.dir beside the config's used one: status */
	int sigfd, lockfd, stop;
	uint64_t watchdog_usec;
	double catch_up_at;		/* monotonic: the start-up alert catch-up; 0: done */
	int caught_up;			/* the start-up's catch-up is done: later ones follow backfills */
};

/* Seconds from binding the sockets to the start-up alert catch-up (main.c says why). */
#define CATCH_UP_DELAY 1.0

/*
 * The file at path, or the built-in default for NULL; 0 or -1 with err.
 * *hash (when hash is not NULL and there is a file): its bytes' hash,
 * taken before it is read (config_file.h), or 0 when unreadable.
 */
int daemon_load_config(const char *path, struct wd_config *cfg, uint64_t *hash, char *err, size_t errlen);
/* A notice when cfg has no study: snapshots are stored, nothing compared. */
void daemon_note_no_study(const struct wd_config *cfg);
/*
 * What daemon_reload checks of the config file, without the reload (ctx:
 * the daemon): 0, or -1 with err; *hash: the bytes checked (config_file.h's
 * check).
 */
int daemon_reload_check(void *ctx, uint64_t *hash, char *err, size_t errlen);
/* SIGHUP and control's reload (ctx: the daemon); control.h's reload_fn. */
int daemon_reload(void *ctx, json_t **changes, char *err, size_t errlen);
/* control's runs rm (ctx: the daemon); control.h's forget_fn. */
int daemon_forget_run(void *ctx, const char *run, unsigned how, struct forgotten *gone, char *err,
		      size_t errlen);
/* control's publishers of a run (ctx: the daemon): its connections open now. */
size_t daemon_publishers(void *ctx, const char *run);
/* control's jobs of a run (ctx: the daemon): peers_jobs. */
size_t daemon_jobs(void *ctx, const char *run, char *who, size_t len);
/* control's connected (ctx: the daemon): peers_open. */
int daemon_connected(void *ctx, const void *rid, size_t len);
/* libwdrift's log lines, for wd_log_set. */
void daemon_lib_log(int level, const char *msg);

#endif
