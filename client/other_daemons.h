/*
 * other_daemons.h: when the CLI cannot reach the daemon its config names,
 * the wdriftd processes running with another config. A trial ran `wdrift
 * status` from another directory: the CLI found the install prefix's
 * config, asked "is wdriftd running?", while one ran with ./wdrift.yaml
 * elsewhere. /proc says which (its argv's -c, made absolute with its
 * working directory where that is readable: the same user's, or root).
 *
 * Depends on libc, Linux's /proc and daemon_client.h (shell quoting).
 */
#ifndef WD_OTHER_DAEMONS_H
#define WD_OTHER_DAEMONS_H

/*
 * " (wdriftd runs as pid 123 with -c /home/u/p/wdrift.yaml: give its
 * config with -c FILE or WDRIFT_CONFIG)" for up to 4 wdriftd processes
 * whose config is not config_path (resolved), this user's first, then
 * "and others (ps ...)" when there are more; "" when there is none. When
 * the user chose config_path (-c, WDRIFT_CONFIG), pointing them at another
 * config's daemon is wrong (a trial's): " (wdriftd -c FILE starts this
 * config's daemon; another wdriftd runs as pid 123 with -c ...)", FILE
 * quoted for a shell. When config_path's own daemon runs (it did not
 * answer): " (this config's wdriftd runs, as pid 42, but did not answer)".
 * A static buffer, valid until the next call.
 */
const char *dc_other_daemons(const char *config_path, int chosen);

#endif
