#!/usr/bin/env bash
# The classifier benchmark (issue 2, "Benchmark"; results in BENCHMARKS.md): `fleetctl explain -o
# json` end to end against `grep -E -c -f` over the same catalogue patterns, side by side on one
# core, on a generated startup log with failures sprinkled in.
#
#   bench/run.sh [SIZE_MIB]                  default 1024
#   BUILD_DIR=build-bench bench/run.sh 64    another build directory (default: build/)
#   SEED=2 RUNS=5 bench/run.sh               another log, more timed runs (default 1 and 3)
#   JIT_PERCENT=60 bench/run.sh 256          a JIT-heavier mix (share of blocks that are JIT
#                                            builds; default 17, see startup_log_generator.cc)
#
# The other benchmarks (each its own section in BENCHMARKS.md) run through here by name, or
# directly as bench/NAME/run.sh; the arguments after the name are theirs:
#   bench/run.sh agent                       detection latency and footprint (bench/agent/run.sh)
#   bench/run.sh daemon                      fleetd at scale, issue 4 (bench/daemon/run.sh)
#   bench/run.sh remediation [--speed X] [--runs N]
#                                            time-to-ready of the seed scenario, issue 5
#                                            (bench/remediation/run.sh)
#   bench/run.sh remote [--speed X] [--runs N]
#                                            agent bootstrap over SSH and time-to-ready on two
#                                            simulated hosts against the local transport, issue 6
#                                            (bench/remote/run.sh; needs root)
#
# It prints MB/s for both, the ratio ours/grep, our peak RSS at SIZE_MIB and at 1/8 of it, the
# matching-line counts of both tools, and one JSON summary line (also in .bench/). It exits
# non-zero when the classifier names a class or line other than the first injected failure's, or
# when the exported patterns are not valid, equivalent GNU EREs.
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
  agent | daemon | remediation | remote) exec bash "bench/$1/run.sh" "${@:2}" ;;
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
rss_limit_kib=$((32 * 1024))
out=.bench

step "dependencies"
bash deploy/install-deps.sh

step "build ($build/)"
bench_build "$build" RelWithDebInfo fleetctl gen_startup_log catalogue_patterns
fleetctl=$build/cli/fleetctl
gen=$build/bench/classifier/gen_startup_log
patterns_tool=$build/bench/classifier/catalogue_patterns

mkdir -p "$out"
small_mib=$((size_mib / 8))
need_kib=$(((size_mib + small_mib + 32) * 1024))
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
summary="{$(IFS=,; echo "${fields[*]}")}"
echo "$summary" | tee "$out/classifier-summary.json"
# Speed and memory are targets to report; a wrong answer or an unfair comparison is a failure.
$class_ok && $patterns_ok
