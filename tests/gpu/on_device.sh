#!/bin/sh
# on_device.sh: the GPU work of docs/gpu.md ("What remains to run on a
# GPU"), step by step, on a machine with a CUDA device, from the repository
# root. Each step runs under its own time limit, its output goes to
# OUTDIR/STEP.log, and a table of steps, exit statuses and seconds ends the
# output, so that one failing step neither hides nor stops the others.
#
#   sh tests/gpu/on_device.sh OUTDIR STEP...
#
# Steps:
#   info        the device, driver and CUDA versions (nvidia-smi, nvcc)
#   test20      build/tests/test_gpu 20    (make check-gpu, sizes up to 2^20)
#   test28      build/tests/test_gpu 28    (make check-gpu, the full run)
#   memcheck    compute-sanitizer --tool memcheck  build/tests/test_gpu 16
#   racecheck   compute-sanitizer --tool racecheck on build/lab/hist16 14
#               (the cluster count, weights and zeros) and on
#               build/tests/test_gpu 0 (every kernel, size 1): racecheck
#               follows shared memory slowly, and test_gpu 12 did not finish
#               in 300 s; with --kernel-name filters the sanitizer itself
#               failed ("failed to handle a hardware exception")
#   synccheck   compute-sanitizer --tool synccheck build/tests/test_gpu 12
#   initcheck   compute-sanitizer --tool initcheck build/tests/test_gpu 12
#   lab         build/lab/hist16 28 weights, zeros and uniform
#   bench       build/bench-gpu, then bench/bench_gpu_torch.py (row 3)
#   publish     tests/gpu/t_publish_cuda.py (make check-gpu-publish)
#   paper       wdriftd with examples/gpu_paper.yaml (compute.backend: cuda)
#               and examples/gpu_paper.py; OUTDIR/paper.json, wdriftd.log
#
# The binaries are the ones in build/ (`make`, which builds them when nvcc
# is there); this script builds nothing, so that a machine with a driver
# but no compiler, or a call with little time, runs what it was given.
#
# wdriftd, wdrift and libwdrift.so need libzmq, HDF5, libyaml and the rest.
# A machine without them gets them from LIBDIR (default .dev/lib, filled by
# tests/gpu/pack_libs.sh from the build machine's own Debian packages):
# only the libraries the machine lacks are put on LD_LIBRARY_PATH, so that
# its own newer libstdc++ (which torch needs) is kept.
set -u
out=${1:?usage: on_device.sh OUTDIR STEP...}
shift
mkdir -p "$out"
PYTHON=${PYTHON:-python3}
LIBDIR=${LIBDIR:-.dev/lib}
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

if [ -d "$LIBDIR" ]; then
	shim=$(mktemp -d /tmp/wdrift-libs.XXXXXX)
	for f in "$LIBDIR"/*.so*; do
		n=$(basename "$f")
		ldconfig -p | grep -q " $n " || ln -s "$(cd "$(dirname "$f")" && pwd)/$n" "$shim/$n"
	done
	LD_LIBRARY_PATH="$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export LD_LIBRARY_PATH
fi

summary=""
step() {	# step NAME LIMIT COMMAND...: runs it, logs it, notes rc and time
	name=$1 limit=$2
	shift 2
	echo "=== $name: $*"
	t0=$(date +%s.%N)
	timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
	rc=$?
	t=$(awk "BEGIN { print $(date +%s.%N) - $t0 }")
	tail -n 25 "$out/$name.log"
	[ $rc -eq 124 ] && echo "=== $name: TIMED OUT after $limit s"
	summary="$summary$(printf '%-10s rc %-4s %8.1f s' "$name" "$rc" "$t" 2>/dev/null)
"
}

for s in "$@"; do
	case $s in
	info)
		step info 60 sh -c "nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; \
			${NVCC:-echo no nvcc} --version; ldd build/wdriftd | grep 'not found'; \
			$PYTHON -c 'import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'"
		;;
	test20)    step test20 240 build/tests/test_gpu 20 ;;
	test28)    step test28 420 build/tests/test_gpu 28 ;;
	memcheck)  step memcheck 300 "$SAN" --tool memcheck --leak-check full --error-exitcode 3 build/tests/test_gpu 16 ;;
	racecheck)
		step racecheck-lab 150 "$SAN" --tool racecheck --error-exitcode 3 build/lab/hist16 14 weights
		step racecheck-lab0 100 "$SAN" --tool racecheck --error-exitcode 3 build/lab/hist16 14 zeros
		step racecheck 240 "$SAN" --tool racecheck --error-exitcode 3 build/tests/test_gpu 0
		;;
	synccheck) step synccheck 300 "$SAN" --tool synccheck --error-exitcode 3 build/tests/test_gpu 12 ;;
	initcheck) step initcheck 300 "$SAN" --tool initcheck --error-exitcode 3 build/tests/test_gpu 12 ;;
	lab)
		for d in weights zeros uniform; do
			step "lab-$d" 120 build/lab/hist16 28 "$d"
		done
		;;
	bench)
		step bench 420 build/bench-gpu --json "$out/bench-gpu.json"
		step bench-torch 200 "$PYTHON" bench/bench_gpu_torch.py "$out/bench-gpu.json"
		;;
	publish)   step publish 200 env BUILD=build "$PYTHON" tests/gpu/t_publish_cuda.py ;;
	paper)
		rm -rf build/paper
		mkdir -p run
		setsid build/wdriftd -c examples/gpu_paper.yaml > "$out/wdriftd.log" 2>&1 < /dev/null &
		pid=$!
		step paper 420 env PYTHONUNBUFFERED=1 "$PYTHON" examples/gpu_paper.py --json-out "$out/paper.json"
		kill "$pid" 2> /dev/null
		wait "$pid"
		echo "wdriftd exited with status $?" >> "$out/wdriftd.log"
		grep -i -e engine -e cuda "$out/wdriftd.log" | head -n 5
		;;
	*)         echo "on_device.sh: unknown step '$s'" >&2; exit 2 ;;
	esac
done
echo "=== summary"
printf '%s' "$summary" | tee "$out/summary.txt"
