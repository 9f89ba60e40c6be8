#!/bin/sh
# run.sh: runs every test that needs no GPU and prints one summary line.
#
# Each test program speaks TAP on stdout ("ok N - what", "not ok N - what")
# and exits 0, or 77 to be skipped. A program that exits otherwise without
# reporting a failure counts as one failure. Set VERBOSE=1 to see every line.
#
#   build/tests/test_*          C unit tests (tests/unit/), and the CUDA kernels'
#                               bodies on the CPU (tests/kernels/)
#   tests/integration/t*.sh|py  the CLI and the daemon, as a user runs them
#                               (harness.py: what the Python ones share)
#   tests/ref/t*.py             cross-checks against scipy and numpy
#
# A build with -fsanitize (make check-asan: $BUILD/.flags says so) runs the
# same tests. Each process writes its sanitizer report, if any, to
# $BUILD/sanitizer/TEST.PID, and a test after which one appears fails, whatever
# the exit status of its programs: a CLI that a test expects to fail may have
# failed on a finding. Python gets the ASan runtime from tests/asan/sitecustomize.py.
#
# With WDRIFT_VALGRIND set to a memcheck command line (make check-valgrind),
# only the C unit tests run (test_gpu aside: CUDA is not memcheck's to judge),
# each under it, with its log in $BUILD/valgrind/TEST.PID. The log's error
# summary becomes one more TAP line of that test: an error, or a definite leak
# when the command line counts those as errors, fails it.
#
# ONLY=TEXT runs only the tests whose name contains TEXT (ONLY=t22).
#
# Tests run JOBS at a time (default: the cores this process may use), each
# with its output kept until it ends, then printed whole, with its time, in
# the order the tests started. The tests in SERIAL run after the others,
# each alone: they run make in $BUILD (two makes in one build directory
# race), install into a prefix, or time a daemon's reaction to signals and
# load, which a loaded machine turns into false failures, or name the
# wdriftd processes running (t104: those of other tests would crowd them out).
#
# WDRIFT_SOAK=1 (set by .ci/run) gives the soak tests their full size: t70's
# 100 kills, t71's 60 s flood, t72's 1000 attempts per attack. Without it
# they run a quick size (10 kills, 10 s, 100 attempts) for developers.
set -u
ONLY=${ONLY:-}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 1)}
SERIAL="t05_ t30_ t31_ t40_ t41_ t42_ t55_ t57_ t65_ t70_ t71_ t72_ t104_"
if [ "${WDRIFT_SOAK:-0}" != 1 ]; then
	T70_ROUNDS=${T70_ROUNDS:-10} T71_FLOOD_SECONDS=${T71_FLOOD_SECONDS:-10}
	T72_ATTEMPTS=${T72_ATTEMPTS:-100}
	export T70_ROUNDS T71_FLOOD_SECONDS T72_ATTEMPTS
fi
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
WDRIFT=${WDRIFT:-$BUILD/wdrift}
export BUILD PYTHON WDRIFT
passed=0 failed=0 skipped=0
results=$(mktemp -d) || exit 1
trap 'rm -rf "$results"' EXIT

san_dir=
WDRIFT_VALGRIND=${WDRIFT_VALGRIND:-}
if [ -n "$WDRIFT_VALGRIND" ]; then
	san_dir=$(cd "$BUILD" && pwd)/valgrind || exit 1
	rm -rf "$san_dir" && mkdir -p "$san_dir" || exit 1
elif grep -q -e '-fsanitize=' "$BUILD/.flags" 2>/dev/null; then
	# What a test may skip under a sanitizer (t71's RSS bound): never the rest.
	WDRIFT_SANITIZE=$(grep -o -e '-fsanitize=[^ ]*' "$BUILD/.flags" | head -n 1 | cut -d= -f2)
	export WDRIFT_SANITIZE
	san_dir=$(cd "$BUILD" && pwd)/sanitizer
	rm -rf "$san_dir" && mkdir -p "$san_dir" || exit 1
	asan_options=${ASAN_OPTIONS:+$ASAN_OPTIONS:}
	ubsan_options=${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:
fi
if grep -q -e '-fsanitize=[a-z,]*address' "$BUILD/.flags" 2>/dev/null; then
	cc=$(sed 's/ .*//' "$BUILD/.flags")
	case $("$cc" --version 2>/dev/null) in
	*clang*) rt=libclang_rt.asan-$(uname -m).so ;;
	*) rt=libasan.so ;;
	esac
	WDRIFT_ASAN_RUNTIME=$("$cc" -print-file-name="$rt")
	if [ ! -f "$WDRIFT_ASAN_RUNTIME" ]; then
		echo "run.sh: $cc has no ASan runtime '$rt' for Python to preload"
		exit 1
	fi
	PYTHONPATH=$(pwd)/tests/asan${PYTHONPATH:+:$PYTHONPATH}
	export WDRIFT_ASAN_RUNTIME PYTHONPATH
fi

# verdict REPORT: the TAP line for one process's sanitizer report or valgrind
# log, with the report's first lines after a failure; found=1 when it fails.
# A valgrind log that ends at its banner is a fork that ran another program
# (system()), which valgrind does not follow: no verdict.
verdict() {
	if [ -z "$WDRIFT_VALGRIND" ]; then
		found=1
		echo "not ok - sanitizer report $1"
		sed -e '/^Shadow bytes/,$d' "$1" | head -n 40 | sed 's/^/#   /'
		return
	fi
	errors=$(sed -n 's/^==[0-9]*== ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$1")
	lost=$(sed -n 's/^==[0-9]*== *definitely lost: //p' "$1")
	# past the banner: the errors, then the heap and leak summaries
	body=$(sed -e '1,/^==[0-9]*== $/d' "$1")
	if [ "$errors" = 0 ]; then
		echo "ok - valgrind: 0 errors, definitely lost: ${lost:-0 bytes} ($1)"
		return
	elif [ -z "$errors" ] && [ -z "$body" ]; then
		return
	elif [ -z "$errors" ]; then
		echo "not ok - valgrind: no error summary: the process died under valgrind ($1)"
	else
		echo "not ok - valgrind: $errors errors, definitely lost: ${lost:-0 bytes} ($1)"
	fi
	found=1
	printf '%s\n' "$body" | head -n 60 | sed 's/^/#   /'
}

# run_one NAME CMD...: runs one test (in the background, from start_one)
# and leaves in $results/N.res "PASSED FAILED SKIPPED" and in $results/N.out
# what to print; N is its place in the order the tests were started.
run_one() {
	name=$1; shift
	log=$results/$seq.log
	# A background job of a non-interactive sh starts with SIGINT and
	# SIGQUIT ignored, and a program keeps an ignored signal ignored: the
	# tests of Ctrl-C and of a closed terminal (t42, t65) need them as a
	# user has. SIGHUP too: under `nohup make check` every test inherited
	# it ignored, and their SIGHUP checks failed (2026-11-28).
	sigdfl="env --default-signal=INT,QUIT,HUP"
	t0=$(date +%s.%N)
	if [ -n "$WDRIFT_VALGRIND" ]; then
		report=$san_dir/$(basename "$name")
		# unquoted: the command line is words
		$sigdfl $WDRIFT_VALGRIND --log-file="$report.%p" "$@" >"$log" 2>&1
		rc=$?
	elif [ -n "$san_dir" ]; then
		report=$san_dir/$(basename "$name")
		ASAN_OPTIONS=${asan_options}log_path=$report \
		UBSAN_OPTIONS=${ubsan_options}log_path=$report $sigdfl "$@" >"$log" 2>&1
		rc=$?
	else
		$sigdfl "$@" >"$log" 2>&1
		rc=$?
	fi
	if [ -n "$san_dir" ]; then
		found=0
		for r in "$report".*; do
			[ -f "$r" ] || continue
			# ASan's swapcontext interceptor always warns once; the kernel
			# test's fibers annotate every switch (tests/kernels/simt_host.h)
			grep -v -e "ASan doesn't fully support makecontext/swapcontext" \
				-e '^ *$' "$r" | grep -q . || continue
			verdict "$r" >>"$log"
		done
		[ "$found" -eq 1 ] && [ "$rc" -eq 77 ] && rc=1
	fi
	secs=$(echo "$t0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')
	p=$(grep -c '^ok ' "$log")
	f=$(grep -c '^not ok ' "$log")
	out=$results/$seq.out
	if [ "$rc" -eq 77 ]; then
		echo "SKIP $name ($(grep -m1 -i skip "$log" || echo 'no device'))" >"$out"
		echo "0 0 1" >"$results/$seq.res"
		return
	fi
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
		echo "not ok - $name exited $rc" >>"$log"
	fi
	if [ "$f" -ne 0 ]; then
		echo "FAIL $name: $p passed, $f failed (${secs} s)"
		# the failed checks with their detail first: a long log's tail
		# (a daemon's, printed at the end) must not push them out of view
		awk '/^not ok/ { d = 1; print; next } d && /^#   / { print; next } { d = 0 }' "$log" |
			head -n 60 | sed 's/^/    /'
		echo "    --- the end of its output:"
		sed 's/^/    /' "$log" | grep -v -e '^    ok ' -e '^    not ok ' -e '^    #   ' | tail -n 30
	else
		echo "ok   $name: $p passed (${secs} s)"
		[ "${VERBOSE:-0}" = 1 ] && sed 's/^/    /' "$log"
	fi >"$out"
	echo "$p $f 0" >"$results/$seq.res"
}

# seq: tests started; printed: tests printed, in start order. A test has
# ended when its .res file exists (a pid could be a zombie's, or reused).
seq=0 printed=0 phase=parallel

# collect: prints, in start order, every ended test not printed yet, and
# adds up its counts; a test still running holds back those after it.
collect() {
	while [ -f "$results/$((printed + 1)).res" ]; do
		printed=$((printed + 1))
		cat "$results/$printed.out"
		read -r p f k <"$results/$printed.res"
		passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + k))
	done
}

# wait_below N: waits until fewer than N tests run.
wait_below() {
	while :; do
		n=0 i=$((printed + 1))
		while [ "$i" -le "$seq" ]; do
			[ -f "$results/$i.res" ] || n=$((n + 1))
			i=$((i + 1))
		done
		collect
		[ "$n" -lt "$1" ] && return
		sleep 0.1
	done
}

# start_one NAME CMD...: runs it when a slot is free. The SERIAL tests are
# left for the serial phase, in which each runs alone.
start_one() {
	case $1 in *$ONLY*) ;; *) return 0 ;; esac
	kind=parallel
	for s in $SERIAL; do
		case $(basename "$1") in "$s"*) kind=serial ;; esac
	done
	[ "$kind" = "$phase" ] || return 0
	if [ "$phase" = serial ]; then
		wait_below 1
	else
		wait_below "$JOBS"
	fi
	seq=$((seq + 1))
	run_one "$@" &
	return 0
}

# A test whose program was not built would pass by not running: say so.
for src in tests/unit/test_*.c tests/kernels/test_*.cc; do
	name=$(basename "$src"); name=${name%.*}
	case $name in *$ONLY*) ;; *) continue ;; esac
	if [ ! -x "$BUILD/tests/$name" ]; then
		failed=$((failed + 1))
		echo "FAIL $name: $BUILD/tests/$name was not built (from $src)"
	fi
done
for t in "$BUILD"/tests/test_*; do
	case $t in
	*.d|*.o) continue ;;
	*/test_gpu) [ -n "$WDRIFT_VALGRIND" ] && continue ;;
	esac
	[ -x "$t" ] && start_one "$(basename "$t")" "$t"
done
if [ -z "$WDRIFT_VALGRIND" ]; then
	for phase in parallel serial; do
		for t in tests/integration/t*.sh tests/integration/t*.py tests/ref/t*.py; do
			[ -f "$t" ] || continue
			case $t in
			*.py) start_one "$t" "$PYTHON" "$t" ;;
			*) start_one "$t" sh "$t" ;;
			esac
		done
	done
fi
wait_below 1
wait

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
