#!/usr/bin/env python3
"""t89: a handshake the peer closes without a reason is explained by the peer's
mechanism, read from its greeting (lib/zmtp_probe.c), not guessed.

CI found `wdrift status` without keys, against a CURVE daemon under load, told
"not wdriftd's control socket (it answered as a different socket type)": the
daemon read the client's whole greeting at once and closed before writing its
own, so the client's monitor saw a close with no mechanism mismatch. Here a
greeting server on a real ipc:// socket does exactly that, every time: it
writes its signature and major version at once, reads nothing for 0.3 s, then
closes at once if the client's whole greeting (a NULL one) has arrived, and
otherwise writes the rest of its greeting, as libzmq does. The CLI must say
what to give (the CURVE hint); with keys against a NULL server of the same
kind, that the daemon does not use CURVE. A real wdriftd of each kind checks
the mechanism-mismatch path ZeroMQ reports itself. The CLI given the
ingest socket is told so at once by the daemon.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from harness import Daemon, check, summary

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))


class SlowGreeter:
    """A ZMTP 3 greeting peer of one mechanism that is slow to read (see above)."""

    def __init__(self, path, mechanism):
        self.mech = mechanism.encode()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)
        self.raced = self.probed = 0
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self.one, args=(c,), daemon=True).start()

    def one(self, c):
        try:
            c.sendall(b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03")
            time.sleep(0.3)
            c.settimeout(1.0)
            got = c.recv(64)
            if len(got) >= 64:
                if got[12:12 + len(self.mech)] != self.mech or got[12 + len(self.mech)] != 0:
                    self.raced += 1     # refused before our greeting was written
                    return
            else:
                # counted before our reply: under load the probe's 500 ms may end first (CI did)
                self.probed += 1
                c.sendall(b"\x00" + self.mech.ljust(20, b"\0") + b"\x01" + b"\0" * 31)
                while len(got) < 64:
                    more = c.recv(64 - len(got))
                    if not more:
                        return
                    got += more
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def cli(*args, keys=None):
    t0 = time.time()
    r = subprocess.run([WDRIFT, *args] + (keys or []), capture_output=True, text=True, timeout=30)
    return r.returncode, r.stderr.strip(), time.time() - t0


def main():
    d = tempfile.mkdtemp(prefix="wdrift-t89-")
    greeters = []
    try:
        srv, me = os.path.join(d, "server"), os.path.join(d, "me")
        for k in (srv, me):
            subprocess.run([WDRIFT, "keygen", k], capture_output=True, check=True)
        keys = ["--server-key", srv + ".pub", "--key", me]

        curve = SlowGreeter(os.path.join(d, "curve.sock"), "CURVE")
        greeters.append(curve)
        rc, err, dt = cli("status", "--endpoint", f"ipc://{d}/curve.sock")
        check(rc == 1 and "refused the handshake" in err and "give --server-key and --key" in err
              and "socket type" not in err and "closed the connection" not in err,
              f"no keys, a CURVE peer that closes before its greeting: the CURVE hint, not a socket type "
              f"({dt:.1f} s; refused {curve.raced} before its greeting, probed {curve.probed})", err)
        check(curve.raced >= 1 and curve.probed >= 1,
              f"the race happened, and the probe sent only the start of its greeting (raced {curve.raced}, "
              f"probed {curve.probed})")

        null = SlowGreeter(os.path.join(d, "null.sock"), "NULL")
        greeters.append(null)
        rc, err, dt = cli("status", "--endpoint", f"ipc://{d}/null.sock", keys=keys)
        check(rc == 1 and "does not use CURVE" in err and "WDRIFT_SERVER_KEY" in err,
              f"keys, a NULL peer that closes before its greeting: it does not use CURVE ({dt:.1f} s; "
              f"raced {null.raced}, probed {null.probed})", err)
        rc, err, dt = cli("watch", "--endpoint", f"ipc://{d}/null.sock", keys=keys)
        check(rc == 1 and "does not use CURVE" in err,
              f"watch says the same ({dt:.1f} s)", err)

        # a real daemon without auth, a client with keys: ZeroMQ's own mechanism mismatch
        pd = os.path.join(d, "plain")
        os.makedirs(pd)
        plain = Daemon(pd)
        cfg = plain.write_config()
        check(plain.start(), "a daemon without auth starts")
        try:
            rc, err, dt = cli("status", "-c", cfg, keys=keys)
            check(rc == 1 and "does not use CURVE" in err and "auth.clients" not in err,
                  f"keys against a daemon without auth.server_key: drop them, not check auth.clients "
                  f"({dt:.1f} s)", err)
            rc, err, dt = cli("status", "--endpoint", f"ipc://{pd}/run/events.sock")
            check(rc == 1 and "not wdriftd's control socket" in err and "CURVE" not in err,
                  f"no keys, the events socket given to status: the socket type, no CURVE hint "
                  f"({dt:.1f} s)", err)
            # the ingest socket takes a REQ socket (a ROUTER): its reply, with the
            # envelope REQ needs, says where to go (it waited 4.5 s for "not answering")
            for cmd in (["status"], ["runs", "--json"]):
                rc, err, dt = cli(*cmd, "--endpoint", f"ipc://{pd}/run/ingest.sock")
                check(rc == 1 and "wdriftd's ingest socket (listen.ingest)" in err and "listen.control" in err
                      and dt < 2, f"{cmd[0]} given the ingest socket: says so at once ({dt:.1f} s)", err)
            rc, err, dt = cli("status", "-c", cfg)
            check(rc == 0, "and the daemon serves on", err)
            time.sleep(0.3)   # the CLIs' disconnects reach the daemon's monitor
            log = plain.log_text()
            check(log.count("a REQ socket's request: a CLI given listen.ingest") == 2
                  and "disconnected after a message that was refused" not in log,
                  "its log says so once a request, not again as a publisher that died", log[-1500:])
        finally:
            plain.stop()
    finally:
        for g in greeters:
            g.close()
        shutil.rmtree(d, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
