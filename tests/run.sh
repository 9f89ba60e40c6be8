#!/bin/sh
# run.sh: runs every test that needs no GPU and prints one summary line.
#
# Each test program speaks TAP on stdout ("ok N - what", "not ok N - what")
# and exits 0, or 77 to be skipped. A program that exits otherwise without
# reporting a failure counts as one failure. Set VERBOSE=1 to see every line.
#
#   build/tests/test_*          C unit tests (tests/unit/)
#   tests/integration/t*.sh|py  the CLI and the daemon, as a user runs them
#   tests/ref/t*.py             cross-checks against scipy and numpy
set -u
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
WDRIFT=${WDRIFT:-$BUILD/wdrift}
export BUILD PYTHON WDRIFT
passed=0 failed=0 skipped=0
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT

run_one() {
	name=$1; shift
	"$@" >"$log" 2>&1
	rc=$?
	p=$(grep -c '^ok ' "$log")
	f=$(grep -c '^not ok ' "$log")
	if [ "$rc" -eq 77 ]; then
		skipped=$((skipped + 1))
		echo "SKIP $name ($(grep -m1 -i skip "$log" || echo 'no device'))"
		return
	fi
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
		echo "not ok - $name exited $rc" >>"$log"
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	if [ "$f" -ne 0 ]; then
		echo "FAIL $name: $p passed, $f failed"
		sed 's/^/    /' "$log" | grep -v '^    ok ' | tail -n 60
	else
		echo "ok   $name: $p passed"
		[ "${VERBOSE:-0}" = 1 ] && sed 's/^/    /' "$log"
	fi
}

for t in "$BUILD"/tests/test_*; do
	case $t in *.d|*.o) continue ;; esac
	[ -x "$t" ] && run_one "$(basename "$t")" "$t"
done
for t in tests/integration/t*.sh tests/integration/t*.py; do
	[ -f "$t" ] || continue
	case $t in
	*.py) run_one "$t" "$PYTHON" "$t" ;;
	*) run_one "$t" sh "$t" ;;
	esac
done
for t in tests/ref/t*.py; do
	[ -f "$t" ] && run_one "$t" "$PYTHON" "$t"
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
