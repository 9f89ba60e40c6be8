#!/usr/bin/env python3
"""make_corpus.py: writes the seed corpus of each fuzz target under fuzz/corpus/.

Seeds are valid inputs and the malformed ones the tests know, so that the
fuzzer starts from the shapes the parsers accept and the edges they refuse.
`make check` replays them all (test_fuzz_*). Deterministic: run it again and
nothing changes. Needs Debian's h5py and numpy (for the checkpoint seeds).

    /usr/bin/python3 fuzz/make_corpus.py
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, data):
    """A seed named by its content, so that reruns write the same files."""
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def wire():
    def j(**kw):
        return json.dumps(dict(v=1, **kw))
    tensor = dict(type="tensor", run="llama-fa", step=1200, name="layers.3.attention.wq.weight",
                  dtype="bf16", shape=[4096, 4096], offset=0, count=16777216, total=16777216,
                  crc32=2868114395)
    for s in [j(type="hello", run="llama-fa", client="libwdrift 0.1"),
              j(type="hello", run="a"), j(type="ping"), j(type="pong"),
              j(type="commit", run="llama-fa", step=1200, tensors=291),
              j(type="ack", run="llama-fa", step=1200, tensors=291, bytes=13476298752, duplicate=False),
              j(type="welcome", run="llama-fa", window=1073741824, max_frame=67108864,
                max_message=1073741824, durable_steps=[100, 200]),
              j(type="error", code="bad_field", field="dtype", reason="unknown dtype", run="r",
                step=1, name="w"),
              j(**tensor), j(**dict(tensor, shape=[], total=1, count=1)),
              j(**dict(tensor, offset=100, count=50)), j(**dict(tensor, dtype="f8")),
              j(**dict(tensor, shape=[2] * 17)), j(**dict(tensor, step=-1)),
              j(**dict(tensor, run="..")), j(**dict(tensor, run="a/b")),
              j(**dict(tensor, name="x" * 600)), j(**dict(tensor, count=0)),
              j(**dict(tensor, offset=2 ** 64 - 1)), j(**dict(tensor, shape=[2 ** 40, 2 ** 40])),
              j(**dict(tensor, crc32=-1)), j(**dict(tensor, step=1.5)), j(**dict(tensor, name="a\u0001b")),
              '{"v": 2, "type": "hello", "run": "x"}', '{"type": "hello"}', '{"v": 1}', '[]', '{', '',
              '{"v": 1, "type": "hello", "run": "x", "run": "y"}', '\x00', '{"v":1,"type":"commit",'
              '"run":"r","step":9223372036854775807,"tensors":18446744073709551615}',
              '{"v":1e400,"type":"ping"}', '"just a string"', '{"v":1,"type":"hello","run":"\\ud800"}']:
        put("wire", s)


def control():
    for r in [{"cmd": "status"}, {"cmd": "runs"}, {"cmd": "studies"}, {"cmd": "alerts"},
              {"cmd": "reload"}, {"cmd": "drift", "study": "demo"},
              {"cmd": "drift", "study": "demo", "step": 20},
              {"cmd": "drift", "study": "demo", "step": 21},
              {"cmd": "drift", "study": "demo", "tensors": "layers.*"},
              {"cmd": "drift", "study": "demo", "tensors": "[[[["},
              {"cmd": "drift", "study": "nope"}, {"cmd": "drift"},
              {"cmd": "drift", "study": "demo", "step": "20"}, {"cmd": "nope"}, {"cmd": 7}, {}]:
        put("control", json.dumps(dict(v=1, **r)))
    for s in ['{"cmd":"status"}', '{"v":2,"cmd":"status"}', '[]', '', '{', 'null',
              '{"v":1,"cmd":"status","cmd":"runs"}', '{"v":1,"cmd":"st\\u0000atus"}']:
        put("control", s)


def config():
    shutil.copy(os.path.join(HERE, "..", "config", "wdrift.yaml"),
                os.path.join(HERE, "corpus", "config", "shipped.yaml"))
    full = """listen:
  ingest: tcp://*:5555
  control: ipc:///run/wdrift/control.sock
  events: tcp://127.0.0.1:5557
auth:
  server_key: /etc/wdrift/server.key
  clients: {trainer-a: "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", ci: "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"}
storage: {dir: /var/lib/wdrift}
compute: {backend: cpu}
memory: {budget: 16G}
spool: {retention: {every: 10, disk_budget: 1T}}
alignment: {tolerance: 5}
limits: {max_message: 64M, max_name: 256, max_dims: 8, max_tensors: 5000, max_runs: 16, max_pending: 4}
log: {level: debug}
studies:
  - name: llama-fa
    baseline: llama-base
    candidates: [llama-fa, llama-fp8]
    proxies: {fp16: llama-fp16, seed: llama-seed2}
    synthetic_proxy: round:bf16
alerts:
  - {name: fa-vs-fp16, study: llama-fa, metric: ratio, proxy: fp16, threshold: 0.5, for: 3}
  - {name: attn, study: llama-fa, metric: w1, scope: tensors, tensors: "layers.*.attention.*", threshold: 1e-3}
  - {name: nan, study: llama-fa, metric: nonfinite, threshold: 0, severity: critical,
     command: /bin/true, command_min_interval: 300}
  - {name: stall, study: llama-fa, metric: stalled, threshold: 600}
"""
    for s in [full, "", "---\n", "memory:\n  budget: 4X\n", "memory: {budget: 1.5G}\n",
              "a: &x 1\nb: *x\n", "<<: {x: 1}\n", "studies:\n  - name: a\n", "listen: [1, 2]\n",
              "memory:\n  budget:\n", "memory:\n  budget: 4G\n  budget: 8G\n", "\t- x\n", "[\n",
              "studies: []\nalerts: [{name: a, study: nope, metric: w1, threshold: 1}]\n",
              "log: {level: loud}\n", "spool: {retention: {every: 0}}\n", "'unterminated\n",
              "limits: {max_dims: 99999999999999999999999}\n", "storage: {dir: \"\"}\n",
              "listen: {ingest: \"tcp://*:1\"}\n", "listen: {ingest: \"tcp://*:1\"}\nauth: {allow_insecure: true}\n",
              "auth: {server_key: k, clients: {a: short}}\n", "auth: {clients: {a: b}}\n",
              "auth: {server_key: k, clients: [x]}\n"]:
        put("config", s)


def checkpoint():
    import h5py
    import numpy as np
    tmp = tempfile.mkdtemp()
    try:
        rng = np.random.default_rng(0)
        files = []

        def h5(name, fill):
            p = os.path.join(tmp, name)
            with h5py.File(p, "w") as f:
                fill(f)
            files.append(p)

        h5("f32.h5", lambda f: (f.create_dataset("layers.0.w", data=rng.standard_normal((4, 3)).astype("f4")),
                                f.create_dataset("layers.1.w", data=rng.standard_normal(5).astype("f4"))))
        h5("mixed.h5", lambda f: (f.create_dataset("a", data=np.arange(3, dtype="f8")),
                                  f.create_dataset("g/h", data=np.arange(4, dtype="f2")),
                                  f.create_dataset("b", data=np.array([np.nan, np.inf], "f4"))))

        def bf16(f):
            d = f.create_dataset("emb", data=np.arange(8, dtype="u2"))
            d.attrs["dtype"] = "bfloat16"
        h5("bf16.h5", bf16)
        h5("odd.h5", lambda f: (f.create_dataset("scalar", data=np.float32(1)),
                                f.create_dataset("ints", data=np.arange(3)),
                                f.create_dataset("empty", shape=(0,), dtype="f4"),
                                f.create_dataset("str", data=b"text"),
                                f.create_dataset("cmp", data=np.zeros(2, [("x", "f4"), ("y", "i2")]))))
        for p in files:
            data = open(p, "rb").read()
            put("checkpoint", data)
            put("checkpoint", data[:len(data) // 2])	# truncated
            put("checkpoint", data[:800])
        put("checkpoint", b"")
        put("checkpoint", b"\x89HDF\r\n\x1a\n" + bytes(64))
    finally:
        shutil.rmtree(tmp)


def main():
    # adds, never removes: the corpus also holds regression inputs that
    # make fuzz found (named for what they are, not by hash)
    for t in ("wire", "control", "config", "checkpoint"):
        os.makedirs(os.path.join(HERE, "corpus", t), exist_ok=True)
    wire()
    control()
    config()
    checkpoint()
    for t in ("wire", "control", "config", "checkpoint"):
        print(f"fuzz/corpus/{t}: {len(os.listdir(os.path.join(HERE, 'corpus', t)))} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
