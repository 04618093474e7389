#!/usr/bin/env bash
# bundle.sh: gpu-fleet's binaries with every shared library they load, the C library and its
# loader included, for a machine that has none of Debian 12's libraries (another distribution,
# an older glibc, no package registry: a GPU machine to run deploy/gpu-run.sh on).
#
#   deploy/bundle.sh OUT.tar.xz [--build-dir DIR]
#
# The archive unpacks to gpu-fleet/{bin,lib,libexec}: libexec/ holds the stripped binaries, lib/
# their libraries (from ldd) and ld-linux-x86-64.so.2, and bin/NAME is a small sh wrapper that runs
# libexec/NAME through the bundled loader with --library-path lib/, so no system library is used
# and nothing leaks into the servers' environment (no LD_LIBRARY_PATH is set). fleet-agent finds
# its readiness helper as bin/fleet-http-probe (pass --http-probe). Nothing here is built.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=
build_dir=$repo/build
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift ;;
    -*) printf 'bundle: unknown option %s\n' "$1" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done
[[ -n $out ]] || { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

binaries=(daemon/fleetd agent/fleet-agent agent/fleet-http-probe cli/fleetctl)
stage=$(mktemp -d)
trap 'rm -rf -- "$stage"' EXIT
root=$stage/gpu-fleet
mkdir -p "$root/bin" "$root/lib" "$root/libexec"

loader=
for b in "${binaries[@]}"; do
  path=$build_dir/$b
  [[ -x $path ]] || { printf 'bundle: %s is not built\n' "$path" >&2; exit 1; }
  name=$(basename "$b")
  strip -o "$root/libexec/$name" "$path"
  # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" and the loader's own line.
  while read -r lib; do
    [[ -n $lib && -f $lib ]] || continue
    case $lib in
      */ld-linux-x86-64.so.2) loader=$lib ;;
    esac
    cp -L -n -- "$lib" "$root/lib/" 2>/dev/null || true
  done < <(ldd "$path" | awk '/=>/ { print $3 } !/=>/ && $1 ~ /^\// { print $1 }')
  {
    printf '#!/bin/sh\n# gpu-fleet bundle (deploy/bundle.sh): %s through the bundled loader.\n' "$name"
    # shellcheck disable=SC2016  # written literally into the wrapper
    printf 'here=$(cd "$(dirname "$0")/.." && pwd)\n'
    # shellcheck disable=SC2016
    printf 'exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib" "$here/libexec/%s" "$@"\n' "$name"
  } >"$root/bin/$name"
  chmod 755 "$root/bin/$name"
done
[[ -n $loader ]] || { printf 'bundle: no ld-linux-x86-64.so.2 among the libraries\n' >&2; exit 1; }
for lib in "$root"/lib/*.so*; do strip --strip-unneeded "$lib" 2>/dev/null || true; done
tar -C "$stage" -cJf "$out" gpu-fleet
printf 'bundle: %s (%s)\n' "$out" "$(du -h "$out" | cut -f1)"
