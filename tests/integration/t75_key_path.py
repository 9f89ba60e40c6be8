#!/usr/bin/env python3
"""t75_key_path.py: a server key file whose path looks like a key (issue 11, item 5).

A key file's path of exactly 40 characters, all from the Z85 alphabet
('/', '.', '-', letters and digits are), such as
/tmp/wd-z85-19818/kkkkkkkkkkkkkkkkkk.pub, was taken for the key itself,
and the CLI then said "daemon not answering". Against the real daemon with
CURVE (tcp://127.0.0.1): that path works as --server-key, as
WDRIFT_SERVER_KEY and as the Python publisher's server_key=; z85:KEY gives
a key explicitly; a missing key file's path of 40 such characters is an
error that names it; and an auth.clients key that names an existing file
is warned about in the daemon's log.

The daemon is stopped by pid and the temp dir removed, also on failure.
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("WDRIFT_LIB", os.path.join(BUILD, "libwdrift.so"))

import harness as t50  # noqa: E402
from harness import Daemon, check, summary, teardown  # noqa: E402
from t71_flood import free_port  # noqa: E402
from t72_auth import cli, keygen, read_keys, write_config  # noqa: E402

import numpy as np  # noqa: E402

import wdrift  # noqa: E402

Z85 = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


def make_dir():
    """A fresh directory whose path is all Z85 (mkdtemp may put '_' in it)."""
    for i in range(100):
        d = f"/tmp/wd-z85-{os.getpid()}{i or ''}"
        try:
            os.mkdir(d, 0o700)
            return d
        except FileExistsError:
            continue
    raise RuntimeError("no fresh directory under /tmp")


def fifo_keys(tmp, d, cfg, endpoint, srv, trn):
    """A FIFO given as a key file is refused at once, naming it and the option.

    Red team t28: open() for reading waited forever for a writer, so the
    CLI and wdrift.Publisher hung. The timeouts turn a regression into a
    failure instead of a hung run.
    """
    fifo = os.path.join(tmp, "fifo.pub")
    os.mkfifo(fifo, 0o600)
    want = f"{fifo}: a FIFO, not a regular file"
    for args, env, opt in ((["--server-key", fifo, "--key", trn], None, "--server-key"),
                           (["--key", fifo], {"WDRIFT_SERVER_KEY": srv + ".pub"}, "--key"),
                           (["--key", trn], {"WDRIFT_SERVER_KEY": fifo}, "WDRIFT_SERVER_KEY")):
        t0 = time.time()
        try:
            r = cli(["status", "-c", cfg, *args], env_extra=env, timeout=10)
            out, rc = r.stderr, r.returncode
        except subprocess.TimeoutExpired:
            out, rc = "still blocked after 10 s", None
        check(rc == 1 and f"{opt}: {want}" in out,
              f"wdrift status: a FIFO as {opt} is refused, naming it ({time.time() - t0:.2f} s)", out)
    try:
        r = subprocess.run([sys.executable, "-c",
                            "import sys, wdrift\n"
                            "try:\n"
                            f"    wdrift.Publisher({endpoint!r}, 'base', server_key={fifo!r}, key={trn!r})\n"
                            "except wdrift.WdriftError as e:\n"
                            "    print(e); sys.exit(3)\n"],
                           capture_output=True, text=True, timeout=10,
                           env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        out, rc = "still blocked after 10 s", None
    check(rc == 3 and f"server_key=: {want}" in out,
          "wdrift.Publisher(server_key=FIFO) raises, naming it", out)
    bad = os.path.join(tmp, "fifo.yaml")
    with open(cfg) as f:
        text = f.read()
    with open(bad, "w") as f:
        f.write(text.replace(f"server_key: {srv}\n", f"server_key: {fifo}\n"))
    try:
        r = subprocess.run([t50.WDRIFTD, "-c", bad, "--check-config"], capture_output=True,
                           text=True, timeout=10)
        out, rc = r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        out, rc = "still blocked after 10 s", None
    check(rc == 2 and f"auth.server_key: {want}" in out,
          "wdriftd --check-config: auth.server_key a FIFO is refused, naming it", out)
    os.unlink(fifo)


def main():
    tmp = make_dir()
    d = os.path.join(tmp, "d")
    os.makedirs(d)
    dm = Daemon(d)
    try:
        # the server's key pair FILE, named so that FILE.pub is 40 characters
        srv = os.path.join(tmp, "k" * (40 - len(tmp) - 1 - len(".pub")))
        pub_path = srv + ".pub"
        trn = os.path.join(d, "trainer")
        keygen(srv)
        trainer_pub = keygen(trn)
        check(len(pub_path) == 40 and set(pub_path) <= Z85 and os.path.isfile(pub_path),
              f"the server's .pub file '{pub_path}' has a path of 40 Z85 characters")
        server_pub = read_keys(pub_path)["public-key"].decode()

        port = free_port()
        endpoint = f"tcp://127.0.0.1:{port}"
        auth = (f'  server_key: {srv}\n  clients:\n    trainer: "{trainer_pub}"\n'
                f'    pathy: "{pub_path}"')
        cfg = write_config(d, endpoint, auth)
        check(dm.start() is not None, "the daemon starts with CURVE", dm.log_text())
        log = dm.log_text()
        check("auth.clients.pathy: '" + pub_path + "' is the name of an existing file" in log,
              "an auth.clients key that names an existing file is warned about", log[-2000:])

        r = cli(["status", "-c", cfg, "--server-key", pub_path, "--key", trn])
        check(r.returncode == 0 and "CURVE" in r.stdout,
              "wdrift status --server-key PATH (40 Z85 characters) reads the file", r.stdout + r.stderr)
        r = cli(["status", "-c", cfg, "--key", trn], env_extra={"WDRIFT_SERVER_KEY": pub_path})
        check(r.returncode == 0, "WDRIFT_SERVER_KEY=PATH reads the file too", r.stdout + r.stderr)
        r = cli(["status", "-c", cfg, "--server-key", "z85:" + server_pub, "--key", trn])
        check(r.returncode == 0, "--server-key z85:KEY is the key", r.stdout + r.stderr)
        r = cli(["status", "-c", cfg, "--server-key", server_pub, "--key", trn])
        check(r.returncode == 0, "--server-key KEY (the 40 characters alone) still works",
              r.stdout + r.stderr)

        missing = pub_path[:-5] + "q.pub"
        r = cli(["status", "-c", cfg, "--server-key", missing, "--key", trn])
        check(r.returncode == 1 and f"--server-key: no such key file '{missing}'" in r.stderr and
              "z85:" in r.stderr and "not answering" not in r.stderr,
              "a missing key file's path of 40 Z85 characters is an error naming it", r.stderr)
        r = cli(["status", "-c", cfg, "--server-key", "z85:short", "--key", trn])
        check(r.returncode == 1 and "after 'z85:', expected the key" in r.stderr,
              "z85: with no key after it is an error", r.stderr)

        t0 = time.time()
        p = wdrift.Publisher(endpoint, "base", ack_timeout=5.0, server_key=pub_path, key=trn)
        p.publish(0, {"w": np.arange(1000, dtype=np.float32)})
        p.flush(10.0)
        stats = p.stats()
        p.close()
        check(stats["acked"] == 1, f"the Python publisher with server_key=PATH: acked "
              f"({time.time() - t0:.2f} s)", stats)
        try:
            wdrift.Publisher(endpoint, "base", server_key=missing, key=trn)
            err = None
        except wdrift.WdriftError as e:
            err = str(e)
        check(err and f"server_key=: no such key file '{missing}'" in err,
              "server_key= of a missing 40-character path raises, naming it", err)

        fifo_keys(tmp, d, cfg, endpoint, srv, trn)
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
