#!/usr/bin/env bash
# The remediation benchmark (issue 5, "fleet time-to-ready for the seed scenario"; results in
# BENCHMARKS.md, "Remediation: time-to-ready of the seed scenario"). Three measurements, each run
# RUNS times at one simulated speed, interleaved, medians reported:
#
#   fleet     the seed scenario through the real programs: a simulated container with 8 GPUs in
#             the seed state (tests/sim/make_sim_world.sh --state seed), fleetd + fleet-agent +
#             sglang-server-sim as deploy/demo.sh runs them; the time from `fleetctl deploy` to
#             `fleetctl status --until-ready` returning with all 8 READY. From fleet.db: the
#             launches (attempt rows), the remediations (by trigger) and each phase (preflight,
#             the canary's failing start, the PTX remediation, the canary's cold start, the 7
#             warm starts) and the gaps between them.
#   critical  what the simulated starts alone need, as the issue defines it: the failures that
#             cannot be foreseen, one canary and one cached start = (a start that fails with
#             ptx_version_unsupported in a world with only that problem: --state fixed --break
#             ptxas) + (a cold start to READY, empty JIT cache) + (a start to READY with that
#             cache warm). sglang-server-sim is run directly with the world's server.env, no
#             supervisor: ready = its "fired up" log line (then GET /health_generate must give
#             200), failed = the process's exit. The remediation actions' own time is not in it
#             (reported separately, from fleet.db).
#   loop      an estimate, computed from measured pieces and not run through fleetd, of the
#             users' fix-as-you-fail loop: each of the 8 GPUs on its own fails once per seed
#             problem in the seed's order and is fixed after each failure, then starts: 8 x 7 =
#             56 launches, and (GPUs in parallel) the sum of the six measured times-to-failure
#             (worlds with one problem each: --break loader_path|nvcc|ninja|headers|ptxas|
#             link_stub) plus one cold start.
#
#   bash bench/remediation/run.sh [--speed X] [--runs N] [--out DIR] [--build-dir DIR] [--no-build]
#                                 [--engine sglang|vllm] [--test-compile on|off]
#
#   --speed X        FLEET_SIM_SPEED of every simulated server (default 10; the demo's is 2.5)
#   --runs N         runs of each measurement (default 3)
#   --out DIR        results and every run's state (default /tmp/gpu-fleet-bench-remediation;
#                    emptied at start, and only if it is empty or a previous run's)
#   --build-dir DIR  the CMake build to reuse or make (default build/, or $BUILD_DIR)
#   --no-build       use the binaries in the build dir as they are (no deps, no cmake)
#   --engine E       the servers' engine (default sglang): vllm runs the world's simulated vLLM
#                    server (`vllm serve MODEL`) in all three measurements; its ready line is
#                    uvicorn's "Application startup complete." and its health GET /health
#   --test-compile on|off  the policy's preflight.test_compile (default on: the probe sees the
#                    PTX problem before any launch, 8 launches; off: the canary learns it from
#                    its failed start, 9 launches, as before issue 19)
#
# It prints a timeline per fleet run, a table of the pieces, and a summary: launches,
# remediations, fleet time-to-ready, critical path, their ratio (target <= 1.2x), the loop
# estimate. Machine-readable: DIR/summary.env (key=value), DIR/summary.json (one JSON object),
# DIR/runs.tsv (one line per run). Exits non-zero when a run does not end with all 8 READY, or a
# direct start does not fail or start as its world says; a missed target is reported, not a
# failure. Every process it starts is stopped on any exit; waits are on log lines, process
# exits and fleetd's own `status --until-ready`, with bounded polls only where nothing can be
# waited on.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
source deploy/lib/fleet.sh
fleet_me=bench

speed=10
runs=3
out=/tmp/gpu-fleet-bench-remediation
build=${BUILD_DIR:-build}
do_build=true
engine=sglang
test_compile=on
while [[ $# -gt 0 ]]; do
  case $1 in
    --speed) [[ $# -ge 2 ]] || usage; speed=$2; shift ;;
    --speed=*) speed=${1#--speed=} ;;
    --runs) [[ $# -ge 2 ]] || usage; runs=$2; shift ;;
    --runs=*) runs=${1#--runs=} ;;
    --out) [[ $# -ge 2 ]] || usage; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --build-dir) [[ $# -ge 2 ]] || usage; build=$2; shift ;;
    --build-dir=*) build=${1#--build-dir=} ;;
    --no-build) do_build=false ;;
    --engine) [[ $# -ge 2 ]] || usage; engine=$2; shift ;;
    --engine=*) engine=${1#--engine=} ;;
    --test-compile) [[ $# -ge 2 ]] || usage; test_compile=$2; shift ;;
    --test-compile=*) test_compile=${1#--test-compile=} ;;
    -h | --help) usage ;;
    *) printf 'bench: unknown argument %s\n' "$1" >&2; usage ;;
  esac
  shift
done
[[ $speed =~ ^[0-9]+([.][0-9]+)?$ && ! $speed =~ ^0+([.]0+)?$ ]] || {
  printf 'bench: --speed must be a positive number, not %s\n' "$speed" >&2
  exit 2
}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { printf 'bench: --runs must be >= 1, not %s\n' "$runs" >&2; exit 2; }

readonly gpus=8
readonly canary=local/200/gpu0
# The seed's order: the problem each --break puts back, and the class its start fails with.
# vLLM imports no sgl_kernel: libnvrtc off the loader path fails no vLLM start (the preflight fixes
# it all the same), so its loop has the five others.
if [[ $engine == vllm ]]; then
  readonly problems=(nvcc ninja headers ptxas link_stub)
else
  readonly problems=(loader_path nvcc ninja headers ptxas link_stub)
fi
declare -A problem_class=(
  [loader_path]=missing_shared_library [nvcc]=nvcc_not_found [ninja]=ninja_not_found
  [headers]=cuda_header_mismatch [ptxas]=ptx_version_unsupported [link_stub]=link_error)
[[ $engine == sglang || $engine == vllm ]] || die "--engine is sglang or vllm, not $engine"
if [[ $engine == vllm ]]; then
  readonly ready_line='INFO:     Application startup complete.' health_path=/health
else
  readonly ready_line='The server is fired up and ready to roll!' health_path=/health_generate
fi
# Bounds of the waits, in wall seconds: a cold start is about 50 simulated seconds.
bound=$(awk -v s="$speed" 'BEGIN {b = int(600 / s) + 60; print (b > 900 ? 900 : b)}')

command -v sqlite3 >/dev/null || die "needs the sqlite3 shell (apt-get install sqlite3) to read fleet.db"
command -v curl >/dev/null || die "needs curl (GET /health_generate)"

if $do_build; then
  step "dependencies"
  bash deploy/install-deps.sh
  step "build ($build/)"
  bench_build "$build" RelWithDebInfo fleetd fleet-agent fleet-http-probe fleetctl \
    sglang-server-sim sim-free-ports
fi
bin=$(cd -- "$build" && pwd)
fleetd_bin="$bin/daemon/fleetd"
agent_bin="$bin/agent/fleet-agent"
fleetctl_bin="$bin/cli/fleetctl"
server_bin="$bin/tests/sim/sglang-server-sim"
free_ports="$bin/tests/sim/sim-free-ports"
for b in "$fleetd_bin" "$agent_bin" "$fleetctl_bin" "$server_bin" "$free_ports"; do
  [[ -x $b ]] || die "$b is not built (run without --no-build)"
done

# The results dir: emptied, but never one that holds something else than a previous run.
readonly marker=.gpu-fleet-bench-remediation
out=$(claim_dir "$out" "$marker" "the results dir" "a previous run's results dir" --out)
find "$out" -mindepth 1 -delete
touch "$out/$marker"

step "machine"
model=$(cpu_model)
revision=$(git_revision)
date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "cpu: ${model:-unknown} ($(nproc) cores online)   kernel: $(uname -r)"
echo "load average: $load_start   revision: $revision   date: $date_utc"
echo "sim speed: $speed (FLEET_SIM_SPEED)   runs: $runs   results: $out"

# --- Process bookkeeping: everything started here is stopped on any exit ---------------------------

pids=()        # fleetd, agents, direct servers: stopped with TERM, then KILL
worlds=()      # sim worlds: any process still running a program from one is killed at exit
fleet_dirs=()  # state dirs of fleetds still running: their servers are stopped through them first

# world_pids, stop_pid, stop_fleet, stop_all, run_bg, forget_pid: deploy/lib/fleet.sh.
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

# --- Helpers ----------------------------------------------------------------------------------------

# now, secs, median, minimum, maximum: deploy/lib/fleet.sh.

# make_world DIR ARGS...: a simulated container (8 GPUs), its conf and server.env read into
# the arrays conf and server_env.
declare -A conf=() server_env=()
make_world() {
  local dir=$1
  shift
  bash tests/sim/make_sim_world.sh "$dir" "$@" --server "$server_bin" --gpus "$gpus" >/dev/null
  read_kv "$dir/sim-world.conf" conf
  read_kv "$dir/server.env" server_env
  server_env[FLEET_SIM_SPEED]=$speed
}

# write_config STATE_DIR WORLD BASE_PORT: the demo's fleet config (tests/sim/sim_fleet_config.sh:
# the SGLang template on the world's python, its server.env, the container's own
# pip/apt-get/nvidia-smi), the default policy (remediation on, canary on).
write_config() {
  bash tests/sim/sim_fleet_config.sh --world "$2" --socket "$1/agent.sock" --base-port "$3" \
    --logs "$1/logs" --speed "$speed" --comment "written by bench/remediation/run.sh" \
    --engine "$engine" --test-compile "$test_compile" \
    >"$1/fleet.yaml"
}

# --- 1. The fleet: the seed scenario through fleetd ------------------------------------------------

# fleet_run N: one deploy of the seed scenario; appends its numbers to $out/fleet.tsv and prints
# its timeline.
fleet_run() {
  local n=$1 dir="$out/fleet-$1" world port t0 t1 rc=0 db fleetd_pid
  mkdir -p "$dir/logs"
  world="$dir/world"
  make_world "$world" --state seed
  worlds+=("$world")
  port=$(free_base_port "$gpus") || die "no $gpus consecutive free ports found"
  "$fleetd_bin" --state-dir "$dir" 2>>"$dir/fleetd.log" &
  fleetd_pid=$!
  pids+=("$fleetd_pid")
  "$agent_bin" --listen "unix:$dir/agent.sock" --state-dir "$dir/agent" --host local \
    --container 200 --readiness-interval 0.5 --stop-grace 5 2>>"$dir/agent.log" &
  pids+=("$!")
  fleet_dirs+=("$dir")
  # fleetd says when it serves; wait for that line (tail follows the log with inotify; bounded).
  if ! run_bg timeout 30 grep -q -m1 -F 'serving on' < <(exec tail -n +1 -F --pid="$fleetd_pid" "$dir/fleetd.log" 2>/dev/null); then
    cat "$dir/fleetd.log" >&2
    die "fleetd did not start"
  fi
  write_config "$dir" "$world" "$port"

  t0=$(now)
  "$fleetctl_bin" --state-dir "$dir" deploy -f "$dir/fleet.yaml" >"$dir/deploy.out"
  run_bg timeout "$bound" "$fleetctl_bin" --state-dir "$dir" status --until-ready >"$dir/status.out" 2>&1 ||
    rc=$?
  t1=$(now)
  if ((rc != 0)); then
    cat "$dir/status.out" >&2
    die "fleet run $n: not all $gpus READY (fleetctl status --until-ready exited $rc); state in $dir"
  fi

  db="$dir/fleet.db"
  q() { sqlite3 -batch -noheader -separator '|' "$db" "$1"; }
  # fleetd's record of the 8 READY attempts can trail its status by one turn: a bounded poll.
  local tries
  for ((tries = 0; tries < 100; tries++)); do
    [[ $(q "SELECT count(*) FROM attempts WHERE outcome = 'ready' AND time_to_ready_ms IS NOT NULL") -ge $gpus ]] && break
    sleep 0.1  # polling the record, bounded: nothing to wait on
  done
  "$fleetctl_bin" --state-dir "$dir" attempts -o json >"$dir/attempts.json"
  "$fleetctl_bin" --state-dir "$dir" remediations -o json >"$dir/remediations.json" 2>/dev/null || true

  # Unix milliseconds of a stored time, relative to the deploy.
  local t0ms
  t0ms=$(awk -v t="$t0" 'BEGIN {printf "%.3f", t * 1000}')
  rel() {
    echo "CASE WHEN $1 IS NULL THEN '' ELSE printf('%.3f', ((julianday($1) - 2440587.5) * 86400000.0 - $t0ms) / 1000.0) END"
  }

  printf '\nfleet run %d: all %d READY %s s after the deploy\n' "$n" "$gpus" "$(secs "$t0" "$t1")"
  printf '  %-20s %-14s %-8s %8s %8s %8s %7s  %s\n' what trigger outcome "start/s" "end/s" "ready/s" "ttr/s" class
  q "SELECT w, t, o, st, en, rd, ttr, cls FROM (
     SELECT 'remediation ' || r.id AS w, r.trigger AS t, r.status AS o, $(rel r.created_at) AS st,
            $(rel r.applied_at) AS en, '' AS rd, '' AS ttr,
            r.diagnosis_class || ' (' || (SELECT count(*) FROM actions WHERE remediation_id = r.id) ||
            ' actions, ' || coalesce((SELECT sum(took_ms) FROM actions WHERE remediation_id = r.id), 0) || ' ms)' AS cls
       FROM remediations r
     UNION ALL
     SELECT s.name || ' #' || a.number, a.trigger, a.outcome, $(rel a.created_at),
            $(rel a.ended_at),
            coalesce((SELECT $(rel 'min(e.received_at)') FROM events e WHERE e.attempt_id = a.id AND e.kind = 'ready'), ''),
            CASE WHEN a.time_to_ready_ms IS NULL THEN '' ELSE printf('%.3f', a.time_to_ready_ms / 1000.0) END, a.diagnosis_class
       FROM attempts a JOIN servers s ON s.id = a.server_id
     ) ORDER BY CAST(st AS REAL)" |
    while IFS='|' read -r what trig outc st en rd ttr cls; do
      printf '  %-20s %-14s %-8s %8s %8s %8s %7s  %s\n' "$what" "$trig" "$outc" "$st" "$en" "$rd" "$ttr" "$cls"
    done

  # The phases.
  local launches rem_pre rem_diag rem_all pre_dur pre_actions ptx_dur ptx_actions fail_dur fail_class
  local cold warm_med warm_min warm_max probe_gap pre_to_canary fail_to_rem rem_to_relaunch
  local ready_to_warm last_ready_to_return canary_ready first_warm last_ready warm_launch_spread
  launches=$(q "SELECT count(*) FROM attempts")
  local failed_starts tc_ms tc_n
  failed_starts=$(q "SELECT count(*) FROM attempts WHERE outcome = 'failed'")
  # The probes' test-compiles (before and after each plan), from fleetctl's own report of them.
  "$fleetctl_bin" --state-dir "$dir" remediations -o json >"$dir/remediations.json"
  tc_ms=$({ grep -oE '"test_compile(_after)?_ms":[0-9]+' "$dir/remediations.json" || true; } |
    awk -F: '{s += $2} END {print s + 0}')
  tc_n=$({ grep -oE '"test_compile(_after)?_ms":[0-9]+' "$dir/remediations.json" || true; } |
    wc -l)
  rem_pre=$(q "SELECT count(*) FROM remediations WHERE trigger = 'preflight'")
  rem_diag=$(q "SELECT count(*) FROM remediations WHERE trigger = 'diagnosis'")
  rem_all=$(q "SELECT count(*) FROM remediations")
  pre_dur=$(q "SELECT round((julianday(applied_at) - julianday(created_at)) * 86400.0, 3) FROM remediations WHERE trigger = 'preflight' ORDER BY id LIMIT 1")
  pre_actions=$(q "SELECT coalesce(sum(took_ms), 0) FROM actions WHERE remediation_id IN (SELECT id FROM remediations WHERE trigger = 'preflight')")
  ptx_dur=$(q "SELECT round((julianday(applied_at) - julianday(created_at)) * 86400.0, 3) FROM remediations WHERE trigger = 'diagnosis' AND diagnosis_class = 'ptx_version_unsupported' ORDER BY id LIMIT 1")
  ptx_actions=$(q "SELECT coalesce(sum(took_ms), 0) FROM actions WHERE remediation_id IN (SELECT id FROM remediations WHERE trigger = 'diagnosis' AND diagnosis_class = 'ptx_version_unsupported')")
  # The canary's failing start: launched (the agent's answer) to ended (fleetd saw the exit).
  IFS='|' read -r fail_dur fail_class < <(q "SELECT round((julianday(a.ended_at) - julianday(coalesce(a.launched_at, a.created_at))) * 86400.0, 3), a.diagnosis_class
       FROM attempts a JOIN servers s ON s.id = a.server_id
      WHERE s.name = '$canary' AND a.outcome = 'failed' ORDER BY a.number LIMIT 1") || true
  cold=$(q "SELECT round(a.time_to_ready_ms / 1000.0, 3) FROM attempts a JOIN servers s ON s.id = a.server_id
             WHERE s.name = '$canary' AND a.time_to_ready_ms IS NOT NULL ORDER BY a.number LIMIT 1")
  q "SELECT round(a.time_to_ready_ms / 1000.0, 3) FROM attempts a JOIN servers s ON s.id = a.server_id
      WHERE s.name <> '$canary' AND a.time_to_ready_ms IS NOT NULL" >"$dir/warm.txt"
  warm_med=$(median <"$dir/warm.txt")
  warm_min=$(minimum <"$dir/warm.txt")
  warm_max=$(maximum <"$dir/warm.txt")
  # The gaps: what fleetd (and the agent) add between the pieces.
  probe_gap=$(q "SELECT $(rel 'min(created_at)') FROM remediations WHERE trigger = 'preflight'")
  pre_to_canary=$(q "SELECT round((julianday((SELECT min(created_at) FROM attempts)) - julianday((SELECT applied_at FROM remediations WHERE trigger = 'preflight' ORDER BY id LIMIT 1))) * 86400.0, 3)")
  fail_to_rem=$(q "SELECT round((julianday(r.created_at) - julianday(a.ended_at)) * 86400.0, 3)
       FROM remediations r, attempts a JOIN servers s ON s.id = a.server_id
      WHERE r.trigger = 'diagnosis' AND r.diagnosis_class = 'ptx_version_unsupported'
        AND s.name = '$canary' AND a.outcome = 'failed' ORDER BY a.number, r.id LIMIT 1")
  rem_to_relaunch=$(q "SELECT round((julianday((SELECT min(a.created_at) FROM attempts a JOIN servers s ON s.id = a.server_id WHERE s.name = '$canary' AND a.created_at >= r.applied_at)) - julianday(r.applied_at)) * 86400.0, 3)
       FROM remediations r WHERE r.trigger = 'diagnosis' AND r.diagnosis_class = 'ptx_version_unsupported' ORDER BY r.id LIMIT 1")
  canary_ready=$(q "SELECT $(rel 'min(e.received_at)') FROM events e WHERE e.kind = 'ready' AND e.server = '$canary'")
  first_warm=$(q "SELECT $(rel 'min(a.created_at)') FROM attempts a JOIN servers s ON s.id = a.server_id WHERE s.name <> '$canary'")
  warm_launch_spread=$(q "SELECT round((julianday(max(a.created_at)) - julianday(min(a.created_at))) * 86400.0, 3) FROM attempts a JOIN servers s ON s.id = a.server_id WHERE s.name <> '$canary'")
  last_ready=$(q "SELECT $(rel 'max(e.received_at)') FROM events e WHERE e.kind = 'ready'")
  ready_to_warm=$(awk -v a="$canary_ready" -v b="$first_warm" 'BEGIN {printf "%.3f", b - a}')
  last_ready_to_return=$(awk -v a="$last_ready" -v b="$(secs "$t0" "$t1")" 'BEGIN {printf "%.3f", b - a}')
  printf '  phases: preflight %s s (actions %s ms); canary fails in %s s (%s); ptx remediation %s s (actions %s ms);\n' \
    "$pre_dur" "$pre_actions" "$fail_dur" "$fail_class" "$ptx_dur" "$ptx_actions"
  printf '          canary cold start %s s; 7 warm starts %s s median (%s-%s)\n' "$cold" "$warm_med" "$warm_min" "$warm_max"
  printf '  gaps:   deploy -> preflight row %s s; preflight applied -> canary launch %s s; canary failed -> remediation %s s;\n' \
    "$probe_gap" "$pre_to_canary" "$fail_to_rem"
  printf '          remediation applied -> canary relaunch %s s; canary READY -> first warm launch %s s (the 7 within %s s);\n' \
    "$rem_to_relaunch" "$ready_to_warm" "$warm_launch_spread"
  printf '          last READY -> status --until-ready returned %s s\n' "$last_ready_to_return"
  printf '  test-compiles in the probes: %s, %s ms in all; failed starts: %s\n' "$tc_n" "$tc_ms" "$failed_starts"
  printf '%s\n' "$n $(secs "$t0" "$t1") $launches $rem_all $rem_pre $rem_diag $pre_dur $pre_actions $fail_dur ${fail_class:--} $ptx_dur $ptx_actions $cold $warm_med $warm_min $warm_max $probe_gap $pre_to_canary $fail_to_rem $rem_to_relaunch $ready_to_warm $warm_launch_spread $last_ready_to_return $failed_starts $tc_n $tc_ms" |
    tr ' ' '\t' >>"$out/fleet.tsv"

  # Stop this run's servers, agent and fleetd before the next measurement.
  stop_all
}

# --- 2./3. Direct starts of sglang-server-sim ------------------------------------------------------

# start_server WORLD LOG: runs the world's `python -m sglang.launch_server` on GPU 0 with its
# server.env (nothing else), on a free port; sets server_pid, server_port, server_t0.
start_server() {
  local world=$1 log=$2 key
  local -a env_args=()
  for key in "${!server_env[@]}"; do env_args+=("$key=${server_env[$key]}"); done
  server_port=$("$free_ports" 1)
  server_t0=$(now)
  local -a argv=("${conf[python]}" -m sglang.launch_server --model-path "${conf[model]}")
  [[ $engine != vllm ]] || argv=("${conf[vllm]}" serve "${conf[model]}")
  (cd "$world" && exec env -i "${env_args[@]}" CUDA_VISIBLE_DEVICES=0 "${argv[@]}" \
    --host 127.0.0.1 --port "$server_port" >"$log" 2>&1) &
  server_pid=$!
  pids+=("$server_pid")
}

# wait_exit: waits for the server's exit, bounded (a watchdog stops it after $bound s).
wait_exit() {
  local watchdog rc=0
  # A deadline, not a synchronisation. Its sleep is killed with it and holds none of our output: a
  # sleep left behind kept the caller's pipe open for $bound s after the benchmark ended (ctest
  # waited for it).
  (
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
    sleep "$bound" &
    sleeper=$!
    wait "$sleeper"
    kill -TERM "$server_pid" 2>/dev/null
  ) >/dev/null 2>&1 &
  watchdog=$!
  wait "$server_pid" 2>/dev/null || rc=$?
  kill "$watchdog" 2>/dev/null || true
  wait "$watchdog" 2>/dev/null || true
  forget_pid "$server_pid"
  return "$rc"
}

# time_failure PROBLEM DIR: sets elapsed to the seconds from the start to the exit of a server in
# a fixed world with only PROBLEM; checks that `fleetctl explain` names the expected class.
time_failure() {
  local problem=$1 world="$2/world-$1" log="$2/fail-$1.log" t1 got
  make_world "$world" --state fixed --break "$problem"
  start_server "$world" "$log"
  wait_exit || true
  t1=$(now)
  got=$("$fleetctl_bin" explain -o json "$log" | grep -o '"class":"[^"]*"' | head -1 | cut -d'"' -f4)
  [[ $got == "${problem_class[$problem]}" ]] ||
    die "--break $problem: the start failed with '$got', not ${problem_class[$problem]} ($log)"
  elapsed=$(secs "$server_t0" "$t1")
}

# time_ready WORLD LOG: sets elapsed to the seconds from the start to the ready line (then
# GET /health_generate must give 200); the server is stopped after.
time_ready() {
  local world=$1 log=$2 t1 code
  start_server "$world" "$log"
  # The log followed with inotify; tail ends when the server exits (then grep fails).
  if ! run_bg timeout "$bound" grep -q -m1 -F "$ready_line" < <(exec tail -n +1 -F --pid="$server_pid" "$log" 2>/dev/null); then
    tail -20 "$log" >&2
    die "no ready line in $log"
  fi
  t1=$(now)
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$server_port$health_path" || true)
  [[ $code == 200 ]] || die "ready line, but GET $health_path gave '$code' ($log)"
  stop_pid "$server_pid"
  forget_pid "$server_pid"
  elapsed=$(secs "$server_t0" "$t1")
}

# direct_run N: every piece once; appends them to $out/direct.tsv.
direct_run() {
  local n=$1 dir="$out/direct-$1" p world cold warm jit_cold jit_warm
  local -A fail=()
  mkdir -p "$dir"
  for p in "${problems[@]}"; do
    time_failure "$p" "$dir"
    fail[$p]=$elapsed
  done
  world="$dir/world-fixed"
  make_world "$world" --state fixed
  time_ready "$world" "$dir/cold.log"
  cold=$elapsed
  time_ready "$world" "$dir/warm.log"
  warm=$elapsed
  # The cold start built the JIT ops (ninja in its log), the warm one only loaded them.
  jit_cold=$(grep -c '^ninja: Entering directory' "$dir/cold.log" || true)
  jit_warm=$(grep -c '^ninja: Entering directory' "$dir/warm.log" || true)
  [[ $jit_cold -gt 0 && $jit_warm -eq 0 ]] ||
    die "direct run $n: the cold start shows $jit_cold JIT builds, the warm one $jit_warm"
  printf 'direct run %d: fails in' "$n"
  for p in "${problems[@]}"; do printf ' %s %s s;' "${problem_class[$p]}" "${fail[$p]}"; done
  printf '\n  cold start to READY %s s (%s JIT builds); warm start %s s\n' "$cold" "$jit_cold" "$warm"
  printf '%s\n' "$n ${fail[loader_path]:--} ${fail[nvcc]} ${fail[ninja]} ${fail[headers]} ${fail[ptxas]} ${fail[link_stub]} $cold $warm" |
    tr ' ' '\t' >>"$out/direct.tsv"
}

# --- The runs, interleaved ---------------------------------------------------------------------------

printf 'run\tfleet_s\tlaunches\tremediations\tpreflight_rem\tdiagnosis_rem\tpreflight_s\tpreflight_actions_ms\tcanary_fail_s\tcanary_fail_class\tptx_rem_s\tptx_actions_ms\tcanary_cold_s\twarm_median_s\twarm_min_s\twarm_max_s\tdeploy_to_preflight_s\tpreflight_to_canary_s\tfail_to_remediation_s\tremediation_to_relaunch_s\tcanary_ready_to_warm_launch_s\twarm_launch_spread_s\tlast_ready_to_return_s\tfailed_starts\ttest_compiles\ttest_compile_ms\n' >"$out/fleet.tsv"
printf 'run\tfail_missing_shared_library_s\tfail_nvcc_not_found_s\tfail_ninja_not_found_s\tfail_cuda_header_mismatch_s\tfail_ptx_version_unsupported_s\tfail_link_error_s\tcold_s\twarm_s\n' >"$out/direct.tsv"
for ((r = 1; r <= runs; r++)); do
  step "run $r of $runs: the fleet (seed world, fleetd + fleet-agent + sglang-server-sim)"
  fleet_run "$r"
  step "run $r of $runs: direct starts of sglang-server-sim (one-problem worlds, cold, warm)"
  direct_run "$r"
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- Summary ---------------------------------------------------------------------------------------

col() {  # col FILE NAME: the column NAME of every run
  awk -F'\t' -v name="$2" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == name) c = i; next} {print $c}' "$1"
}
fmed() { col "$out/fleet.tsv" "$1" | median; }
dmed() { col "$out/direct.tsv" "$1" | median; }
# Per-run sums of the direct pieces, then their medians.
awk -F'\t' 'NR > 1 {printf "%s\t%.3f\t%.3f\n", $1, $6 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8}' \
  "$out/direct.tsv" >"$out/sums.tsv"
critical=$(cut -f2 "$out/sums.tsv" | median)
loop=$(cut -f3 "$out/sums.tsv" | median)
fleet=$(fmed fleet_s)
fleet_min=$(col "$out/fleet.tsv" fleet_s | minimum)
fleet_max=$(col "$out/fleet.tsv" fleet_s | maximum)
launches=$(col "$out/fleet.tsv" launches | sort -u | paste -sd/ -)
remediations=$(col "$out/fleet.tsv" remediations | sort -u | paste -sd/ -)
rem_pre=$(col "$out/fleet.tsv" preflight_rem | sort -u | paste -sd/ -)
rem_diag=$(col "$out/fleet.tsv" diagnosis_rem | sort -u | paste -sd/ -)
ratio=$(awk -v f="$fleet" -v c="$critical" 'BEGIN {printf "%.2f", f / c}')
ratios=$(paste <(col "$out/fleet.tsv" fleet_s) <(cut -f2 "$out/sums.tsv") |
  awk '{printf "%s%.2f", (NR > 1 ? " " : ""), $1 / $2}')
met=$(awk -v r="$ratio" 'BEGIN {print (r <= 1.2) ? "met" : "MISSED"}')
loop_ratio=$(awk -v l="$loop" -v f="$fleet" 'BEGIN {printf "%.2f", l / f}')
overhead=$(awk -v f="$fleet" -v c="$critical" 'BEGIN {printf "%.3f", f - c}')

step "summary (speed $speed, $runs runs, medians; every time in wall seconds)"
printf '%-58s %s\n' "launches (attempt rows)" "$launches"
printf '%-58s %s\n' "failed starts" "$(col "$out/fleet.tsv" failed_starts | sort -u | paste -sd/ -)"
printf '%-58s %s (%s ms in all, median per run)\n' "test-compiles in the probes (policy: $test_compile)" \
  "$(fmed test_compiles)" "$(fmed test_compile_ms)"
printf '%-58s %s\n' "remediations (preflight + diagnosis)" "$remediations ($rem_pre + $rem_diag)"
printf '%-58s %s s (min %s, max %s)\n' "fleet time-to-ready: deploy -> all $gpus READY" "$fleet" "$fleet_min" "$fleet_max"
printf '%-58s %s s\n' "  preflight remediation (row created -> applied)" "$(fmed preflight_s)"
printf '%-58s %s s\n' "  canary's failing start (launched -> ended)" "$(fmed canary_fail_s)"
printf '%-58s %s s\n' "  ptx remediation (row created -> applied)" "$(fmed ptx_rem_s)"
printf '%-58s %s s\n' "  canary cold start, time-to-ready" "$(fmed canary_cold_s)"
printf '%-58s %s s (median of the 7 per run)\n' "  7 warm starts, time-to-ready" "$(fmed warm_median_s)"
printf '%-58s %.0f + %.0f ms (not in the critical path)\n' "  remediation actions' own time (preflight + ptx)" "$(fmed preflight_actions_ms)" "$(fmed ptx_actions_ms)"
printf '%-58s %s s\n' "critical path: ptx failure + cold start + warm start" "$critical"
printf '%-58s %s + %s + %s s\n' "  (direct $engine server starts, same speed)" "$(dmed fail_ptx_version_unsupported_s)" "$(dmed cold_s)" "$(dmed warm_s)"
printf '%-58s %sx (per run: %s)   target <= 1.2x: %s\n' "ratio fleet / critical path" "$ratio" "$ratios" "$met"
printf '%-58s %s s\n' "fleetd's overhead over the critical path" "$overhead"
printf '%-58s %s s, %d launches (%.1fx the fleet'"'"'s time)\n' \
  "fix-as-you-fail loop, ESTIMATED from measured pieces" "$loop" "$((gpus * (${#problems[@]} + 1)))" "$loop_ratio"
printf '%-58s %s\n' "  (not run through fleetd: sum of the ${#problems[@]} failures + 1 cold start; failures:" \
  "$(for p in "${problems[@]}"; do printf '%s ' "$(dmed "fail_${problem_class[$p]}_s")"; done | sed 's/ $//') s)"
echo "load average: $load_start at the start, $load_end at the end"

# Machine-readable: key=value and one JSON object.
{
  echo "bench=remediation"
  echo "date=$date_utc"
  echo "revision=$revision"
  echo "engine=$engine"
  echo "test_compile=$test_compile"
  echo "failed_starts=$(col "$out/fleet.tsv" failed_starts | sort -u | paste -sd/ -)"
  echo "test_compiles=$(fmed test_compiles)"
  echo "test_compile_ms=$(fmed test_compile_ms)"
  echo "cpu=$model"
  echo "cores=$(nproc)"
  echo "load_start=$load_start"
  echo "load_end=$load_end"
  echo "speed=$speed"
  echo "runs=$runs"
  echo "gpus=$gpus"
  echo "launches=$launches"
  echo "remediations=$remediations"
  echo "remediations_preflight=$rem_pre"
  echo "remediations_diagnosis=$rem_diag"
  echo "fleet_s=$fleet"
  echo "fleet_min_s=$fleet_min"
  echo "fleet_max_s=$fleet_max"
  for k in preflight_s preflight_actions_ms canary_fail_s ptx_rem_s ptx_actions_ms canary_cold_s \
    warm_median_s warm_max_s deploy_to_preflight_s preflight_to_canary_s fail_to_remediation_s \
    remediation_to_relaunch_s canary_ready_to_warm_launch_s warm_launch_spread_s last_ready_to_return_s; do
    echo "fleet_$k=$(fmed "$k")"
  done
  for k in fail_missing_shared_library_s fail_nvcc_not_found_s fail_ninja_not_found_s \
    fail_cuda_header_mismatch_s fail_ptx_version_unsupported_s fail_link_error_s cold_s warm_s; do
    echo "direct_$k=$(dmed "$k")"
  done
  echo "critical_path_s=$critical"
  echo "ratio=$ratio"
  echo "ratios_per_run=$ratios"
  echo "ratio_target_met=$([[ $met == met ]] && echo true || echo false)"
  echo "loop_estimate_s=$loop"
  echo "loop_estimate_launches=$((gpus * (${#problems[@]} + 1)))"
  echo "loop_estimate_method=computed from measured pieces, not run through fleetd"
} >"$out/summary.env"
awk -F= '{
    k = $1; v = substr($0, length(k) + 2)
    if (v ~ /^-?[0-9]+([.][0-9]+)?$/ || v == "true" || v == "false") f = sprintf("\"%s\":%s", k, v)
    else { gsub(/"/, "", v); f = sprintf("\"%s\":\"%s\"", k, v) }
    s = s (NR > 1 ? "," : "") f
  } END {print "{" s "}"}' "$out/summary.env" | tee "$out/summary.json"
echo "results: $out/summary.env, $out/summary.json, $out/fleet.tsv, $out/direct.tsv"
