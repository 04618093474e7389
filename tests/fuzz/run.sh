#!/usr/bin/env bash
# Runs the classifier fuzzer for a bounded time: tests/fuzz/run.sh BUILD_DIR SECONDS
#
# BUILD_DIR is a clang build with -DFLEET_FUZZ=ON -DFLEET_SANITIZE=ON (tests/run.sh makes
# build-clang). The seed corpus is copied from tests/fuzz/seeds/ (small logs and a catalogue
# written for this) into a temp dir that libFuzzer grows and that is removed afterwards. Exits
# non-zero on any crash, broken invariant, leak, timeout or out-of-memory; the reproducer is kept
# in BUILD_DIR/fuzz-artifacts/<run>/ and shown as a hex dump.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 1
fi
build_dir=$1
seconds=$2
case $seconds in
  '' | *[!0-9]*)
    echo "run.sh: SECONDS must be a whole number, got '$seconds'" >&2
    exit 1
    ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
fuzzer=$build_dir/tests/fuzz/classifier_fuzzer
if [ ! -x "$fuzzer" ]; then
  echo "run.sh: no $fuzzer: configure $build_dir with clang, -DFLEET_FUZZ=ON and build it" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fleet-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
cp "$here"/seeds/* "$work/corpus/"
# Reproducers of this run only; the folder is removed again when the run finds nothing.
artifacts=$build_dir/fuzz-artifacts/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$artifacts"

echo "fuzzing $fuzzer for ${seconds}s ($(ls "$work/corpus" | wc -l) seeds)"
status=0
# One input may take at most -timeout seconds (the engine is linear time); -rss_limit_mb bounds
# memory (the engine's is bounded whatever the input).
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$fuzzer" "$work/corpus" \
  -dict="$here/classifier.dict" \
  -max_total_time="$seconds" -max_len=65536 -detect_leaks=1 -rss_limit_mb=2048 -timeout=30 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 \
  >"$work/fuzz.log" 2>&1 || status=$?

# The coverage lines are noise in CI; the end tells what happened.
grep -E '^(#[0-9]+ +DONE|Done [0-9]+ runs|stat::)' "$work/fuzz.log" || true
if [ "$status" -ne 0 ]; then
  echo "run.sh: the fuzzer failed (exit $status):" >&2
  grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse|INITED)' "$work/fuzz.log" | tail -n 80 >&2
  for f in "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*; do
    [ -f "$f" ] || continue
    echo "--- reproducer $f ($(wc -c <"$f") bytes):" >&2
    od -A d -c "$f" | head -n 40 >&2
  done
  exit "$status"
fi
rmdir "$artifacts" 2>/dev/null || true
echo "run.sh: no crash, leak or timeout in ${seconds}s"
