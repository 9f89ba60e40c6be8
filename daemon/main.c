/*
 * main.c: wdriftd: start-up, the zmq_poll loop and shutdown; reload and
 * runs rm are in reconfigure.c (docs/daemon.md). It owns the sockets:
 * ingest.c and control.c see frames and strings, not sockets (events.c
 * sends on the bound events socket, auth.c and peers.c watch theirs).
 *
 * Start-up order: config, storage lock, write-ahead log replay and spool
 * sweep (recover.c), engine probe, spool thread, compute thread, sockets
 * bound, then READY=1.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

/* The oldest libzmq wdriftd runs on: 4.3.3. */
#define WD_ZMQ_FLOOR 40303

#include "alerts.h"
#include "daemon.h"
#include "auth.h"
#include "compute.h"
#include "config.h"
#include "config_diff.h"
#include "config_find.h"
#include "control.h"
#include "dirs.h"
#include "events.h"
#include "fdlimit.h"
#include "ingest.h"
#include "logging.h"
#include "metrics_http.h"
#include "notify.h"
#include "spool.h"
#include "peers.h"
#include "query.h"
#include "records.h"
#include "recover.h"
#include "relpath.h"
#include "socket_file.h"
#include "state.h"
#include "wal.h"
#include "zctx.h"
#include "zmtp_probe.h"

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
"  -c, --config FILE  the configuration (docs/config.md). Without it:\n"
"                     $WDRIFT_CONFIG, else the first of ./config/wdrift.yaml,\n"
"                     PREFIX/etc/wdrift/wdrift.yaml (PREFIX: where wdriftd is\n"
"                     installed) and /etc/wdrift/wdrift.yaml; else the built-in\n"
"                     default, which equals config/wdrift.yaml. Relative ipc://\n"
"                     paths are relative to the file's directory\n"
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


/* --- replies through the ingest socket --- */

static void ingest_send(void *ctx, const void *id, size_t id_len, int envelope, const char *body)
{
	struct daemon *d = ctx;
	if (zmq_send(d->ingest_sock, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    (envelope && zmq_send(d->ingest_sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) ||
	    zmq_send(d->ingest_sock, body, strlen(body), ZMQ_DONTWAIT) < 0)
		log_debug("ingest: reply not sent: %s", zmq_strerror(errno));
}

/* --- configuration --- */

/*
 * Alert state (docs/reliability.md, "Alert state"), and what runs and
 * drift say of a run beside its snapshots (an expired step, a conflict,
 * two jobs at once), to the WAL: appended, not fsync'd here, so that a
 * slow disk holds up the loop at most for a WAL fsync the spool thread
 * has begun (wal_append_sync keeps the log to itself through one small
 * record's fdatasync; a snapshot's file is synced before, outside it); the
 * kernel has the record when the process dies, the next snapshot's or
 * result's fsync when the machine does.
 */
static int to_wal(void *ctx, const char *payload)
{
	struct daemon *d = ctx;
	return wal_append(d->wal, payload, strlen(payload));
}

/* --- start-up --- */

static void on_durable(void *ctx, const char *run, int64_t step)
{
	struct daemon *d = ctx;
	compute_submit(d->compute, run, step);
}

static int64_t waits_for_rank(void *ctx, const char *run, uint64_t rank, uint64_t ranks)
{
	struct daemon *d = ctx;
	return ingest_waits_for_rank(&d->ix, run, rank, ranks);
}

static int rank_death_coming(void *ctx, const struct snapshot *snap)
{
	struct daemon *d = ctx;
	return peers_gone_lacking(d->peers, snap);
}

static size_t publishers_besides(void *ctx, const char *run, const void *rid, size_t rid_len)
{
	struct daemon *d = ctx;
	return peers_others(d->peers, run, rid, rid_len);
}

static size_t each_publisher(void *ctx, const char *run, uint64_t told, peers_each_fn *fn, void *fctx)
{
	struct daemon *d = ctx;
	return peers_each_publisher(d->peers, run, told, fn, fctx);
}

/* The path dir names under base when relative ("./" dropped), as it is when absolute. */
static void storage_under(const char *base, const char *dir, char *buf, size_t size)
{
	const char *rest = wd_path_rest(dir);	/* ".//var" too */

	if (dir[0] == '/') {
		snprintf(buf, size, "%s", dir);
		return;
	}
	int whole = !*rest || !strcmp(rest, ".");	/* "." or "./": the directory itself */
	snprintf(buf, size, "%s%s%s", base, whole || !strcmp(base, "/") ? "" : "/", whole ? "" : rest);
}

/* The path storage.dir names now, from the working directory when relative. */
static void storage_now(const char *dir, char *buf, size_t size)
{
	char cwd[PATH_MAX];

	if (!getcwd(cwd, sizeof(cwd)))
		snprintf(cwd, sizeof(cwd), "(the working directory: %s)", strerror(errno));
	storage_under(cwd, dir, buf, size);
}

/*
 * -1, said, when listen.WHAT's ipc:// path is there and is no socket (a
 * regular file, a directory, a link): ZeroMQ's bind deletes a file or a
 * link there and binds in its place, so a typo in a path lost a user's
 * file in silence; a directory it calls "Address already in use".
 */
static int not_a_socket(const struct daemon *d, const char *what, const char *endpoint)
{
	const char *kind = wd_ipc_not_socket(endpoint, 0);

	if (!kind)
		return 0;
	log_err("cannot bind the %s socket to '%s' (listen.%s of %s): '%s' is %s, not a socket: "
		"wdriftd replaces only a socket file (one a wdriftd left); give listen.%s a path of its "
		"own, or remove that one", what, endpoint, what,
		d->config_path ? d->config_path : "the built-in config", endpoint + 6, kind, what);
	return -1;
}

static void *bind_socket(struct daemon *d, int type, const char *endpoint, const char *what,
			 struct socket_file *file)
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
	if (not_a_socket(d, what, endpoint)) {	/* checked at start too: one made since */
		zmq_close(s);
		return NULL;
	}
	/*
	 * The built-in config's ./run/...: bound whole where it fits a Unix
	 * socket's path, so that /proc/net/unix lists where it is and a CLI
	 * elsewhere can name it (a trial's daemon, started with no config in
	 * another directory, was listed as ./run/control.sock: no CLI found it).
	 */
	char whole[PATH_MAX + 16];
	if (!strncmp(endpoint, "ipc://", 6) && endpoint[6] != '/' && endpoint[6] != '@') {
		char abs[PATH_MAX];
		storage_now(endpoint + 6, abs, sizeof(abs));
		if (abs[0] == '/' && strlen(abs) < sizeof(((struct sockaddr_un *)0)->sun_path)) {
			snprintf(whole, sizeof(whole), "ipc://%s", abs);
			endpoint = whole;
		}
	}
	int made = strncmp(endpoint, "ipc://", 6) ? 0 : dirs_make(endpoint + 6, 1);
	if (made < 0)
		log_warning("%s: cannot create the directory of '%s': %s", what, endpoint + 6,
			    strerror(-made));
	else if (made)	/* a typo in the path makes a tree: said (a trial's /nonexistent/dir was made in silence) */
		log_notice("%s: created %d director%s for '%s' (listen.%s)", what, made, made == 1 ? "y" : "ies",
			   endpoint + 6, what);
	if (!maxmsg_ok || zmq_bind(s, endpoint) < 0) {
		int e = errno;
		/* ZeroMQ's words for the two common mistakes are cryptic: said as what they mean */
		const char *hint = e == EADDRNOTAVAIL ? ": the host is no address of this machine (bind an "
							"address it has, 127.0.0.1, [::1] or *)"
				 : e == ENODEV ? ": no interface or host of that name here (a name that does not "
						 "resolve, or a typo?)"
				 : e == EADDRINUSE ? ": another process listens there (another wdriftd?)" : "";
		log_err("cannot bind the %s socket to '%s' (listen.%s of %s): %s%s", what, endpoint, what,
			d->config_path ? d->config_path : "the built-in config", zmq_strerror(e), hint);
		zmq_close(s);
		return NULL;
	}
	socket_file_note(file, endpoint);
	char shown[PATH_MAX + 16];
	if (!strncmp(endpoint, "ipc://", 6) && endpoint[6] != '/' && endpoint[6] != '@') {
		/* the built-in config's ./run/...: said whole, as a config's are (config.md) */
		char abs[PATH_MAX];
		storage_now(endpoint + 6, abs, sizeof(abs));
		snprintf(shown, sizeof(shown), "ipc://%s", abs);
	} else {
		snprintf(shown, sizeof(shown), "%s", endpoint);
	}
	log_notice("%s: listening on %s", what, shown);
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


/*
 * storage.dir, when relative, is relative to the working directory (unlike
 * ipc:// paths, which follow the config file): the absolute path it names
 * now, for a notice, so that a daemon started elsewhere does not put its
 * data there silently. 0 when storage.dir is absolute (nothing to say).
 */
static int storage_relative(const struct wd_config *cfg, char *buf, size_t size)
{
	char now[PATH_MAX + 256];

	if (cfg->storage.dir[0] == '/')
		return 0;
	storage_now(cfg->storage.dir, now, sizeof(now));
	snprintf(buf, size, "storage: '%s' is relative to the working directory: %s (an absolute "
		 "storage.dir does not depend on where wdriftd starts)", cfg->storage.dir, now);
	return 1;
}

/*
 * A relative storage.dir that is new here while the same path beside the
 * config holds a write-ahead log: this config's daemon started in another
 * directory, on an empty storage.dir, whose status and drift then say that
 * nothing was ever received (a trial's "restart" looked like every result
 * lost). The warning into buf, said where the daemon starts and in status;
 * 0 when there is nothing to say.
 */
static int storage_elsewhere(const struct daemon *d, char *buf, size_t size)
{
	char cdir[PATH_MAX], here[PATH_MAX + 256], there[PATH_MAX + 256], wal[PATH_MAX + 272];
	char *slash;
	uint64_t bytes;

	/* config_path is absolute, without symlinks, since main() resolved it (else no warning) */
	if (d->cfg.storage.dir[0] == '/' || !d->config_path || d->config_path[0] != '/' ||
	    (size_t)snprintf(cdir, sizeof(cdir), "%s", d->config_path) >= sizeof(cdir))
		return 0;
	slash = strrchr(cdir, '/');
	slash[slash == cdir] = 0;	/* /wdrift.yaml: the root, "/" */
	storage_under(cdir, d->cfg.storage.dir, there, sizeof(there));
	storage_now(d->cfg.storage.dir, here, sizeof(here));
	if (!strcmp(here, there))	/* started in the config's directory */
		return 0;
	snprintf(wal, sizeof(wal), "%s/wal", here);
	if (wal_bytes(wal))
		return 0;
	snprintf(wal, sizeof(wal), "%s/wal", there);
	if (!(bytes = wal_bytes(wal)))
		return 0;
	snprintf(buf, size, "storage: '%.1024s' is %s, new here (relative to the working directory), but %s, "
		 "the same path beside the config, holds a write-ahead log of %llu bytes: this config's "
		 "runs and results are there, not here; started in another directory? stop this wdriftd "
		 "and start it in %s, or make storage.dir absolute", d->cfg.storage.dir, here, there,
		 (unsigned long long)bytes, cdir);
	return 1;
}

/*
 * No config found (why: config_find's words): started in the wrong
 * directory, often. Said on stderr as a warning (a near miss, such as
 * ./wdrift.yaml, named), with where its files then go and the --endpoint
 * the CLI reaches it at, since the CLI finds no config there either (a
 * trial's near miss got neither).
 */
static void warn_no_config(const char *why, const char *control)
{
	char cwd[PATH_MAX], ep[PATH_MAX + 64];

	if (!strncmp(control, "ipc://", 6) && control[6] != '/' && control[6] != '@') {
		storage_now(control + 6, cwd, sizeof(cwd));	/* relative to the working directory, as storage.dir */
		snprintf(ep, sizeof(ep), "ipc://%s", cwd);
	} else {
		snprintf(ep, sizeof(ep), "%s", control);
	}
	fprintf(stderr, "wdriftd: warning: %s; running on the built-in config, whose relative paths are "
		"under %s; the CLI reaches it with `wdrift status --endpoint %s`\n", why,
		getcwd(cwd, sizeof(cwd)) ? cwd : "the working directory", ep);
}

/*
 * -1, said, when a process listens on one of the config's ipc:// socket
 * files: another wdriftd, typically this config started from another
 * directory, whose relative storage.dir differs, so that the lock does
 * not stop it. Said before anything is made, so that a daemon in the
 * wrong directory leaves no storage.dir behind. The same storage.dir in
 * use is left to the lock, whose words say it exactly.
 */
static int another_daemon(const struct daemon *d)
{
	const char *const eps[] = { d->cfg.listen.ingest, d->cfg.listen.control, d->cfg.listen.events };
	static const char *const keys[] = { "ingest", "control", "events" };
	char path[4096], now[PATH_MAX + 256];

	snprintf(path, sizeof(path), "%s/lock", d->cfg.storage.dir);
	int held = open(path, O_RDWR | O_CLOEXEC);
	int same = held >= 0 && flock(held, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	if (held >= 0)
		close(held);	/* its lock, if taken, goes with it */
	if (same)
		return 0;
	storage_now(d->cfg.storage.dir, now, sizeof(now));
	for (int i = 0; i < 3; i++) {
		long pid;
		char who[32] = "";
		if (!socket_file_taken(eps[i], &pid))
			continue;
		if (pid > 0)	/* which process to stop */
			snprintf(who, sizeof(who), " (pid %ld)", pid);
		return error("listen.%s: a process%s already listens on %s: another wdriftd, started "
			     "with this config from another directory, or with another config? "
			     "(this one's storage.dir is %s; the storage.dir lock keeps out only "
			     "a second daemon on the same one.) Binding would take the socket from it "
			     "and leave it running unreachable: stop it first, or give this daemon "
			     "other listen.* endpoints", keys[i], who, eps[i], now);
	}
	return 0;
}

/* The lock file's text, replaced: "running PID" while it serves, "stopped" after. */
static void lock_write(int fd, const char *text)
{
	if (ftruncate(fd, 0) < 0 || pwrite(fd, text, strlen(text), 0) < 0)
		log_debug("storage.dir's lock file: cannot write it: %s", strerror(errno));
}


/*
 * What the config opens to the network without authentication, as lines
 * for the operator: a listen.* endpoint off loopback without
 * auth.server_key (auth.allow_insecure), and listen.metrics off loopback.
 * Logged at start, and said by --check-config (a trial's check said "ok",
 * and only the log warned). How many, at most 2.
 */
static int exposure(const struct wd_config *c, char out[2][512])
{
	const char *key, *ep = wd_config_network_endpoint(c, &key);
	char host[256];
	int n = 0;

	if (ep && !c->auth.server_key)	/* no server key: no CURVE (auth_start) */
		snprintf(out[n++], sizeof(out[0]), "%s: '%s' takes connections from the network without "
			 "authentication (auth.allow_insecure: true): anyone who can reach it may publish and "
			 "control", key, ep);
	if (c->listen.metrics && wd_config_hostport(c->listen.metrics, host, sizeof(host), NULL, NULL, 0) == 0 &&
	    strncmp(host, "127.", 4) && strcmp(host, "::1"))
		snprintf(out[n++], sizeof(out[0]), "listen.metrics: '%s' is not a loopback address: anyone who "
			 "can reach it reads run names, drift and alert states, without authentication "
			 "(docs/metrics.md, \"Security\")", c->listen.metrics);
	return n;
}
/*
 * Says when the daemon before this one on storage.dir did not stop
 * cleanly (its lock file still says "running": SIGKILL, the OOM killer, a
 * crash, a power loss), which a trial's restart after kill -9 did not: it
 * logged as after a clean stop. Then marks this one running.
 */
static void lock_mark_running(int fd, const char *path)
{
	char was[64] = "", now[64];
	ssize_t n = pread(fd, was, sizeof(was) - 1, 0);

	if (n > 0 && !strncmp(was, "running ", 8)) {
		was[strcspn(was, "\n")] = 0;
		log_warning("the wdriftd before this one on this storage.dir (pid %s, '%s') did not stop "
			    "cleanly (killed, or a crash): what was durable is recovered from the write-ahead "
			    "log, below; snapshots it was still receiving were lost, and their publishers "
			    "send them again", was + 8, path);
	}
	snprintf(now, sizeof(now), "running %ld\n", (long)getpid());
	lock_write(fd, now);
}

static int start(struct daemon *d, int force)
{
	char path[4096], err[WD_CONFIG_ERR_MAX];
	sigset_t mask;
	int r;

	d->st.started = now_mono();
	d->st.budget = d->cfg.memory.budget;
	/* before anything is made or read */
	if (not_a_socket(d, "ingest", d->cfg.listen.ingest) || not_a_socket(d, "control", d->cfg.listen.control) ||
	    not_a_socket(d, "events", d->cfg.listen.events) || another_daemon(d) < 0)
		return -1;
	if ((r = dirs_make(d->cfg.storage.dir, 0)) < 0)
		return error("storage.dir '%s': cannot create: %s", d->cfg.storage.dir, strerror(-r));
	if (!realpath(d->cfg.storage.dir, d->storage))
		snprintf(d->storage, sizeof(d->storage), "%s", d->cfg.storage.dir);
	snprintf(path, sizeof(path), "%s/lock", d->cfg.storage.dir);
	int lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		char text[64] = "", who[96] = "";
		/* the holder's pid, as its lock file says it: which process to stop */
		ssize_t n = lockfd >= 0 ? pread(lockfd, text, sizeof(text) - 1, 0) : -1;
		long pid = n > 8 && !strncmp(text, "running ", 8) ? strtol(text + 8, NULL, 10) : 0;
		if (pid > 0)
			snprintf(who, sizeof(who), " (pid %ld, from its lock file)", pid);
		if (lockfd >= 0)
			close(lockfd);	/* not ours: its "running" is the other daemon's to change */
		if (e == EWOULDBLOCK)
			return error("'%s': another wdriftd%s uses this storage.dir", path, who);
		return error("'%s': %s", path, strerror(e));
	}
	d->lockfd = lockfd;
	lock_mark_running(d->lockfd, path);
	snprintf(path, sizeof(path), "%s/wal", d->cfg.storage.dir);
	/* before the replay: it restores the alert instances, for the rules configured */
	if (!(d->alerts = alerts_new(events_sink, &d->events)))
		return error("out of memory");
	alerts_set_config(d->alerts, &d->cfg);
	d->rec = (struct recovery){ .st = &d->st, .cfg = &d->cfg, .alerts = d->alerts };
	if (wal_open(path, force, recover_record, &d->rec, &d->wal, err, sizeof(err)) < 0)
		return error("%s", err);
	recover_done(&d->rec);
	alerts_set_store(d->alerts, to_wal, d);
	alerts_restore_done(d->alerts);
	log_notice("write-ahead log: %llu records, %zu runs, %llu durable snapshots",
		   (unsigned long long)wal_records(d->wal), d->st.n_runs,
		   (unsigned long long)d->st.count.snapshots_durable);
	recover_sweep(&d->rec, d->cfg.storage.dir, force);
	wd_log_set(log_level, daemon_lib_log);	/* the engine says which backend runs */
	if ((r = wd_engine_open_device((enum wd_backend)d->cfg.compute.backend,
				       (int)d->cfg.compute.device, &d->engine)) < 0)
		return error("'%s': compute.backend cuda on compute.device %d: cannot open "
			     "the engine: %s (the line above says why)",
			     d->config_path ? d->config_path : "built-in config",
			     (int)d->cfg.compute.device, strerror(-r));
	wd_engine_set_threads(d->engine, (int)d->cfg.compute.threads);
	if (wd_engine_backend(d->engine) == WD_BACKEND_CPU)	/* the library says a cuda one at open */
		log_notice("engine: %s", wd_engine_describe(d->engine));
	if ((r = spool_start(d->cfg.storage.dir, d->wal, &d->spool)) < 0)
		return error("spool thread: %s", strerror(-r));
	size_t n_logged, n_results;
	struct result_batch **logged = recover_batches(&d->rec, &n_logged);
	char **results = recover_take_results(&d->rec, &n_results);
	r = compute_start(d->cfg.storage.dir, d->wal, d->engine, &d->cfg, results, n_results,
			  &d->compute);	/* which then has the results, and frees them */
	if (r < 0) {
		for (size_t i = 0; i < n_logged; i++)
			result_batch_free(&logged[i]);
		free(logged);
		for (size_t i = 0; i < n_results; i++)
			free(results[i]);
		free(results);
		return error("compute thread: %s", strerror(-r));
	}
	recover_resume(&d->rec, d->compute);
	d->ix = (struct ingest){ .st = &d->st, .cfg = &d->cfg, .spool = d->spool,
				  .sink = { ingest_send, d }, .window = d->cfg.memory.budget / 2,
				  .on_durable = on_durable, .durable_ctx = d,
				  .to_wal = to_wal, .wal_ctx = d,
				  .publishers_besides = publishers_besides, .publishers_ctx = d,
				  .each_publisher = each_publisher };
	d->ctl = (struct control){ .st = &d->st, .cfg = &d->cfg,
				   .engine = wd_engine_describe(d->engine), .storage = d->storage,
				   .storage_note = d->storage_note[0] ? d->storage_note : NULL,
				   .spool = d->spool,
				   .reload = daemon_reload, .reload_ctx = d, .forget = daemon_forget_run,
				   .publishers = daemon_publishers, .jobs = daemon_jobs,
				   .connected = daemon_connected,
				   .config_file = &d->cfile };
	for (size_t i = 0; i < n_logged; i++)	/* logged results answer "drift" at once */
		control_add_result(&d->ctl, logged[i]);
	free(logged);
	d->ctl.alerts = d->alerts;
	d->zctx = wd_zmq_ctx_new();
	if (!d->zctx)
		return error("zmq context: %s", zmq_strerror(errno));
	if (auth_start(d->zctx, &d->cfg, &d->st.count.auth, &d->auth, err, sizeof(err)) < 0)
		return error("%s", err);
	char open[2][512];
	for (int i = 0, n = exposure(&d->cfg, open); i < n; i++)
		log_warning("%s", open[i]);
	fdlimit_raise();	/* every connection takes one; libzmq aborts when they run out */
	if (!(d->ingest_sock = bind_socket(d, ZMQ_ROUTER, d->cfg.listen.ingest, "ingest", &d->socket_files[0])) ||
	    !(d->control_sock = bind_socket(d, ZMQ_ROUTER, d->cfg.listen.control, "control",
					    &d->socket_files[1])) ||
	    !(d->events.sock = bind_socket(d, ZMQ_PUB, d->cfg.listen.events, "events", &d->socket_files[2])))
		return -1;
	/*
	 * The rules' catch-up (each judged on its study's latest complete step)
	 * waits a second: a PUB socket drops what it sends before a subscriber
	 * is there, and subscribers of the daemon before this start reconnect
	 * within ZeroMQ's 100 ms retry. An instance evaluated on a later step
	 * in between is left as it is (alerts.c), so nothing is judged twice.
	 */
	d->catch_up_at = now_mono() + CATCH_UP_DELAY;
	if (!(d->peers = peers_start(d->zctx, d->ingest_sock, d->auth)))
		return error("ingest socket: cannot monitor its connections: %s", zmq_strerror(errno));
	if (d->cfg.listen.metrics &&	/* before READY=1, as the sockets are */
	    metrics_http_start(d->cfg.listen.metrics, &d->ctl, &d->metrics, err, sizeof(err)) < 0)
		return error("%s (listen.metrics of %s)", err, d->config_path ? d->config_path : "the built-in config");
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
			ingest_send(d, one.data[0], one.len[0], 0, body);
		} else {
			ingest_handle(&d->ix, &f, &seen);
		}
		char who[WD_RUN_MIXED_WHO];
		struct run *r;
		/* what the peer last sent, for a line if it drops; two jobs in one run, kept with it */
		if (n >= 2 && peers_message(d->peers, msgs, &seen, who, sizeof(who)) &&
		    (r = state_run(&d->st, seen.run, 0))) {
			double wall = now_wall();
			if (run_note_mixed(r, seen.step, who, wall)) {	/* the first: said after a restart too */
				char what[NAME_MAX + 64];
				snprintf(what, sizeof(what), "run '%s''s two jobs at once", r->name);
				ingest_record(&d->ix, record_mixed(r->name, seen.step, wall, who), what);
			}
		}
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

/* body to the client of w: its envelope, then a copy of body (w may share it with others). */
static void send_to(struct daemon *d, const struct query_waiter *w, zmq_msg_t *body)
{
	size_t i = 0;
	zmq_msg_t m;

	while (i < w->n && zmq_send(d->control_sock, w->data[i], w->len[i], ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0)
		i++;
	zmq_msg_init(&m);
	if (i == w->n && zmq_msg_copy(&m, body) == 0)
		zmq_msg_send(&m, d->control_sock, ZMQ_DONTWAIT);
	zmq_msg_close(&m);
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
		for (struct query_waiter *w = j->waiters; w; w = w->next)
			send_to(d, w, &body);
		zmq_msg_close(&body);
		query_job_free(&j);
	}
}

/* runs rm requests whose run's publishers are gone, or whose wait is up (rm_wait.h). */
static void handle_rm_waiting(struct daemon *d, int stopping)
{
	struct query_waiter *to;
	char *reply;

	for (;;) {
		reply = control_rm_due(&d->ctl, stopping, &to);
		if (!to)
			break;
		zmq_msg_t body;
		if (!reply || zmq_msg_init_data(&body, reply, strlen(reply), free_reply, NULL) < 0) {
			free(reply);	/* out of memory: the client's own timeout tells it */
		} else {
			send_to(d, to, &body);
			zmq_msg_close(&body);
		}
		query_waiter_free(to);
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
		d->st.count.comparisons++;	/* /metrics */
		d->st.count.compute_seconds += b->seconds;
		events_drift(&d->events, b);
		/*
		 * A backfill's history is judged once it is done: the rules'
		 * catch-up, a second after its last batch, takes each study's
		 * latest complete step (control.c), as after a start or reload.
		 */
		if (b->backfill)
			d->catch_up_at = now_mono() + CATCH_UP_DELAY;
		else
			alerts_on_results(d->alerts, b);
		ingest_tell_names(&d->ix, b);	/* a "module." prefix, said in the job too */
		control_add_result(&d->ctl, b);
	}
}

static void handle_signal(struct daemon *d)
{
	struct signalfd_siginfo si;
	char err[WD_CONFIG_ERR_MAX];

	while (read(d->sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP)
			daemon_reload(d, NULL, err, sizeof(err));
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
		zmq_pollitem_t items[8 + 4] = {
			{ d->ingest_sock, 0, ZMQ_POLLIN, 0 },
			{ d->control_sock, 0, ZMQ_POLLIN, 0 },
			{ NULL, spool_fd(d->spool), ZMQ_POLLIN, 0 },
			{ NULL, d->sigfd, ZMQ_POLLIN, 0 },
			{ NULL, compute_fd(d->compute), ZMQ_POLLIN, 0 },
			{ peers_socket(d->peers), 0, ZMQ_POLLIN, 0 },
			{ NULL, control_fd(&d->ctl), control_fd(&d->ctl) >= 0 ? ZMQ_POLLIN : 0, 0 },
			{ NULL, metrics_http_fd(d->metrics), d->metrics ? ZMQ_POLLIN : 0, 0 },
		};
		int n_items = 8 + auth_pollitems(d->auth, items + 8, 4);
		long timeout = d->watchdog_usec ? (long)(d->watchdog_usec / 1000) : 1000;
		if (timeout > 1000)
			timeout = 1000;
		metrics_http_timeout(d->metrics, &timeout);
		double rm_due = control_rm_deadline(&d->ctl);
		if (rm_due) {	/* a runs rm's wait ends on time, even with nothing else to do */
			long ms = (long)((rm_due - now_mono()) * 1000.0) + 1;
			if (ms < timeout)
				timeout = ms > 0 ? ms : 0;
		}
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
		for (int i = 8; i < n_items; i++)
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
		compute_spool(d->compute, &d->ctl.spool_usage);
		if (items[1].revents)
			handle_control(d, msgs);
		if (items[6].revents)
			handle_queries(d);
		if (items[0].revents)
			handle_ingest(d, msgs);
		if (items[4].revents)
			handle_results(d);
		if (d->ctl.rm_waiting.n)	/* after ingest and peers: a disconnect, or a hello */
			handle_rm_waiting(d, 0);
		metrics_http_run(d->metrics, items[7].revents != 0);	/* last: the freshest state */
		double t = now_mono();
		if (d->watchdog_usec && t >= next_ping) {
			notify_watchdog();	/* from the loop itself: a stalled loop stops it */
			next_ping = t + (double)d->watchdog_usec / 1e6;
		}
		if (t >= next_status) {
			notify_status("%zu runs, %llu snapshots durable, %zu pending, %llu MiB held",
				      d->st.n_runs, (unsigned long long)d->st.count.snapshots_durable,
				      state_pending(&d->st), (unsigned long long)(d->st.reserved >> 20));
			next_status = t + 5;
		}
		if (t >= next_tick) {
			if (d->catch_up_at && t >= d->catch_up_at) {
				d->catch_up_at = 0;
				alerts_drop_former(d->alerts);	/* the first time: what the start's config dropped */
				control_alerts_catch_up(&d->ctl, !d->caught_up);
				d->caught_up = 1;
			}
			alerts_tick(d->alerts, &d->st);
			auth_tick(d->auth);
			next_tick = t + 1;
		}
		alerts_reap(d->alerts);
		if (t >= next_expire) {
			ingest_expire(&d->ix, (double)d->cfg.limits.pending_timeout);
			ingest_refusals_tick(&d->ix);
			peers_tick(d->peers, t, (double)d->cfg.limits.pending_timeout, waits_for_rank, d);
			/* after: a death said is no lag */
			ingest_lag_tick(&d->ix, (double)d->cfg.limits.pending_timeout, rank_death_coming, d);
			next_expire = t + 1;	/* limits.pending_timeout may be seconds */
		}
	}
	handle_rm_waiting(d, 1);	/* each waiting runs rm is told, not left to time out */
	free(msgs);
}

/* Stops taking snapshots, lets the spool finish what was committed, acks it. */
static void drain(struct daemon *d)
{
	double deadline = now_mono() + DRAIN_SECONDS;
	size_t partial = 0;

	for (const struct snapshot *p = d->st.pending; p; p = p->next)
		partial += snapshot_pending(p) && !p->committing;
	notify_stopping();
	/* the partly received are lost with the process: said, as a trial found them not */
	char lost[128] = "";
	if (partial)
		snprintf(lost, sizeof(lost), "; %zu partly received, not kept (their publishers send "
			 "them again)", partial);
	log_notice("stopping: %zu snapshots committing%s", spool_depth(d->spool), lost);
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
	metrics_http_stop(&d->metrics);	/* first: it reads d->ctl and the alerts */
	alerts_free(&d->alerts);
	control_release(&d->ctl);
	recover_release(&d->rec);
	peers_stop(&d->peers);
	if (d->ingest_sock) zmq_close(d->ingest_sock);
	if (d->control_sock) zmq_close(d->control_sock);
	if (d->events.sock) zmq_close(d->events.sock);
	for (int i = 0; i < 3; i++)	/* libzmq leaves them: a clean stop is no crash */
		socket_file_remove(&d->socket_files[i]);
	auth_stop(&d->auth);
	if (d->zctx) zmq_ctx_term(d->zctx);
	wd_engine_close(&d->engine);
	wal_close(&d->wal);
	state_release(&d->st);
	wd_config_release(&d->cfg);
	if (d->sigfd > 0) close(d->sigfd);
	if (d->lockfd > 0) {
		lock_write(d->lockfd, "stopped\n");	/* only a kill or a crash leaves "running" */
		close(d->lockfd);
	}
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
	/* no -c: the search the CLI makes too (config_find.h), else the built-in default */
	int found = wd_config_find(d.config_path, &d.found, err, sizeof(err));
	if (found < 0) {
		fprintf(stderr, "wdriftd: %s\n", err);
		return 2;
	}
	d.config_path = found == 0 ? d.found.path : NULL;
	char none_found[sizeof(err)];
	snprintf(none_found, sizeof(none_found), "%s", found == 1 ? err : "");
	/*
	 * Absolute, so that `wdrift status` names the file wherever it runs
	 * (the name is in the reply), and a reload reads the same file.
	 */
	char real[PATH_MAX];
	if (d.config_path && realpath(d.config_path, real) && strlen(real) < sizeof(d.found.path))
		snprintf(d.found.path, sizeof(d.found.path), "%s", real);
	wd_config_defaults(&d.cfg);
	uint64_t hash;
	if (daemon_load_config(d.config_path, &d.cfg, &hash, err, sizeof(err)) < 0) {
		if (found == 0 && strcmp(d.found.origin, "-c"))	/* not named: say how it was found */
			fprintf(stderr, "wdriftd: %s (found through %s)\n", err, d.found.origin);
		else
			fprintf(stderr, "wdriftd: %s\n", err);
		return 2;
	}
	if (found == 1)
		warn_no_config(none_found, d.cfg.listen.control);
	d.cfile.path = d.config_path;
	d.cfile.check = daemon_reload_check;	/* status: would a reload take the file as it is now? */
	d.cfile.check_ctx = &d;
	config_file_ran(&d.cfile, hash);
	if (check && auth_check_key(&d.cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "wdriftd: %s\n", err);
		wd_config_release(&d.cfg);
		return 2;
	}
	char where[2 * PATH_MAX + 512];
	int relative = storage_relative(&d.cfg, where, sizeof(where));
	if ((check || print) && relative)	/* stderr: stdout is the verdict, or YAML */
		fprintf(stderr, "wdriftd: %s\n", where);
	if (check) {
		char open[2][512];
		for (int i = 0, n = exposure(&d.cfg, open); i < n; i++)
			fprintf(stderr, "wdriftd: warning: %s\n", open[i]);
		printf("%s: ok (%zu stud%s, %zu alert%s)\n", d.cfg.source, d.cfg.n_studies,
		       d.cfg.n_studies == 1 ? "y" : "ies", d.cfg.n_alerts, d.cfg.n_alerts == 1 ? "" : "s");
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
	if (relative)
		log_notice("%s", where);
	if (storage_elsewhere(&d, d.storage_note, sizeof(d.storage_note)))
		log_warning("%s", d.storage_note);
	if (start(&d, force) < 0) {
		shutdown_daemon(&d);
		return 1;
	}
	notify_ready("serving");
	log_notice("ready: wdriftd %s, libzmq %d.%d.%d, config '%s' (%s)", WDRIFT_VERSION, zmaj, zmin,
		   zpat, d.cfg.source, d.config_path ? d.found.origin : "no file found: built in");
	daemon_note_no_study(&d.cfg);
	run_loop(&d);
	drain(&d);
	shutdown_daemon(&d);
	log_notice("stopped");
	return 0;
}
