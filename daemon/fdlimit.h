/*
 * fdlimit.h: the daemon's file descriptors: the limit it runs under
 * (RLIMIT_NOFILE), raised at start-up, and how many are in use.
 *
 * Every connection the daemon accepts takes a descriptor, and libzmq 4.3
 * cannot refuse one: when a descriptor cannot be made (EMFILE) its ipc
 * listener asserts and the process aborts ("Too many open files
 * (src/ipc_listener.cpp:325)"), and its tcp listener retries accept() in a
 * busy loop until some other descriptor fails the same way. The limit is
 * thus the most connections the daemon survives: start-up raises the soft
 * limit to the hard one (LimitNOFILE= in the unit sets both), and peers.c
 * warns as the ingest connections approach it (docs/reliability.md, "File
 * descriptors").
 *
 * Main thread only. Depends on libc and logging.h; knows nothing of ZeroMQ.
 */
#ifndef WD_FDLIMIT_H
#define WD_FDLIMIT_H

/*
 * Raises the soft RLIMIT_NOFILE to the hard limit (to fs.nr_open where
 * the hard limit is unlimited), and logs the limit in force at notice, or
 * at warning when it could not be raised. Called once, at start-up, before
 * the endpoints are bound. Returns the limit in force, or -1 when
 * getrlimit fails (logged) or there is none.
 */
long fdlimit_raise(void);

/* The soft RLIMIT_NOFILE now; -1 when it cannot be read or is unlimited. */
long fdlimit_get(void);

/* Descriptors this process has open (entries of /proc/self/fd); -1 when unreadable. */
long fdlimit_in_use(void);

#endif
