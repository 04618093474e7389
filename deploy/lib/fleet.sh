# shellcheck shell=bash disable=SC2154  # fleetctl_bin, free_ports: the sourcing script's
# fleet.sh: the shell functions that gpu-fleet's scripts share (deploy/, bench/, tests/sim/,
# tests/faults/, tests/run.sh): messages and usage, numbers, the build, the results dir, free
# ports, the config's YAML strings, and the bookkeeping of the processes a script starts.
#
# Sourced, never run. A script finds it from its own path, so that it works from any cwd and in a
# fresh clone (the path is the script's folder to the repository root, then deploy/lib):
#   source "$(dirname "${BASH_SOURCE[0]}")/../deploy/lib/fleet.sh"
# It lives in deploy/ because deploy/ is what runs on a machine without the build or the tests
# (deploy/gpu-run.sh on a GPU machine); bench/ and tests/ already depend on deploy/
# (deploy/install-deps.sh), never the other way round.
#
# Sourcing it sets no shell option, defines no variable the script has not named below, and runs
# nothing but noting which script sourced it (fleet_script) and where the repository is
# (fleet_repo). Every function works under
# `set -euo pipefail`. Settings, read when a function runs:
#   fleet_me          the script's name in die's messages ("bench", "gpu-run", ...)
#   fleet_die_status  die's exit status (default 1)
#   fleet_step_mark   what starts a step's line (default "=="); note indents to its text
#   fleet_bold, fleet_plain   around a step's line (terminal escapes, or empty)
# The process functions use the script's arrays pids (processes it started), fleet_dirs (state
# dirs of its running fleetds) and worlds (sim worlds), and its variable fleetctl_bin.

# The script that sourced this file (its header is its usage), and the repository's root.
fleet_script=${BASH_SOURCE[1]:-$0}
fleet_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# --- Messages ------------------------------------------------------------------------------------

# usage: the script's header comment (line 2 up to `set -euo`) on stderr, exit 2.
usage() {
  sed -n '2,/^set -euo/p' "$fleet_script" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

# die MESSAGE...: "$fleet_me: MESSAGE" on stderr, exit $fleet_die_status (1).
die() {
  printf '%s: %s\n' "${fleet_me:-$(basename "$fleet_script")}" "$*" >&2
  exit "${fleet_die_status:-1}"
}

# step TEXT...: a heading, after an empty line. note TEXT...: a line under it, indented to its text.
step() { printf '\n%s%s %s%s\n' "${fleet_bold-}" "${fleet_step_mark:-==}" "$*" "${fleet_plain-}"; }
note() {
  local mark=${fleet_step_mark:-==}
  printf '%*s%s\n' "$((${#mark} + 1))" '' "$*"
}

# --- Numbers -------------------------------------------------------------------------------------

now() { printf '%s\n' "$EPOCHREALTIME"; }
# secs T0 T1: T1 - T0 in seconds, to the millisecond.
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }
# median [FORMAT] / minimum / maximum of the numbers on stdin, one a line. median prints "-" when
# there are none, else with FORMAT (printf's, default %.3f).
# shellcheck disable=SC2120  # FORMAT is optional
median() {
  sort -g | awk -v f="${1:-%.3f}" '{v[NR] = $1} END {
    if (NR == 0) print "-"
    else printf f "\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  }'
}
minimum() { sort -g | head -1; }
maximum() { sort -g | tail -1; }
# mib KIB: KIB in MiB, one decimal.
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
# met true|false: a target's verdict.
met() { [ "$1" = true ] && echo met || echo MISSED; }

# --- Text ----------------------------------------------------------------------------------------

# yaml_string TEXT: a YAML double-quoted scalar of TEXT.
yaml_string() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}

# read_kv FILE ARRAY: the key=value lines of FILE (not shell; # comments, empty lines) into the
# associative array named ARRAY, emptied first.
# shellcheck disable=SC2034  # kv_into is a name reference: the caller's array
read_kv() {
  local -n kv_into=$2
  local key value
  kv_into=()
  while IFS='=' read -r key value; do
    [[ -z $key || $key == \#* ]] || kv_into["$key"]=$value
  done <"$1"
}

# --- The machine and the build -------------------------------------------------------------------

cpu_model() { grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //' || true; }
# git_revision: the short commit, "+changes" when the tree has any, "unknown" outside git.
git_revision() {
  local revision
  revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git status --porcelain 2>/dev/null | head -1)" ]; then revision="$revision+changes"; fi
  printf '%s\n' "$revision"
}

# bench_build DIR TYPE TARGET...: configures DIR (CMAKE_BUILD_TYPE TYPE) and builds TARGETs.
# A benchmark of an instrumented build means nothing: sanitizers and fuzzing stay off here.
bench_build() {
  local dir=$1 type=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" -DFLEET_SANITIZE=OFF \
    -DFLEET_FUZZ=OFF >/dev/null
  cmake --build "$dir" --target "$@"
}

# claim_dir DIR MARKER WHAT PREVIOUS OPTION: DIR's absolute path on stdout, made if absent, when
# it may be emptied: it is not /, the repository or HOME, and it is empty or holds MARKER (a
# PREVIOUS run's dir). Else dies: "refusing to use DIR as WHAT", "DIR is not empty and not
# PREVIOUS; choose another OPTION". The caller empties it (find DIR -mindepth 1 -delete) and
# leaves MARKER in it.
claim_dir() {
  local dir
  mkdir -p -- "$1"
  dir=$(cd -- "$1" && pwd)
  case $dir in
    / | "$fleet_repo" | "${HOME:-/}") die "refusing to use $dir as $3" ;;
  esac
  if [[ -n $(ls -A -- "$dir") && ! -f $dir/$2 ]]; then
    die "$dir is not empty and not $4; choose another $5"
  fi
  printf '%s\n' "$dir"
}

# free_base_port N: the first of N consecutive loopback ports that are free now, outside the
# kernel's ephemeral range (so that no other program's port-0 bind takes one first); needs
# $free_ports, the sim-free-ports binary.
free_base_port() { "$free_ports" "$1" | sed -n 1p; }

# --- The processes a script starts: all stopped on its exit (trap stop_all EXIT) -----------------

# forget_pid PID: PID no longer in pids (it has been waited for).
forget_pid() {
  local -a kept=()
  local p
  for p in ${pids[@]+"${pids[@]}"}; do [[ $p == "$1" ]] || kept+=("$p"); done
  pids=(${kept[@]+"${kept[@]}"})
}

# stop_pid PID: TERM, a bounded wait for its exit, then KILL; forgotten.
stop_pid() {
  kill -TERM "$1" 2>/dev/null || { forget_pid "$1"; return 0; }
  timeout 15 tail -f --pid="$1" /dev/null 2>/dev/null || kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  forget_pid "$1"
}

# run_bg CMD...: runs CMD in the background and waits for it: bash runs a trap only between
# foreground commands, but at once during `wait`, so an interrupt stops everything without
# waiting for CMD's end. CMD gets this function's stdin (not /dev/null) and is stopped on exit.
run_bg() {
  local pid rc=0
  "$@" <&0 &
  pid=$!
  pids+=("$pid")
  wait "$pid" || rc=$?
  forget_pid "$pid"
  return "$rc"
}

# world_pids DIR: the pids of processes whose command line names a path inside DIR (the servers
# an agent launched there and their schedulers: `DIR/venv/bin/python -m sglang.launch_server`).
world_pids() {
  grep -l -a -F -- "$1/" /proc/[0-9]*/cmdline 2>/dev/null | sed 's|^/proc/||; s|/cmdline$||' |
    grep -vx -- "$$" || true
}

# server_states STATE_DIR: the servers' states as that fleetd reports them, one a line.
server_states() {
  "$fleetctl_bin" --state-dir "$1" --timeout 5s status -o json 2>/dev/null |
    grep -o '"state":"[A-Z_]*"' | cut -d'"' -f4
}

# stop_fleet STATE_DIR: the servers through that fleetd (they belong to the agent and outlive
# it): `fleetctl stop --all`, then a bounded poll until every server is STOPPED (true) or the
# bound passed (false). A server that never launched may stay PENDING; a stray process is killed
# by kill_worlds.
stop_fleet() {
  local tries
  "$fleetctl_bin" --state-dir "$1" --timeout 10s stop --all >/dev/null 2>&1 || return 1
  for ((tries = 0; tries < 150; tries++)); do
    server_states "$1" | grep -qvE '^(STOPPED|PENDING)$' || return 0
    sleep 0.2  # a poll interval while the servers stop: fleetd has no "until stopped"
  done
  return 1
}

# kill_worlds: KILL every process still running a program from one of the worlds.
kill_worlds() {
  local w pid
  for w in ${worlds[@]+"${worlds[@]}"}; do
    for pid in $(world_pids "$w"); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  worlds=()
}

# stop_all: the servers through each running fleetd, then every process in pids (TERM, then
# KILL), then what still runs from a world. Safe to call twice (and from the EXIT trap).
# shellcheck disable=SC2317  # called through the EXIT trap
stop_all() {
  local d pid
  for d in ${fleet_dirs[@]+"${fleet_dirs[@]}"}; do stop_fleet "$d" || true; done
  fleet_dirs=()
  for pid in ${pids[@]+"${pids[@]}"}; do stop_pid "$pid"; done
  pids=()
  kill_worlds
}
