/*
 * main.c: wdriftd: start-up, the zmq_poll loop, reload and shutdown
 * (docs/daemon.md). The only file that includes zmq.h: ingest.c and
 * control.c see frames and strings, not sockets.
 *
 * Start-up order: config, storage lock, write-ahead log replay, engine
 * probe, spool thread, sockets bound, then READY=1.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

/* The oldest libzmq wdriftd runs on: 4.3.3. */
#define WD_ZMQ_FLOOR 40303

#include "alerts.h"
#include "auth.h"
#include "compute.h"
#include "config.h"
#include "control.h"
#include "dirs.h"
#include "fdlimit.h"
#include "forget.h"
#include "identity.h"
#include "ingest.h"
#include "logging.h"
#include "notify.h"
#include "spool.h"
#include "peers.h"
#include "query.h"
#include "state.h"
#include "wal.h"

#define MAX_FRAMES (1 + 4096)	/* per message: the routing id, then at most 4096 frames,
				   header and payload (protocol.md) */
#define BATCH 64		/* messages per socket per poll round: fairness */
#define INGEST_SLICE 0.05	/* seconds of ingest work per poll round, so that a flood of
				   large messages (a checksum each) leaves control answering */
#define DRAIN_SECONDS 10.0
#define INGEST_RCVHWM 8		/* frames ZeroMQ may queue per peer */
/*
 * A control request is a small JSON object (a tensor glob at most). Parsed
 * on the main loop, a 60 MiB one held it for 3 s and took 1 GB (an outside
 * attack, issue 11): over CONTROL_MAX_REQUEST it gets an error unread, and
 * ZeroMQ drops a peer that sends a frame over CONTROL_MAX_FRAME.
 */
#define CONTROL_MAX_REQUEST (64 << 10)
#define CONTROL_MAX_FRAME (1 << 20)

static const char usage_text[] =
"usage: wdriftd [-c FILE] [--check-config] [--print-config] [--force]\n"
"\n"
"The wdrift daemon: training runs stream weight snapshots to it over ZeroMQ\n"
"(docs/protocol.md); it stores them durably and compares them (docs/daemon.md).\n"
"\n"
"  -c, --config FILE  the configuration (docs/config.md); without it, the\n"
"                     built-in default, which equals config/wdrift.yaml:\n"
"                     ipc:// endpoints under ./run/, storage under ./var/\n"
"      --check-config validate the configuration and exit: 0 valid, 2 not\n"
"      --print-config print the effective configuration as YAML and exit\n"
"      --force        start even when the write-ahead log is damaged in its\n"
"                     middle, keeping the records before the damage\n"
"  -h, --help         this help\n"
"      --version      the version\n"
"\n"
"Signals: SIGHUP reloads the configuration (an invalid one is refused and the\n"
"old one kept); SIGTERM and SIGINT drain and exit 0. Under systemd it speaks\n"
"sd_notify (Type=notify, WatchdogSec=). Exit: 0 ok, 1 start-up failure, 2 bad\n"
"configuration or usage.\n";

struct daemon {
	const char *config_path;	/* NULL: the built-in default */
	struct wd_config cfg;
	struct state st;
	struct wal *wal;
	struct spool *spool;
	struct compute *compute;
	struct alerts *alerts;
	struct wd_engine *engine;
	/* from the WAL replay: result payloads, and which runs they cover */
	char **replayed;
	size_t n_replayed, cap_replayed;
	struct covered { char *study, *run; int64_t step; } *covered;
	size_t n_covered, cap_covered;
	struct covered *dropped;	/* retention drops: study unused */
	size_t n_dropped, cap_dropped;
	struct ingest ix;
	struct control ctl;
	void *zctx, *ingest_sock, *control_sock, *events_sock;
	struct auth *auth;		/* NULL: no CURVE */
	struct peers *peers;		/* the ingest socket's connections */
	int sigfd, lockfd, stop;
	uint64_t watchdog_usec;
};

/* --- replies through the ingest socket --- */

static void ingest_send(void *ctx, const void *id, size_t id_len, const char *body)
{
	struct daemon *d = ctx;
	if (zmq_send(d->ingest_sock, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(d->ingest_sock, body, strlen(body), ZMQ_DONTWAIT) < 0)
		log_debug("ingest: reply not sent: %s", zmq_strerror(errno));
}

/* --- configuration --- */

static int load_config(const char *path, struct wd_config *cfg, char *err, size_t errlen)
{
	if (path)
		return wd_config_load(path, cfg, err, errlen);
	return wd_config_load_string("(built-in)", wd_config_default_yaml, cfg, err, errlen);
}

static void lib_log(int level, const char *msg);

/* SIGHUP and the reload command: validate all, then swap, or keep the old. */
static int reload(void *ctx, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	struct wd_config next;
	int r;

	notify_reloading();
	wd_config_defaults(&next);
	r = load_config(d->config_path, &next, err, errlen);
	if (r == 0 && (r = wd_config_reload_check(&d->cfg, &next, err, errlen)) < 0)
		wd_config_release(&next);
	if (r == 0) {
		wd_config_release(&d->cfg);
		d->cfg = next;	/* the arena moves with the struct */
		d->ix.cfg = d->ctl.cfg = &d->cfg;
		if (d->compute)
			compute_set_config(d->compute, &d->cfg);
		if (d->alerts)
			alerts_set_config(d->alerts, &d->cfg);
		auth_set_config(d->auth, &d->cfg);
		log_level = d->cfg.log.level;
		wd_log_set(log_level, lib_log);	/* libwdrift's level follows too */
		log_notice("reloaded '%s': %zu studies, %zu alerts", d->cfg.source, d->cfg.n_studies,
			   d->cfg.n_alerts);
	} else {
		log_err("reload refused, the old config stays: %s", err);
	}
	notify_ready("serving");	/* always, even when the reload failed */
	return r;
}

/*
 * runs rm (control.c): refused for a run unknown or with a snapshot being
 * received or stored; otherwise the compute thread forgets it on disk and
 * this thread in memory: its durable steps, identities and kept results.
 */
static int forget_run(void *ctx, const char *run, size_t *steps, size_t *results, char *err,
		      size_t errlen)
{
	struct daemon *d = ctx;
	struct run *r = state_run(&d->st, run, 0);
	long files;
	int rc;

	if (!r)
		return snprintf(err, errlen, "no run '%.200s' (wdrift runs lists them)", run), -ENOENT;
	for (struct snapshot *p = d->st.pending; p; p = p->next)
		if (p->run == r && !p->recheck) {
			snprintf(err, errlen, "run '%.200s' has step %lld %s: wait for its ack (or for "
				 "limits.pending_timeout to drop it), then try again", run, (long long)p->step,
				 p->committing ? "being stored" : "being received");
			return -EBUSY;
		}
	if ((rc = compute_forget(d->compute, run, results, &files)) < 0)
		return snprintf(err, errlen, "write-ahead log: %s: nothing was removed", strerror(-rc)), rc;
	for (struct snapshot *p = d->st.pending, *n; p; p = n) {	/* re-sends being checked */
		n = p->next;
		if (p->run != r)
			continue;
		for (struct snapshot **q = &d->st.pending; *q; q = &(*q)->next)
			if (*q == p) {
				*q = p->next;
				d->st.n_pending--;
				break;
			}
		snapshot_free(&d->st, p);
	}
	*steps = r->n_durable;
	d->st.count.snapshots_durable -= r->n_durable < d->st.count.snapshots_durable ?
					 r->n_durable : d->st.count.snapshots_durable;
	state_forget_run(&d->st, r);
	control_forget(&d->ctl, run);
	log_notice("runs rm: run '%s': %zu durable steps and %zu result records forgotten, %ld spool "
		   "files removed", run, *steps, *results, files > 0 ? files : 0);
	return 0;
}

/* --- start-up --- */

/*
 * A "forget" record (runs rm) in the replay: the run's durable steps, its
 * rows in the results read so far (all of a result whose baseline it was),
 * and what those noted, as compute.c's forget_job did when it was written.
 */
static void replay_forget(struct daemon *d, const char *run)
{
	struct run *r = run ? state_run(&d->st, run, 0) : NULL;
	size_t k = 0;

	if (!run)
		return;
	if (r) {
		d->st.count.snapshots_durable -= r->n_durable < d->st.count.snapshots_durable ?
						 r->n_durable : d->st.count.snapshots_durable;
		state_forget_run(&d->st, r);
	}
	d->n_replayed = forget_records(d->replayed, d->n_replayed, run, NULL, NULL);
	for (size_t i = 0; i < d->n_covered; i++) {
		const struct wd_config_study *st = NULL;
		for (size_t s = 0; s < d->cfg.n_studies; s++)
			if (!strcmp(d->cfg.studies[s].name, d->covered[i].study))
				st = &d->cfg.studies[s];
		if (!strcmp(d->covered[i].run, run) || (st && !strcmp(st->baseline, run))) {
			free(d->covered[i].study);
			free(d->covered[i].run);
			continue;
		}
		d->covered[k++] = d->covered[i];
	}
	d->n_covered = k;
	k = 0;
	for (size_t i = 0; i < d->n_dropped; i++) {
		if (!strcmp(d->dropped[i].run, run)) {
			free(d->dropped[i].run);
			continue;
		}
		d->dropped[k++] = d->dropped[i];
	}
	d->n_dropped = k;
}

static int replay_record(void *ctx, const char *payload, size_t len)
{
	struct daemon *d = ctx;
	json_t *o = json_loadb(payload, len, 0, NULL);
	const char *t = json_string_value(json_object_get(o, "t"));

	if (t && !strcmp(t, "result")) {	/* kept for the drift logs; runs noted */
		const char *study = json_string_value(json_object_get(o, "study"));
		json_t *rows = json_object_get(o, "rows");
		int64_t step = json_integer_value(json_object_get(o, "step"));
		if (d->n_replayed == d->cap_replayed) {
			size_t cap = d->cap_replayed ? 2 * d->cap_replayed : 64;
			char **v = realloc(d->replayed, cap * sizeof(*v));
			if (!v)
				goto out;
			d->replayed = v;
			d->cap_replayed = cap;
		}
		if (!(d->replayed[d->n_replayed] = strndup(payload, len)))
			goto out;
		d->n_replayed++;
		for (size_t i = 0; study && i < json_array_size(rows); i++) {
			const char *run = json_string_value(json_array_get(json_array_get(rows, i), 3));
			const struct covered *last = d->n_covered ? &d->covered[d->n_covered - 1] : NULL;
			if (!run || (last && last->step == step && !strcmp(last->run, run) &&
				     !strcmp(last->study, study)))
				continue;	/* the row before covers it already */
			if (d->n_covered == d->cap_covered) {
				size_t cap = d->cap_covered ? 2 * d->cap_covered : 256;
				struct covered *v = realloc(d->covered, cap * sizeof(*v));
				if (!v)
					goto out;
				d->covered = v;
				d->cap_covered = cap;
			}
			d->covered[d->n_covered++] = (struct covered){ strdup(study), strdup(run), step };
		}
	}
	if (t && !strcmp(t, "drop")) {
		const char *run = json_string_value(json_object_get(o, "run"));
		if (run && d->n_dropped == d->cap_dropped) {
			size_t cap = d->cap_dropped ? 2 * d->cap_dropped : 64;
			struct covered *v = realloc(d->dropped, cap * sizeof(*v));
			if (!v)
				goto out;
			d->dropped = v;
			d->cap_dropped = cap;
		}
		if (run)
			d->dropped[d->n_dropped++] = (struct covered){ NULL, strdup(run),
				json_integer_value(json_object_get(o, "step")) };
	}
	if (t && !strcmp(t, "forget"))	/* runs rm: what came before it of the run goes */
		replay_forget(d, json_string_value(json_object_get(o, "run")));
	if (t && !strcmp(t, "snapshot")) {
		const char *run = json_string_value(json_object_get(o, "run"));
		json_t *step = json_object_get(o, "step");
		struct run *r = run ? state_run(&d->st, run, 1) : NULL;
		if (r && json_is_integer(step)) {
			/* content: absent in records older than it; such steps go unchecked */
			run_add_durable(r, json_integer_value(step),
					identity_from_json(json_object_get(o, "content")));
			d->st.count.snapshots_durable++;
		}
	}
out:
	json_decref(o);
	return 0;	/* a record we do not know is a later version's: skip it */
}

/* Has run a logged result in study at a baseline step within tol of step? */
static int is_covered(const struct daemon *d, const char *study, const char *run, int64_t step,
		      int64_t tol)
{
	for (size_t i = 0; i < d->n_covered; i++) {
		int64_t dist = d->covered[i].step > step ? d->covered[i].step - step
							   : step - d->covered[i].step;
		if (dist <= tol && !strcmp(d->covered[i].run, run) && !strcmp(d->covered[i].study, study))
			return 1;
	}
	return 0;
}

/* Did retention remove run's spool file at step (a "drop" record)? */
static int is_dropped(const struct daemon *d, const char *run, int64_t step)
{
	for (size_t k = 0; k < d->n_dropped; k++)
		if (d->dropped[k].step == step && !strcmp(d->dropped[k].run, run))
			return 1;
	return 0;
}

/*
 * Frees what replay_record noted for resume_compute (covered, dropped): after
 * resume_compute, or at shutdown when start-up failed before it (a damaged
 * WAL stops wal_open after it has replayed the records before the damage).
 */
static void replay_notes_release(struct daemon *d)
{
	for (size_t k = 0; k < d->n_dropped; k++)
		free(d->dropped[k].run);
	free(d->dropped);
	d->dropped = NULL;
	d->n_dropped = d->cap_dropped = 0;
	for (size_t i = 0; i < d->n_covered; i++) {
		free(d->covered[i].study);
		free(d->covered[i].run);
	}
	free(d->covered);
	d->covered = NULL;
	d->n_covered = d->cap_covered = 0;
}

/* Resubmits each of run's durable steps that no logged result covers. */
static size_t resume_run(struct daemon *d, const char *study, const char *run_name, int64_t tol)
{
	struct run *x = state_run(&d->st, run_name, 0);
	size_t n = 0;
	for (size_t k = 0; x && k < x->n_durable; k++)
		if (!is_dropped(d, x->name, x->durable[k]) &&
		    !is_covered(d, study, x->name, x->durable[k], tol)) {
			compute_submit(d->compute, x->name, x->durable[k]);
			n++;
		}
	return n;
}

/*
 * After a restart: the compute thread learns every durable snapshot, and a
 * snapshot of a candidate or proxy with no logged result in its study (it
 * was acked, then the daemon died before its results) is computed again;
 * so is a baseline step that lacks its synthetic proxy's row.
 */
static void resume_compute(struct daemon *d)
{
	int64_t tol = d->cfg.alignment.tolerance;
	size_t redo = 0;

	for (struct run *r = d->st.runs; r; r = r->next)
		for (size_t i = 0; i < r->n_durable; i++)
			if (!is_dropped(d, r->name, r->durable[i]))	/* retention removed its file */
				compute_known(d->compute, r->name, r->durable[i]);
	/* a crash between a "drop" record and its unlink leaves the file: remove it */
	for (size_t k = 0; k < d->n_dropped; k++) {
		char path[4300];
		snprintf(path, sizeof(path), "%s/spool/%s/%lld.h5", d->cfg.storage.dir, d->dropped[k].run,
			 (long long)d->dropped[k].step);
		if (unlink(path) == 0)
			log_notice("retention: removed '%s', dropped before the restart", path);
	}
	/* a dropped snapshot is never computed again: its file is gone */
	for (size_t i = 0; i < d->cfg.n_studies; i++) {
		const struct wd_config_study *st = &d->cfg.studies[i];
		for (size_t c = 0; c < st->candidates.n; c++)
			redo += resume_run(d, st->name, st->candidates.names[c], tol);
		for (size_t c = 0; c < st->proxies.n; c++)
			redo += resume_run(d, st->name, st->proxies.v[c].run, tol);
		struct run *base = st->synthetic_proxy != WD_SYNTHETIC_NONE ?
				   state_run(&d->st, st->baseline, 0) : NULL;
		const char *label = st->synthetic_proxy == WD_SYNTHETIC_BF16 ? "round:bf16" : "round:fp16";
		for (size_t k = 0; base && k < base->n_durable; k++)
			if (!is_dropped(d, base->name, base->durable[k]) &&
			    !is_covered(d, st->name, label, base->durable[k], 0)) {
				compute_submit(d->compute, base->name, base->durable[k]);
				redo++;
			}
	}
	if (redo)
		log_notice("compute: %zu snapshots without logged results: computing them again", redo);
	replay_notes_release(d);
}

/*
 * Start-up (storage.md): a spool file with no "snapshot" record was never
 * acked (the daemon died between its rename and its WAL record), and a
 * STEP.h5.tmp is a write a crash cut short. Both are removed, so that they
 * do not hold disk no budget counts. Runs before the spool thread starts.
 *
 * Under --force the WAL may have moved acked records aside (.corrupt), so a
 * spool file without a record may be an acked snapshot: it is renamed to
 * STEP.h5.orphan, which later sweeps leave alone, for a person to recover.
 */
static void spool_sweep(struct daemon *d, int force)
{
	char path[2048];	/* storage.dir is at most 1024 bytes */
	DIR *top, *sub;
	struct dirent *de, *fe;

	snprintf(path, sizeof(path), "%s/spool", d->cfg.storage.dir);
	if (!(top = opendir(path)))
		return;
	while ((de = readdir(top))) {
		if (de->d_name[0] == '.')
			continue;
		char dir[2048 + 260];
		snprintf(dir, sizeof(dir), "%s/%s", path, de->d_name);
		if (!(sub = opendir(dir)))
			continue;
		struct run *r = state_run(&d->st, de->d_name, 0);
		while ((fe = readdir(sub))) {
			long long step;
			char tail[16];
			int n = sscanf(fe->d_name, "%lld.%15s", &step, tail);
			int orphan = n == 2 && !strcmp(tail, "h5") && (!r || !run_is_durable(r, step));
			int torn = n == 2 && !strcmp(tail, "h5.tmp");
			if (!orphan && !torn)
				continue;
			char file[2048 + 520];
			snprintf(file, sizeof(file), "%s/%s", dir, fe->d_name);
			if (orphan && force) {
				char aside[2048 + 540];
				snprintf(aside, sizeof(aside), "%s.orphan", file);
				if (rename(file, aside) == 0)
					log_warning("spool: kept '%s' as '%s': no write-ahead log record "
						    "(--force may have moved it aside)", file, aside);
				continue;
			}
			if (unlink(file) == 0)
				log_notice("spool: removed '%s': %s", file, torn ? "a write cut short"
					   : "never acked (no write-ahead log record)");
		}
		closedir(sub);
	}
	closedir(top);
}

/* Alert transitions go out on the events socket. */
static void publish_event(void *ctx, const char *topic, const char *json)
{
	struct daemon *d = ctx;
	if (zmq_send(d->events_sock, topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(d->events_sock, json, strlen(json), ZMQ_DONTWAIT) < 0)
		log_debug("events: not sent: %s", zmq_strerror(errno));
}

static void on_durable(void *ctx, const char *run, int64_t step)
{
	struct daemon *d = ctx;
	compute_submit(d->compute, run, step);
}

/* libwdrift's log lines, through ours (journal prefixes included). */
static void lib_log(int level, const char *msg)
{
	log_at(level, "%s", msg);
}

static void *bind_socket(struct daemon *d, int type, const char *endpoint, const char *what)
{
	void *s = zmq_socket(d->zctx, type);
	int linger = 1000, maxmsg_ok;
	int64_t maxmsg = (int64_t)WIRE_MAX_FRAME + WIRE_MAX_HEADER;

	if (!s)
		return log_err("%s socket: %s", what, zmq_strerror(errno)), NULL;
	/* ingest's one monitor is peers.c's, which hands auth its handshake failures */
	if (d->auth && auth_server(d->auth, s, what, strcmp(what, "ingest") != 0) < 0) {
		log_err("%s socket: cannot make it a CURVE server: %s", what, zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
	if (!strcmp(what, "control"))
		maxmsg = CONTROL_MAX_FRAME;
	maxmsg_ok = type == ZMQ_PUB || !zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
	if (type == ZMQ_ROUTER) {
		/*
		 * ZeroMQ queues up to RCVHWM frames per peer before it stops
		 * reading that peer's socket (and TCP pushes back on it). The
		 * default, 1000 frames of up to 64 MiB, would hold gigabytes
		 * outside our budget; 8 bounds it at 512 MiB per peer.
		 */
		int hwm = INGEST_RCVHWM;
		zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	}
	int made = strncmp(endpoint, "ipc://", 6) ? 0 : dirs_make(endpoint + 6, 1);
	if (made < 0)
		log_warning("%s: cannot create the directory of '%s': %s", what, endpoint + 6,
			    strerror(-made));
	if (!maxmsg_ok || zmq_bind(s, endpoint) < 0) {
		log_err("cannot bind the %s socket to '%s': %s", what, endpoint, zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	log_notice("%s: listening on %s", what, endpoint);
	return s;
}

/*
 * The signals the loop reads from its signalfd. They must be blocked before
 * any thread starts (ZeroMQ's I/O threads, the spool): a thread that has
 * them unblocked would take SIGHUP's default action and end the process.
 */
static void signal_mask(sigset_t *mask)
{
	sigemptyset(mask);
	sigaddset(mask, SIGHUP);
	sigaddset(mask, SIGTERM);
	sigaddset(mask, SIGINT);
}

static int start(struct daemon *d, int force)
{
	char path[4096], err[WD_CONFIG_ERR_MAX];
	sigset_t mask;
	int r;

	d->st.started = now_mono();
	d->st.budget = d->cfg.memory.budget;
	if ((r = dirs_make(d->cfg.storage.dir, 0)) < 0)
		return error("storage.dir '%s': cannot create: %s", d->cfg.storage.dir, strerror(-r));
	snprintf(path, sizeof(path), "%s/lock", d->cfg.storage.dir);
	d->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (d->lockfd < 0 || flock(d->lockfd, LOCK_EX | LOCK_NB) < 0)
		return error("'%s': %s", path, errno == EWOULDBLOCK ? "another wdriftd uses this "
			     "storage.dir" : strerror(errno));
	snprintf(path, sizeof(path), "%s/wal", d->cfg.storage.dir);
	if (wal_open(path, force, replay_record, d, &d->wal, err, sizeof(err)) < 0)
		return error("%s", err);
	log_notice("write-ahead log: %llu records, %zu runs, %llu durable snapshots",
		   (unsigned long long)wal_records(d->wal), d->st.n_runs,
		   (unsigned long long)d->st.count.snapshots_durable);
	spool_sweep(d, force);
	wd_log_set(log_level, lib_log);	/* the engine says which backend runs */
	if ((r = wd_engine_open_device((enum wd_backend)d->cfg.compute.backend,
				       (int)d->cfg.compute.device, &d->engine)) < 0)
		return error("'%s': compute.backend cuda on compute.device %d: cannot open "
			     "the engine: %s (the line above says why)",
			     d->config_path ? d->config_path : "built-in config",
			     (int)d->cfg.compute.device, strerror(-r));
	if ((r = spool_start(d->cfg.storage.dir, d->wal, &d->spool)) < 0)
		return error("spool thread: %s", strerror(-r));
	struct result_batch **logged = calloc(d->n_replayed + 1, sizeof(*logged));
	size_t n_logged = 0;
	for (size_t i = 0; logged && i < d->n_replayed; i++)
		if ((logged[n_logged] = result_batch_decode(d->replayed[i], strlen(d->replayed[i]))))
			n_logged++;
	r = compute_start(d->cfg.storage.dir, d->wal, d->engine, &d->cfg, d->replayed,
			  d->n_replayed, &d->compute);
	if (r < 0) {
		for (size_t i = 0; i < n_logged; i++)
			result_batch_free(&logged[i]);
		free(logged);
		return error("compute thread: %s", strerror(-r));
	}
	d->replayed = NULL;	/* the compute thread has them (and frees them) */
	d->n_replayed = d->cap_replayed = 0;
	resume_compute(d);
	d->ix = (struct ingest){ .st = &d->st, .cfg = &d->cfg, .spool = d->spool,
				  .sink = { ingest_send, d }, .window = d->cfg.memory.budget / 2,
				  .on_durable = on_durable, .durable_ctx = d };
	d->ctl = (struct control){ .st = &d->st, .cfg = &d->cfg,
				   .engine = wd_engine_describe(d->engine), .spool = d->spool,
				   .reload = reload, .reload_ctx = d, .forget = forget_run };
	for (size_t i = 0; i < n_logged; i++)	/* logged results answer "drift" at once */
		control_add_result(&d->ctl, logged[i]);
	free(logged);
	if (!(d->alerts = alerts_new(publish_event, d)))
		return error("out of memory");
	alerts_set_config(d->alerts, &d->cfg);
	d->ctl.alerts = d->alerts;
	d->zctx = zmq_ctx_new();
	if (!d->zctx)
		return error("zmq context: %s", zmq_strerror(errno));
	if (auth_start(d->zctx, &d->cfg, &d->st.count.auth, &d->auth, err, sizeof(err)) < 0)
		return error("%s", err);
	const char *key, *open_ep = wd_config_network_endpoint(&d->cfg, &key);
	if (open_ep && !d->auth)
		log_warning("%s: '%s' takes connections from the network without authentication "
			    "(auth.allow_insecure: true): anyone who can reach it may publish and "
			    "control", key, open_ep);
	fdlimit_raise();	/* every connection takes one; libzmq aborts when they run out */
	if (!(d->ingest_sock = bind_socket(d, ZMQ_ROUTER, d->cfg.listen.ingest, "ingest")) ||
	    !(d->control_sock = bind_socket(d, ZMQ_ROUTER, d->cfg.listen.control, "control")) ||
	    !(d->events_sock = bind_socket(d, ZMQ_PUB, d->cfg.listen.events, "events")))
		return -1;
	if (!(d->peers = peers_start(d->zctx, d->ingest_sock, d->auth)))
		return error("ingest socket: cannot monitor its connections: %s", zmq_strerror(errno));
	signal_mask(&mask);
	d->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (d->sigfd < 0)
		return error("signalfd: %s", strerror(errno));
	d->watchdog_usec = notify_init();
	return 0;
}

/* --- the loop --- */

/* Receives one multipart message into msgs; returns its frame count, 0 if none. */
static size_t recv_message(void *sock, zmq_msg_t *msgs, int *truncated)
{
	size_t n = 0;
	int more = 1;

	*truncated = 0;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, sock, n ? 0 : ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			if (n == 0)
				return 0;	/* EAGAIN (or ETERM): nothing there */
			break;
		}
		more = zmq_msg_more(&m);
		if (n < MAX_FRAMES)
			msgs[n++] = m;
		else {
			*truncated = 1;	/* read the rest and drop it */
			zmq_msg_close(&m);
		}
	}
	return n;
}

static void handle_ingest(struct daemon *d, zmq_msg_t *msgs)
{
	static const void *data[MAX_FRAMES];
	static size_t len[MAX_FRAMES];
	double until = now_mono() + INGEST_SLICE;

	for (int k = 0; k < BATCH && now_mono() < until; k++) {
		int truncated;
		size_t n = recv_message(d->ingest_sock, msgs, &truncated);
		if (!n)
			return;
		for (size_t i = 0; i < n; i++) {
			data[i] = zmq_msg_data(&msgs[i]);
			len[i] = zmq_msg_size(&msgs[i]);
		}
		struct frames f = { truncated ? (n > 2 ? 2 : n) : n, data, len };
		struct ingest_seen seen = { .type = -1, .step = -1 };
		if (truncated) {
			/* more frames than any tensor may have: refuse without reading them */
			struct frames one = { 1, data, len };
			const char *body = "{\"v\":1,\"type\":\"error\",\"code\":\"bad_frames\","
					   "\"field\":\"frames\",\"reason\":\"more than 4096 frames\"}";
			d->st.count.errors[WIRE_BAD_FRAMES]++;
			ingest_send(d, one.data[0], one.len[0], body);
		} else {
			ingest_handle(&d->ix, &f, &seen);
		}
		if (n >= 2)	/* what the peer last sent, for a line if it drops */
			peers_message(d->peers, &msgs[1], seen.type, seen.run, seen.step);
		for (size_t i = 0; i < n; i++)
			zmq_msg_close(&msgs[i]);
	}
}

/* Control requests: [id, (empty,) body]; the reply keeps the envelope. */
static void handle_control(struct daemon *d, zmq_msg_t *msgs)
{
	for (int k = 0; k < BATCH; k++) {
		int truncated;
		size_t n = recv_message(d->control_sock, msgs, &truncated);
		if (!n)
			return;
		if (n >= 2) {
			/* the envelope, kept for a reply the query thread builds (drift) */
			const void *env_data[16];
			size_t env_len[16];
			struct query_envelope env = { n - 1, env_data, env_len };
			for (size_t i = 0; i + 1 < n && i < 16; i++) {
				env_data[i] = zmq_msg_data(&msgs[i]);
				env_len[i] = zmq_msg_size(&msgs[i]);
			}
			size_t len = zmq_msg_size(&msgs[n - 1]);
			char *reply;
			if (len > CONTROL_MAX_REQUEST) {
				d->st.count.control_requests++;
				if ((reply = malloc(160)))
					snprintf(reply, 160, "{\"v\":1,\"ok\":false,\"error\":\"request of %zu "
						 "bytes: at most %d, unread\"}", len, CONTROL_MAX_REQUEST);
			} else {
				reply = control_request(&d->ctl, zmq_msg_data(&msgs[n - 1]), len,
							n - 1 <= 16 ? &env : NULL);
			}
			for (size_t i = 0; reply && i + 1 < n; i++)
				zmq_send(d->control_sock, zmq_msg_data(&msgs[i]), zmq_msg_size(&msgs[i]),
					 ZMQ_SNDMORE | ZMQ_DONTWAIT);
			if (reply)
				zmq_send(d->control_sock, reply, strlen(reply), ZMQ_DONTWAIT);
			free(reply);
		}
		for (size_t i = 0; i < n; i++)
			zmq_msg_close(&msgs[i]);
	}
}

static void free_reply(void *data, void *hint)
{
	(void)hint;
	free(data);	/* from ZeroMQ's I/O thread, once the last copy is sent */
}

/* Drift replies the query thread built: each to every client that asked for it. */
static void handle_queries(struct daemon *d)
{
	struct query_job *j;

	while ((j = control_take(&d->ctl))) {
		zmq_msg_t body;
		/* not copied: a reply may be tens of megabytes */
		if (zmq_msg_init_data(&body, j->reply, j->reply_len, free_reply, NULL) < 0) {
			log_err("control: drift reply not sent: %s", zmq_strerror(errno));
			query_job_free(&j);
			continue;
		}
		j->reply = NULL;
		for (struct query_waiter *w = j->waiters; w; w = w->next) {
			size_t i = 0;
			while (i < w->n && zmq_send(d->control_sock, w->data[i], w->len[i],
						    ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
				i++;
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (i == w->n && zmq_msg_copy(&m, &body) == 0)
				zmq_msg_send(&m, d->control_sock, ZMQ_DONTWAIT);
			zmq_msg_close(&m);
		}
		zmq_msg_close(&body);
		query_job_free(&j);
	}
}

static void handle_spooled(struct daemon *d)
{
	struct snapshot *snap;
	char why[256];
	int err;

	while ((snap = spool_take(d->spool, &err, why, sizeof(why))))
		ingest_spooled(&d->ix, snap, err, why);
}

/* Results: an event for subscribers, and the latest kept for "drift". */
static void handle_results(struct daemon *d)
{
	struct result_batch *b;

	while ((b = compute_take(d->compute))) {
		json_t *runs = json_object();
		for (size_t i = 0; i < b->n_rows; i++) {
			const struct drift_row *r = &b->rows[i];
			if (r->kind != ROW_MAX && r->kind != ROW_MEAN)
				continue;
			json_t *run = json_object_get(runs, r->run);
			if (!run) {
				run = json_pack("{s:s}", "role", r->role == ROLE_CANDIDATE ? "candidate" : "proxy");
				json_object_set_new(runs, r->run, run);
			}
			json_t *ratios = json_object();
			for (size_t k = 0; k < b->n_proxies; k++)
				json_object_set_new(ratios, b->proxies[k],
						    isfinite(r->ratio[k]) ? json_real(r->ratio[k]) : json_null());
			const char *w = r->kind == ROW_MAX ? "w1_max" : "w1_mean";
			json_object_set_new(run, w, isfinite(r->w1) ? json_real(r->w1) : json_null());
			json_object_set_new(run, r->kind == ROW_MAX ? "ratio_max" : "ratio_mean", ratios);
		}
		json_t *ev = json_pack("{s:i,s:s,s:I,s:s,s:o}", "v", 1, "study", b->study,
				       "step", (json_int_t)b->step, "baseline", b->baseline, "runs", runs);
		char *body = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
		char topic[256];
		snprintf(topic, sizeof(topic), "drift.%.200s", b->study);
		if (body && (zmq_send(d->events_sock, topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
			     zmq_send(d->events_sock, body, strlen(body), ZMQ_DONTWAIT) < 0))
			log_debug("events: not sent: %s", zmq_strerror(errno));
		free(body);
		json_decref(ev);
		alerts_on_results(d->alerts, b);
		control_add_result(&d->ctl, b);
	}
}

static void handle_signal(struct daemon *d)
{
	struct signalfd_siginfo si;
	char err[WD_CONFIG_ERR_MAX];

	while (read(d->sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP)
			reload(d, err, sizeof(err));
		else
			d->stop = 1;
	}
}

static void run_loop(struct daemon *d)
{
	zmq_msg_t *msgs = calloc(MAX_FRAMES, sizeof(*msgs));
	double next_ping = 0, next_status = 0, next_tick = 0, next_expire = now_mono() + 1;

	if (control_start(&d->ctl) < 0)
		log_warning("control: no query thread: drift replies are built on the main loop");
	while (!d->stop && msgs) {
		zmq_pollitem_t items[7 + 4] = {
			{ d->ingest_sock, 0, ZMQ_POLLIN, 0 },
			{ d->control_sock, 0, ZMQ_POLLIN, 0 },
			{ NULL, spool_fd(d->spool), ZMQ_POLLIN, 0 },
			{ NULL, d->sigfd, ZMQ_POLLIN, 0 },
			{ NULL, compute_fd(d->compute), ZMQ_POLLIN, 0 },
			{ peers_socket(d->peers), 0, ZMQ_POLLIN, 0 },
			{ NULL, control_fd(&d->ctl), control_fd(&d->ctl) >= 0 ? ZMQ_POLLIN : 0, 0 },
		};
		int n_items = 7 + auth_pollitems(d->auth, items + 7, 4);
		long timeout = d->watchdog_usec ? (long)(d->watchdog_usec / 1000) : 1000;
		if (timeout > 1000)
			timeout = 1000;
		if (zmq_poll(items, n_items, timeout) < 0) {
			if (errno == EINTR)
				continue;
			log_err("zmq_poll: %s", zmq_strerror(errno));
			if (errno == ETERM)
				break;
			continue;
		}
		if (items[3].revents)
			handle_signal(d);
		for (int i = 7; i < n_items; i++)
			if (items[i].revents) {
				auth_handle(d->auth);	/* handshakes wait on ZAP: first */
				break;
			}
		if (items[5].revents)
			peers_handle(d->peers);
		if (items[2].revents)
			handle_spooled(d);
		/*
		 * Before the control requests, not after: the first status after
		 * start-up would report the queue of recomputations empty (the
		 * initial 0), and a client waiting for it would read a drift log
		 * that still lacks them.
		 */
		d->ctl.compute_depth = compute_depth(d->compute);
		if (items[1].revents)
			handle_control(d, msgs);
		if (items[6].revents)
			handle_queries(d);
		if (items[0].revents)
			handle_ingest(d, msgs);
		if (items[4].revents)
			handle_results(d);
		double t = now_mono();
		if (d->watchdog_usec && t >= next_ping) {
			notify_watchdog();	/* from the loop itself: a stalled loop stops it */
			next_ping = t + (double)d->watchdog_usec / 1e6;
		}
		if (t >= next_status) {
			notify_status("%zu runs, %llu snapshots durable, %zu pending, %llu MiB held",
				      d->st.n_runs, (unsigned long long)d->st.count.snapshots_durable,
				      d->st.n_pending, (unsigned long long)(d->st.reserved >> 20));
			next_status = t + 5;
		}
		if (t >= next_tick) {
			alerts_tick(d->alerts, &d->st);
			auth_tick(d->auth);
			next_tick = t + 1;
		}
		alerts_reap(d->alerts);
		if (t >= next_expire) {
			ingest_expire(&d->ix, (double)d->cfg.limits.pending_timeout);
			next_expire = t + 1;	/* limits.pending_timeout may be seconds */
		}
	}
	free(msgs);
}

/* Stops taking snapshots, lets the spool finish what was committed, acks it. */
static void drain(struct daemon *d)
{
	double deadline = now_mono() + DRAIN_SECONDS;

	notify_stopping();
	log_notice("stopping: %zu snapshots committing", spool_depth(d->spool));
	while (spool_depth(d->spool) && now_mono() < deadline) {
		zmq_pollitem_t it = { NULL, spool_fd(d->spool), ZMQ_POLLIN, 0 };
		zmq_poll(&it, 1, 100);
		handle_spooled(d);
	}
	if (spool_depth(d->spool))
		log_warning("stopping with %zu snapshots not yet durable: not acked, their "
			    "publishers will re-send", spool_depth(d->spool));
}

static void shutdown_daemon(struct daemon *d)
{
	if (d->spool) {
		spool_stop(&d->spool);	/* joins: finished jobs stay unacked, which is safe */
	}
	compute_stop(&d->compute);	/* after the current comparison; the WAL has the rest */
	alerts_free(&d->alerts);
	control_release(&d->ctl);
	for (size_t i = 0; i < d->n_replayed; i++)
		free(d->replayed[i]);
	free(d->replayed);
	replay_notes_release(d);
	peers_stop(&d->peers);
	if (d->ingest_sock) zmq_close(d->ingest_sock);
	if (d->control_sock) zmq_close(d->control_sock);
	if (d->events_sock) zmq_close(d->events_sock);
	auth_stop(&d->auth);
	if (d->zctx) zmq_ctx_term(d->zctx);
	wd_engine_close(&d->engine);
	wal_close(&d->wal);
	state_release(&d->st);
	wd_config_release(&d->cfg);
	if (d->sigfd > 0) close(d->sigfd);
	if (d->lockfd > 0) close(d->lockfd);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, 'C' },
		{ "print-config", no_argument, NULL, 'P' },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct daemon d;
	char err[WD_CONFIG_ERR_MAX];
	int c, check = 0, print = 0, force = 0;

	memset(&d, 0, sizeof(d));
	d.sigfd = d.lockfd = -1;
	log_init();
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': d.config_path = optarg; break;
		case 'C': check = 1; break;
		case 'P': print = 1; break;
		case 'f': force = 1; break;
		case 'h': fputs(usage_text, stdout); return 0;
		case 'V': printf("wdriftd %s\n", WDRIFT_VERSION); return 0;
		case ':':
			fprintf(stderr, "wdriftd: option '%s' needs a value\ntry 'wdriftd --help'\n",
				argv[optind - 1]);
			return 2;
		default:
			fprintf(stderr, "wdriftd: unknown option '%s'\ntry 'wdriftd --help'\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "wdriftd: unexpected argument '%s'\ntry 'wdriftd --help'\n", argv[optind]);
		return 2;
	}
	wd_config_defaults(&d.cfg);
	if (load_config(d.config_path, &d.cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "wdriftd: %s\n", err);
		return 2;
	}
	if (check && auth_check_key(&d.cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "wdriftd: %s\n", err);
		wd_config_release(&d.cfg);
		return 2;
	}
	if (check) {
		printf("%s: ok (%zu studies, %zu alerts)\n", d.cfg.source, d.cfg.n_studies,
		       d.cfg.n_alerts);
		wd_config_release(&d.cfg);
		return 0;
	}
	if (print) {
		wd_config_print(stdout, &d.cfg);
		wd_config_release(&d.cfg);
		return 0;
	}
	log_level = d.cfg.log.level;
	/* older libzmq has known CURVE and decoder bugs (CVE-2019-13132 among them) */
	int zmaj, zmin, zpat;
	zmq_version(&zmaj, &zmin, &zpat);
	if (zmaj * 10000 + zmin * 100 + zpat < WD_ZMQ_FLOOR) {
		log_err("libzmq %d.%d.%d is older than 4.3.3: upgrade it", zmaj, zmin, zpat);
		wd_config_release(&d.cfg);
		return 1;
	}
	sigset_t mask;
	signal_mask(&mask);
	sigprocmask(SIG_BLOCK, &mask, NULL);	/* before any thread exists */
	signal(SIGPIPE, SIG_IGN);	/* a peer's closed pipe must not kill us */
	if (start(&d, force) < 0) {
		shutdown_daemon(&d);
		return 1;
	}
	notify_ready("serving");
	log_notice("ready: wdriftd %s, libzmq %d.%d.%d, config '%s'", WDRIFT_VERSION, zmaj, zmin, zpat,
		   d.cfg.source);
	run_loop(&d);
	drain(&d);
	shutdown_daemon(&d);
	log_notice("stopped");
	return 0;
}
