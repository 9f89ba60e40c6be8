#!/bin/sh
# demo.sh: `make demo` (docs/demo.md). Starts wdriftd on the shipped default
# config, trains a small GPT on the CPU as four runs (base, fa, lowprec,
# seed2) that publish snapshots to it, prints the drift as training goes,
# writes report.html, and stops the daemon.
#
# The daemon runs in DEMO_DIR (default build/demo, emptied first), so its
# ./run/ sockets and ./var/ storage from the config land there, and a
# second demo starts from nothing. DEMO_STEPS and DEMO_EVERY shorten it
# (the CI test does); DEMO_REPORT is the page (default ./report.html).
set -eu
root=$(pwd)
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
dir=${DEMO_DIR:-$BUILD/demo}
report=${DEMO_REPORT:-report.html}
case $dir in /*) ;; *) dir=$root/$dir ;; esac
case $report in /*) ;; *) report=$root/$report ;; esac
case $BUILD in /*) bin=$BUILD ;; *) bin=$root/$BUILD ;; esac
config=$root/config/wdrift.yaml

# Empty DEMO_DIR only when it is a previous demo's (it has the marker this
# script leaves), or already empty: never a directory someone pointed us at.
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
	if [ ! -f "$dir/.wdrift-demo" ] && [ "$dir" != "$bin/demo" ]; then	# build/ is ours
		echo "demo: $dir is not empty and is not a previous demo's; give an empty or new DEMO_DIR" >&2
		exit 1
	fi
	rm -rf "$dir"
fi
mkdir -p "$dir"
: >"$dir/.wdrift-demo"
cd "$dir"
# A copy beside the daemon: its relative ipc:// paths resolve against the
# config's directory, so the sockets land in $dir/run, as the trainer's
# ipc://./run/ingest.sock expects, and `wdrift ... -c $dir/wdrift.yaml`
# finds them from any directory.
cp "$root/config/wdrift.yaml" "$dir/wdrift.yaml"
config=$dir/wdrift.yaml

pid=
stop() {	# stop the daemon we started, by its pid, and wait for it
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	rc=0
	wait "$pid" || rc=$?
	pid=
	return "$rc"
}
# A signal to the terminal's process group (Ctrl-C, the terminal closing)
# reaches the daemon too, but it reloads on SIGHUP: it is stopped here.
trap 'stop; exit 129' HUP
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap 'stop' EXIT

"$bin/wdriftd" -c "$config" >"$dir/wdriftd.log" 2>&1 &
pid=$!
i=0
until "$bin/wdrift" status -c "$config" >/dev/null 2>&1; do
	i=$((i + 1))
	if [ "$i" -ge 50 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "demo: wdriftd did not start; its log ($dir/wdriftd.log):" >&2
		sed 's/^/    /' "$dir/wdriftd.log" >&2
		exit 1
	fi
	sleep 0.2
done
echo "demo: wdriftd (pid $pid) is up on $config, in $dir"
echo "demo: training base, fa, lowprec and seed2 on the CPU; each publishes its weights to it"
echo

set -- --config "$config" --wdrift "$bin/wdrift"
[ -n "${DEMO_STEPS:-}" ] && set -- "$@" --steps "$DEMO_STEPS"
[ -n "${DEMO_EVERY:-}" ] && set -- "$@" --every "$DEMO_EVERY"
"$PYTHON" "$root/examples/demo_train.py" --json-out "$dir/train.json" "$@"

echo
"$bin/wdrift" alerts -c "$config"
"$bin/wdrift" report demo -c "$config" -o "$report"
stop
trap - EXIT HUP INT TERM
echo
echo "demo: the report is $report (open it in a browser); wdriftd stopped cleanly."
echo "demo: the drift log is $dir/var/drift/demo.h5: wdrift export demo --log $dir/var/drift/demo.h5"
