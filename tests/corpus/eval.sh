#!/usr/bin/env bash
# Corpus evaluation: runs the real `fleetctl explain -o json` over a labelled corpus of startup
# failure logs and scores it (accuracy per class, confusions, safety, facts).
#
#   tests/corpus/eval.sh [BUILD_DIR] [CORPUS_DIR]
#
# CORPUS_DIR defaults to ../shared/corpus/dev next to the checkout; the script skips (exit 0)
# when it does not exist. The corpus is read in place, never copied into the repository.
# tests/corpus/fixtures holds the project's own fixtures (issue 15) in the same format:
#   tests/corpus/eval.sh build tests/corpus/fixtures
# Relative paths are taken from the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
corpus=${2:-../shared/corpus/dev}
if [ ! -f "$corpus/labels.json" ]; then
  echo "corpus eval: $corpus/labels.json not found; skipping"
  exit 0
fi
for bin in cli/fleetctl tests/corpus/corpus_score; do
  [ -x "$build/$bin" ] || { echo "corpus eval: $build/$bin missing; build first" >&2; exit 2; }
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
shopt -s nullglob
logs=("$corpus"/*.log)
status=0
"$build/cli/fleetctl" explain -o json "${logs[@]}" >"$out" || status=$?
if [ "$status" -ne 0 ]; then
  echo "corpus eval: fleetctl explain exited $status" >&2
  exit "$status"
fi
"$build/tests/corpus/corpus_score" "$corpus/labels.json" "$out"
