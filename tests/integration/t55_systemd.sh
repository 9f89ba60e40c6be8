#!/bin/sh
# t55_systemd.sh: `make install-system` into a temp prefix gives a unit that
# systemd-analyze verify accepts, and a system config that wdriftd accepts,
# with its endpoints under /run/wdrift and storage in /var/lib/wdrift, no
# study, and comments that show how to add one; and a sandbox that
# systemd-analyze security scores at an exposure of 2.5 or less. `make
# uninstall` with the same variables removes the unit, the config (unless
# edited: kept, and said so) and the directories install-system created.
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
grep -q '^  ingest: ipc:///run/wdrift/ingest.sock' "$conf" && grep -q '^  dir: /var/lib/wdrift$' "$conf"
ok $? "system config: endpoints under /run/wdrift, storage in /var/lib/wdrift"
grep -q '(0 studies, 0 alerts)' "$tmp/check" && grep -q '^# studies:' "$conf" && grep -q '^#     baseline:' "$conf" &&
	grep -q '^# alerts:' "$conf" && grep -q 'wdrift reload' "$conf"
ok $? "system config: no study, no alert; comments show how to add them, and how to apply them"
# the daemon itself on it, its paths moved under the temp dir: a notice, not an error
sed -e "s|ipc:///run/wdrift/|ipc://$tmp/run/|" -e "s|/var/lib/wdrift|$tmp/var|" "$conf" >"$tmp/nostudy.yaml"
"$BUILD/wdriftd" -c "$tmp/nostudy.yaml" >"$tmp/nostudy.log" 2>&1 &
dpid=$!
i=0
until WDRIFT_TIMEOUT_MS=300 "$BUILD/wdrift" status -c "$tmp/nostudy.yaml" >/dev/null 2>&1 || [ $i -ge 40 ]; do
	sleep 0.25; i=$((i + 1))
done
kill -TERM "$dpid" 2>/dev/null; wait "$dpid"; rc=$?
[ "$rc" = 0 ] && grep -q "notice: '$tmp/nostudy.yaml' has no study: snapshots are received and stored, but nothing is compared" \
	"$tmp/nostudy.log" && ! grep -q ': error:' "$tmp/nostudy.log"
ok $? "a daemon with no study serves, says so at notice level, and stops cleanly (exit $rc) $(grep -v notice "$tmp/nostudy.log" | head -n 3 | tr '\n' ' ')"
[ ! -e "$tmp/usr/etc/wdrift/wdrift.yaml" ]
ok $? "one config: install-system puts it in SYSCONFDIR, not also in PREFIX/etc"

# uninstall: the exact inverse
make -s uninstall PREFIX="$tmp/usr" SYSCONFDIR="$tmp/etc" UNITDIR="$tmp/unit" BUILD="$BUILD" >"$tmp/un" 2>&1
ok $? "make uninstall with the same variables $(tail -n 2 "$tmp/un" | tr '\n' ' ')"
[ ! -e "$tmp/usr" ] && [ ! -e "$tmp/etc" ] && [ ! -e "$tmp/unit" ]
ok $? "and leaves nothing install-system created: $(find "$tmp/usr" "$tmp/etc" "$tmp/unit" 2>/dev/null | head -n 5 | tr '\n' ' ')"
make -s install-system PREFIX="$tmp/usr" SYSCONFDIR="$tmp/etc" UNITDIR="$tmp/unit" BUILD="$BUILD" >"$tmp/out" 2>&1
echo "studies: [{name: mine, baseline: a, candidates: [b]}]" >"$conf"
make -s uninstall PREFIX="$tmp/usr" SYSCONFDIR="$tmp/etc" UNITDIR="$tmp/unit" BUILD="$BUILD" >"$tmp/un" 2>&1
grep -q "kept $conf: edited" "$tmp/un" && grep -q 'name: mine' "$conf" && [ ! -e "$unit" ] && [ ! -e "$tmp/usr/bin/wdriftd" ]
ok $? "an edited system config is kept, and said so; the unit and the rest go $(tr '\n' ' ' <"$tmp/un")"
echo "# $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
