#!/bin/sh
# t30_install.sh: `make install PREFIX=...` installs a working wdrift, the
# library and its header, and the system config (no study), which the
# installed wdriftd and wdrift find without -c; a C program builds against
# the installed header and library and gets the right W1. `make uninstall`
# is the exact inverse: nothing install created is left, except a config
# edited since, which is kept and said so. Uninstalling one PREFIX leaves
# the systemd unit and its config that install-system put for another
# PREFIX, and says so; uninstalling that PREFIX takes them. The unit and
# system config directories are this test's own (UNITDIR, SYSCONFDIR).
set -u
tmp=$(mktemp -d) || exit 1
# the unit install-system generates in BUILD runs this test's temporary PREFIX: not left there for
# a user to copy (an ops trial found BUILD/wdriftd.service with ExecStart=/tmp/tmp.../usr/bin/wdriftd)
trap 'rm -rf "$tmp"; rm -f "${BUILD:-build}/wdriftd.service"' EXIT INT TERM
n=0 fail=0
check() {	# check DESCRIPTION COMMAND...
	n=$((n + 1)); desc=$1; shift
	if "$@" >"$tmp/out" 2>&1; then echo "ok $n - $desc"
	else fail=$((fail + 1)); echo "not ok $n - $desc"; sed 's/^/#   /' "$tmp/out"; fi
}
prefix=$tmp/prefix
BUILD=${BUILD:-build}
# never the host's /etc: every install and uninstall here gets these
export UNITDIR="$tmp/unit" SYSCONFDIR="$tmp/sysetc"
check "make install PREFIX=$prefix" make -s install PREFIX="$prefix" BUILD="$BUILD"
for f in bin/wdrift bin/wdriftd lib/libwdrift.so lib/pkgconfig/wdrift.pc include/wdrift.h etc/wdrift/wdrift.yaml; do
	check "installs $f" test -f "$prefix/$f"
done
check "the installed config is the system one, with no study" cmp config/wdrift.system.yaml "$prefix/etc/wdrift/wdrift.yaml"
# from a directory with no ./config: the prefix's etc/wdrift, found through /proc/self/exe
check "the installed wdriftd finds the installed config without -c" sh -c \
	"cd / && env -u WDRIFT_CONFIG '$prefix/bin/wdriftd' --check-config | grep -qx '$prefix/etc/wdrift/wdrift.yaml: ok (0 studies, 0 alerts)'"
check "installed wdrift runs from its prefix" sh -c "'$prefix/bin/wdrift' --version | grep -q '^wdrift '"
cat >"$tmp/use.c" <<'C'
#include <math.h>
#include <stdio.h>
#include <wdrift.h>
int main(void)
{
	float a[4] = { 0, 1, 2, 3 }, b[4] = { 0.5f, 1.5f, 2.5f, 3.5f };
	struct wd_view va = { WD_F32, a, 4 }, vb = { WD_F32, b, 4 };
	struct wd_engine *e;
	struct wd_prepared *pa, *pb;
	double w = -1;
	if (wd_engine_open(WD_BACKEND_AUTO, &e) || wd_prepare(e, &va, 0, &pa) ||
	    wd_prepare(e, &vb, 0, &pb) || wd_w1(e, pa, pb, &w))
		return 1;
	printf("%s %.17g\n", wd_engine_describe(e), w);
	wd_prepared_free(&pa);
	wd_prepared_free(&pb);
	wd_engine_close(&e);
	return w == 0.5 ? 0 : 1;
}
C
# A library built under sanitizers (make check-asan) needs their runtime in
# the program too: then the program is built by that compiler, with those flags.
cc=cc san=
if grep -q -e -fsanitize= "$BUILD/.flags" 2>/dev/null; then
	cc=$(sed 's/ .*//' "$BUILD/.flags")
	san=$(grep -o -e '-f[a-z-]*sanitize[^ ]*' "$BUILD/.flags" | tr '\n' ' ')
fi
check "a C program compiles against the installed header and library" \
	"$cc" $san -std=c11 -Wall -Wextra -Werror -I"$prefix/include" -o "$tmp/use" "$tmp/use.c" \
	-L"$prefix/lib" -lwdrift -Wl,-rpath,"$prefix/lib"
check "and computes W1 = 0.5 for a shift of 0.5" "$tmp/use"
# the same through pkg-config, as docs/publishing.md ("From C") says to build
pc="env PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config"
check "pkg-config gives the prefix's flags: $($pc --cflags --libs wdrift 2>&1)" sh -c \
	"$pc --cflags --libs wdrift | grep -qx -- '-I$prefix/include -L$prefix/lib -lwdrift *' &&
	 $pc --modversion wdrift | grep -qx '$(sed -n 's/^#define WDRIFT_VERSION "\(.*\)"/\1/p' lib/wdrift.h)'"
check "a C program built with pkg-config's flags runs" sh -c \
	"$cc $san -std=c11 -o '$tmp/use2' '$tmp/use.c' \$($pc --cflags --libs wdrift) -Wl,-rpath,\$($pc --variable=libdir wdrift) && '$tmp/use2'"
find "$prefix" | sort >"$tmp/installed"
check "make uninstall removes what install put" sh -c \
	"make -s uninstall PREFIX='$prefix' BUILD='$BUILD' && ! test -e '$prefix/bin/wdrift' && ! test -e '$prefix/lib/libwdrift.so'"
# install made $prefix itself: uninstall leaves nothing of it
check "and leaves nothing that install created: $(find "$prefix" 2>/dev/null | head -n 5 | tr '\n' ' ')" \
	test ! -e "$prefix"
check "a second install into the same prefix" make -s install PREFIX="$prefix" BUILD="$BUILD"
echo "# my edit" >>"$prefix/etc/wdrift/wdrift.yaml"
check "install again keeps the edited config, and says so" sh -c \
	"make -s install PREFIX='$prefix' BUILD='$BUILD' | grep -q 'kept $prefix/etc/wdrift/wdrift.yaml: it differs' &&
	 tail -n 1 '$prefix/etc/wdrift/wdrift.yaml' | grep -qx '# my edit'"
make -s uninstall PREFIX="$prefix" BUILD="$BUILD" >"$tmp/uninstall" 2>&1
check "uninstall keeps the edited config and says so: $(tr '\n' ' ' <"$tmp/uninstall")" sh -c \
	"grep -q 'kept $prefix/etc/wdrift/wdrift.yaml: edited' '$tmp/uninstall' &&
	 grep -qx '# my edit' '$prefix/etc/wdrift/wdrift.yaml'"
check "and removes everything else: $(find "$prefix" -type f | grep -v etc/wdrift/wdrift.yaml | head -n 3 | tr '\n' ' ')" \
	sh -c "[ -z \"\$(find '$prefix' -type f ! -path '*/etc/wdrift/wdrift.yaml')\" ]"
# A system install of one PREFIX, a private install of another, both sharing UNITDIR and SYSCONFDIR.
sys=$tmp/sys other=$tmp/other
check "make install-system PREFIX=$sys" make -s install-system PREFIX="$sys" BUILD="$BUILD"
# a PREFIX the unit's PrivateTmp/ProtectHome hide: it would never start (a trial read the unit and saw it)
case "$sys/" in
/tmp/*) check "install-system under /tmp warns that the unit cannot run its wdriftd" sh -c \
	"make -s install-system PREFIX='$sys' BUILD='$BUILD' 2>&1 | grep -q 'which its PrivateTmp=yes and ProtectHome=yes hide from the service: it will not start'" ;;
esac
check "make install PREFIX=$other" make -s install PREFIX="$other" BUILD="$BUILD"
make -s uninstall PREFIX="$other" BUILD="$BUILD" >"$tmp/uninstall" 2>&1
check "uninstalling $other keeps $sys's unit and config, and says so: $(tr '\n' ' ' <"$tmp/uninstall")" sh -c \
	"test -f '$UNITDIR/wdriftd.service' && test -f '$SYSCONFDIR/wdrift/wdrift.yaml' &&
	 grep -q 'kept $UNITDIR/wdriftd.service and $SYSCONFDIR/wdrift/wdrift.yaml: the unit runs another install' '$tmp/uninstall' &&
	 ! test -e '$other/bin/wdrift'"
make -s uninstall PREFIX="$sys" BUILD="$BUILD" >"$tmp/uninstall" 2>&1
check "uninstalling $sys takes its unit and config: $(tr '\n' ' ' <"$tmp/uninstall")" sh -c \
	"! test -e '$UNITDIR/wdriftd.service' && ! test -e '$SYSCONFDIR/wdrift/wdrift.yaml' && ! test -e '$sys/bin/wdriftd'"
echo "# $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
