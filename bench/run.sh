#!/usr/bin/env bash
# The classifier benchmark (issues 2 and 15; results in BENCHMARKS.md): `fleetctl explain -o json`
# end to end against `grep -E -c -f`, side by side on one core, on three generated startup logs:
#   default  the default mix (SIZE_MIB), grep running the catalogue's own patterns as EREs;
#   jit      the JIT-heavy mix (JIT builds 60% of blocks, SIZE_MIB/2), the same patterns;
#   stems    a log over which bench/classifier/stems.txt, 30 short message stems a person would
#            grep for, matches a quarter of the lines (SIZE_MIB/2; gen_stems_log), grep running
#            those stems: a comparison that suits grep.
# For each it also times explain once with the Vectorscan prefilter off (FLEET_CLASSIFIER_PREFILTER
# =off: RE2 alone, the prefilter's gain) and measures raw hs_scan throughput of the catalogue on
# the log (hs_scan_bench, the whole buffer in one scan): issue 15's targets (explain >= 1 GB/s on
# the default mix, >= 3x grep on the JIT-heavy one, >= 0.5x grep on the stems log) become half of
# that raw figure on a log where it is under 2 GB/s.
#
#   bench/run.sh [SIZE_MIB]                  default 1024
#   LOGS=default bench/run.sh 256            the default-mix comparison alone (issue 2's)
#   BUILD_DIR=build-bench bench/run.sh 64    another build directory (default: build/)
#   SEED=2 RUNS=5 bench/run.sh               another log, more timed runs (default 1 and 3)
#   JIT_PERCENT=60 LOGS=default bench/run.sh 256
#                                            the first log with another mix (share of blocks
#                                            that are JIT builds; default 17, see
#                                            startup_log_generator.cc)
#
# The other benchmarks (each its own section in BENCHMARKS.md) run through here by name, or
# directly as bench/NAME/run.sh; the arguments after the name are theirs:
#   bench/run.sh agent                       detection latency and footprint (bench/agent/run.sh)
#   bench/run.sh daemon                      fleetd at scale, issue 4 (bench/daemon/run.sh)
#   bench/run.sh remediation [--speed X] [--runs N]
#                                            time-to-ready of the seed scenario, issue 5
#                                            (bench/remediation/run.sh)
#   bench/run.sh remote [--speed X] [--runs N] [--lxc]
#                                            agent bootstrap over SSH and time-to-ready on two
#                                            simulated hosts against the local transport, issue 6;
#                                            --lxc: real LXC containers, issue 17
#                                            (bench/remote/run.sh; needs root)
#
# It prints MB/s for both, the ratio ours/grep, our peak RSS at SIZE_MIB and at 1/8 of it, the
# matching-line counts of both tools; for each log explain, RE2-alone, grep and raw hs_scan MB/s,
# the ratio, the target that applies and whether it is met; and one JSON summary line (also in
# .bench/). It exits non-zero when the classifier names a class or line other than the first
# injected failure's, when explain's JSON differs with the prefilter off, when the exported
# patterns are not valid, equivalent GNU EREs, or when grep does not count the stems log's
# matching lines as its generator does.
#
# Method: nothing is dropped from the page cache; both tools read a warm cache (each command runs
# once untimed first). Then RUNS timed runs of each, interleaved so that a noisy neighbour hurts
# both alike; the median wall time counts, peak RSS is the largest seen. Everything runs pinned to
# one CPU with taskset. grep's output goes to a file, never /dev/null: GNU grep stops at the first
# match when it sees its output discarded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source deploy/lib/fleet.sh

case ${1:-} in
  agent | daemon | failover | remediation | remote) exec bash "bench/$1/run.sh" "${@:2}" ;;
esac

size_mib=${1:-1024}
if ! [[ $size_mib =~ ^[0-9]+$ ]] || ((size_mib < 8)); then
  echo "usage: bench/run.sh [SIZE_MIB]   (SIZE_MIB >= 8; default 1024)" >&2
  echo "       bench/run.sh agent|daemon|remediation|remote [ARGS]   (the other benchmarks)" >&2
  exit 1
fi
build=${BUILD_DIR:-build}
seed=${SEED:-1}
runs=${RUNS:-3}
jit_percent=${JIT_PERCENT:-17}
logs=${LOGS:-all}
case $logs in
  all | default) ;;
  *)
    echo "bench/run.sh: LOGS is all (default) or default, not '$logs'" >&2
    exit 1
    ;;
esac
rss_limit_kib=$((32 * 1024))
out=.bench

step "dependencies"
bash deploy/install-deps.sh

step "build ($build/)"
bench_build "$build" RelWithDebInfo fleetctl gen_startup_log catalogue_patterns gen_stems_log
# hs_scan_bench exists in a build with the Vectorscan prefilter (FLEET_VECTORSCAN, the default).
with_vectorscan=false
if grep -q '^FLEET_VECTORSCAN:BOOL=ON' "$build/CMakeCache.txt"; then
  with_vectorscan=true
  cmake --build "$build" --target hs_scan_bench
fi
fleetctl=$build/cli/fleetctl
gen=$build/bench/classifier/gen_startup_log
gen_stems=$build/bench/classifier/gen_stems_log
patterns_tool=$build/bench/classifier/catalogue_patterns
hs_bench=$build/bench/classifier/hs_scan_bench
stems=bench/classifier/stems.txt

mkdir -p "$out"
small_mib=$((size_mib / 8))
half_mib=$((size_mib / 2))
need_kib=$(((size_mib + small_mib + 32) * 1024))
if [ "$logs" = all ]; then need_kib=$((need_kib + 2 * half_mib * 1024)); fi
free_kib=$(df -Pk "$out" | awk 'NR == 2 {print $4}')
if ((free_kib < need_kib)); then
  echo "bench: $out needs $((need_kib / 1024)) MiB free, has $((free_kib / 1024)) MiB" >&2
  exit 1
fi
# The first CPU this process may run on (containers often restrict the set).
cpu=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')
pin=(taskset -c "$cpu")

step "machine"
model=$(cpu_model)
cores=$(nproc)
grep_version=$(grep --version | head -1)
default_locale=$(locale 2>/dev/null | sed -n 's/^LC_CTYPE="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')
default_locale=${default_locale:-C}
revision=$(git_revision)
date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')
echo "cpu: ${model:-unknown} ($cores cores online; pinned to CPU $cpu)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)   kernel: $(uname -r)   $grep_version"
echo "default locale: $default_locale   revision: $revision   date: $date_utc"

step "generate the logs (seed $seed, JIT builds $jit_percent% of blocks)"
big=$out/startup-${size_mib}MiB.log
small=$out/startup-${small_mib}MiB.log
sample=$out/sample.log
"$gen" --size-mib "$size_mib" --seed "$seed" --jit-percent "$jit_percent" --output "$big" \
  >"$big.manifest.json"
"$gen" --size-mib "$small_mib" --seed "$seed" --jit-percent "$jit_percent" --output "$small" \
  >"$small.manifest.json"
"$gen" --size-mib 16 --seed "$((seed + 1))" --output "$sample" >/dev/null
# Real failure logs exercise patterns the generator never triggers: a labelled corpus of real logs
# is added when the machine has one (read in place, never copied into the repository).
corpus_dir=../shared/corpus/dev
if compgen -G "$corpus_dir/*.log" >/dev/null; then cat "$corpus_dir"/*.log >>"$sample"; fi
cat "$big.manifest.json"
if [ "$logs" = all ]; then
  jit_log=$out/jit60-${half_mib}MiB.log
  stems_log=$out/stems-${half_mib}MiB.log
  "$gen" --size-mib "$half_mib" --seed "$seed" --jit-percent 60 --output "$jit_log" \
    >"$jit_log.manifest.json"
  "$gen_stems" --stems "$stems" --size-mib "$half_mib" --seed "$seed" --output "$stems_log" \
    >"$stems_log.manifest.json"
  cat "$jit_log.manifest.json" "$stems_log.manifest.json"
fi
manifest_field() { sed -n "s/.*\"$2\":\"\{0,1\}\([^\",}]*\).*/\1/p" "$1"; }
bytes=$(manifest_field "$big.manifest.json" bytes)
lines=$(manifest_field "$big.manifest.json" lines)
failures=$(manifest_field "$big.manifest.json" failures)

step "patterns: the catalogue as GNU EREs ($out/patterns.ere)"
patterns=$out/patterns.ere
"$patterns_tool" >"$patterns"
npatterns=$(wc -l <"$patterns")
rejected=0
while IFS= read -r p; do
  # grep exits 2 on an invalid regexp; a warning ("stray \") means it read something else.
  rc=0
  err=$(LC_ALL=C grep -E -e "$p" /dev/null 2>&1) || rc=$?
  if ((rc == 2)) || [ -n "$err" ]; then
    echo "grep rejects: $p${err:+ ($err)}" >&2
    rejected=$((rejected + 1))
  fi
done <"$patterns"
echo "$((npatterns - rejected)) of $npatterns patterns accepted by GNU grep"
# Equivalence, pattern by pattern, on a sample: each ERE must match exactly the lines its RE2
# pattern matches, or grep would be racing on different (easier or harder) patterns.
mapfile -t ours_per_pattern < <("$patterns_tool" --count "$sample" --per-pattern | tail -n +2)
disagree=0
i=0
while IFS= read -r p; do
  theirs=$(LC_ALL=C grep -c -E -e "$p" "$sample" || true)
  if [ "$theirs" != "${ours_per_pattern[$i]}" ]; then
    echo "pattern $((i + 1)) matches ${ours_per_pattern[$i]} lines with RE2, $theirs with grep:" \
      "$p" >&2
    disagree=$((disagree + 1))
  fi
  i=$((i + 1))
done <"$patterns"
sample_lines=$(wc -l <"$sample")
echo "$((npatterns - disagree)) of $npatterns patterns match the same lines in both engines" \
  "($sample_lines-line sample)"

step "timing: $runs runs each after one warm-up, median counts"
rm -f "$out"/times.*
# timed NAME OUTPUT CMD...: runs CMD pinned, stdout to OUTPUT, appends "wall_s rss_kib cpu_s" to
# times.NAME (cpu: user + system, which a neighbour preempting the CPU does not inflate).
timed() {
  local name=$1 output=$2
  shift 2
  /usr/bin/time -f '%e %M %U %S' -o "$out/time.last" "${pin[@]}" "$@" >"$output"
  tail -1 "$out/time.last" | awk '{printf "%s %s %.2f\n", $1, $2, $3 + $4}' >>"$out/times.$name"
}
ours_cmd=("$fleetctl" explain -o json "$big")
grep_cmd=(env LC_ALL=C grep -E -c -f "$patterns" "$big")
grep_locale_cmd=(env LC_ALL="$default_locale" grep -E -c -f "$patterns" "$big")
with_locale=false
case "$default_locale" in C | POSIX) ;; *) with_locale=true ;; esac

"${pin[@]}" "${ours_cmd[@]}" >"$out/ours.json"
"${pin[@]}" "${grep_cmd[@]}" >"$out/grep.count" || true
if $with_locale; then "${pin[@]}" "${grep_locale_cmd[@]}" >"$out/grep-locale.count" || true; fi
rm -f "$out"/times.*
for ((r = 1; r <= runs; r++)); do
  timed ours "$out/ours.json" "${ours_cmd[@]}"
  timed grep "$out/grep.count" "${grep_cmd[@]}" || true
  if $with_locale; then
    timed grep_locale "$out/grep-locale.count" "${grep_locale_cmd[@]}" || true
  fi
  line="run $r: ours $(tail -1 "$out/times.ours" | cut -d' ' -f1) s"
  line+=", grep (C) $(tail -1 "$out/times.grep" | cut -d' ' -f1) s"
  if $with_locale; then
    line+=", grep ($default_locale) $(tail -1 "$out/times.grep_locale" | cut -d' ' -f1) s"
  fi
  echo "$line"
done
# The small log: memory must not grow with size. The sample, with the real corpus logs in it,
# drives more distinct DFA states than the generated text (memory follows variety, not size).
"${pin[@]}" "$fleetctl" explain -o json "$small" >"$out/ours-small.json"
for ((r = 1; r <= runs; r++)); do
  timed ours_small "$out/ours-small.json" "$fleetctl" explain -o json "$small"
done
timed ours_sample "$out/ours-sample.json" "$fleetctl" explain -o json "$sample"

# What the peak consists of: run once more in the background and sample /proc every 50 ms; the
# sample with the largest VmRSS splits into anonymous memory (heap: read buffer, compiled
# patterns, DFA caches) and file pages (shared libraries' code; the log is read(), never mapped).
"${pin[@]}" "$fleetctl" explain -o json "$big" >/dev/null &
probe_pid=$!
rss_sample="0 0 0 0"
while kill -0 "$probe_pid" 2>/dev/null; do
  # One read of both files, so that the numbers belong to one moment; a failed read (the process
  # just ended) is skipped.
  now=$(awk 'FNR == 1 {file++}
             file == 1 && /^VmRSS:/ {r = $2}
             file == 1 && /^RssAnon:/ {a = $2}
             file == 1 && /^RssFile:/ {f = $2}
             file == 2 && /^[0-9a-f]+-/ {in_heap = ($6 == "[heap]")}
             file == 2 && in_heap && /^Rss:/ {h = $2}
             END {if (r > 0 && file == 2) print r, a, f, h + 0}' \
    "/proc/$probe_pid/status" "/proc/$probe_pid/smaps" 2>/dev/null || true)
  if [ -n "$now" ] && ((${now%% *} > ${rss_sample%% *})); then rss_sample=$now; fi
  sleep 0.05
done
wait "$probe_pid"
read -r _ rss_anon rss_file rss_heap <<<"$rss_sample"

# median_of FILE [FIELD]: of wall times (field 1) or CPU times (field 3).
median_of() { cut -d' ' -f"${2:-1}" "$1" | median %s; }
max_rss() { cut -d' ' -f2 "$1" | sort -n | tail -1; }
mbps() { awk -v b="$bytes" -v s="$1" 'BEGIN {printf "%.1f", b / 1e6 / s}'; }
ratio() { awk -v g="$1" -v o="$2" 'BEGIN {printf "%.2f", g / o}'; }
ours_s=$(median_of "$out/times.ours")
grep_s=$(median_of "$out/times.grep")
ours_mbps=$(mbps "$ours_s")
grep_mbps=$(mbps "$grep_s")
ratio=$(ratio "$grep_s" "$ours_s")
ours_cpu=$(median_of "$out/times.ours" 3)
grep_cpu=$(median_of "$out/times.grep" 3)
ratio_cpu=$(ratio "$grep_cpu" "$ours_cpu")
if $with_locale; then
  grep_locale_s=$(median_of "$out/times.grep_locale")
  grep_locale_mbps=$(mbps "$grep_locale_s")
  ratio_locale=$(ratio "$grep_locale_s" "$ours_s")
fi
ours_rss=$(max_rss "$out/times.ours")
small_rss=$(max_rss "$out/times.ours_small")
sample_rss=$(max_rss "$out/times.ours_sample")

step "correctness"
class_ok=true
# check_class JSON MANIFEST: the class and line must be the first injected failure's.
check_class() {
  local got_class got_line want_class want_line
  got_class=$(grep -o '"class":"[^"]*"' "$1" | head -1 | cut -d'"' -f4)
  got_line=$(grep -o '"root_cause_line":[0-9]*' "$1" | head -1 | cut -d: -f2)
  want_class=$(sed -n 's/.*"first_failure":{[^}]*"class":"\([^"]*\)".*/\1/p' "$2")
  want_line=$(sed -n 's/.*"first_failure":{[^}]*"root_cause_line":\([0-9]*\).*/\1/p' "$2")
  if [ "$got_class" = "$want_class" ] && [ "$got_line" = "$want_line" ]; then
    echo "$1: $got_class at line $got_line, as injected: correct"
  else
    echo "$1: $got_class at line $got_line, but the first injected failure is $want_class at" \
      "line $want_line: WRONG" >&2
    class_ok=false
  fi
}
check_class "$out/ours.json" "$big.manifest.json"
check_class "$out/ours-small.json" "$small.manifest.json"
expected_class=$(sed -n 's/.*"first_failure":{[^}]*"class":"\([^"]*\)".*/\1/p' "$big.manifest.json")
counted=$("$patterns_tool" --count "$big")
ours_matched=$(sed 's/.*matched=\([0-9]*\).*/\1/' <<<"$counted")
matched_bytes=$(sed 's/.*matched_bytes=\([0-9]*\).*/\1/' <<<"$counted")
grep_matched=$(cat "$out/grep.count")
echo "matching lines: grep -c $grep_matched, SignatureMatcher::Match $ours_matched" \
  "($( [ "$grep_matched" = "$ours_matched" ] && echo equal || echo DIFFERENT))"
patterns_ok=true
if ((rejected > 0 || disagree > 0)) || [ "$grep_matched" != "$ours_matched" ]; then
  patterns_ok=false
fi

step "issue 15: RE2 alone, raw hs_scan$([ "$logs" = all ] && echo ", the JIT-heavy and stems logs")"
# compare NAME LOG MANIFEST PATTERNS: for one log, explain (its JSON in $out/NAME.on.json, times in
# times.NAME_explain) against LC_ALL=C grep -E -c -f PATTERNS (times.NAME_grep), RUNS interleaved
# runs after a warm-up (the default log's were timed above: its files are linked, not rerun); one
# timed explain with the prefilter off, whose JSON must be the same; raw hs_scan of the catalogue
# on the log. Fills the r_* arrays under NAME.
declare -A r_bytes r_lines r_matched r_explain_s r_re2_s r_grep_s r_explain_mbps r_re2_mbps
declare -A r_grep_mbps r_raw_mbps r_raw_cpu_mbps r_ratio r_class r_same r_target r_target_met
declare -A r_reason r_issue_target r_issue_met
prefilter_same=true
compare() {
  local name=$1 log=$2 manifest=$3 pats=$4 r b
  local explain_cmd=("$fleetctl" explain -o json "$log")
  local grep_cmd=(env LC_ALL=C grep -E -c -f "$pats" "$log")
  if [ "$name" = default ]; then
    cp "$out/ours.json" "$out/$name.on.json"
    cp "$out/grep.count" "$out/$name.grep.count"
    cp "$out/times.ours" "$out/times.${name}_explain"
    cp "$out/times.grep" "$out/times.${name}_grep"
  else
    "${pin[@]}" "${explain_cmd[@]}" >"$out/$name.on.json"
    "${pin[@]}" "${grep_cmd[@]}" >"$out/$name.grep.count" || true
    rm -f "$out/times.${name}_explain" "$out/times.${name}_grep"
    for ((r = 1; r <= runs; r++)); do
      timed "${name}_explain" "$out/$name.on.json" "${explain_cmd[@]}"
      timed "${name}_grep" "$out/$name.grep.count" "${grep_cmd[@]}" || true
      echo "$name run $r: explain $(tail -1 "$out/times.${name}_explain" | cut -d' ' -f1) s," \
        "grep $(tail -1 "$out/times.${name}_grep" | cut -d' ' -f1) s"
    done
  fi
  rm -f "$out/times.${name}_re2"
  timed "${name}_re2" "$out/$name.off.json" env FLEET_CLASSIFIER_PREFILTER=off "${explain_cmd[@]}"
  echo "$name, prefilter off: $(cut -d' ' -f1 "$out/times.${name}_re2") s"
  if cmp -s "$out/$name.on.json" "$out/$name.off.json"; then
    r_same[$name]=true
  else
    echo "$name: explain's JSON differs with the prefilter off: WRONG" >&2
    diff "$out/$name.on.json" "$out/$name.off.json" | head -20 >&2 || true
    r_same[$name]=false
    prefilter_same=false
  fi
  check_class "$out/$name.on.json" "$manifest"
  r_class[$name]=$(grep -o '"class":"[^"]*"' "$out/$name.on.json" | head -1 | cut -d'"' -f4)
  b=$(manifest_field "$manifest" bytes)
  r_bytes[$name]=$b
  r_lines[$name]=$(manifest_field "$manifest" lines)
  r_matched[$name]=$(cat "$out/$name.grep.count")
  r_explain_s[$name]=$(median_of "$out/times.${name}_explain")
  r_grep_s[$name]=$(median_of "$out/times.${name}_grep")
  r_re2_s[$name]=$(median_of "$out/times.${name}_re2")
  r_explain_mbps[$name]=$(mbps_of "$b" "${r_explain_s[$name]}")
  r_grep_mbps[$name]=$(mbps_of "$b" "${r_grep_s[$name]}")
  r_re2_mbps[$name]=$(mbps_of "$b" "${r_re2_s[$name]}")
  r_ratio[$name]=$(ratio "${r_grep_s[$name]}" "${r_explain_s[$name]}")
  r_raw_mbps[$name]=-
  r_raw_cpu_mbps[$name]=-
  if $with_vectorscan; then
    # The whole buffer in one scan, every match reported: what the prefilter does per buffer.
    "${pin[@]}" "$hs_bench" --skip-check --min-seconds 1 "$log" >"$out/$name.hs.txt"
    r_raw_mbps[$name]=$(sed -n 's/^log .* whole_mbps=\([0-9.]*\) (cpu \([0-9.]*\)).*/\1/p' \
      "$out/$name.hs.txt")
    r_raw_cpu_mbps[$name]=$(sed -n 's/^log .* whole_mbps=\([0-9.]*\) (cpu \([0-9.]*\)).*/\2/p' \
      "$out/$name.hs.txt")
    echo "$name, raw hs_scan: $(sed -n 's/^log [^ ]* //p' "$out/$name.hs.txt")"
  fi
  # The issue's target, and half of raw hs_scan where that is under 2 GB/s.
  local issue_target met_issue
  case $name in
    default)
      issue_target=">= 1000 MB/s"
      met_issue=$(awk -v e="${r_explain_mbps[$name]}" 'BEGIN {print (e >= 1000) ? "true" : "false"}')
      ;;
    jit)
      issue_target=">= 3.0x grep"
      met_issue=$(awk -v r="${r_ratio[$name]}" 'BEGIN {print (r >= 3.0) ? "true" : "false"}')
      ;;
    stems)
      issue_target=">= 0.5x grep"
      met_issue=$(awk -v r="${r_ratio[$name]}" 'BEGIN {print (r >= 0.5) ? "true" : "false"}')
      ;;
  esac
  r_issue_target[$name]=$issue_target
  r_issue_met[$name]=$met_issue
  r_target[$name]=$issue_target
  r_target_met[$name]=$met_issue
  r_reason[$name]="issue 15's target"
  if [ "${r_raw_mbps[$name]}" != - ] &&
    awk -v raw="${r_raw_mbps[$name]}" 'BEGIN {exit !(raw < 2000)}'; then
    local half
    half=$(awk -v raw="${r_raw_mbps[$name]}" 'BEGIN {printf "%.1f", raw / 2}')
    r_target[$name]=">= $half MB/s"
    r_target_met[$name]=$(awk -v e="${r_explain_mbps[$name]}" -v h="$half" \
      'BEGIN {print (e >= h) ? "true" : "false"}')
    r_reason[$name]="raw hs_scan of the catalogue is ${r_raw_mbps[$name]} MB/s here, under 2 GB/s:"
    r_reason[$name]+=" half of it replaces '$issue_target' (issue 15)"
  fi
}
mbps_of() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.1f", b / 1e6 / s}'; }
names=(default)
compare default "$big" "$big.manifest.json" "$patterns"
stems_ok=true
if [ "$logs" = all ]; then
  names+=(jit stems)
  compare jit "$jit_log" "$jit_log.manifest.json" "$patterns"
  compare stems "$stems_log" "$stems_log.manifest.json" "$stems"
  # The stems must match what their generator says (a quarter of the lines), or grep would be
  # racing on another comparison.
  stems_want=$(manifest_field "$stems_log.manifest.json" matching_lines)
  if [ "${r_matched[stems]}" != "$stems_want" ]; then
    echo "stems log: grep -c counts ${r_matched[stems]} matching lines, its generator" \
      "$stems_want: WRONG" >&2
    stems_ok=false
  fi
fi

step "result"
matched_pct=$(awk -v m="$matched_bytes" -v b="$bytes" 'BEGIN {printf "%.0f", 100 * m / b}')
lines_pct=$(awk -v m="$ours_matched" -v l="$lines" 'BEGIN {printf "%.1f", 100 * m / l}')
throughput_ok=$(awk -v r="$ratio" 'BEGIN {print (r >= 1.0) ? "true" : "false"}')
rss_ok=false
if ((ours_rss <= rss_limit_kib && small_rss <= rss_limit_kib && sample_rss <= rss_limit_kib)); then
  rss_ok=true
fi
echo "log: $size_mib MiB, $bytes bytes, $lines lines, $failures failures; lines that match a" \
  "pattern: $lines_pct% of lines, $matched_pct% of bytes"
printf '%-34s %7s s  %8s MB/s  peak RSS %s MiB\n' "fleetctl explain -o json" "$ours_s" \
  "$ours_mbps" "$(mib "$ours_rss")"
printf '%-34s %7s s  %8s MB/s\n' "LC_ALL=C grep -E -c -f" "$grep_s" "$grep_mbps"
if $with_locale; then
  printf '%-34s %7s s  %8s MB/s\n' "LC_ALL=$default_locale grep -E -c -f" "$grep_locale_s" \
    "$grep_locale_mbps"
fi
echo "ratio ours/grep (C locale): ${ratio}x   target >= 1.0x: $(met "$throughput_ok")"
echo "  by CPU time (user + system, median): ours $ours_cpu s, grep $grep_cpu s: ${ratio_cpu}x"
if $with_locale; then echo "ratio ours/grep ($default_locale): ${ratio_locale}x"; fi
echo "peak RSS: $(mib "$ours_rss") MiB at $size_mib MiB, $(mib "$small_rss") MiB at" \
  "$small_mib MiB   target <= 32 MiB: $(met "$rss_ok")"
with_corpus=""
if compgen -G "$corpus_dir/*.log" >/dev/null; then with_corpus=" (with the real corpus logs)"; fi
echo "peak RSS on the 16 MiB equivalence sample$with_corpus: $(mib "$sample_rss") MiB"
echo "RSS at its peak (sampled): $(mib "$rss_anon") MiB anonymous ($(mib "$rss_heap") MiB of it" \
  "the malloc heap), $(mib "$rss_file") MiB file-backed (program and shared libraries)"

echo
echo "issue 15: explain (prefilter on) against RE2 alone, grep and raw hs_scan; MB/s by wall time," \
  "median of $runs (RE2 alone: one run)"
printf '%-8s %9s %9s %9s %9s %10s %7s  %-16s %s\n' log size_MiB explain re2_alone grep \
  raw_hs ratio target verdict
for n in "${names[@]}"; do
  printf '%-8s %9s %9s %9s %9s %10s %6sx  %-16s %s\n' "$n" \
    "$(awk -v b="${r_bytes[$n]}" 'BEGIN {printf "%.0f", b / 1048576}')" "${r_explain_mbps[$n]}" \
    "${r_re2_mbps[$n]}" "${r_grep_mbps[$n]}" "${r_raw_mbps[$n]}" "${r_ratio[$n]}" \
    "${r_target[$n]}" "$([ "${r_target_met[$n]}" = true ] && echo PASS || echo FAIL)"
done
for n in "${names[@]}"; do
  echo "  $n: target ${r_target[$n]}: ${r_reason[$n]}; issue's own ${r_issue_target[$n]}:" \
    "$([ "${r_issue_met[$n]}" = true ] && echo PASS || echo FAIL); prefilter gain" \
    "$(ratio "${r_re2_s[$n]}" "${r_explain_s[$n]}")x; class ${r_class[$n]}; grep -c" \
    "${r_matched[$n]} of ${r_lines[$n]} lines; JSON with prefilter off:" \
    "$([ "${r_same[$n]}" = true ] && echo same || echo DIFFERENT)"
done

# The machine-readable line: one JSON object, also kept in .bench/classifier-summary.json.
fields=()
str() { fields+=("\"$1\":\"${2//\"/}\""); }
num() { fields+=("\"$1\":$2"); }
str bench classifier
str date "$date_utc"
str revision "$revision"
str cpu "$model"
num cores "$cores"
num size_mib "$size_mib"
num seed "$seed"
num jit_percent "$jit_percent"
num bytes "$bytes"
num lines "$lines"
num failures "$failures"
num matched_lines "$ours_matched"
num matched_bytes "$matched_bytes"
num runs "$runs"
num ours_s "$ours_s"
num ours_mb_s "$ours_mbps"
num grep_c_s "$grep_s"
num grep_c_mb_s "$grep_mbps"
num ratio "$ratio"
num ours_cpu_s "$ours_cpu"
num grep_c_cpu_s "$grep_cpu"
num ratio_cpu "$ratio_cpu"
if $with_locale; then
  str grep_locale "$default_locale"
  num grep_locale_s "$grep_locale_s"
  num grep_locale_mb_s "$grep_locale_mbps"
  num ratio_locale "$ratio_locale"
fi
num ours_peak_rss_kib "$ours_rss"
num rss_anon_kib "$rss_anon"
num rss_heap_kib "$rss_heap"
num rss_file_kib "$rss_file"
num small_mib "$small_mib"
num small_peak_rss_kib "$small_rss"
num sample_peak_rss_kib "$sample_rss"
str class "$expected_class"
num class_correct "$class_ok"
num patterns_equivalent "$patterns_ok"
num throughput_target_met "$throughput_ok"
num rss_target_met "$rss_ok"
str logs "$logs"
for n in "${names[@]}"; do
  num "${n}_bytes" "${r_bytes[$n]}"
  num "${n}_lines" "${r_lines[$n]}"
  num "${n}_grep_matched_lines" "${r_matched[$n]}"
  num "${n}_explain_mb_s" "${r_explain_mbps[$n]}"
  num "${n}_re2_alone_mb_s" "${r_re2_mbps[$n]}"
  num "${n}_grep_c_mb_s" "${r_grep_mbps[$n]}"
  if [ "${r_raw_mbps[$n]}" != - ]; then
    num "${n}_raw_hs_mb_s" "${r_raw_mbps[$n]}"
    num "${n}_raw_hs_cpu_mb_s" "${r_raw_cpu_mbps[$n]}"
  fi
  num "${n}_ratio" "${r_ratio[$n]}"
  str "${n}_target" "${r_target[$n]}"
  num "${n}_target_met" "${r_target_met[$n]}"
  str "${n}_issue_target" "${r_issue_target[$n]}"
  num "${n}_issue_target_met" "${r_issue_met[$n]}"
  str "${n}_class" "${r_class[$n]}"
  num "${n}_prefilter_same_json" "${r_same[$n]}"
done
num stems_counted_as_generated "$stems_ok"
summary="{$(IFS=,; echo "${fields[*]}")}"
echo "$summary" | tee "$out/classifier-summary.json"
# Speed and memory are targets to report; a wrong answer (a class, or answers that change with the
# prefilter) or an unfair comparison is a failure.
$class_ok && $patterns_ok && $prefilter_same && $stems_ok
