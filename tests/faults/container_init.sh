#!/usr/bin/env bash
# container_init.sh: PID 1 of a simulated container (tests/faults/run.sh starts it with
# `unshare --pid --fork --mount-proc`). It starts the container's bystanders (processes that are
# not the supervisor's: each `setsid sleep`, so each leads its own group and session, as a user's
# shell or tmux would), says so on READY_FIFO, then reaps orphans for ever (the servers outlive
# their agent and are re-parented here). The agent is started into the namespace by the harness
# (nsenter), so that it can be killed and restarted without a "reboot".
#
#   container_init.sh READY_FIFO [TAKE_PIDS_FILE]
#
# TAKE_PIDS_FILE (after a "reboot"): pids, one a line, that bystanders must take in this new
# namespace: the pids the agent recorded for its servers before the reboot. Each is taken by
# setting the namespace's ns_last_pid just below it before the fork (nothing else forks here).
set -uo pipefail
fifo=$1
take=${2:-}

if [[ -n $take && -s $take ]]; then
  while read -r pid; do
    if ! [[ $pid =~ ^[0-9]+$ ]] || ((pid <= 2)); then continue; fi
    echo $((pid - 1)) >/proc/sys/kernel/ns_last_pid
    setsid sleep 1000000 &
  done <"$take"
fi
# Two bystanders at fresh pids in every container.
setsid sleep 1000000 &
setsid sleep 1000000 &
echo ready >"$fifo"
# Bash reaps any child (adopted orphans included) when SIGCHLD arrives during the wait.
while :; do
  sleep 1000000 &
  wait $!
done
