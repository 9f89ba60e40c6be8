#!/bin/sh
# triage.sh: sorts what a fuzz target left in its crash directory into the
# findings that are libhdf5's own and those that are not (make fuzz, target
# checkpoint). libhdf5 is not built to resist hostile files, so a crash,
# hang or over-allocation whose innermost frame of ours-or-theirs code is in
# libhdf5, called with valid arguments, is the library's: it is moved to
# KEEP_DIR and counted. Anything else (a frame of wdrift's, or a report
# with no stack to judge) stays in CRASH_DIR and makes the triage fail. An
# input that passes when replayed alone is listed and left in CRASH_DIR,
# but does not fail it: there is nothing to attribute.
#
#   triage.sh FUZZ_BINARY CRASH_DIR KEEP_DIR
#
# Each input is replayed once by the fuzz binary (a file argument runs just
# that input), with the environment make fuzz ran it with. The frames of the
# sanitizer runtime, libFuzzer and libc (memcpy, the signal trampoline) are
# skipped: they are how a fault is reported, not where it is.
# Exit 0 when everything was libhdf5's, 1 otherwise.
set -u
bin=$1 crashes=$2 keep=$3
mkdir -p "$keep" || exit 1
theirs=0 ours=0 unrepro=0
for f in "$crashes"/*; do
	[ -f "$f" ] || continue
	out=$(timeout 60 "$bin" -timeout=5 -rss_limit_mb=2048 "$f" 2>&1)
	# the first stack of the report: from its "#0" line to the first non-frame line
	where=$(printf '%s\n' "$out" | awk '
		/^ *#0 / { on = 1 }
		on && !/^ *#[0-9]+ / { exit }
		on {
			if ($0 ~ /__interceptor_|__asan|__sanitizer|__lsan|__ubsan|fuzzer::|libclang_rt|compiler-rt/) next
			if ($0 ~ / in (malloc|calloc|realloc|free|posix_memalign|aligned_alloc) /) next
			if ($0 ~ /libc\.so|sysdeps|__GI_|__libc_|raise|abort/) next
			if ($0 ~ /libhdf5/) print "libhdf5"; else print "ours"
			exit
		}')
	what=$(printf '%s\n' "$out" | grep -m 1 -E 'ERROR: |ALARM|timeout after|out-of-memory' | cut -c 1-160)
	name=$(basename "$f")
	if [ "$where" = libhdf5 ]; then
		theirs=$((theirs + 1))
		mv "$f" "$keep/$name"
	elif [ -z "$what" ] && [ -z "$where" ]; then
		# it passes alone: it failed on state an earlier input of the same
		# fork-mode job left (in libhdf5: our reader keeps none between
		# inputs, and the target checks that no HDF5 object is left open)
		unrepro=$((unrepro + 1))
		echo "triage: $name: passes when replayed alone; left in $crashes"
	else
		ours=$((ours + 1))
		echo "triage: $name: ${what:-no report on replay}: ${where:-no stack}: $f"
	fi
done
echo "triage: $theirs input(s) fail inside libhdf5 (kept in $keep); $unrepro pass alone; $ours elsewhere"
[ "$ours" -eq 0 ]
