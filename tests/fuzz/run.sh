#!/usr/bin/env bash
# Runs the fuzz targets for a bounded time in all: tests/fuzz/run.sh BUILD_DIR SECONDS
#
# The SECONDS are shared: the classifier gets half, the config reader and the readiness HTTP
# parser a quarter each (the total stays what CI budgets). BUILD_DIR is a clang build with
# -DFLEET_FUZZ=ON -DFLEET_SANITIZE=ON (tests/run.sh makes build-clang). Each target's seed corpus
# is copied from tests/fuzz/ (seeds/: small logs and a catalogue; config_seeds/: fleet configs;
# http_seeds/: HTTP answers, two schedule bytes first) into a temp dir that libFuzzer grows and
# that is removed afterwards. Exits non-zero on any crash, broken invariant, leak, timeout or
# out-of-memory; the reproducer is kept in BUILD_DIR/fuzz-artifacts/<run>/ and shown as a hex dump.
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
for name in classifier_fuzzer config_fuzzer http_response_fuzzer; do
  if [ ! -x "$build_dir/tests/fuzz/$name" ]; then
    echo "run.sh: no $build_dir/tests/fuzz/$name: configure $build_dir with clang, -DFLEET_FUZZ=ON and build it" >&2
    exit 1
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/fleet-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Reproducers of this run only; the folder is removed again when the run finds nothing.
artifacts=$build_dir/fuzz-artifacts/$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$artifacts"

# fuzz NAME SEEDS SECONDS MAX_LEN [FLAG...]: one target, its own corpus.
fuzz() {
  local name=$1 seeds=$2 secs=$3 max_len=$4
  shift 4
  local fuzzer=$build_dir/tests/fuzz/$name status=0
  mkdir -p "$work/$name"
  cp "$here/$seeds"/* "$work/$name/"
  echo "fuzzing $name for ${secs}s ($(ls "$work/$name" | wc -l) seeds)"
  # One input may take at most -timeout seconds (every parser here is bounded); -rss_limit_mb
  # bounds memory.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$fuzzer" "$work/$name" "$@" \
    -max_total_time="$secs" -max_len="$max_len" -detect_leaks=1 -rss_limit_mb=2048 -timeout=30 \
    -artifact_prefix="$artifacts/$name-" -print_final_stats=1 \
    >"$work/$name.log" 2>&1 || status=$?
  # The coverage lines are noise in CI; the end tells what happened.
  grep -E '^(#[0-9]+ +DONE|Done [0-9]+ runs|stat::)' "$work/$name.log" || true
  if [ "$status" -ne 0 ]; then
    echo "run.sh: $name failed (exit $status):" >&2
    grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse|INITED)' "$work/$name.log" | tail -n 80 >&2
    for f in "$artifacts/$name"-crash-* "$artifacts/$name"-leak-* "$artifacts/$name"-timeout-* \
      "$artifacts/$name"-oom-*; do
      [ -f "$f" ] || continue
      echo "--- reproducer $f ($(wc -c <"$f") bytes):" >&2
      od -A d -c "$f" | head -n 40 >&2
    done
    exit "$status"
  fi
}

quarter=$((seconds / 4))
[ "$quarter" -ge 1 ] || quarter=1
fuzz classifier_fuzzer seeds $((seconds - 2 * quarter > 0 ? seconds - 2 * quarter : 1)) 65536 \
  -dict="$here/classifier.dict"
fuzz config_fuzzer config_seeds "$quarter" 16384
fuzz http_response_fuzzer http_seeds "$quarter" 140000
rmdir "$artifacts" 2>/dev/null || true
echo "run.sh: no crash, leak or timeout in ${seconds}s"
