#!/bin/sh
# t57_watchdog_systemd.sh: a real systemd runs wdriftd from the unit that
# `make install-system` installs, sandbox and all, and its watchdog works:
# with WatchdogSec=2s and RestartSec=1s in a drop-in, a daemon frozen with
# SIGSTOP stops pinging, systemd kills it for the watchdog (SIGABRT,
# Result=watchdog) and Restart=on-failure brings up a new one, READY=1 again,
# within 10 s of the SIGSTOP.
#
# Where systemd is not PID 1 (a container, a VM with its own init), the test
# boots one: systemd as PID 1 of a new PID, mount and cgroup namespace, on a
# cgroup2 hierarchy of its own (a child of the host's), with tmpfs on /run,
# /tmp, /var/tmp, /var/lib and /var/log, its own journald, and on its unit path
# only the units written here. SIGKILL to it at the end takes everything in
# the namespace with it. Where systemd is PID 1, the host's runs the unit, as
# wdriftd-t57-PID with its own state and runtime directories, from
# /run/systemd/system, removed afterwards.
#
# Sandbox directives the environment cannot provide would be overridden in
# the drop-in, each named with its reason on a '# ' line (T57_OVERRIDE: lines
# "Directive=value why"); in a Firecracker VM with a 6.x kernel, none is.
# Exit 77 (skip) when no systemd can be had here, with the reason.
set -u
BUILD=${BUILD:-build}
n=0 fail=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else fail=$((fail + 1)); echo "not ok $n - $2"; fi; }
skip() { echo "1..0 # SKIP $*"; exit 77; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
within() { [ -n "$1" ] && awk -v e="$1" -v l="$2" 'BEGIN { exit !(e <= l) }'; }

[ "$(id -u)" = 0 ] || skip "needs root to run systemd"
SYSTEMD=
for s in /lib/systemd/systemd /usr/lib/systemd/systemd; do [ -x "$s" ] && { SYSTEMD=$s; break; }; done
[ -n "$SYSTEMD" ] || skip "no systemd binary (/lib/systemd/systemd)"
for c in systemctl journalctl unshare nsenter timeout; do
	command -v $c >/dev/null 2>&1 || skip "no $c"
done
[ -x "$BUILD/wdriftd" ] && [ -f "$BUILD/libwdrift.so" ] || skip "no $BUILD/wdriftd: build first"
if grep -q -e '-fsanitize=' "$BUILD/.flags" 2>/dev/null || [ -n "${WDRIFT_VALGRIND:-}" ]; then
	skip "sanitizer or valgrind build: the unit's sandbox keeps its reports in"
fi

tmp=$(mktemp -d /tmp/wdrift-t57.XXXXXX) || exit 1
mode=ns cg= upid= spid=
U=wdriftd		# the unit
P=/run/wdrift-t57	# where systemd and the service see the installed files
dest=$tmp/root		# where they are from here
if [ -d /run/systemd/system ]; then
	mode=host U=wdriftd-t57-$$ P=/run/wdrift-t57-$$ dest=
fi
unitdir=$dest$P/unit

cleanup() {
	trap - EXIT INT TERM HUP
	if [ -n "${T57_DEBUG:-}" ]; then
		$NS journalctl --no-pager -o short-monotonic -n 60 2>&1 | sed 's/^/# journal: /'
		sed 's/^/# boot: /' "$tmp/boot.log" 2>/dev/null
	fi
	if [ "$mode" = host ]; then
		systemctl stop "$U.service" >/dev/null 2>&1
		rm -rf "/run/systemd/system/$U.service" "/run/systemd/system/$U.service.d"
		systemctl daemon-reload >/dev/null 2>&1
		systemctl reset-failed "$U.service" >/dev/null 2>&1
		rm -rf "$P" "/var/lib/private/$U" "/var/lib/$U"
	fi
	# SIGKILL to PID 1 of a PID namespace kills every process in it, the
	# service included; its mounts go with the last of them.
	# The unshare exits when its child, that PID 1, is reaped: after the rest.
	[ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null
	if [ -n "$upid" ]; then
		i=0
		while kill -0 "$upid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
		kill -KILL "$upid" 2>/dev/null
		wait "$upid" 2>/dev/null
	fi
	if [ -n "$cg" ] && [ -d "$cg" ]; then
		i=0
		while [ -n "$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && [ $i -lt 100 ]; do
			sleep 0.05; i=$((i + 1))
		done
		find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
		[ -d "$cg" ] && echo "# cleanup: could not remove $cg"
	fi
	rm -rf "$tmp"
}
NS=
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
mkdir -p "$unitdir"

# 1. The systemd.
if [ "$mode" = ns ]; then
	# Stubs for what the unit's default dependencies name, and the journal.
	for t in sysinit basic network-online multi-user shutdown local-fs paths sockets timers; do
		printf '[Unit]\nDescription=%s (t57 stub)\n' "$t" >"$unitdir/$t.target"
	done
	printf '[Unit]\nDescription=t57: the journal, and what the test starts\n' >"$unitdir/t57.target"
	for j in systemd-journald.service systemd-journald.socket systemd-journald-dev-log.socket; do
		[ -f "/lib/systemd/system/$j" ] && ln -s "/lib/systemd/system/$j" "$unitdir/$j" &&
			printf 'Wants=%s\n' "$j" >>"$unitdir/t57.target"
	done
	if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then cgroot=/sys/fs/cgroup
	elif [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then cgroot=/sys/fs/cgroup/unified
	else skip "no cgroup2 hierarchy (neither /sys/fs/cgroup nor /sys/fs/cgroup/unified) to give systemd"
	fi
	cg=$cgroot/wdrift-t57.$$
	mkdir "$cg" 2>"$tmp/err" || { cg=; skip "cannot create a cgroup under $cgroot: $(cat "$tmp/err")"; }
	# /dev/kmsg: neither systemd nor journald is to touch the host's kernel log.
	cat >"$tmp/boot.sh" <<BOOT
set -e
mount --make-rprivate /
umount -l /sys/fs/cgroup
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
mount --bind /dev/null /dev/kmsg
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mkdir -p $P
mount --bind $dest$P $P
for d in /tmp /var/tmp; do mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs \$d; done
for d in /var/lib /var/log; do mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs \$d; done
export container=wdrift-t57 SYSTEMD_UNIT_PATH=$P/unit
exec $SYSTEMD --unit=t57.target --log-target=journal --log-level=info --show-status=no
BOOT
	# The unshare starts in $cg: the new cgroup namespace's root.
	sh -c "echo \$\$ >$cg/cgroup.procs && exec unshare --pid --fork --mount --mount-proc --cgroup sh $tmp/boot.sh" \
		>"$tmp/boot.log" 2>&1 &
	upid=$!
	i=0
	while [ -z "$spid" ] && [ $i -lt 50 ]; do
		spid=$(tr -d ' ' <"/proc/$upid/task/$upid/children" 2>/dev/null)
		[ -n "$spid" ] && [ "$(cat "/proc/$spid/comm" 2>/dev/null)" = systemd ] || spid=
		[ -n "$spid" ] || kill -0 "$upid" 2>/dev/null || break
		[ -n "$spid" ] || sleep 0.1
		i=$((i + 1))
	done
	[ -n "$spid" ] || skip "systemd could not be started as PID 1 of a new PID/mount/cgroup namespace: $(tail -n 3 "$tmp/boot.log" | tr '\n' ' ')"
	NS="nsenter -t $spid -m -p"
	i=0 state=
	while [ $i -lt 100 ]; do
		state=$($NS systemctl is-system-running 2>&1)
		case $state in running|degraded) break ;; esac
		sleep 0.1; i=$((i + 1))
	done
	case $state in running|degraded) ;;
	*) skip "systemd in the namespace did not come up: is-system-running says '$state' $(tail -n 3 "$tmp/boot.log" | tr '\n' ' ')" ;;
	esac
	echo "# systemd $($SYSTEMD --version | sed -n '1s/^systemd //p') is PID 1 of a new PID/mount/cgroup namespace (pid $spid here), in $cg"
else
	state=$(systemctl is-system-running 2>&1)
	case $state in running|degraded) ;; *) skip "the host's systemd is not up: is-system-running says '$state'" ;; esac
	echo "# the host's systemd $(systemctl --version | sed -n '1s/^systemd //p') runs $U.service from /run/systemd/system"
fi
sctl() { $NS systemctl "$@"; }
show() { $NS systemctl show -p "$1" --value "$U.service" 2>/dev/null; }

# 2. Install as the project does. `make install-system` first makes `all`:
# where that would compile (a build out of date with the tree), the unit and
# the system config come from the Makefile's own rules in a scratch BUILD,
# and wdriftd and libwdrift.so (its RUNPATH: $ORIGIN/../lib) from $BUILD.
inst="PREFIX=$P/usr SYSCONFDIR=$P/etc UNITDIR=$P/unit"
if make -n -s install-system DESTDIR="$dest" $inst BUILD="$BUILD" 2>/dev/null |
	grep -qE '(^|/)(cc|gcc|clang|nvcc|ar) | -c -o '; then
	echo "# make install-system would rebuild $BUILD: unit and config from its rules, wdriftd and libwdrift.so from $BUILD"
	gen=$tmp/gen
	mkdir -p "$gen" && make -s BUILD="$gen" $inst "$gen/wdriftd.service" "$gen/wdrift.system.yaml" >"$tmp/make.out" 2>&1 &&
		install -d "$dest$P/usr/bin" "$dest$P/usr/lib" "$dest$P/unit" "$dest$P/etc/wdrift" &&
		install -m 755 "$BUILD/wdriftd" "$dest$P/usr/bin/wdriftd" &&
		install -m 755 "$BUILD/libwdrift.so" "$dest$P/usr/lib/libwdrift.so" &&
		install -m 644 "$gen/wdriftd.service" "$dest$P/unit/wdriftd.service" &&
		install -m 644 "$gen/wdrift.system.yaml" "$dest$P/etc/wdrift/wdrift.yaml"
else
	make -s install-system DESTDIR="$dest" $inst BUILD="$BUILD" >"$tmp/make.out" 2>&1
fi
ok $? "install the unit and the system config under $P $(grep -v '^then:' "$tmp/make.out" | tail -n 3 | tr '\n' ' ')"
conf=$dest$P/etc/wdrift/wdrift.yaml
drop=$unitdir/$U.service.d/t57.conf
mkdir -p "$unitdir/$U.service.d"
printf '[Service]\nWatchdogSec=2s\nRestartSec=1s\n' >"$drop"
if [ "$mode" = host ]; then
	# beside a real wdriftd: directories of its own, and the config to match
	mv "$unitdir/wdriftd.service" "$unitdir/$U.service"
	sed -i -e "s|/run/wdrift/|/run/$U/|" -e "s|/var/lib/wdrift\$|/var/lib/$U|" "$conf"
	printf 'RuntimeDirectory=\nRuntimeDirectory=%s\nStateDirectory=\nStateDirectory=%s\nWorkingDirectory=/var/lib/%s\n' \
		"$U" "$U" "$U" >>"$drop"
	echo "# host: RuntimeDirectory, StateDirectory, WorkingDirectory and the config's paths are $U's"
fi
"$BUILD/wdriftd" --check-config -c "$conf" >"$tmp/check" 2>&1
ok $? "wdriftd accepts the installed config: $(cat "$tmp/check")"

# 3. The sandbox directives this environment cannot provide, if any.
OVERRIDE=${T57_OVERRIDE-}
if [ -n "$OVERRIDE" ]; then
	printf '%s\n' "$OVERRIDE" | sed -n 's/^\([A-Za-z]*=[^ ]*\) .*/\1/p' >>"$drop"
	printf '%s\n' "$OVERRIDE" | sed -n 's/^\([A-Za-z]*=[^ ]*\) *\(.*\)/# override \1: \2/p'
else
	echo "# sandbox: no directive overridden; all of the unit's apply (DynamicUser, PrivateUsers, ProtectSystem=strict, PrivateTmp, SystemCallFilter, ...)"
fi
if [ "$mode" = host ]; then
	ln -s "$unitdir/$U.service" "/run/systemd/system/$U.service"
	cp -r "$unitdir/$U.service.d" /run/systemd/system/
fi
timeout 10 $NS systemctl daemon-reload

# 4. Start it: `systemctl start` of a Type=notify unit returns on READY=1.
t0=$(now)
timeout 10 $NS systemctl start "$U.service" >"$tmp/start" 2>&1
rc=$?
ok $rc "systemctl start $U: active after $(since "$t0") s $(head -c 300 "$tmp/start" | tr '\n' ' ')"
if [ $rc != 0 ]; then
	sctl status --no-pager -l "$U.service" 2>&1 | head -n 30 | sed 's/^/# /'
	$NS journalctl --no-pager -o cat -n 20 2>&1 | sed 's/^/# journal: /'
	echo "$((n - fail)) passed, $fail failed"
	exit 1
fi
pid1=$(show MainPID)
[ "$(show ActiveState)" = active ] && [ "${pid1:-0}" -gt 0 ]
ok $? "active, MainPID $pid1, status '$(show StatusText)'"
# the sandbox is in force: the dynamic user, seccomp, no_new_privs, a user namespace
st=$($NS cat "/proc/$pid1/status" 2>/dev/null)
uid=$(printf '%s\n' "$st" | sed -n 's/^Uid:[[:space:]]*\([0-9]*\).*/\1/p')
sec=$(printf '%s\n' "$st" | sed -n 's/^Seccomp:[[:space:]]*//p')
nnp=$(printf '%s\n' "$st" | sed -n 's/^NoNewPrivs:[[:space:]]*//p')
umap=$($NS cat "/proc/$pid1/uid_map" 2>/dev/null | tr -s ' \n' '  ' | sed 's/^ //; s/ $//')
[ "${uid:-0}" -gt 0 ] && [ "$sec" = 2 ] && [ "$nnp" = 1 ] && [ -n "$umap" ] && [ "$umap" != "0 0 4294967295" ]
ok $? "sandboxed: uid $uid, Seccomp $sec, NoNewPrivs $nnp, uid_map '$umap'"

# 5. Freeze it. systemd's watchdog fires WatchdogSec after the last ping (the
# daemon pings every WatchdogSec/2): SIGABRT, and SIGCONT so that it lands;
# Result=watchdog; Restart=on-failure starts a new one RestartSec later.
$NS kill -STOP "$pid1"
ok $? "kill -STOP $pid1"
tstop=$(now)
t_kill= t_ready= pid2= seen=
while :; do
	el=$(since "$tstop")
	within "$el" 12 || break
	p=$(show MainPID) a=$(show ActiveState) r=$(show Result)
	[ -n "${T57_DEBUG:-}" ] && echo "# $el MainPID=$p ActiveState=$a Result=$r"
	[ "$r" = watchdog ] && seen=$r
	if [ -z "$t_kill" ] && { ! $NS kill -0 "$pid1" 2>/dev/null ||
		$NS grep -q '^State:.*zombie' "/proc/$pid1/status" 2>/dev/null; }; then
		t_kill=$el
	fi
	if [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$pid1" ] && [ "$a" = active ]; then
		t_ready=$el pid2=$p
		break
	fi
	sleep 0.05
done
echo "# after the SIGSTOP: $pid1 killed at ${t_kill:-never} s, new MainPID ${pid2:-none} active (READY=1) at ${t_ready:-never} s"
within "$t_kill" 5
ok $? "systemd kills the frozen $pid1 within 5 s (${t_kill:-never} s)"
log=$($NS journalctl --no-pager -o cat -u "$U.service" 2>/dev/null)
printf '%s\n' "$log" | grep -E 'Watchdog timeout|SIGABRT|ABRT|result' | sed 's/^/# journal: /'
[ "$seen" = watchdog ] && printf '%s\n' "$log" | grep -q 'Watchdog timeout' &&
	printf '%s\n' "$log" | grep -q "Killing process $pid1 .* signal SIGABRT"
ok $? "for the watchdog: Result=watchdog, 'Watchdog timeout' and SIGABRT to $pid1 in the journal"
within "$t_ready" 10
ok $? "restarted: new MainPID ${pid2:-none}, active again ${t_ready:-never} s after the SIGSTOP (<= 10 s)"
nr=$(show NRestarts)
[ "${nr:-0}" -ge 1 ]
ok $? "NRestarts=$nr >= 1"

# 6. And the new one still stops cleanly: SIGTERM drains and exits 0
# (the unit, stopped and unreferenced, is unloaded: the journal says how).
t0=$(now)
timeout 10 $NS systemctl stop "$U.service" >"$tmp/stop" 2>&1
rc=$?
el=$(since "$t0")
log=$($NS journalctl --no-pager -o cat -u "$U.service" 2>/dev/null | sed -n "/ready: wdriftd/,\$p" | tail -n 4)
[ $rc = 0 ] && [ "$(show ActiveState)" = inactive ] && printf '%s\n' "$log" | grep -q '^stopped$' &&
	printf '%s\n' "$log" | tail -n 2 | grep -q 'Deactivated successfully'
ok $? "systemctl stop: inactive after $el s, '$(printf '%s\n' "$log" | tail -n 2 | head -n 1)' $(head -c 200 "$tmp/stop" | tr '\n' ' ')"

echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
