#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing, benchmarking and running the demo of
# gpu-fleet needs. Idempotent: packages already present are left alone, and apt-get runs only when
# something is missing. Works as root, or through sudo for another user.
set -euo pipefail

packages=(
  # Toolchain: GCC for the main build, clang 14 for the thread-safety + ASan/UBSan build and
  # libFuzzer (libclang-rt-14-dev is only recommended by clang-14, so it is named here).
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang-14 libclang-rt-14-dev clang-format-14
  # Libraries.
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libspdlog-dev libfmt-dev libssh-dev libsqlite3-dev libgtest-dev libgmock-dev libre2-dev
  # Vectorscan (the portable Hyperscan): the classifier's multi-pattern prefilter (issue 15).
  libvectorscan-dev
  # Tests and benchmarks: real tools whose output the tests classify, and measurement.
  binutils grep coreutils time sqlite3 curl debootstrap
  # Real containers (issue 17): the remote tests start LXC containers (lxc-start, lxc-attach) on a
  # simulated Proxmox host. Only the tools: the package's services (lxc, lxc-net with its lxcbr0
  # bridge and dnsmasq, lxc-monitord) are never started (policy-rc.d below) and are disabled
  # after the install (below); the tests make their own bridge in a network namespace.
  lxc
  # The daemon and the CLI: the fleet config is YAML (with line marks for errors); the -o json
  # outputs are written with nlohmann/json (header-only).
  libyaml-cpp-dev nlohmann-json3-dev
  # Command-line flags of every binary: CLI11 (header-only) behind common/base/flag_set.h.
  libcli11-dev
  # Remote fleets: the SSH tests run a real sshd on loopback (openssh-server, only its binary; see
  # policy-rc.d below), ssh-keygen makes their keys, openssl makes TLS certs, iproute2 gives `ss`.
  openssh-server openssh-client openssl iproute2
  # Observability: fleetd's /metrics (prometheus-cpp, which brings civetweb; civetweb loads
  # libssl.so for a TLS listener), webhooks over HTTPS (libcurl, OpenSSL's HMAC); the tests run a
  # real Prometheus and promtool on loopback (the package's service is never started: see
  # policy-rc.d below), and `status --watch` in a real terminal (tmux).
  prometheus-cpp-dev libcurl4-openssl-dev libssl-dev prometheus tmux
  # PostgreSQL, fleetd's optional store (issue 16): libpq to talk to it; the server (15, in
  # /usr/lib/postgresql/15/bin, not on PATH) because the tests start their own, as an unprivileged
  # user in a temp dir with no TCP listener. The package's cluster service is never started (see
  # policy-rc.d below) and no cluster is created (create_main_cluster=false, below).
  postgresql libpq-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive

# openssh-server's postinst would start and enable a system sshd on port 22. We want only the
# binary (the tests run their own sshd on a socket they own), and a build machine must not gain a
# listening login service as a side effect. Debian's invoke-rc.d and deb-systemd-invoke ask
# /usr/sbin/policy-rc.d first; exit 101 means "action forbidden", so nothing is started. We remove
# the file afterwards only if we created it: an existing one belongs to the machine (a container
# image often ships one) and stays as it was.
policy_rc=/usr/sbin/policy-rc.d
created_policy=0
remove_policy() {
  if [ "$created_policy" -eq 1 ]; then "${sudo[@]}" rm -f "$policy_rc"; fi
}
trap remove_policy EXIT
if [ ! -e "$policy_rc" ]; then
  printf '#!/bin/sh\n# Written by gpu-fleet install-deps.sh for the install; removed after it.\nexit 101\n' |
    "${sudo[@]}" tee "$policy_rc" >/dev/null
  "${sudo[@]}" chmod 755 "$policy_rc"
  created_policy=1
fi

# postgresql-common's postinst would create a cluster ("15 main", /var/lib/postgresql) owned by a
# system service. The tests make their own; a build machine gains no database as a side effect.
# The shipped createcluster.conf includes createcluster.d, read when the package is configured.
for p in "${missing[@]}"; do
  if [ "$p" = postgresql ] && [ ! -e /etc/postgresql-common/createcluster.d/gpu-fleet.conf ]; then
    "${sudo[@]}" mkdir -p /etc/postgresql-common/createcluster.d
    printf '# Written by gpu-fleet install-deps.sh: its tests start their own servers.\ncreate_main_cluster = false\n' |
      "${sudo[@]}" tee /etc/postgresql-common/createcluster.d/gpu-fleet.conf >/dev/null
  fi
done

"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"

# policy-rc.d stops the start, but a systemd machine would still enable the unit for the next
# boot; disable it when we installed the server just now (an sshd that was already there is the
# machine's own business).
for p in "${missing[@]}"; do
  if [ "$p" = openssh-server ] && command -v systemctl >/dev/null; then
    "${sudo[@]}" systemctl disable --quiet ssh.service ssh.socket 2>/dev/null || true
  fi
  if [ "$p" = postgresql ] && command -v systemctl >/dev/null; then
    "${sudo[@]}" systemctl disable --quiet postgresql.service 2>/dev/null || true
  fi
  # lxc enables lxc-net (a bridge, NAT rules and a dnsmasq on this machine), lxc (autostarted
  # containers) and lxc-monitord for the next boot; none of them is wanted on a build machine.
  if [ "$p" = lxc ] && command -v systemctl >/dev/null; then
    "${sudo[@]}" systemctl disable --now --quiet lxc-net.service lxc.service lxc-monitord.service 2>/dev/null || true
  fi
done
