#!/bin/sh
# install.sh: the parts of `make install`, `make install-system` and
# `make uninstall` that are more than a copy, so that uninstall is the exact
# inverse of install (docs/publishing.md, "Install"):
#
#   install.sh dirs DESTDIR MANIFEST DIR...
#       creates each DIR under DESTDIR, with its parents, and appends to
#       DESTDIR/MANIFEST every one that did not exist before (DIR as given,
#       without DESTDIR): uninstall removes exactly those, when empty.
#   install.sh config SRC FILE
#       installs SRC as FILE unless FILE exists and differs from SRC (it
#       was edited): that one is kept, and said so.
#   install.sh remove-config SRC FILE
#       removes FILE if it is SRC byte for byte; an edited one is kept, and
#       said so.
#   install.sh remove-dirs DESTDIR MANIFEST
#       removes the manifest, then each directory it lists that is empty,
#       deepest first; says which it keeps (not empty).
set -u
cmd=$1
shift
case $cmd in
dirs)
	dest=$1 manifest=$2
	shift 2
	for d; do
		p=$d missing=
		while [ ! -e "$dest$p" ] && [ "$p" != / ] && [ "$p" != . ]; do
			missing="$missing$p
"
			p=$(dirname "$p")
		done
		install -d "$dest$d" || exit 1
		if [ -n "$missing" ]; then
			install -d "$(dirname "$dest$manifest")" || exit 1
			printf '%s' "$missing" >>"$dest$manifest" || exit 1
		fi
	done
	;;
config)
	src=$1 file=$2
	if [ -e "$file" ] && ! cmp -s "$src" "$file"; then
		echo "install: kept $file: it differs from $src (edited); the new one is $src"
	else
		install -m 644 "$src" "$file" || exit 1
	fi
	;;
remove-config)
	src=$1 file=$2
	if [ -e "$file" ]; then
		if cmp -s "$src" "$file"; then
			rm -f "$file" || exit 1
		else
			echo "uninstall: kept $file: edited since it was installed (remove it yourself if it is no longer needed)"
		fi
	fi
	;;
remove-dirs)
	dest=$1 manifest=$2
	[ -f "$dest$manifest" ] || exit 0
	list=$(cat "$dest$manifest") || exit 1
	rm -f "$dest$manifest" || exit 1
	# deepest first: a directory's path is longer than its parent's
	printf '%s\n' "$list" | awk 'NF { print length($0) "\t" $0 }' | sort -rn | cut -f2- | uniq |
	while IFS= read -r d; do
		[ -d "$dest$d" ] || continue
		rmdir "$dest$d" 2>/dev/null || echo "uninstall: kept $dest$d: not empty"
	done
	;;
*)
	echo "install.sh: unknown command '$cmd'" >&2
	exit 2
	;;
esac
