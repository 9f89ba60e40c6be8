#!/bin/sh
# deps.sh PKG...: installs the Debian packages that are missing, and only
# those. Runs apt-get update first when something must be installed, and
# uses sudo when not root. Says what it did in one line.
set -eu
missing=
for p in "$@"; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
		missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all $# packages present"
	exit 0
fi
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
echo "deps: installing$missing"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
