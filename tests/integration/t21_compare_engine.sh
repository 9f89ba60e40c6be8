#!/bin/sh
# t21_compare_engine.sh: `wdrift compare --engine`: cpu and auto give the
# same numbers; cuda runs on a device or fails clearly without one; a bad
# value is a usage error. `--device N`: a device that does not exist fails
# cuda, naming it, and auto falls back to the CPU.
set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
WDRIFT=${WDRIFT:-build/wdrift}
PYTHON=${PYTHON:-/usr/bin/python3}
n=0 fail=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else fail=$((fail + 1)); echo "not ok $n - $2"; fi; }

"$PYTHON" - "$tmp" <<'PY'
import sys, h5py, numpy as np
rng = np.random.default_rng(5)
for name, shift in (("a", 0.0), ("b", 1e-3)):
    with h5py.File(f"{sys.argv[1]}/{name}.h5", "w") as f:
        r = np.random.default_rng(5)
        f["w32"] = (r.standard_normal(70000) * 0.02 + shift).astype(np.float32)
        f["w64"] = r.standard_normal(3001) * 0.02 + shift
        f["h16"] = (r.standard_normal(5000) * 0.02 + shift).astype(np.float16)
PY
"$WDRIFT" compare "$tmp/a.h5" "$tmp/b.h5" --engine cpu --json >"$tmp/cpu.json" 2>"$tmp/err"
ok $? "--engine cpu runs"
"$WDRIFT" compare "$tmp/a.h5" "$tmp/b.h5" --engine auto --json >"$tmp/auto.json" 2>"$tmp/err"
ok $? "--engine auto runs"
"$PYTHON" - "$tmp/cpu.json" "$tmp/auto.json" <<'PY'
import json, sys
c, a = (json.load(open(p)) for p in sys.argv[1:3])
assert c["engine"].startswith("cpu"), c["engine"]
for lc, la in zip(c["layers"], a["layers"]):
    for k in ("w1", "max_abs_diff", "rel_l2", "n_diff", "nonfinite"):
        x, y = lc[k], la[k]
        if isinstance(x, float):
            assert abs(x - y) <= 1e-9 * abs(x) + 1e-15, (lc["name"], k, x, y)
        else:
            assert x == y, (lc["name"], k, x, y)
PY
ok $? "auto and cpu give the same numbers"
"$WDRIFT" compare "$tmp/a.h5" "$tmp/b.h5" --engine cuda --json >"$tmp/cuda.json" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ]; then
	grep -q '"engine": "cuda' "$tmp/cuda.json"; ok $? "--engine cuda runs on the device"
else
	[ $rc -eq 1 ] && grep -q 'cuda asked for, but ' "$tmp/err" && grep -q -- '--engine cuda' "$tmp/err" &&
		! grep -q 'No such device' "$tmp/err" && grep -q -- '--engine cpu (or auto)' "$tmp/err"
	ok $? "--engine cuda without a device: exit 1 naming it, why once, and the way out ($(tail -n1 "$tmp/err"))"
fi
"$WDRIFT" compare "$tmp/a.h5" "$tmp/b.h5" --engine gpu >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "expected auto, cpu or cuda" "$tmp/err"
ok $? "--engine gpu: usage error"
"$WDRIFT" compare --help | grep -q -- '--engine auto|cpu|cuda'
ok $? "--help documents --engine"
"$WDRIFT" compare --help | grep -q -- '--device N'
ok $? "--help documents --device"
for bad in -1 x 1.5 "" 1024; do
	"$WDRIFT" compare "$tmp/a.h5" "$tmp/b.h5" --device "$bad" >/dev/null 2>"$tmp/err"
	[ $? -eq 2 ] && grep -q -- "--device '$bad': expected a device index" "$tmp/err"
	ok $? "--device '$bad': usage error"
done
"$WDRIFT" compare "$tmp/a.h5" "$tmp/b.h5" --engine cpu --device 7 --json >"$tmp/cpu7.json" 2>"$tmp/err"
[ $? -eq 0 ] && cmp -s "$tmp/cpu.json" "$tmp/cpu7.json"
ok $? "--engine cpu ignores --device"
"$WDRIFT" compare "$tmp/a.h5" "$tmp/b.h5" --engine cuda --device 1023 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q -- '--engine cuda --device 1023' "$tmp/err"
ok $? "--engine cuda --device 1023: exit 1 naming it ($(tail -n1 "$tmp/err"))"
if [ $rc -eq 0 ]; then	# a device: the index and the count are named
	grep -q "no device 1023 (this machine has" "$tmp/err"
	ok $? "a device that does not exist is named, with the count"
fi
"$WDRIFT" compare "$tmp/a.h5" "$tmp/b.h5" --device 1023 --json >"$tmp/auto1023.json" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q '"engine": "cpu' "$tmp/auto1023.json"
ok $? "--engine auto --device 1023 runs on the cpu"
# Out of memory in the engine (RLIMIT_AS, raised step by step until the
# readers have room and the two tensors' sort buffers do not): exit 1
# naming a file, the dataset and the reason; never a crash. The pair is
# prepared as one batch, and a failed batch is prepared again one tensor
# at a time so that the message names the one that failed. No address
# space limit works under AddressSanitizer.
if [ -z "${WDRIFT_SANITIZE:-}" ]; then
	"$PYTHON" - "$WDRIFT" "$tmp" <<'PY'
import resource, subprocess, sys
import h5py, numpy as np
wdrift, d = sys.argv[1:3]
r = np.random.default_rng(9)
for name in ("big_a", "big_b"):
    with h5py.File(f"{d}/{name}.h5", "w") as f:
        f["w"] = r.standard_normal(1 << 23).astype(np.float32)
seen = []
for mib in range(150, 1200, 10):
    def limit(mib=mib):
        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
    p = subprocess.run([wdrift, "compare", f"{d}/big_a.h5", f"{d}/big_b.h5", "--engine", "cpu"],
                       preexec_fn=limit, capture_output=True, text=True)
    assert p.returncode in (0, 1), (mib, p.returncode, p.stderr)
    if p.returncode == 0:
        break
    seen.append(p.stderr.strip().splitlines()[-1])
hit = [e for e in seen if "cannot prepare: Cannot allocate memory" in e]
assert hit, seen
assert all("dataset 'w'" in e and ("big_a.h5" in e or "big_b.h5" in e) for e in hit), hit
print(f"  {len(seen)} limits failed before one fit; the engine's: {hit[-1]}")
PY
	ok $? "out of memory while preparing: exit 1, naming the file and the dataset"
fi
echo "# $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
