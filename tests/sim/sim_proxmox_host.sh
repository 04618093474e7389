#!/usr/bin/env bash
# sim_proxmox_host.sh: a simulated Proxmox host on this machine, for the remote-fleet tests and
# the remote benchmark. Needs root (network and mount namespaces), iproute2, util-linux and
# openssh-server.
#
#   sim_proxmox_host.sh up DIR CTID... [--route] [--bind DIR]... [--lxc CACHE_DIR [--unprivileged CTID]...
#                          [--systemd CTID]...]
#   sim_proxmox_host.sh down DIR
#
# up makes, under DIR (absolute, short: interface names are derived from a free index):
#   - the host: a network namespace with its own address (HOST_ADDR, on a veth pair to this
#     machine's namespace), a bridge vmbr0 for its containers, IP forwarding on, and a real sshd
#     (/usr/sbin/sshd, its own host key DIR/ssh_host_ed25519_key, root's authorized_keys
#     DIR/authorized_keys, StrictModes no) listening on HOST_ADDR:22, in a mount namespace where
#     /usr/local/sbin holds `pct` (tests/sim/pct-sim for DIR/ct) and /root is DIR/root-home;
#   - per CTID a container: a network namespace with address CT_ADDR on vmbr0 (default route via
#     the host) and a root DIR/ct/CTID/rootfs (merged-/usr layout, its own /etc /opt /var /run
#     /tmp), with every --bind folder mounted at the same path inside;
#   - with --route, a route on this machine to the containers' subnet through the host (the
#     `direct` channel); without it a container's address is reachable from the host only
#     (`ssh_tunnel`).
# With --lxc CACHE_DIR each container is a real LXC container instead (issue 17): privileged, on an
# overlay of the Debian 12 root of tests/sim/lxc_rootfs.sh CACHE_DIR (its upper layer
# DIR/lxc/CTID/upper), eth0 on vmbr0 through a veth, LXC's init.lxc as PID 1, the --bind folders
# mounted in (--unprivileged CTID: that one maps 0 to 100000; --systemd CTID: its PID 1 is systemd);
# `pct` is then tests/sim/pct-lxc for DIR/lxc, and sshd runs as tests/sim/sim-host-exec
# runs a host's process (LXC needs the host's /sys and the machine's cgroups).
# It prints `host_addr=ADDR`, `host_key=PATH.pub` and `ct_CTID=ADDR` lines, and keeps what it
# made in DIR/state for `down`, which kills every process in the namespaces (agents and servers
# included), removes them, the route and the links. `down` is safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/lib/fleet.sh  # (shellcheck run from the repository root)
source "$here/../../deploy/lib/fleet.sh"
fleet_me=sim_proxmox_host

down() {
  local dir=$1 state=$1/state ns pid containers=()
  [[ -f $state ]] || return 0
  # shellcheck disable=SC1090
  source "$state"
  local ctid
  for ctid in "${containers[@]}"; do
    "$here/sim-host-exec" "$host_ns" "$here/pct-lxc" --lxcpath "$lxcpath" stop "$ctid" || true
  done
  for ns in "${namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  [[ -z ${route-} ]] || ip route del "$route" 2>/dev/null || true
  ip link del "$root_if" 2>/dev/null || true
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  [[ -z ${lxcpath-} ]] || rm -rf -- "$lxcpath"
  rm -f -- "$state"
}

up() {
  local dir=$1
  shift
  local ctids=() route=0 binds=() lxc_cache='' unprivileged=() systemd=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      --route) route=1 ;;
      --bind) binds+=("$2"); shift ;;
      --lxc) lxc_cache=$2; shift ;;
      --unprivileged) unprivileged+=("$2"); shift ;;
      --systemd) systemd+=("$2"); shift ;;
      *) ctids+=("$1") ;;
    esac
    shift
  done
  [[ $dir == /* ]] || die "DIR must be absolute"
  [[ ${#ctids[@]} -gt 0 ]] || die "no CTID"
  [[ $(id -u) == 0 ]] || die "needs root"
  mkdir -p -- "$dir"
  [[ ! -f $dir/state ]] || die "$dir is up already"

  # A free index n: this machine has no 10.200.n.1 yet. Under a lock, as tests run in parallel.
  local n
  exec 9>/run/gpu-fleet-sim-net.lock
  flock 9
  # (The addresses are read whole first: with pipefail, `ip | grep -q` can fail on SIGPIPE.)
  local addrs
  addrs=$(ip -o -4 addr show)
  for n in $(seq 1 251); do
    [[ $n -le 250 ]] || die "no free index (10.200.1-250.1 are all taken)"
    [[ $addrs == *" 10.200.$n.1/"* || -e /run/netns/gfsim$n-h ]] || break
  done
  local host_ns=gfsim$n-h root_if=gfs$n-r host_if=gfs$n-h
  local host_addr=10.200.$n.2 bridge_addr=10.201.$n.1
  local namespaces=("$host_ns")
  {
    printf 'root_if=%q\n' "$root_if"
    [[ $route == 1 ]] && printf 'route=%q\n' "10.201.$n.0/24"
    printf 'namespaces=(%q)\n' "$host_ns"
    [[ -z $lxc_cache ]] || printf 'lxcpath=%q\nhost_ns=%q\n' "$dir/lxc" "$host_ns"
  } >"$dir/state"
  ip netns add "$host_ns"
  ip link add "$root_if" type veth peer name "$host_if"
  ip link set "$host_if" netns "$host_ns"
  ip addr add "10.200.$n.1/24" dev "$root_if"
  ip link set "$root_if" up
  flock -u 9
  ip -n "$host_ns" link set lo up
  ip -n "$host_ns" addr add "$host_addr/24" dev "$host_if"
  ip -n "$host_ns" link set "$host_if" up
  ip -n "$host_ns" link add vmbr0 type bridge
  ip -n "$host_ns" addr add "$bridge_addr/24" dev vmbr0
  ip -n "$host_ns" link set vmbr0 up
  ip netns exec "$host_ns" sysctl -qw net.ipv4.ip_forward=1
  [[ $route == 0 ]] || ip route add "10.201.$n.0/24" via "$host_addr"

  local lxc_root=
  if [[ -n $lxc_cache ]]; then
    lxc_root=$("$here/lxc_rootfs.sh" "$lxc_cache")
    mkdir -p -- "$dir/lxc"
  fi
  # The containers.
  mkdir -p -- "$dir/ct"
  local i=0 ctid ct_ns ct_addr rootfs d
  for ctid in "${ctids[@]}"; do
    i=$((i + 1))
    if [[ -n $lxc_root ]]; then
      ct_addr=10.201.$n.$((9 + i))
      local ct_root=$lxc_root kind=()
      if [[ " ${unprivileged[*]} " == *" $ctid "* ]]; then
        ct_root=$("$here/lxc_rootfs.sh" "$lxc_cache" --uid-shift 100000)
        kind+=(--unprivileged)
      fi
      [[ " ${systemd[*]} " != *" $ctid "* ]] || kind+=(--init systemd)
      local create=("$here/pct-lxc" --lxcpath "$dir/lxc" create "$ctid" --rootfs "$ct_root"
        "${kind[@]}" --net vmbr0 "$ct_addr/24" "$bridge_addr")
      for d in "${binds[@]}"; do create+=(--bind "$d"); done
      "${create[@]}"
      printf 'containers+=(%q)\n' "$ctid" >>"$dir/state"
      "$here/sim-host-exec" "$host_ns" "$here/pct-lxc" --lxcpath "$dir/lxc" start "$ctid" ||
        die "container $ctid did not start (see $dir/lxc/$ctid/lxc.log)"
      printf 'ct_%s=%s\n' "$ctid" "$ct_addr"
      continue
    fi
    ct_ns=gfsim$n-c$ctid
    ct_addr=10.201.$n.$((9 + i))
    namespaces+=("$ct_ns")
    printf 'namespaces+=(%q)\n' "$ct_ns" >>"$dir/state"
    ip netns add "$ct_ns"
    ip -n "$host_ns" link add "veth${ctid}i0" type veth peer name eth0 netns "$ct_ns"
    ip -n "$host_ns" link set "veth${ctid}i0" master vmbr0 up
    ip -n "$ct_ns" link set lo up
    ip -n "$ct_ns" addr add "$ct_addr/24" dev eth0
    ip -n "$ct_ns" link set eth0 up
    ip -n "$ct_ns" route add default via "$bridge_addr"
    rootfs=$dir/ct/$ctid/rootfs
    mkdir -p -- "$rootfs"/{usr,dev,proc,etc,opt,run,tmp,root,var/lib,var/log,var/tmp}
    chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
    for d in bin sbin lib lib64; do
      [[ -e $rootfs/$d ]] || ln -s "usr/$d" "$rootfs/$d"
    done
    for f in passwd group hosts nsswitch.conf; do
      [[ -f /etc/$f ]] && cp -- "/etc/$f" "$rootfs/etc/$f"
    done
    printf '%s\n' "$ct_ns" >"$dir/ct/$ctid/netns"
    printf '%s\n' "${binds[@]}" >"$dir/ct/$ctid/binds"
    printf 'ct_%s=%s\n' "$ctid" "$ct_addr"
  done

  # The host's sshd, with `pct` on root's PATH.
  mkdir -p -- "$dir/sbin"
  if [[ -n $lxc_root ]]; then
    printf '#!/bin/sh\nexec %q --lxcpath %q "$@"\n' "$here/pct-lxc" "$dir/lxc" >"$dir/sbin/pct"
  else
    printf '#!/bin/sh\nexec %q --root %q "$@"\n' "$here/pct-sim" "$dir/ct" >"$dir/sbin/pct"
  fi
  chmod 0755 "$dir/sbin/pct"
  [[ -f $dir/ssh_host_ed25519_key ]] ||
    ssh-keygen -q -t ed25519 -N '' -C "sim-host-$n" -f "$dir/ssh_host_ed25519_key"
  touch "$dir/authorized_keys"
  cat >"$dir/sshd_config" <<EOF
ListenAddress $host_addr
Port 22
HostKey $dir/ssh_host_ed25519_key
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd.pid
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding yes
LogLevel VERBOSE
EOF
  # The host's root has a home of its own (this machine's root may have a slow shell profile:
  # bash reads ~/.bashrc for every ssh command).
  mkdir -p /run/sshd "$dir/root-home"
  local enter=(ip netns exec "$host_ns" unshare --mount --propagation private --)
  [[ -z $lxc_root ]] || enter=("$here/sim-host-exec" "$host_ns")
  # shellcheck disable=SC2016  # the positional parameters are the inner shell's
  "${enter[@]}" \
    sh -c 'mount --bind "$1" /usr/local/sbin && mount --bind "$2" /root &&
           exec /usr/sbin/sshd -D -e -f "$3"' sh \
    "$dir/sbin" "$dir/root-home" "$dir/sshd_config" >>"$dir/sshd.log" 2>&1 </dev/null &
  # Up when the port answers (bounded).
  local tries=0
  until ip netns exec "$host_ns" bash -c "exec 3<>/dev/tcp/$host_addr/22" 2>/dev/null; do
    tries=$((tries + 1))
    [[ $tries -lt 200 ]] || die "sshd did not listen (see $dir/sshd.log)"
    sleep 0.05 # a poll interval while sshd starts, not a synchronisation guess
  done
  printf 'host_addr=%s\nhost_key=%s\n' "$host_addr" "$dir/ssh_host_ed25519_key.pub"
}

case ${1-} in
  up) shift; up "$@" ;;
  down) shift; down "$1" ;;
  *) die "usage: sim_proxmox_host.sh up DIR CTID... [--route] [--bind DIR]... | down DIR" ;;
esac
