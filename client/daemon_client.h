/*
 * daemon_client.h: what the CLI's daemon subcommands share: where the
 * daemon is (from its config, or --endpoint), and one request to its
 * control socket in the Lazy Pirate pattern: a timeout, a few tries, then a
 * clear one-line error; a request the daemon is still working on is waited
 * for, never sent again.
 */
#ifndef WD_DAEMON_CLIENT_H
#define WD_DAEMON_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "config_find.h"
#include "handshake.h"
#include "keys.h"

#define DC_ENDPOINT_MAX 512

/* Help text the daemon subcommands share, so that it reads the same. */
#define DC_HELP_TARGET \
	"  -c, --config FILE  the daemon's config, for its endpoints\n" \
	WD_CONFIG_SEARCH_HELP \
	"      --endpoint EP  the control endpoint, instead of the config's\n" \
	"      --server-key K the daemon's CURVE public key, or a file that holds it\n" \
	"                     (default: $WDRIFT_SERVER_KEY); with --key, when the\n" \
	"                     daemon has auth.server_key (docs/security.md)\n" \
	"      --key FILE     this client's key pair, from wdrift keygen (default:\n" \
	"                     $WDRIFT_KEY)\n"
/* The usage line's words for the same options. */
#define DC_USAGE_TARGET "[-c FILE] [--endpoint EP] [--server-key K] [--key FILE]"
#define DC_HELP_JSON "      --json         print the reply as JSON\n"
#define DC_HELP_HELP "  -h, --help         this help\n"
#define DC_HELP_EXIT "\nexit status: 0 ok; 1 the daemon is down or not answering; 2 usage error.\n"

struct dc_target {
	const char *config;	/* -c FILE, or NULL for the default search */
	const char *control;	/* --endpoint: overrides the config's */
	const char *ingest;	/* --ingest (send): overrides the config's */
	int ingest_only;	/* send: it needs the ingest endpoint, so a hint names --ingest */
	/*
	 * A control request (status, drift, runs rm, ...; not reload, whose
	 * file it is): a config that
	 * does not load, whose listen.control can still be read, is warned of
	 * on stderr and that endpoint asked all the same, since the daemon runs
	 * the config it read before the edit (a trial's one typo locked out
	 * every command). dc_call sets it; reload does not take it.
	 */
	int lenient_config;
	const char *server_key, *key;	/* --server-key, --key; NULL: the environment */
	struct wd_client_keys keys;	/* what dc_resolve made of them */
	char control_ep[DC_ENDPOINT_MAX], ingest_ep[DC_ENDPOINT_MAX], events_ep[DC_ENDPOINT_MAX];
	char config_path[WD_CONFIG_PATH_MAX];	/* the file the endpoints came from; "": none */
};

struct wd_config;

/*
 * The options that chose the daemon, as the user gave them, for a command
 * the CLI suggests: " -c FILE", " --endpoint EP", " --server-key K" and
 * " --key K", each that was given, shell-quoted where needed; "" when none
 * was, or when they do not fit. A static buffer.
 */
const char *dc_again(const struct dc_target *t);
/*
 * " OPT WORD" (" WORD" when opt is "") appended to out at *at, WORD in
 * single quotes when it holds anything but the plain characters of paths,
 * so that the line pastes into a shell; -1 when it does not fit.
 */
int dc_shell_arg(char *out, size_t len, size_t *at, const char *opt, const char *s);

/*
 * The file the CLI reads (config_find.h: -c FILE, $WDRIFT_CONFIG,
 * ./config, the install prefix, /etc): given, or the one found, as an
 * absolute path (a static buffer), or "(none found)".
 */
const char *dc_config_path(const char *given);
/*
 * For an error that names the config: wd_config_near_miss of the file the
 * search finds (given: -c's, or NULL; "" for -c and WDRIFT_CONFIG), then
 * the wdriftd processes running with another config (other_daemons.h).
 */
const char *dc_config_near_miss(const char *given);

/*
 * Loads that file into cfg (set to the defaults first), relative ipc://
 * paths made absolute against its directory. Returns 0, or -1 with err:
 * the loader's message, or, when no file exists, where it looked, then
 * ", or INSTEAD" ("give --endpoint").
 */
int dc_config_load(const char *given, struct wd_config *cfg, const char *instead, char *err, size_t errlen);

/*
 * An --endpoint or --ingest value (opt) the CLI can connect to, checked
 * when the option is read: 0, or cli_usage_error's status (exit 2) with
 * the reason, as the config would say it (a scheme typo such as icp://),
 * or why the CLI cannot reach it (inproc://, tcp://HOST:*).
 */
int dc_endpoint_option(const char *opt, const char *arg);

/*
 * Fills the endpoints: --endpoint/--ingest where given, else the config's
 * (dc_config_load; t->config_path says which file). Loads the CURVE keys
 * too. Returns 0, or -1 with err (exit 1).
 */
int dc_resolve(struct dc_target *t, char *err, size_t errlen);

/*
 * Sends one JSON request and returns the reply (malloc'd). Waits
 * WDRIFT_TIMEOUT_MS (default 1500) at a time; after each wait with no
 * reply, asks the daemon for its status on a fresh socket. While it
 * answers, the request is not sent again (unless the daemon restarted
 * since) and the wait goes on, up to WDRIFT_QUERY_TIMEOUT_MS (default
 * 120000) in all: a drift query on a large study may take seconds. Three
 * waits in a row with no answer at all mean the daemon is down. A status
 * request is re-sent on a fresh socket instead. Returns 0, or -1 with err
 * naming the endpoint: the daemon is down, not answering, or too slow;
 * after a second of refused connects, why (wd_hs_stale_socket: nothing
 * listens there). -2 when a peer answered there and the handshake failed
 * (its keys, or another socket: err says which), so that no hint about
 * other daemons' configs goes with it. t gives the control endpoint and
 * the keys (dc_resolve).
 */
int dc_request(const struct dc_target *t, const char *request, char **reply, char *err, size_t errlen);

/* What to add to "not answering": a hint about keys, for the error line. */
const char *dc_keys_hint(const struct wd_client_keys *keys);

/*
 * For an ipc:// endpoint, whether its socket file is there, before any
 * wait: 0 (or not ipc://, or abstract), or -1 with err "no socket at PATH:
 * is wdriftd running?" or "PATH is not a socket ...". A missing file
 * otherwise costs the whole Lazy Pirate wait and reads like a key problem.
 * A socket file beside it is named ("did you mean"); for a config's
 * endpoint (typed 0, not given on the command line), with the hint that a
 * listen.* edit takes a restart. want: the socket's kind ("control",
 * "ingest", "events"), whose file a directory is said with.
 */
int dc_endpoint_check(const char *endpoint, const char *want, int typed, char *err, size_t errlen);

/*
 * How the CLI names the sockets it asks and the CURVE options, for the
 * handshake's errors (handshake.h: monitors and reasons).
 */
extern const struct wd_hs_names dc_control_names, dc_events_names;

/* The options every daemon subcommand takes: -c FILE, --endpoint EP, --json, --help. */
struct dc_args {
	struct dc_target t;
	int json;
	int no_endpoint;	/* set before dc_args: --endpoint does not apply (the caller says so) */
};

struct option;
typedef struct json_t json_t;

/*
 * Parses argv with the common options and extra ones (on_extra gets each,
 * returning nonzero to refuse it; one whose val is 'o' is also -o), through
 * cli_opts. Returns the index of the first positional argument; or a
 * negative return for cli_opts_exit: -2 (usage) or, after --help was
 * printed, DC_HELPED (exit 0).
 */
int dc_args(int argc, char **argv, struct dc_args *a, const char *usage,
	    const struct option *extra, int (*on_extra)(int c, const char *arg, void *ctx), void *ctx);
#define DC_HELPED CLI_HELPED

/*
 * Sends request (taken) and returns the reply object without "v" and "ok";
 * NULL after printing the error (the daemon is down, or refused).
 */
json_t *dc_call(struct dc_args *a, json_t *request);
/*
 * The same, but a refusal of the daemon ({"ok": false, ...}, whole) is
 * handed back in *refused, not said, for the caller to act on; *refused
 * is NULL otherwise.
 */
json_t *dc_call_refusable(struct dc_args *a, json_t *request, json_t **refused);
void dc_print_json(json_t *o);

/* The integer member key of a reply object o, as long long; 0 when absent. */
long long dc_int(json_t *o, const char *key);
/*
 * The sentence o has under key, when it has one, as a line under a table:
 * "refused    'fa' (candidate): ..." (the key, padded to the tables' first
 * column). runs and drift say refused, mixed and expired so.
 */
void dc_said(json_t *o, const char *key);
/*
 * The reply's storage_note (a wdriftd started in another directory, its
 * relative storage.dir new there), when it has one, under a table:
 * "storage    warning: ...". runs and studies say it so; status under its
 * storage line.
 */
void dc_storage_note(json_t *reply);
/*
 * A drift reply's run that lags (missing_latest), as drift and report say
 * it: "fa (candidate): compared last at step 5", the role from
 * missing_candidates; a reply without that field (a daemon before it)
 * gives no role rather than a wrong one.
 */
void dc_lagging(json_t *drift, const char *run, char *out, size_t len);

/*
 * The whole of a subcommand that sends {"cmd": cmd} and takes no arguments:
 * parses argv, calls, and prints the reply: as JSON with --json, else
 * through print (a table, most often). Returns the exit code (0 after
 * --help).
 */
int dc_simple(int argc, char **argv, const char *usage, const char *cmd, void (*print)(json_t *reply));
/*
 * Sends request (its reference is taken) and prints the reply: as JSON
 * with --json, else through print. EXIT_OK, or EXIT_FAIL when there was no
 * reply (dc_call has said why).
 */
int dc_show(struct dc_args *a, json_t *request, void (*print)(json_t *reply));

/* The help of such a subcommand's options. */
#define DC_HELP_SIMPLE DC_HELP_TARGET DC_HELP_JSON DC_HELP_HELP DC_HELP_EXIT

/* The whole --help of such a subcommand: its name and what it lists. */
#define DC_USAGE_SIMPLE(cmd, what) \
	"usage: wdrift " cmd " " DC_USAGE_TARGET " [--json]\n\n" what "\n" DC_HELP_SIMPLE

#endif
