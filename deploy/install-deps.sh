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
  # Tests and benchmarks: real tools whose output the tests classify, and measurement.
  binutils grep coreutils time
  # The agent: HTTP readiness probes (a real client library), its local state (SQLite).
  libcurl4-openssl-dev
  # The daemon and the CLI: the fleet config is YAML (with line marks for errors).
  libyaml-cpp-dev
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
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
