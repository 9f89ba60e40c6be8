#!/bin/sh
# t05_cuda_toolkit.sh: the Makefile finds the CUDA toolkit by asking nvcc,
# not by the directory nvcc sits in. A CI machine had /usr/local/bin/nvcc as
# a two-line wrapper script, and the link looked for libcudart_static.a in
# /usr/local/lib64 (regression: CI exit 2, "cannot find -lcudart_static").
set -u
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
n=0 fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $1"; }
# MAKEFLAGS goes too: under `make check-asan` it carries CUDA=0 from the make
# that runs this test, and a command-line CUDA would override the detection.
var() {	# var NAME: the value make settles on, with the environment in $tmp/env
	env -u CUDA_HOME -u CUDA -u NVCC -u MAKEFLAGS -u MFLAGS PATH="$path" make -s -p -n -f Makefile 2>/dev/null |
		sed -n "s/^$1 :*= //p" | head -n 1
}
real=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -z "$real" ]; then
	echo "skip: no nvcc on this machine"
	exit 77
fi
mkdir "$tmp/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "$real" >"$tmp/bin/nvcc"
chmod +x "$tmp/bin/nvcc"
path="$tmp/bin:/usr/bin:/bin"
lib=$(var CUDA_LIBDIR)
if [ -f "$lib/libcudart_static.a" ]; then ok "wrapper nvcc: CUDA_LIBDIR has libcudart_static.a ($lib)"
else bad "wrapper nvcc: CUDA_LIBDIR '$lib' has no libcudart_static.a"; fi
inc=$(var CUDA_INCDIR)
if [ -f "$inc/cuda_runtime_api.h" ]; then ok "wrapper nvcc: CUDA_INCDIR has cuda_runtime_api.h"
else bad "wrapper nvcc: CUDA_INCDIR '$inc' has no cuda_runtime_api.h"; fi
[ "$(var CUDA)" = 1 ] && ok "wrapper nvcc: CUDA=1" || bad "wrapper nvcc: CUDA is '$(var CUDA)'"

# A wrapper that runs no toolkit at all: CUDA is off, the build stays CPU-only.
printf '#!/bin/sh\nexit 1\n' >"$tmp/bin/nvcc"
[ "$(var CUDA)" = 0 ] && ok "nvcc that finds no toolkit: CUDA=0" || bad "broken nvcc: CUDA is '$(var CUDA)'"

# The real link, through the wrapper, into a scratch build directory.
printf '#!/bin/sh\nexec %s "$@"\n' "$real" >"$tmp/bin/nvcc"
if env -u CUDA_HOME -u MAKEFLAGS -u MFLAGS PATH="$tmp/bin:$PATH" make -s BUILD="$tmp/build" "$tmp/build/libwdrift.so" >"$tmp/out" 2>&1
then ok "libwdrift.so links with CUDA through a wrapper nvcc"
else bad "libwdrift.so through a wrapper nvcc"; sed 's/^/#   /' "$tmp/out" | tail -n 20; fi
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
