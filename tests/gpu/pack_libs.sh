#!/bin/sh
# pack_libs.sh: copies the shared libraries that build/wdriftd, build/wdrift
# and build/libwdrift.so load (libzmq, HDF5, libyaml and what they need; not
# libc, libm or the loader) into DIR (default .dev/lib), so that a GPU
# machine without those Debian packages can run the daemon built here
# (tests/gpu/on_device.sh puts the ones it lacks on LD_LIBRARY_PATH).
# DIR should be ignored by git (.git/info/exclude).
set -eu
dir=${1:-.dev/lib}
mkdir -p "$dir"
ldd build/wdriftd build/wdrift build/libwdrift.so |
	awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
	grep -v -e '/libc\.so' -e '/libm\.so' -e '/ld-linux' -e '/libwdrift\.so' |
	sort -u |
	while read -r lib; do cp -L "$lib" "$dir/"; done
echo "pack_libs: $(ls "$dir" | wc -l) libraries, $(du -sh "$dir" | cut -f1), in $dir"
