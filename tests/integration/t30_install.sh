#!/bin/sh
# t30_install.sh: `make install PREFIX=...` installs a working wdrift, the
# library and its header, and the default config; a C program builds
# against the installed header and library and gets the right W1.
set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
n=0 fail=0
check() {	# check DESCRIPTION COMMAND...
	n=$((n + 1)); desc=$1; shift
	if "$@" >"$tmp/out" 2>&1; then echo "ok $n - $desc"
	else fail=$((fail + 1)); echo "not ok $n - $desc"; sed 's/^/#   /' "$tmp/out"; fi
}
prefix=$tmp/prefix
BUILD=${BUILD:-build}
check "make install PREFIX=$prefix" make -s install PREFIX="$prefix" BUILD="$BUILD"
for f in bin/wdrift bin/wdriftd lib/libwdrift.so include/wdrift.h etc/wdrift/wdrift.yaml; do
	check "installs $f" test -f "$prefix/$f"
done
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
check "make uninstall removes what install put" sh -c \
	"make -s uninstall PREFIX='$prefix' && ! test -e '$prefix/bin/wdrift' && ! test -e '$prefix/lib/libwdrift.so'"
echo "# $((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
