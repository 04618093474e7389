#!/usr/bin/env bash
# The agent benchmarks (issue 3, "Benchmarks"; results in BENCHMARKS.md, "Agent: detection latency
# and footprint"), against the real fleet-agent binary over gRPC on loopback:
#   detection latency  a root-cause line appended to a server's log (one write(2)) -> the
#                      provisional diagnosis event at an Events stream client; TRIALS trials
#   footprint          RSS, CPU time and wake-ups of the agent following 8 READY simulated SGLang
#                      servers over IDLE_SECONDS with nothing happening
#
#   bench/agent/run.sh                              1000 trials, 60 s idle
#   BUILD_DIR=build-abench bench/agent/run.sh       another build directory (default: build/)
#   TRIALS=100 IDLE_SECONDS=10 bench/agent/run.sh   a quick run
#
# It prints both results, met/MISSED for each target (detection p99 <= 50 ms; RSS <= 20 MiB with
# 8 servers; idle CPU ~ 0, taken as at most 1 ms of CPU per second of idle, 0.1% of a core), and one
# JSON summary line (also in .bench/agent-summary.json). It exits non-zero when a trial or a server
# fails or times out; a missed target is reported, not a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/lib/fleet.sh

build=${BUILD_DIR:-build}
trials=${TRIALS:-1000}
idle=${IDLE_SECONDS:-60}
out=.bench

step "dependencies"
bash deploy/install-deps.sh

step "build ($build/)"
bench_build "$build" RelWithDebInfo fleet-agent fleet-test-child sglang-server-sim sim-free-ports \
  agent_bench

step "machine"
model=$(cpu_model)
cores=$(nproc)
revision=$(git_revision)
date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "cpu: ${model:-unknown} ($cores cores online)   kernel: $(uname -r)"
echo "load average: $load_before   revision: $revision   date: $date_utc"

step "run: $trials trials, $idle s idle"
mkdir -p "$out"
rc=0
"$build/bench/agent/agent_bench" --trials "$trials" --idle-seconds "$idle" \
  --agent "$build/agent/fleet-agent" --test-child "$build/tests/testing/fleet-test-child" \
  --sim-server "$build/tests/sim/sglang-server-sim" --free-ports "$build/tests/sim/sim-free-ports" \
  --make-world tests/sim/make_sim_world.sh --json "$out/agent-bench.json" || rc=$?
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if ((rc != 0)) || [ ! -s "$out/agent-bench.json" ]; then
  echo "agent benchmark failed (exit $rc)" >&2
  exit 1
fi

step "result"
bench_json=$(cat "$out/agent-bench.json")
field() { sed -n "s/.*\"$1\":\([-0-9.]*\).*/\1/p" <<<"$bench_json"; }
p99_us=$(field latency_p99_us)
rss_kib=$(field VmRSS_kib)
hwm_kib=$(field VmHWM_kib)
pss_kib=$(field Pss_kib)
idle_ms=$(field idle_ms)
cpu_us=$(field idle_cpu_us)
wakeups=$(($(field idle_voluntary_switches) + $(field idle_involuntary_switches)))
latency_ok=$(awk -v p="$p99_us" 'BEGIN {print (p <= 50000) ? "true" : "false"}')
rss_ok=$(awk -v r="$rss_kib" 'BEGIN {print (r <= 20 * 1024) ? "true" : "false"}')
# ~0: at most 1 ms of CPU per second of idle (cpu_us <= idle_ms).
cpu_ok=$(awk -v c="$cpu_us" -v s="$idle_ms" 'BEGIN {print (c <= s) ? "true" : "false"}')
echo "detection latency p50 $(field latency_p50_us) us, p99 $p99_us us, max" \
  "$(field latency_max_us) us   target p99 <= 50 ms: $(met "$latency_ok")"
echo "RSS with 8 servers $(mib "$rss_kib") MiB (peak $(mib "$hwm_kib") MiB, PSS" \
  "$(mib "$pss_kib") MiB)   target <= 20 MiB: $(met "$rss_ok")"
echo "idle CPU $(awk -v c="$cpu_us" 'BEGIN {printf "%.1f", c / 1000}') ms over" \
  "$(awk -v m="$idle_ms" 'BEGIN {printf "%.1f", m / 1000}') s, $wakeups wake-ups   target ~ 0" \
  "(<= 1 ms/s): $(met "$cpu_ok")"
echo "load average: before $load_before, after $load_after"

# The machine-readable line: the benchmark's own fields with the run's context and the verdicts.
summary="{\"date\":\"$date_utc\",\"revision\":\"$revision\",\"kernel\":\"$(uname -r)\""
summary+=",\"load_before\":\"$load_before\",\"load_after\":\"$load_after\",${bench_json#\{}"
summary="${summary%\}},\"latency_target_met\":$latency_ok,\"rss_target_met\":$rss_ok"
summary+=",\"idle_cpu_target_met\":$cpu_ok}"
echo "$summary" | tee "$out/agent-summary.json"
