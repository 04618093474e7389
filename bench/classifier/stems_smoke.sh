#!/usr/bin/env bash
# The stems benchmark's smoke run (ctest stems_bench_smoke; the full run is bench/run.sh):
#   stems_smoke.sh GEN_STEMS_LOG FLEETCTL STEMS_TXT
# Writes a 2 MiB stems log and checks what bench/run.sh relies on: grep -E -c -f STEMS_TXT counts
# the lines the generator says match, 20-30% of them; fleetctl explain names the injected failure's
# class and line; and its JSON is the same with the Vectorscan prefilter off.
set -euo pipefail
gen=$1 fleetctl=$2 stems=$3
dir=$(mktemp -d)
trap 'rm -rf -- "$dir"' EXIT
"$gen" --stems "$stems" --bytes $((2 << 20)) --seed 3 --output "$dir/stems.log" >"$dir/manifest.json"
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$dir/manifest.json"; }
lines=$(field lines)
matching=$(field matching_lines)
want_class=$(sed -n 's/.*"first_failure":{[^}]*"class":"\([^"]*\)".*/\1/p' "$dir/manifest.json")
want_line=$(sed -n 's/.*"first_failure":{[^}]*"root_cause_line":\([0-9]*\).*/\1/p' \
  "$dir/manifest.json")
grep_count=$(LC_ALL=C grep -E -c -f "$stems" "$dir/stems.log")
echo "lines $lines, matching (generator) $matching, grep -c $grep_count"
fail=0
if [ "$grep_count" != "$matching" ]; then
  echo "FAIL: grep counts $grep_count matching lines, the generator $matching" >&2
  fail=1
fi
if ! awk -v m="$grep_count" -v l="$lines" 'BEGIN {exit !(m >= 0.2 * l && m <= 0.3 * l)}'; then
  echo "FAIL: $grep_count of $lines lines match a stem, not 20-30%" >&2
  fail=1
fi
"$fleetctl" explain -o json "$dir/stems.log" >"$dir/on.json"
FLEET_CLASSIFIER_PREFILTER=off "$fleetctl" explain -o json "$dir/stems.log" >"$dir/off.json"
got_class=$(grep -o '"class":"[^"]*"' "$dir/on.json" | head -1 | cut -d'"' -f4)
got_line=$(grep -o '"root_cause_line":[0-9]*' "$dir/on.json" | head -1 | cut -d: -f2)
echo "explain: $got_class at line $got_line; injected: $want_class at line $want_line"
if [ -z "$want_class" ] || [ "$got_class" != "$want_class" ] || [ "$got_line" != "$want_line" ]; then
  echo "FAIL: explain does not name the injected failure" >&2
  fail=1
fi
if ! cmp -s "$dir/on.json" "$dir/off.json"; then
  echo "FAIL: explain's JSON differs with the prefilter off" >&2
  diff "$dir/on.json" "$dir/off.json" | head -20 >&2 || true
  fail=1
fi
exit "$fail"
