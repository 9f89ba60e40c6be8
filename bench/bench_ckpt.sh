#!/bin/sh
# bench_ckpt.sh: `make bench-ckpt`. What reading a user's checkpoint in a
# resource-limited child costs (wdrift compare, wdrift send:
# lib/ckpt_sandbox.c) beside the in-process reader it wraps, on the two
# files docs/performance.md reports: one 256 MiB f32 tensor (the cost per
# byte) and 1000 small tensors (the cost per tensor). A benchmark, not a
# test.
#
#   BENCH_REPEATS (9) passes of each path on each file, alternating.
set -eu
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
REPEATS=${BENCH_REPEATS:-9}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

"$PYTHON" -c "
import sys
import h5py, numpy as np
r = np.random.default_rng(6)
with h5py.File(sys.argv[1] + '/one-256MiB.h5', 'w') as f:
    f['w'] = r.standard_normal(1 << 26, dtype=np.float32)
with h5py.File(sys.argv[1] + '/1000-small.h5', 'w') as f:
    for i in range(1000):
        f[f'layers.{i}.w'] = r.standard_normal(1000, dtype=np.float32)
" "$tmp"
echo "bench-ckpt: $(uname -n), $(nproc) cores, $(date -u +%Y-%m-%d)"
for f in one-256MiB 1000-small; do
	"$BUILD/wdrift-bench-ckpt" "$tmp/$f.h5" "$REPEATS"
done
