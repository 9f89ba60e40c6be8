#!/bin/sh
# t40_demo.sh: the README's first command works: `make demo-compare`'s script
# generates the four runs and compares them, table and JSON.
set -u
out=$(mktemp -d) || exit 1
trap 'rm -rf "$out"' EXIT INT TERM
BUILD=${BUILD:-build}
n=0 fail=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else fail=$((fail + 1)); echo "not ok $n - $2"; fi; }

BUILD=$BUILD sh scripts/demo_compare.sh >"$out/demo.txt" 2>&1
ok $? "scripts/demo_compare.sh exits 0"
grep -q '^\[all\] weighted' "$out/demo.txt"; ok $? "the table has its summary rows"
grep -q 'ratio\[fp16\]' "$out/demo.txt" && grep -q 'ratio\[seed\]' "$out/demo.txt" &&
	grep -q 'ratio\[round:bf16\]' "$out/demo.txt"
ok $? "three proxies: fp16, seed and round:bf16"
"${PYTHON:-/usr/bin/python3}" - "$BUILD/demo/compare.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = {l["name"]: l["proxies"]["fp16"]["ratio"] for l in d["layers"]}
# The demo's story: attention drift grows with depth, FFN drift stays small.
assert len(d["layers"]) == 39, len(d["layers"])
assert r["layers.3.attention.wq.weight"] > r["layers.0.attention.wq.weight"], r
assert r["layers.3.feed_forward.w1.weight"] < 0.5, r
PY
ok $? "compare.json: 39 tensors; attention ratio grows with depth"
echo "# $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
