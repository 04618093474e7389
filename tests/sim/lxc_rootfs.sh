#!/usr/bin/env bash
# lxc_rootfs.sh: the Debian 12 root the real-LXC tests start their containers from, made once with
# debootstrap and kept in a cache folder (the build tree, or one that tests/run.sh shares between
# its two builds). minbase plus systemd-sysv: one root serves a container whose PID 1 is systemd
# (/sbin/init) and one whose PID 1 is LXC's own init.lxc (lxc.init.cmd); see $include for the rest.
#
#   lxc_rootfs.sh CACHE_DIR                 prints the root's path, making it first if needed
#   lxc_rootfs.sh CACHE_DIR --uid-shift N   prints the path of a copy owned by N+uid:N+gid, for an
#                                           unprivileged container mapping 0 to N (as Proxmox's
#                                           default 100000), making it first if needed
#
# Containers never write to these roots: each one runs on an overlay of its own (the root as the
# lower layer). A root is used only once complete: made as NAME.partial under a lock (tests run
# in parallel), then renamed into place with a marker. Needs root, debootstrap and network on the
# first run (http://deb.debian.org/debian, or $FLEET_DEBIAN_MIRROR); about 2 minutes, 230 MB.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/lib/fleet.sh
source "$here/../../deploy/lib/fleet.sh"
fleet_me=lxc_rootfs

marker=.fleet-root-complete
# What debootstrap adds to minbase. The marker records it: a root made with another list is made
# again. libabsl20220623 and ninja-build are the runtime of the simulated SGLang server
# (tests/sim/sglang-server-sim, linked against Debian 12's Abseil) and the ninja its world's
# apt-get-sim installs, for the remote tests that run the simulated world in a container.
include=systemd-sysv,libabsl20220623,ninja-build
cache=${1-}
[[ -n $cache ]] || die "usage: lxc_rootfs.sh CACHE_DIR [--uid-shift N]"
shift
shift_by=
if [[ ${1-} == --uid-shift ]]; then
  shift_by=${2-}
  [[ $shift_by =~ ^[1-9][0-9]{0,9}$ ]] || die "--uid-shift wants a positive number"
fi
[[ $(id -u) == 0 ]] || die "needs root"
mkdir -p -- "$cache"
cache=$(cd -- "$cache" && pwd)
root=$cache/bookworm-lxc-root

exec 9>"$cache/bookworm-lxc-root.lock"
flock 9

if [[ $(tail -n 1 -- "$root/$marker" 2>/dev/null) != "include=$include" ]]; then
  mirror=${FLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  rm -rf -- "$root.partial" "$root"
  started=$SECONDS
  # In a mount namespace of its own: the /proc and /sys debootstrap mounts vanish with it.
  if ! unshare --mount --propagation private -- debootstrap --variant=minbase \
    --include="$include" bookworm "$root.partial" "$mirror" >"$root.log" 2>&1; then
    rm -rf -- "$root.partial"
    tail -n 15 -- "$root.log" >&2
    die "debootstrap of Debian 12 from $mirror failed (no network? set FLEET_DEBIAN_MIRROR)"
  fi
  # As a container manager does: minbase has no /etc/hosts.
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' >"$root.partial/etc/hosts"
  printf '%s\ninclude=%s\n' "$mirror" "$include" >"$root.partial/$marker"
  mv -T -- "$root.partial" "$root"
  printf 'made %s in %d s\n' "$root" $((SECONDS - started)) >&2
fi

if [[ -z $shift_by ]]; then
  printf '%s\n' "$root"
  exit 0
fi

shifted=$root-$shift_by
if ! cmp -s -- "$root/$marker" "$shifted/$marker"; then
  rm -rf -- "$shifted.partial" "$shifted"
  cp -a -- "$root" "$shifted.partial"
  # chown clears set-uid and set-gid bits: note them first, put them back after.
  special=()
  while IFS= read -r -d '' entry; do special+=("$entry"); done < <(
    find "$shifted.partial" -xdev -type f -perm /6000 -printf '%m %p\0')
  while IFS=: read -r uid gid; do
    find "$shifted.partial" -xdev -uid "$uid" -gid "$gid" -print0 |
      xargs -0 -r chown -h -- "$((uid + shift_by)):$((gid + shift_by))"
  done < <(find "$shifted.partial" -xdev -printf '%U:%G\n' | sort -u)
  for entry in "${special[@]}"; do chmod -- "${entry%% *}" "${entry#* }"; done
  mv -T -- "$shifted.partial" "$shifted"
fi
printf '%s\n' "$shifted"
