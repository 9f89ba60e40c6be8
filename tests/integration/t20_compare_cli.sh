#!/bin/sh
# t20_compare_cli.sh: `wdrift compare` as a user runs it, on real HDF5 files.
#
# Usage, from the repository root: sh tests/integration/t20_compare_cli.sh
# Env: WDRIFT (default build/wdrift), PYTHON (default /usr/bin/python3, with
# numpy and h5py), KEEP=1 to keep the temporary directory. Prints TAP; exits
# 1 when a check fails.
#
# Covers: help and version; usage errors (exit 2); a normal run (exit 0):
# table header, summary rows, natural order, unmatched names, proxy labels,
# --layers; --timings; the JSON output; and bad input (exit 1, a message on stderr that
# names the file and the dataset): missing file, directory, text file,
# truncated HDF5, unsupported element types, zero-size datasets, bf16
# attribute on the wrong integer type, a proxy that lacks a tensor; and no
# crash (exit >= 128) on garbage behind an HDF5 signature or on corrupted
# copies of a valid file.
set -u

WDRIFT=${WDRIFT:-build/wdrift}
PYTHON=${PYTHON:-/usr/bin/python3}

case $WDRIFT in
*/*) WDRIFT=$(cd "$(dirname "$WDRIFT")" 2>/dev/null && pwd)/$(basename "$WDRIFT") ;;
esac
n=0
failed=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wdrift-t20.XXXXXX") || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
	n=$((n + 1)); failed=$((failed + 1))
	echo "not ok $n - $1"
	shift
	for line in "$@"; do
		printf '%s\n' "$line" | sed 's/^/#   /'
	done
}
# check DESC CONDITION...: ok when the command CONDITION succeeds.
check() {
	desc=$1; shift
	if "$@"; then ok "$desc"; else not_ok "$desc" "exit $rc" \
		"stdout: $(head -c 1500 "$tmp/out")" "stderr: $(head -c 1500 "$tmp/err")"; fi
}

# run ARGS...: runs wdrift, leaving $rc, $tmp/out and $tmp/err. A crash (exit
# status 128 or more: killed by a signal) is a failure of its own.
run() {
	"$WDRIFT" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ge 128 ]; then
		not_ok "wdrift $* does not crash" "exit $rc (signal $((rc - 128)))" \
			"stderr: $(head -c 1500 "$tmp/err")"
	fi
}

out_has() { grep -qF -- "$1" "$tmp/out"; }
err_has() { grep -qF -- "$1" "$tmp/err"; }
out_lacks() { ! grep -qF -- "$1" "$tmp/out"; }
rc_is() { [ "$rc" -eq "$1" ]; }

# expect_usage DESC ARGS...: exit 2, a message on stderr, nothing on stdout.
expect_usage() {
	desc=$1; shift
	run "$@"
	check "$desc: exit 2 with a message" eval 'rc_is 2 && [ -s "$tmp/err" ] && [ ! -s "$tmp/out" ]'
}

# expect_fail DESC NEEDLE... -- ARGS...: exit 1, nothing on stdout, and
# "wdrift compare: error:" on stderr with every NEEDLE in it.
expect_fail() {
	desc=$1; shift
	needles=
	while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
		needles="$needles$1
"
		shift
	done
	shift
	run "$@"
	good=1
	rc_is 1 || good=0
	[ -s "$tmp/out" ] && good=0
	err_has "wdrift compare: error:" || good=0
	missing='' named=''
	old_ifs=$IFS
	IFS='
'
	for nd in $needles; do
		named="$named '$nd'"
		err_has "$nd" || { good=0; missing="$missing '$nd'"; }
	done
	IFS=$old_ifs
	if [ "$good" = 1 ]; then
		ok "$desc: exit 1, stderr names$named"
	else
		not_ok "$desc: exit 1 with a message naming the file/dataset" "exit $rc, want 1" \
			"missing in stderr:${missing:- (none)}" "stderr: $(head -c 1500 "$tmp/err")" \
			"stdout: $(head -c 300 "$tmp/out")"
	fi
}

if [ ! -x "$WDRIFT" ]; then
	not_ok "$WDRIFT is built (make CUDA=0 build/wdrift)"
	echo "1..$n"
	exit 1
fi
if ! "$PYTHON" -c 'import numpy, h5py' 2>/dev/null; then
	echo "1..0 # SKIP $PYTHON lacks numpy or h5py"
	exit 77
fi

# --- files -----------------------------------------------------------------
T=$tmp
REF=$(pwd)/tests/ref
if ! PYTHONDONTWRITEBYTECODE=1 "$PYTHON" - "$T" "$REF" >"$tmp/gen.log" 2>&1 <<'EOF'
import os, sys
import numpy as np
import h5py
T, REF = sys.argv[1], sys.argv[2]
sys.path.insert(0, REF)
import gen
from gen import Bf16

rng = np.random.default_rng(20)
def w(n, s=0.02):
    return (rng.standard_normal(n) * s).astype(np.float32)
def bf(n):
    return Bf16(gen.f32_to_bf16(w(n)))

common = ["layers.0.attn.wq.weight", "layers.2.mlp.w1", "layers.10.mlp.w1"]
def model(extra):
    t = {name: w(1000) for name in common}
    t["embed.weight"] = bf(4096)
    t["norm/scale"] = w(64).astype(np.float16)
    t.update(extra)
    return t

gen.write_checkpoint(T + "/base.h5", model({"only_base.bias": w(10)}))
gen.write_checkpoint(T + "/cand.h5", model({"only_cand.bias": w(10)}))
gen.write_checkpoint(T + "/-dash.h5", model({}))
gen.write_checkpoint(T + "/fp16run.h5", model({}))
LONG = "model.transformer.encoder.layers.11.self_attention.query_key_value.weight"
gen.write_checkpoint(T + "/long_a.h5", {LONG: w(100)})
gen.write_checkpoint(T + "/long_b.h5", {LONG: w(100)})
gen.write_checkpoint(T + "/a_proxy_file_with_a_rather_long_label_name.h5", {LONG: w(100)})
# mixed dtypes and sizes; non-finite values
gen.write_checkpoint(T + "/mixed_a.h5", {"m": w(100), "t": w(600).reshape(30, 20)})
gen.write_checkpoint(T + "/mixed_b.h5", {"m": w(50).astype(np.float64), "t": w(600).reshape(20, 30)})
x = w(100)
x[[3, 4]] = np.nan
x[7] = -np.inf
gen.write_checkpoint(T + "/nf.h5", {"m": x, "t": w(600).reshape(30, 20)})
gen.write_checkpoint(T + "/seed.h5", model({}))
# no name in common: a DDP-wrapped model's state_dict, another model, no tensor at all
gen.write_checkpoint(T + "/ddp.h5", {"module." + k: v for k, v in model({}).items()})
gen.write_checkpoint(T + "/other_model.h5", {"encoder.w": w(10)})
gen.write_checkpoint(T + "/halfddp.h5", {("module." + k if k.startswith("layers") else k): v
                                         for k, v in model({}).items()})
with h5py.File(T + "/no_tensor.h5", "w") as f:
    f.attrs["step"] = 1
gen.write_checkpoint(T + "/run.v2.h5", model({}))
gen.write_checkpoint(T + "/a=b.h5", model({}))
os.makedirs(T + "/other", exist_ok=True)
gen.write_checkpoint(T + "/other/fp16run.h5", model({}))
p = model({})
del p["layers.10.mlp.w1"]
gen.write_checkpoint(T + "/proxy_missing.h5", p)

# Bad datasets, each beside a good one; the files differ in one dataset.
good = {"good": w(100)}
def bad(name, tensors, fn=None):
    gen.write_checkpoint(T + "/" + name, dict(good, **tensors))
bad("int32.h5", {"bad.int": np.arange(10, dtype=np.int32)})
bad("int32_asf32.h5", {"bad.int": np.arange(10, dtype=np.float32)})
bad("string.h5", {"bad.str": np.array([b"abc", b"defg"])})
bad("zero.h5", {"bad.zero": np.zeros(0, np.float32)})
bad("zero2d.h5", {"bad.zero2d": np.zeros((0, 5), np.float32)})
bad("ld.h5", {"bad.ld": np.ones(5, np.longdouble)})
bad("compound.h5", {"bad.cplx": np.ones(4, np.complex64)})
bad("bf16_u16.h5", {"emb": Bf16(gen.f32_to_bf16(w(50)))})
bad("bf16_u16_fixed.h5", {"emb": Bf16(gen.f32_to_bf16(w(50)), attr="fixed")})
bad("bf16_i16.h5", {"emb": Bf16(gen.f32_to_bf16(w(50)), int_dtype=np.int16)})
bad("bf16_u32.h5", {"emb": Bf16(gen.f32_to_bf16(w(50)), int_dtype=np.uint32)})
bad("bf16_float.h5", {"emb": Bf16(gen.f32_to_bf16(w(50)), form="float")})
with h5py.File(T + "/null.h5", "w") as f:
    f["good"] = good["good"]
    f.create_dataset("bad.null", data=h5py.Empty("f4"))
gen.write_checkpoint(T + "/good.h5", good)
# one weight transposed in the candidate: equal counts, other shapes
gen.write_checkpoint(T + "/shape_a.h5", {"w": w(2048).reshape(32, 64), "v": w(10)})
gen.write_checkpoint(T + "/shape_b.h5", {"w": w(2048).reshape(64, 32), "v": w(10)})

# A large contiguous dataset, to be cut in half.
gen.write_checkpoint(T + "/big.h5", {"small": w(10), "big": w(1 << 20)})
# The same, cut in half, with the end-of-file address in its version 0
# superblock (bytes 40..47) set to the new length: it opens and lists, and
# fails only when 'big' is read.
import struct
b = open(T + "/big.h5", "rb").read()
assert b[8] == 0, "expected a version 0 superblock"
half = b[:len(b) // 2]
half = half[:40] + struct.pack("<Q", len(half)) + half[48:]
open(T + "/trunc_eof.h5", "wb").write(half)
with open(T + "/text.h5", "w") as f:
    f.write("this is not an HDF5 file\n" * 100)
# what torch.save writes: a zip archive (made here without torch, as its first bytes are all that count)
import zipfile
with zipfile.ZipFile(T + "/model.pt", "w") as z:
    z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")

# Garbage behind the HDF5 signature, and corrupted copies of a valid file.
sig = b"\x89HDF\r\n\x1a\n"
g = np.random.default_rng(2020)
os.makedirs(T + "/garbage")
for i, size in enumerate((0, 1, 8, 64, 512, 4096, 65536)):
    with open(T + "/garbage/sig%d.h5" % i, "wb") as f:
        f.write(sig + g.integers(0, 256, size, dtype=np.uint8).tobytes())
# superblock version 0/1/2/3 bytes, then garbage
for v in range(4):
    with open(T + "/garbage/sb%d.h5" % v, "wb") as f:
        f.write(sig + bytes([v, 0, 0, 0, 0, 8, 8, 0]) + g.integers(0, 256, 2048, dtype=np.uint8).tobytes())
orig = open(T + "/good.h5", "rb").read()
for i in range(40):
    b = bytearray(orig)
    for _ in range(1 + i % 8):
        at = int(g.integers(0, min(len(b), 2048)))
        b[at] = int(g.integers(0, 256))
    with open(T + "/garbage/mut%02d.h5" % i, "wb") as f:
        f.write(bytes(b))
# The bf16 float type as HDF5's own tools see it.
bad_type = gen.verify_bf16_file(T + "/bf16_float.h5", "emb")
if bad_type:
    print(bad_type)
    sys.exit(3)
EOF
then
	not_ok "generate the test files with $PYTHON" "$(cat "$tmp/gen.log")"
	echo "1..$n"
	exit 1
fi
ok "test files generated; h5ls/h5dump see the bf16 float type as 16-bit, 8-bit exponent, 7-bit mantissa"
B=$T/base.h5
C=$T/cand.h5

# --- help and version ----------------------------------------------------------
run compare --help
check "compare --help exits 0" rc_is 0
missing=
for opt in --proxy --round-proxy --layers --json --help LABEL= bf16 fp16 GLOB \
	BASELINE CANDIDATE "exit status"; do
	out_has "$opt" || missing="$missing $opt"
done
check "compare --help documents every option${missing:+ (missing:$missing)}" [ -z "$missing" ]
run compare -h
check "compare -h exits 0 and prints usage" eval 'rc_is 0 && out_has "usage: wdrift compare"'
run --help
check "wdrift --help exits 0 and lists compare" eval 'rc_is 0 && out_has compare && out_has usage'
run --version
check "wdrift --version exits 0 and prints 'wdrift X.Y.Z'" \
	eval 'rc_is 0 && grep -Eq "^wdrift [0-9]+\.[0-9]+\.[0-9]+" "$tmp/out"'
run
check "wdrift with no command: exit 2, usage on stderr" eval 'rc_is 2 && err_has usage'
run frobnicate
check "wdrift frobnicate: exit 2, names the command" eval 'rc_is 2 && err_has frobnicate'
check "... and suggests nothing far from it" eval '! err_has "did you mean"'
run run
check "wdrift run: exit 2, did you mean 'runs'" eval 'rc_is 2 && err_has "unknown command '"'run'; did you mean 'runs'?"'"'
run help compare
check "wdrift help compare: compare's help, exit 0" eval 'rc_is 0 && out_has "usage: wdrift compare"'

# --- usage errors: exit 2 ----------------------------------------------------------
expect_usage "unknown option --bogus" compare "$B" "$C" --bogus
check "unknown option is named on stderr" err_has --bogus
check "usage errors point to --help" err_has "--help"
expect_usage "unknown short option -x" compare -x "$B" "$C"
expect_usage "no files" compare
expect_usage "one file" compare "$B"
check "one file: says what it expected" err_has "BASELINE"
expect_usage "three files" compare "$B" "$C" "$C"
expect_usage "--proxy without a value" compare "$B" "$C" --proxy
expect_usage "--layers without a value" compare "$B" "$C" --layers
expect_usage "--round-proxy bf8" compare "$B" "$C" --round-proxy bf8
check "bad --round-proxy value is named" err_has bf8
expect_usage "--round-proxy ''" compare "$B" "$C" --round-proxy ''
expect_usage "--round-proxy fp32" compare "$B" "$C" --round-proxy fp32
expect_usage "duplicate proxy labels from the same stem" \
	compare "$B" "$C" --proxy "$T/fp16run.h5" --proxy "$T/other/fp16run.h5"
check "duplicate label is named" err_has fp16run
expect_usage "duplicate LABEL=FILE labels" compare "$B" "$C" --proxy "x=$T/seed.h5" --proxy "x=$T/fp16run.h5"
check "duplicate LABEL=FILE labels: both files named, no advice to use LABEL=FILE" \
	eval 'err_has "proxy label '"'x'"' given twice (for '"'$T/seed.h5'"' and '"'$T/fp16run.h5'"')" && ! err_has "name them with"'
expect_usage "a LABEL=FILE label equal to a stem" compare "$B" "$C" --proxy "seed=$T/fp16run.h5" --proxy "$T/seed.h5"
check "a label from a stem: the advice is LABEL=FILE" err_has "name them with LABEL=FILE"
expect_usage "--round-proxy bf16 twice (bfloat16 alias)" compare "$B" "$C" --round-proxy bf16 --round-proxy bfloat16
check "--round-proxy alias: says the format is asked for already, not 'given twice'" \
	eval 'err_has "--round-proxy bfloat16: that format is asked for already" && ! err_has "given twice"'
expect_usage "--round-proxy against a --proxy labelled round:bf16" \
	compare "$B" "$C" --proxy "round:bf16=$T/seed.h5" --round-proxy bf16
check "--round-proxy against a --proxy label: names the --proxy file" \
	err_has "--round-proxy bf16: its label 'round:bf16' is taken by --proxy '$T/seed.h5'"
expect_usage "--proxy LABEL= with no file" compare "$B" "$C" --proxy "lab="
expect_usage "usage errors come before reading files" compare "$T/nonexistent.h5" "$C" --bogus

# --- success ------------------------------------------------------------------
run compare "$B" "$C"
check "compare BASE CAND: exit 0" rc_is 0
check "nothing on stderr on success" [ ! -s "$tmp/err" ]
hdr_ok=1
for h in tensor dtype elements W1 "max|d|" "rel L2" nonfinite; do
	grep -E '^tensor ' "$tmp/out" | grep -qF -- "$h" || hdr_ok=0
done
check "table header: tensor dtype elements W1 max|d| rel L2 nonfinite" [ "$hdr_ok" = 1 ]
check "summary rows [all] weighted / median / max" \
	eval 'grep -q "^\[all\] weighted " "$tmp/out" && grep -q "^\[all\] median" "$tmp/out" && grep -q "^\[all\] max" "$tmp/out"'
check "weighted row counts the matched elements (3*1000+4096+64)" \
	eval 'grep "^\[all\] weighted" "$tmp/out" | grep -qw 7160'
check "baseline and candidate paths printed" eval 'out_has "$B" && out_has "$C"'
check "every matched tensor has a row" eval '(for t in layers.0.attn.wq.weight layers.2.mlp.w1 layers.10.mlp.w1 embed.weight norm/scale; do grep -q "^$t " "$tmp/out" || exit 1; done)'
check "dtypes shown: f32, bf16, f16" eval 'grep "^embed.weight " "$tmp/out" | grep -qw bf16 && grep "^norm/scale " "$tmp/out" | grep -qw f16 && grep "^layers.2.mlp.w1 " "$tmp/out" | grep -qw f32'
order=$(grep -E '^layers\.' "$tmp/out" | awk '{print $1}' | tr '\n' ' ')
check "natural order: layers.0, layers.2, layers.10 (got: $order)" \
	[ "$order" = "layers.0.attn.wq.weight layers.2.mlp.w1 layers.10.mlp.w1 " ]
check "unmatched: only_base.bias listed (only in the baseline)" \
	eval 'grep -q "unmatched.*only_base.bias.*only in the baseline" "$tmp/out"'
check "unmatched: only_cand.bias listed (only in the candidate)" \
	eval 'grep -q "unmatched.*only_cand.bias.*only in the candidate" "$tmp/out"'
check "unmatched tensors get no row" eval '! grep -q "^only_" "$tmp/out"'

# option order, --
run compare --json --layers 'layers.*' "$B" "$C"
check "options before the files: exit 0, JSON" eval 'rc_is 0 && out_has "\"layers\""'
run compare "$B" --layers 'layers.*' "$C" --json
check "options between the files: exit 0, JSON" eval 'rc_is 0 && out_has "\"layers\""'
(cd "$T" && "$WDRIFT" compare --json -- -dash.h5 cand.h5 >"$tmp/out" 2>"$tmp/err"); rc=$?
check "'--' ends the options: a file named -dash.h5 is read" eval 'rc_is 0 && out_has "-dash.h5"'
(cd "$T" && "$WDRIFT" compare -dash.h5 cand.h5 >"$tmp/out" 2>"$tmp/err"); rc=$?
check "without '--', -dash.h5 is an option: exit 2" rc_is 2

# long names and labels are not cut
run compare "$T/long_a.h5" "$T/long_b.h5" --proxy "$T/a_proxy_file_with_a_rather_long_label_name.h5"
check "a 74-character tensor name is printed whole" \
	eval 'rc_is 0 && grep -q "^model.transformer.encoder.layers.11.self_attention.query_key_value.weight " "$tmp/out"'
check "a 42-character proxy label is printed whole: W1[...] and ratio[...]" \
	eval 'grep "^tensor " "$tmp/out" | grep -qF "W1[a_proxy_file_with_a_rather_long_label_name]" && grep "^tensor " "$tmp/out" | grep -qF "ratio[a_proxy_file_with_a_rather_long_label_name]"'

# mixed types and sizes; transposed shapes; non-finite values
run compare "$T/mixed_a.h5" "$T/mixed_b.h5"
check "dtype BASE/CAND and elements BASE/CAND when they differ: f32/f64 100/50" \
	eval 'rc_is 0 && grep "^m " "$tmp/out" | grep -qw "f32/f64" && grep "^m " "$tmp/out" | grep -qw "100/50"'
check "unequal sizes: max|d| and rel L2 print '-'" \
	eval '[ "$(grep "^m " "$tmp/out" | awk "{print \$5, \$6}")" = "- -" ]'
check "... and a note under the table says why (a trial read '-' with no word)" \
	out_has "note       m: element counts 100 and 50 differ: max|a-b|, rel L2 and n_diff need equal counts (-); W1 compares the two distributions as they are"
check "30x20 vs 20x30: compared element by element (max|d| is a number)" \
	eval 'grep "^t " "$tmp/out" | awk "{exit !(\$3 == 600 && \$5 != \"-\")}"'
run compare "$T/nf.h5" "$T/mixed_a.h5"
check "nonfinite column BASE/CAND: 3/0, and the legend line" \
	eval 'rc_is 0 && grep "^m " "$tmp/out" | grep -qw "3/0" && out_has "nonfinite: NaN/Inf counts, baseline/candidate; left out of W1, and their pairs out of max|d| and rel L2"'
run compare "$T/nf.h5" "$T/mixed_a.h5" --json
check "JSON per-kind non-finite counts: nan 2, neginf 1" \
	eval 'rc_is 0 && "$PYTHON" -c "
import json, sys
d = json.load(open(sys.argv[1]))
m = [l for l in d[\"layers\"] if l[\"name\"] == \"m\"][0]
assert m[\"nonfinite\"][\"baseline\"] == {\"nan\": 2, \"posinf\": 0, \"neginf\": 1}, m[\"nonfinite\"]
assert isinstance(m[\"n_diff\"], int) and m[\"n_diff\"] >= 97, m[\"n_diff\"]
" "$tmp/out"'

run compare "$B" "$B"
check "a file against itself: exit 0, W1 0" \
	eval 'rc_is 0 && grep "^layers.2.mlp.w1 " "$tmp/out" | awk "{exit !(\$4 == 0)}"'

# proxies: label from the stem, LABEL=FILE, a stem with dots, '=' in a real name
run compare "$B" "$C" --proxy "$T/fp16run.h5" --proxy "seed=$T/seed.h5" --round-proxy bf16 \
	--proxy "$T/run.v2.h5" --proxy "$T/a=b.h5"
check "compare with 4 proxy files and a rounding proxy: exit 0" rc_is 0
check "proxy label defaults to the file stem: W1[fp16run] ratio[fp16run]" \
	eval 'grep "^tensor " "$tmp/out" | grep -qF "W1[fp16run]" && grep "^tensor " "$tmp/out" | grep -qF "ratio[fp16run]"'
check "LABEL=FILE: W1[seed] ratio[seed]" \
	eval 'grep "^tensor " "$tmp/out" | grep -qF "W1[seed]" && grep "^tensor " "$tmp/out" | grep -qF "ratio[seed]"'
check "stem keeps inner dots: W1[run.v2]" eval 'grep "^tensor " "$tmp/out" | grep -qF "W1[run.v2]"'
check "an existing file named a=b.h5 is a file, label a=b" eval 'grep "^tensor " "$tmp/out" | grep -qF "W1[a=b]"'
check "--round-proxy bf16: W1[round:bf16]" eval 'grep "^tensor " "$tmp/out" | grep -qF "W1[round:bf16]"'
check "proxy lines name the proxy files" eval 'out_has "fp16run: $T/fp16run.h5" && out_has "seed: $T/seed.h5"'

# --layers
run compare "$B" "$C" --layers 'layers.*'
rows=$(grep -cE '^(layers|embed|norm|only)' "$tmp/out")
check "--layers 'layers.*': exactly the 3 layers.* rows (got $rows)" \
	eval 'rc_is 0 && [ "$rows" -eq 3 ] && grep -q "^layers.10.mlp.w1 " "$tmp/out"'
check "--layers: unselected names are not listed as unmatched" eval '! out_has only_base'
run compare "$B" "$C" --layers 'layers.*' --layers embed.weight --layers 'only_*'
rows=$(grep -cE '^(layers|embed|norm)' "$tmp/out")
check "--layers repeatable: layers.* + embed.weight (got $rows rows)" \
	eval 'rc_is 0 && [ "$rows" -eq 4 ] && grep -q "^embed.weight " "$tmp/out"'
check "--layers 'only_*': both unmatched names listed" eval 'out_has only_base.bias && out_has only_cand.bias'
run compare "$B" "$C" --layers 'norm*'
check "--layers: '*' matches '/' (norm* selects norm/scale)" eval 'rc_is 0 && grep -q "^norm/scale " "$tmp/out"'
run compare "$B" "$C" --layers '*.w1'
check "--layers '*.w1': layers.2.mlp.w1 and layers.10.mlp.w1 only" \
	eval 'rc_is 0 && [ "$(grep -cE "^(layers|embed|norm)" "$tmp/out")" -eq 2 ]'
run compare "$B" "$C" --layers 'nothing*'
check "--layers matching nothing: exit 1 naming the glob, both files and some names, nothing on stdout" \
	eval 'rc_is 1 && err_has "--layers '"'nothing*'"' matches no tensor of '"'$B'"' or '"'$C'"'" &&
	      err_has "such as '"'"'" && [ ! -s "$tmp/out" ]'
run compare "$B" "$C" --layers 'layers.*' --layers 'embd.weight'
check "--layers: one glob of two matching nothing (a typo) is still an error naming it" \
	eval 'rc_is 1 && err_has "--layers '"'embd.weight'"' matches no tensor" && [ ! -s "$tmp/out" ]'
run compare "$B" "$C" --layers 'lyers.*' --layers 'layers.*' --layers 'embd.weight'
check "--layers: two typos are both named in one run" \
	eval 'rc_is 1 && err_has "'"'lyers.*'"' matches no tensor" && err_has "'"'embd.weight'"' matches no tensor" &&
	      [ "$(grep -c "matches no tensor" "$tmp/err")" -eq 2 ]'
ln -s "$B" "$T/base-link.h5"
run compare "$B" "$T/base-link.h5" --layers 'layers.*'
check "the same file twice (through a link): exit 0, one warning naming both paths" \
	eval 'rc_is 0 && err_has "warning: '"'$B'"' and '"'$T/base-link.h5'"' are the same file" &&
	      [ "$(grep -c warning "$tmp/err")" -eq 1 ]'
run compare "$B" "$C" --layers 'layers.*'
check "two different files: no same-file warning" eval 'rc_is 0 && ! err_has "same file"'
run compare "$B" "$C" --layers 'only_cand*'
check "--layers matching a name of the candidate only: exit 0, listed as unmatched, no row" \
	eval 'rc_is 0 && out_has "no tensor matched" && out_has only_cand.bias'

# --- --timings ------------------------------------------------------------------
# Where the time went: the same results, and a line (or a JSON object) whose
# parts add up to no more than the total. No timing is asserted beyond that.
run compare "$B" "$C" --proxy "$T/fp16run.h5" --round-proxy fp16 --json
cp "$tmp/out" "$tmp/plain.json"
run compare "$B" "$C" --proxy "$T/fp16run.h5" --round-proxy fp16 --json --timings
check "--timings --json: exit 0" rc_is 0
check "--timings --json: the results as without it, and a timings object whose parts fit in the total" \
	"$PYTHON" -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
t = b.pop("timings")
assert "timings" not in a and a == b, "results differ"
assert set(t) == {"total_s", "engine_s", "read_wait_s", "open_s"}, t
assert all(v >= 0 for v in t.values()), t
assert t["engine_s"] > 0 and t["engine_s"] + t["read_wait_s"] + t["open_s"] <= t["total_s"] * 1.0001, t
' "$tmp/plain.json" "$tmp/out"
run compare "$B" "$C" --timings
check "--timings: the table ends with the timings line" \
	eval 'rc_is 0 && tail -n 1 "$tmp/out" | grep -Eq "^timings: total [0-9.]+ s = engine [0-9.]+ s \+ waiting for the readers [0-9.]+ s \+ starting them and listing [0-9.]+ s \+ the rest [0-9.]+ s$"'
run compare --help
check "compare --help documents --timings" out_has --timings

# --- JSON -----------------------------------------------------------------------
run compare "$B" "$C" --proxy "$T/fp16run.h5" --proxy "seed=$T/seed.h5" --round-proxy fp16 --json
check "--json: exit 0" rc_is 0
cp "$tmp/out" "$tmp/full.json"
check "--json output parses with $PYTHON -m json.tool" eval '"$PYTHON" -m json.tool "$tmp/full.json" >/dev/null 2>"$tmp/err"'
cat >"$tmp/keys.py" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
want = sys.argv[2:]
errs = []
for k in ("baseline", "candidate", "layers", "unmatched", "summary"):
    if k not in d:
        errs.append("no key " + k)
exec(sys.stdin.read())
print("\n".join(errs))
sys.exit(1 if errs else 0)
EOF
jcheck() {  # jcheck DESC PYTHON-CODE (appends to errs; d is the object)
	desc=$1
	if printf '%s\n' "$2" | "$PYTHON" "$tmp/keys.py" "$tmp/full.json" >"$tmp/jerr" 2>&1; then
		ok "$desc"
	else
		not_ok "$desc" "$(cat "$tmp/jerr")"
	fi
}
jcheck "JSON has baseline, candidate, layers, unmatched, summary" "
if d.get('baseline') != '$B' or d.get('candidate') != '$C':
    errs.append('paths: %r %r' % (d.get('baseline'), d.get('candidate')))"
jcheck "JSON layers: the 5 matched tensors in natural order" "
names = [l['name'] for l in d['layers']]
if names != ['embed.weight', 'layers.0.attn.wq.weight', 'layers.2.mlp.w1', 'layers.10.mlp.w1', 'norm/scale']:
    errs.append('names %r' % names)"
jcheck "JSON unmatched: only_base.bias then only_cand.bias; unmatched_detail" "
if d['unmatched'] != ['only_base.bias', 'only_cand.bias']:
    errs.append('unmatched %r' % d['unmatched'])
if d.get('unmatched_detail') != {'baseline_only': ['only_base.bias'], 'candidate_only': ['only_cand.bias']}:
    errs.append('unmatched_detail %r' % d.get('unmatched_detail'))"
jcheck "JSON proxies: fp16run (stem), seed (LABEL=FILE), round:fp16 (synthetic)" "
p = d.get('proxies', {})
if p != {'fp16run': '$T/fp16run.h5', 'seed': '$T/seed.h5', 'round:fp16': 'synthetic'}:
    errs.append('proxies %r' % p)
for l in d['layers']:
    if sorted(l['proxies']) != ['fp16run', 'round:fp16', 'seed']:
        errs.append('%s: proxies %r' % (l['name'], l['proxies']))"
jcheck "JSON layer fields: w1, max_abs_diff, rel_l2, n_diff, nonfinite, numel, dtype" "
for l in d['layers']:
    for k in ('w1', 'max_abs_diff', 'rel_l2', 'n_diff', 'nonfinite', 'numel', 'dtype', 'numel_candidate', 'dtype_candidate', 'stats'):
        if k not in l: errs.append('%s: no %s' % (l['name'], k))
    if not (isinstance(l.get('w1'), float) and l['w1'] > 0):
        errs.append('%s: w1 %r' % (l['name'], l.get('w1')))
dt = {l['name']: l['dtype'] for l in d['layers']}
if dt != {'embed.weight': 'bf16', 'layers.0.attn.wq.weight': 'f32', 'layers.2.mlp.w1': 'f32', 'layers.10.mlp.w1': 'f32', 'norm/scale': 'f16'}:
    errs.append('dtypes %r' % dt)"
jcheck "JSON summary: tensors 5, numel 7160, w1_weighted, per-proxy ratios" "
s = d['summary']
if s.get('tensors') != 5 or s.get('numel') != 7160: errs.append('summary %r' % s)
for k in ('w1_weighted', 'w1_median', 'w1_max', 'max_abs_diff', 'nonfinite', 'proxies'):
    if k not in s: errs.append('summary: no ' + k)
for lab in ('fp16run', 'seed', 'round:fp16'):
    for k in ('w1_weighted', 'ratio_median', 'ratio_max', 'ratio_weighted'):
        if k not in s['proxies'].get(lab, {}): errs.append('summary proxies %s: no %s' % (lab, k))"
run compare "$B" "$C" --layers 'layers.*' --json
cp "$tmp/out" "$tmp/full.json"
jcheck "--layers with --json: only layers.*, nothing unmatched" "
names = [l['name'] for l in d['layers']]
if names != ['layers.0.attn.wq.weight', 'layers.2.mlp.w1', 'layers.10.mlp.w1'] or d['unmatched'] != []:
    errs.append('layers %r unmatched %r' % (names, d['unmatched']))
if d['summary']['tensors'] != 3 or d['summary']['numel'] != 3000:
    errs.append('summary %r' % d['summary'])"

# --- bad input: exit 1, the message names the file (and dataset) -------------
# no tensor name in common: nothing compared is an error, not an empty table
# exiting 0 (a trial took one for a result); a wrapper's prefix is named
expect_fail "no name in common: the candidate's have DDP's 'module.'" "'$B' (6 tensors) and '$T/ddp.h5' (5)" \
	"have no tensor name in common" "the candidate's names are the baseline's with 'module.' before them" -- \
	compare "$B" "$T/ddp.h5"
expect_fail "no name in common: the baseline's have the prefix" "the baseline's names are the candidate's with 'module.'" -- \
	compare "$T/ddp.h5" "$C"
expect_fail "no name in common, no prefix: a name of each" "have no tensor name in common" \
	"the baseline has 'embed.weight', the candidate 'encoder.w'" "different models?" -- compare "$B" "$T/other_model.h5"
expect_fail "an HDF5 file with no tensor (baseline)" "'$T/no_tensor.h5' holds no tensor" -- \
	compare "$T/no_tensor.h5" "$C"
expect_fail "an HDF5 file with no tensor (candidate)" "'$T/no_tensor.h5' holds no tensor" -- \
	compare "$B" "$T/no_tensor.h5"
expect_fail "a proxy with DDP's prefix: the error names its name for the tensor" "proxy 'ddp' has no tensor" \
	"the name with 'module.': a wrapped model's state_dict" -- compare "$B" "$C" --proxy "$T/ddp.h5"
# some names in common, the others with a prefix: compared, listed, and a note names the prefix
run compare "$B" "$T/halfddp.h5"
check "some names with DDP's prefix: exit 0, a note under the unmatched names naming it" \
	eval 'rc_is 0 && out_has "note       3 names only in the candidate are the baseline'"'"'s with '"'"'module.'"'"' before them"'
run compare "$B" "$T/halfddp.h5" --json
check "... and \"unmatched_hint\" in --json (null without one)" eval '
	"$PYTHON" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d[\"unmatched_hint\"].startswith(\"3 names only in the candidate\")" "$tmp/out" &&
	"$WDRIFT" compare "$B" "$C" --json | "$PYTHON" -c "import json,sys; assert json.load(sys.stdin)[\"unmatched_hint\"] is None"'
run compare "$B" "$T/ddp.h5" --layers 'module.*'
check "no name in common, with --layers: the selection's unmatched names, exit 0 (as documented)" \
	eval 'rc_is 0 && out_has "no tensor matched" && out_has module.embed.weight'
expect_fail "missing baseline" "$T/nonexistent.h5" -- compare "$T/nonexistent.h5" "$C"
expect_fail "missing candidate" "$T/nonexistent.h5" -- compare "$B" "$T/nonexistent.h5"
check "a missing file with no near name: no suggestion" eval '! err_has "did you mean"'
expect_fail "a typo of a file beside it" "'$T/cnad.h5': cannot open: No such file or directory; did you mean '$T/cand.h5'?" -- \
	compare "$B" "$T/cnad.h5"
expect_fail "missing proxy file" "$T/nope.h5" -- compare "$B" "$C" --proxy "$T/nope.h5"
expect_fail "missing proxy file given as LABEL=FILE" "$T/nope.h5" -- compare "$B" "$C" --proxy "x=$T/nope.h5"
expect_fail "a directory" "$T/other" "directory" -- compare "$T/other" "$C"
expect_fail "a text file" "$T/text.h5" "not an HDF5 file" -- compare "$B" "$T/text.h5"
expect_fail "torch.save's file: said to be one, with the converter" "$T/model.pt" \
	"not an HDF5 file (it is a zip archive, as PyTorch's torch.save writes: wdrift reads HDF5; docs/checkpoints.md" \
	-- compare "$B" "$T/model.pt"
expect_fail "an empty file" "$T/empty.h5" -- compare "$(: >"$T/empty.h5"; echo "$T/empty.h5")" "$C"
size=$(wc -c <"$T/big.h5")
head -c $((size / 2)) "$T/big.h5" >"$T/truncated.h5"
check "big.h5 is large and cut in half ($size -> $(wc -c <"$T/truncated.h5") bytes)" \
	[ "$size" -gt 4000000 ]
expect_fail "a truncated HDF5 file (baseline)" "$T/truncated.h5" -- compare "$T/truncated.h5" "$T/big.h5"
expect_fail "a truncated HDF5 file (candidate)" "$T/truncated.h5" -- compare "$T/big.h5" "$T/truncated.h5"
cp "$T/big.h5" "$T/truncated2.h5"
truncate -s $((size - 4096)) "$T/truncated2.h5" 2>/dev/null || head -c $((size - 4096)) "$T/big.h5" >"$T/truncated2.h5"
expect_fail "an HDF5 file missing its last 4 KiB" "$T/truncated2.h5" -- compare "$T/big.h5" "$T/truncated2.h5"
expect_fail "truncated data, consistent header: the read fails" "$T/trunc_eof.h5" "'big'" -- \
	compare "$T/big.h5" "$T/trunc_eof.h5"
run compare "$T/trunc_eof.h5" "$T/big.h5" --layers small
check "truncated data: the tensors that are whole still compare (--layers small): exit 0" rc_is 0
expect_fail "int32 dataset (baseline)" "$T/int32.h5" "bad.int" -- compare "$T/int32.h5" "$T/int32.h5"
check "int32: says the element type is unsupported" err_has "unsupported element type"
check "... and not how bf16 is stored, which only a 2-byte integer may mean (a trial)" eval '! err_has "bf16 as uint16"'
check "... and that --skip-other leaves such tensors out" err_has "(--skip-other leaves out tensors that are not floats, and empty ones)"
# a transposed weight: W1 as ever, and a note that the element-wise columns pair row-major elements
run compare "$T/shape_a.h5" "$T/shape_b.h5"
check "equal counts, other shapes: exit 0 and a note naming the tensor and both shapes" eval \
	'rc_is 0 && out_has "note       w: shapes (32, 64) and (64, 32) differ: max|a-b|, rel L2 and n_diff pair the elements in row-major order" && out_lacks "note       v:"'
run compare "$T/shape_a.h5" "$T/shape_b.h5" --json
check "--json: \"shape_note\" on that layer only" eval \
	'rc_is 0 && $PYTHON -c "import json,sys; d={l[\"name\"]: l for l in json.load(open(sys.argv[1]))[\"layers\"]}; assert \"(64, 32)\" in d[\"w\"][\"shape_note\"] and \"shape_note\" not in d[\"v\"]" "$tmp/out"'
# --skip-other: an integer counter (BatchNorm's num_batches_tracked) left out, loudly; the floats compared
run compare "$T/int32.h5" "$T/int32.h5" --skip-other
check "--skip-other: exit 0, the int32 tensor listed as skipped, with why" eval \
	'rc_is 0 && out_has "skipped    bad.int: unsupported element type (4-byte signed integer" && out_has "good"'
run compare "$T/int32.h5" "$T/int32.h5" --skip-other --json
check "--skip-other --json: \"skipped\": [{name, why}], the float compared" eval \
	'rc_is 0 && $PYTHON -c "import json,sys; d=json.load(open(sys.argv[1])); s=d[\"skipped\"]; assert [x[\"name\"] for x in s]==[\"bad.int\"] and \"integer\" in s[0][\"why\"] and [l[\"name\"] for l in d[\"layers\"]]==[\"good\"]" "$tmp/out"'
run compare "$T/int32_asf32.h5" "$T/int32.h5" --skip-other
check "--skip-other: a float in one file and an integer in the other is skipped too, naming the file" eval \
	'rc_is 0 && out_has "skipped    bad.int: unsupported element type" && out_has "(in the candidate)"'
expect_fail "--skip-other does not hide a file's mistake: a bf16 attribute on an int16 dataset" "$T/bf16_i16.h5" \
	"emb" "bfloat16" -- compare "$T/bf16_u16.h5" "$T/bf16_i16.h5" --skip-other
expect_fail "int32 dataset in the candidate, f32 in the baseline" "$T/int32.h5" "bad.int" -- \
	compare "$T/int32_asf32.h5" "$T/int32.h5"
check "the message does not blame the good baseline" eval '! err_has "int32_asf32"'
# the candidate has bad.int, the baseline not: unmatched, never read: fine
run compare "$T/good.h5" "$T/int32.h5"
check "a bad dataset that is only unmatched is not read: exit 0, listed as unmatched" \
	eval 'rc_is 0 && out_has bad.int'
run compare "$T/int32.h5" "$T/int32.h5" --layers good
check "a bad dataset not selected by --layers does not stop the run: exit 0" rc_is 0
expect_fail "string dataset" "$T/string.h5" "bad.str" "string" -- compare "$T/string.h5" "$T/string.h5"
expect_fail "zero-size dataset" "$T/zero.h5" "bad.zero" "zero-size" -- compare "$T/zero.h5" "$T/zero.h5"
expect_fail "zero-size 2-D dataset" "$T/zero2d.h5" "bad.zero2d" -- compare "$T/zero2d.h5" "$T/zero2d.h5"
check "... naming --skip-other, which leaves it out (a trial: no way round it)" err_has "(--skip-other leaves out tensors that are not floats, and empty ones)"
run compare "$T/zero2d.h5" "$T/zero2d.h5" --skip-other
check "--skip-other: a zero-size dataset listed as skipped, the rest compared" eval \
	'rc_is 0 && out_has "skipped    bad.zero2d: zero-size dataset (in both)" && out_has "good"'
run compare "$T/zero.h5" "$T/good.h5" --skip-other
check "--skip-other: a zero-size dataset in one file only is unmatched, not skipped" eval 'rc_is 0 && out_lacks "skipped    "'
run compare "$T/zero2d.h5" "$T/zero2d.h5" --skip-other --layers 'bad.*'
check "--skip-other leaving out every tensor selected: exit 1, nothing compared (a trial's exited 0, an empty table)" eval \
	'rc_is 1 && err_has "nothing compared: --skip-other left out every tensor selected (1, such as '"'"'bad.zero2d'"'"'"'
run compare "$T/int32_asf32.h5" "$T/int32_asf32.h5" --proxy "i=$T/int32.h5" --skip-other
check "a proxy's tensor that --skip-other would leave out: an error that says it does not apply to proxies" eval \
	'rc_is 1 && err_has "proxy '"'"'i'"'"': dataset '"'"'bad.int'"'"'" && err_has "not a proxy'"'"'s" && err_has "--layers"'
run compare --help
check "compare --help: the usage lines name --skip-other" eval 'rc_is 0 && head -4 "$tmp/out" | grep -q -- "--skip-other"' 
expect_fail "null dataspace" "$T/null.h5" "bad.null" -- compare "$T/null.h5" "$T/null.h5"
expect_fail "80-bit long double dataset" "$T/ld.h5" "bad.ld" -- compare "$T/ld.h5" "$T/ld.h5"
expect_fail "complex (compound) dataset" "$T/compound.h5" "bad.cplx" -- compare "$T/compound.h5" "$T/compound.h5"
run compare "$T/bf16_u16.h5" "$T/bf16_float.h5" --json
check "uint16 + dtype=\"bfloat16\" vs 16-bit bf16 float: exit 0, both bf16" \
	eval 'rc_is 0 && grep -q "\"dtype\": \"bf16\"" "$tmp/out" && grep -q "\"dtype_candidate\": \"bf16\"" "$tmp/out"'
run compare "$T/bf16_u16_fixed.h5" "$T/bf16_u16.h5"
check "uint16 + fixed-length string dtype=\"bfloat16\": exit 0" rc_is 0
expect_fail "int16 + dtype=\"bfloat16\"" "$T/bf16_i16.h5" "emb" "bfloat16" -- compare "$T/bf16_u16.h5" "$T/bf16_i16.h5"
expect_fail "uint32 + dtype=\"bfloat16\"" "$T/bf16_u32.h5" "emb" -- compare "$T/bf16_u32.h5" "$T/bf16_u16.h5"
expect_fail "proxy lacks a tensor the baseline has" "$T/proxy_missing.h5" "layers.10.mlp.w1" -- \
	compare "$B" "$C" --proxy "$T/proxy_missing.h5"
check "proxy lacks a tensor: the message names the proxy label" err_has proxy_missing
run compare "$B" "$C" --proxy "$T/proxy_missing.h5" --layers 'layers.[02].*'
check "proxy lacking a tensor that --layers leaves out: exit 0" rc_is 0
expect_fail "a proxy file that is a text file" "$T/text.h5" -- compare "$B" "$C" --proxy "$T/text.h5"

# --- garbage never crashes --------------------------------------------------------
crashes=0 bad_exit='' silent=''
for f in "$T"/garbage/*.h5; do
	"$WDRIFT" compare "$f" "$T/good.h5" >/dev/null 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ge 128 ]; then
		crashes=$((crashes + 1)); bad_exit="$bad_exit $(basename "$f"):$rc"
	elif [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
		bad_exit="$bad_exit $(basename "$f"):$rc"
	elif [ "$rc" -eq 1 ] && ! err_has "$f"; then
		silent="$silent $(basename "$f")"
	fi
	"$WDRIFT" compare "$T/good.h5" "$f" --json >/dev/null 2>&1
	rc=$?
	[ "$rc" -ge 128 ] && { crashes=$((crashes + 1)); bad_exit="$bad_exit $(basename "$f")(cand):$rc"; }
done
ngarbage=$(ls "$T"/garbage | wc -l)
check "$ngarbage garbage/corrupted files (HDF5 signature + random bytes, mutated copies): no crash, exit 0 or 1" \
	eval '[ "$crashes" -eq 0 ] && [ -z "$bad_exit" ]' 
[ -n "$bad_exit" ] && echo "#   exits:$bad_exit"
check "garbage files that fail are named in the message" [ -z "$silent" ]
[ -n "$silent" ] && echo "#   not named:$silent"

echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
