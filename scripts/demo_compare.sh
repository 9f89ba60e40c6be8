#!/bin/sh
# demo_compare.sh: `make demo-compare`. Generates four runs of a small transformer and
# compares the optimised run with the baseline, beside two proxy runs and
# the baseline rounded to bf16. Needs build/wdrift and Debian's h5py.
set -eu
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
out=$BUILD/demo
"$PYTHON" scripts/make_demo_checkpoints.py "$out"
set -x
"$BUILD/wdrift" compare "$out/baseline.h5" "$out/fa.h5" \
	--proxy fp16="$out/fp16.h5" --proxy seed="$out/seed2.h5" --round-proxy bf16
{ set +x; } 2>/dev/null
"$BUILD/wdrift" compare "$out/baseline.h5" "$out/fa.h5" --proxy fp16="$out/fp16.h5" \
	--json >"$out/compare.json"
echo
echo "demo: the same comparison as JSON is in $out/compare.json (schema: docs/compare.md)."
echo "demo: ratio < 1 means the optimised run drifts less than the fp16 proxy run."
