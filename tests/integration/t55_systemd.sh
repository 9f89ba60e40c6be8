#!/bin/sh
# t55_systemd.sh: `make install-system` into a temp prefix gives a unit that
# systemd-analyze verify accepts, and a system config that wdriftd accepts,
# with its endpoints under /run/wdrift and storage in /var/lib/wdrift, and a
# sandbox that systemd-analyze security scores at an exposure of 2.5 or less.
set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
n=0 fail=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else fail=$((fail + 1)); echo "not ok $n - $2"; fi; }
BUILD=${BUILD:-build}

make -s install-system PREFIX="$tmp/usr" SYSCONFDIR="$tmp/etc" UNITDIR="$tmp/unit" \
	BUILD="$BUILD" >"$tmp/out" 2>&1
ok $? "make install-system PREFIX=... SYSCONFDIR=... UNITDIR=... installs"
unit=$tmp/unit/wdriftd.service
conf=$tmp/etc/wdrift/wdrift.yaml
[ -f "$unit" ] && [ -f "$conf" ]; ok $? "the unit and /etc/wdrift/wdrift.yaml are there"
for key in Type=notify ExecStartPre= WatchdogSec= Restart=on-failure StateDirectory=wdrift RuntimeDirectory=wdrift; do
	grep -q "^$key" "$unit"; ok $? "unit has $key"
done
grep -q "ExecStart=$tmp/usr/bin/wdriftd -c $tmp/etc/wdrift/wdrift.yaml" "$unit"
ok $? "ExecStart points at the installed daemon"
if command -v systemd-analyze >/dev/null 2>&1; then
	# verify checks the unit and that its commands exist at those paths
	systemd-analyze verify "$unit" >"$tmp/verify" 2>&1
	ok $? "systemd-analyze verify accepts the unit $(head -c 300 "$tmp/verify" | tr '\n' ' ')"
	# the sandbox: systemd's own exposure score, 0 (locked) to 10 (exposed)
	systemd-analyze security --offline=true "$unit" >"$tmp/sec" 2>&1
	score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$tmp/sec")
	echo "# systemd-analyze security --offline=true: exposure $score"
	[ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }'
	ok $? "sandbox: exposure ${score:-?} <= 2.5 $( [ -n "$score" ] || tail -n 3 "$tmp/sec" | tr '\n' ' ')"
	for key in DynamicUser=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes \
		'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' SystemCallFilter=@system-service \
		'CapabilityBoundingSet=$' MemoryMax= 'DeviceAllow=/dev/nvidiactl'; do
		grep -q "^$key" "$unit"; ok $? "unit has $key"
	done
else
	echo "ok $((n + 1)) - # SKIP systemd-analyze not installed"; n=$((n + 1))
fi
"$BUILD/wdriftd" --check-config -c "$conf" >"$tmp/check" 2>&1
ok $? "wdriftd accepts the system config: $(cat "$tmp/check")"
grep -q '^  ingest: ipc:///run/wdrift/ingest.sock' "$conf" && grep -q '^  dir: /var/lib/wdrift$' "$conf" &&
	grep -q 'Default: ipc://./run/ingest.sock' "$conf"
ok $? "system config: endpoints under /run/wdrift, storage in /var/lib/wdrift; comments keep the built-in defaults"
echo "# $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
