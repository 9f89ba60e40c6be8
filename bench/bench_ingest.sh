#!/bin/sh
# bench_ingest.sh: `make bench-ingest`. Sustained ingest into a real wdriftd
# (compute on: a study compares the two publishing runs) against raw libzmq
# moving the same bytes in frames of the same size over the same transport,
# and against the engine's own throughput, all in this run. Also the
# daemon's peak RSS against memory.budget. A benchmark, not a test.
#
#   BENCH_TENSORS (4) x BENCH_NUMEL (4Mi floats, 16 MiB) per snapshot,
#   BENCH_STEPS (6) snapshots per run, two runs.
set -eu
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
TENSORS=${BENCH_TENSORS:-4}
NUMEL=${BENCH_NUMEL:-4194304}
STEPS=${BENCH_STEPS:-6}
B=$BUILD/wdrift-bench-ingest
tmp=$(mktemp -d)
dpid=
cleanup() { [ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
num() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p"; }

# the engine: prepare two tensors of NUMEL floats and W1, as compute does per pair
"$PYTHON" -c "
import numpy as np, sys
r = np.random.default_rng(1); n = int(sys.argv[1])
(r.standard_normal(n).astype(np.float32) * 0.02).tofile(sys.argv[2] + '/a.raw')
(r.standard_normal(n).astype(np.float32) * 0.02).tofile(sys.argv[2] + '/b.raw')" "$NUMEL" "$tmp"
eng=$("$BUILD/wdrift-bench" f32 "$tmp/a.raw" "$tmp/b.raw" 3)
eng_s=$(echo "$eng" | num seconds)
engine_gbps=$(echo "$eng_s $NUMEL" | awk '{ printf "%.4f", 2 * $2 * 4 / $1 / 1e9 }')

echo "wdrift ingest benchmark: $TENSORS x $NUMEL f32 per snapshot, $STEPS snapshots x 2 runs"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus; $(date +%F)"
echo "engine (cpu, 1 thread, prepare 2 + W1): $engine_gbps GB/s"
# the CRC-32 every payload costs the publisher and the daemon's main loop
crc=$("$BUILD/wdrift-bench" --crc32 "$tmp/a.raw" 7)
echo "crc32 of a payload: $(echo "$crc" | num crc32_gbps) GB/s (folded: $(echo "$crc" | sed -n 's/.*"folded": \([a-z]*\).*/\1/p')); zlib's code $(echo "$crc" | num zlib_gbps) GB/s; memcpy $(echo "$crc" | num memcpy_gbps) GB/s"
echo
# CURVE keys for the third row: the daemon's pair and one allowed client
"$BUILD/wdrift" keygen "$tmp/server.key" >/dev/null
client_pub=$("$BUILD/wdrift" keygen "$tmp/client.key")
printf '%-6s %10s %10s %10s %8s %8s %12s\n' transport "raw GB/s" "ours GB/s" "floor" "ratio" target "peak RSS"
for transport in ipc tcp curve; do
	auth=""
	unset BENCH_SERVER_KEY WDRIFT_SERVER_KEY WDRIFT_KEY
	if [ $transport = ipc ]; then
		raw_ep="ipc://$tmp/raw.sock"; ep_in="ipc://$tmp/in.sock"
	else
		port=$((20000 + ($$ + ${#transport}) % 20000))
		raw_ep="tcp://127.0.0.1:$port"; ep_in="tcp://127.0.0.1:$((port + 1))"
	fi
	if [ $transport = curve ]; then	# tcp, both sides encrypting: raw ZeroMQ too
		export BENCH_SERVER_KEY="$tmp/server.key" WDRIFT_SERVER_KEY="$tmp/server.key.pub"
		export WDRIFT_KEY="$tmp/client.key"
		auth="auth:
  server_key: $tmp/server.key
  clients: {bench: \"$client_pub\"}"
	fi
	"$B" sink "$raw_ep" >"$tmp/sink.out" &
	spid=$!
	sleep 0.3
	raw=$("$B" raw "$raw_ep" $((TENSORS * STEPS * 2)) "$NUMEL")
	wait $spid
	raw_gbps=$(echo "$raw" | num gbps)

	rm -rf "$tmp/var"
	cat >"$tmp/wdrift.yaml" <<YAML
listen:
  ingest: $ep_in
  control: ipc://$tmp/control.sock
  events: ipc://$tmp/events.sock
$auth
storage:
  dir: $tmp/var
compute:
  backend: cpu
memory:
  budget: 1G
spool:
  retention:
    disk_budget: 2G
log:
  level: warning
studies:
  - name: bench
    baseline: base
    candidates: [cand]
YAML
	"$BUILD/wdriftd" -c "$tmp/wdrift.yaml" 2>"$tmp/daemon.log" &
	dpid=$!
	sleep 0.5
	t0=$(date +%s.%N)
	"$B" publish "$ep_in" base "$STEPS" "$TENSORS" "$NUMEL" >"$tmp/p1.out" &
	p1=$!
	"$B" publish "$ep_in" cand "$STEPS" "$TENSORS" "$NUMEL" >"$tmp/p2.out" &
	p2=$!
	wait $p1 $p2
	t1=$(date +%s.%N)
	rss_kb=$(sed -n 's/^VmHWM:[ \t]*\([0-9]*\) kB/\1/p' /proc/$dpid/status)
	kill -TERM $dpid; wait $dpid || true; dpid=
	bytes=$(( TENSORS * NUMEL * 4 * STEPS * 2 ))
	ours_gbps=$(echo "$t0 $t1 $bytes" | awk '{ printf "%.4f", $3 / ($2 - $1) / 1e9 }')
	floor=$(echo "$raw_gbps $engine_gbps" | awk '{ print ($1 < $2) ? $1 : $2 }')
	ratio=$(echo "$ours_gbps $floor" | awk '{ printf "%.2f", $1 / $2 }')
	verdict=$(echo "$ratio" | awk '{ print ($1 >= 0.7) ? "met" : "MISSED" }')
	printf '%-6s %10s %10s %10s %8s %8s %9s MiB\n' $transport "$raw_gbps" "$ours_gbps" "$floor" "$ratio" \
		">=0.7 $verdict" $((rss_kb / 1024))
done
echo
echo "ours: two publishers (base, cand) to wdriftd, each snapshot acked once durable (spool"
echo "file + WAL fsync'd), compute on; floor: min(raw ZeroMQ, engine); peak RSS: VmHWM of"
echo "wdriftd, against memory.budget 1024 MiB. curve: tcp with CURVE on both sides (raw"
echo "ZeroMQ too), every byte encrypted and authenticated (docs/security.md)."
