#!/usr/bin/env bash
# The failover benchmark (issue 16; results in BENCHMARKS.md, "Failover"): two real fleetds on one
# real PostgreSQL record, the real agent with simulated servers (tests/e2e/failover_test.cc), the
# leader taken away ROUNDS times in each way:
#   kill9      kill -9 of the leader of a steady fleet (2 servers READY)
#   sigstop    SIGSTOP of the leader past its lease; the new leader restarts a server; SIGCONT:
#              the old one must exit (75) having written and launched nothing
#   partition  the leader in a network namespace, its link to PostgreSQL cut (its packets dropped)
#   seed-*     the seed scenario (8 GPUs, canary, remediation) with its leader killed at three
#              moments of the cascade: after the preflight remediation, after the canary's
#              failure, after the diagnosis remediation; it must end as without the failover
#              (8 READY in 9 launches, 1 failure, 2 remediations applied)
# Each round prints the takeover time (from the signal to the new leader's "leading fleet" line,
# which it logs once its turns have started), the attempts lost or added and whether a server was
# restarted. This sums them up per mode: rounds, p50, p99 and max takeover (ms), lost, added,
# restarted (the goals: p99 <= 5000 ms, 0, 0, 0). The lease is fleetd's default, 3 s (renewed
# every second, a standby trying every half second); LEASE=2s for another.
#
#   bash bench/failover/run.sh [ROUNDS]       default 20
#   BUILD_DIR=build bash bench/failover/run.sh 5
#   MODES="steady seed partition"             which groups run (default all three)
#   NO_BUILD=1                                the binaries in BUILD_DIR as they are (the smoke run)
#
# Needs root (the partition's network namespace; PostgreSQL runs as nobody). Exits non-zero when a
# round fails its test or a goal is missed. Output in .bench/failover-REVISION.txt too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/lib/fleet.sh
fleet_me=bench

rounds=${1:-20}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number, got '$rounds'"
build=${BUILD_DIR:-build}
modes=${MODES:-steady seed partition}
if [[ -z ${NO_BUILD:-} ]]; then
  bench_build "$build" RelWithDebInfo failover_test fleetd fleetctl fleet-agent fleet-http-probe \
    sglang-server-sim >/dev/null
fi
mkdir -p .bench
out=.bench/failover-$(git_revision).txt
: >"$out"

run() {  # run FILTER ROUNDS
  step "failover_test --gtest_filter=$1 ($2 rounds)"
  FLEET_FAILOVER_LEASE=${LEASE:-3s} FLEET_FAILOVER_ROUNDS=$2 "$build/tests/e2e/failover_test" --gtest_filter="$1" \
    >"$out.log" 2>&1 || { tail -50 "$out.log"; die "failover_test $1 failed (log: $out.log)"; }
  grep '^failover:' "$out.log" | tee -a "$out"
}
for mode in $modes; do
  case $mode in
    steady) run 'FailoverTest.AKilledOrPaused*' "$rounds" ;;
    seed) run 'Moments/SeedFailoverTest.*' "$rounds" ;;
    # A namespace and a TCP PostgreSQL per round: one round per test run.
    partition) for ((i = 0; i < rounds; i++)); do run 'PartitionTest.*' 1; done ;;
    *) die "MODES: steady, seed or partition, got '$mode'" ;;
  esac
done

step "summary (revision $(git_revision))"
awk '
  {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    m = f["mode"]; n[m]++; t[m, n[m]] = f["takeover_ms"]
    lost[m] += f["attempts_lost"]; added[m] += f["attempts_added"]; rs[m] += f["restarted"]
  }
  END {
    bad = 0
    printf "%-20s %6s %8s %8s %8s %5s %5s %9s\n", "mode", "rounds", "p50_ms", "p99_ms", "max_ms", "lost", "added", "restarted"
    for (m in n) {
      k = n[m]
      for (i = 1; i <= k; i++) v[i] = t[m, i]
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
      p50 = v[int((k + 1) / 2)]; i99 = int(k * 0.99 + 0.999); if (i99 < 1) i99 = 1; p99 = v[i99]
      printf "%-20s %6d %8d %8d %8d %5d %5d %9d\n", m, k, p50, p99, v[k], lost[m], added[m], rs[m]
      if (p99 > 5000 || lost[m] || added[m] || rs[m]) bad = 1
    }
    exit bad
  }' "$out" | tee "$out.summary" || die "a goal was missed (p99 <= 5000 ms, 0 lost, 0 added, 0 restarted)"
