#!/usr/bin/env bash
# The whole test run, from a fresh Debian 12 machine: installs what is missing, builds with GCC
# (Ninja) and runs every test; checks formatting; then builds again with clang 14
# (-Wthread-safety -Werror, AddressSanitizer + UndefinedBehaviorSanitizer, libFuzzer) and runs the
# suite and a bounded fuzz session there. Exits non-zero on the first failure.
#
#   tests/run.sh            everything
#   FLEET_SKIP_CLANG=1 tests/run.sh   the GCC build and suite only (quick local loop)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source deploy/lib/fleet.sh
fleet_step_mark='==='

# Each step says how long the one before took, and the end the total: CI's log shows where its
# 40 minutes go.
run_started=$SECONDS
step_started=
timed_step() {
  if [ -n "$step_started" ]; then note "($((SECONDS - step_started)) s)"; fi
  step_started=$SECONDS
  step "$@"
}

timed_step "dependencies (deploy/install-deps.sh)"
bash deploy/install-deps.sh

jobs=$(nproc)
# Line tables only (-g1): backtraces, sanitizer reports and gdb's `bt` keep file:line; full
# debug info (variables, types) made a third of each compile and is left to local builds
# (cmake's own RelWithDebInfo). Both builds are unity builds (FLEET_UNITY, top CMakeLists.txt):
# each target's sources compiled in batches, which more than halves the CPU of a clean build. The
# whole run must fit CI's 40 minutes on 2 cores.
opt_flags="-O2 -g1 -DNDEBUG"

timed_step "format check (clang-format 14)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || find . -name '*.cc' -o -name '*.h' | grep -v '^./build')
if [ ${#sources[@]} -gt 0 ]; then
  clang-format-14 --dry-run --Werror "${sources[@]}"
fi

timed_step "GCC build (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt_flags" -DFLEET_UNITY=ON >/dev/null
cmake --build build -j "$jobs"

# The Debian 12 root of the LXC tests (tests/sim/lxc_rootfs.sh; the uid-shifted copy of the
# unprivileged container too) is made here, once per run, before any test needs it: in build/,
# where any build tree's tests find it through FLEET_LXC_CACHE (the clang half runs none of them).
# A root left by an earlier run is kept only when it was made with the same package list
# (lxc_rootfs.sh's marker). It needs the Debian mirror, as the Debian 11 root of old_system_test
# does: without network the run stops here.
timed_step "LXC root of the container tests (tests/sim/lxc_rootfs.sh)"
export FLEET_LXC_CACHE="$root/build/lxc-cache"
tests/sim/lxc_rootfs.sh "$FLEET_LXC_CACHE" >/dev/null
tests/sim/lxc_rootfs.sh "$FLEET_LXC_CACHE" --uid-shift 100000 >/dev/null

timed_step "GCC test suite"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600

if [ "${FLEET_SKIP_CLANG:-0}" != 1 ]; then
  timed_step "clang 14 build: -Wthread-safety -Werror, ASan+UBSan, libFuzzer (build-clang/)"
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt_flags" -DFLEET_UNITY=ON \
    -DFLEET_SANITIZE=ON -DFLEET_FUZZ=ON >/dev/null
  cmake --build build-clang -j "$jobs"

  # The tests labelled `postgres` (each starts a real PostgreSQL server) run in the GCC half only:
  # the server is not ours to sanitize, and the libpq layer's logic is the same in both builds.
  # So do those labelled `lxc` (real LXC containers): what they test is LXC's and pct's, not our
  # code's memory safety.
  timed_step "clang/sanitizer test suite"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-clang --output-on-failure -j "$jobs" --timeout 900 -LE 'postgres|lxc'

  if [ -x tests/fuzz/run.sh ]; then
    timed_step "fuzzing the classifier, the config reader and the HTTP parser (bounded)"
    tests/fuzz/run.sh build-clang "${FLEET_FUZZ_SECONDS:-60}"
  fi
fi

if [ -x tests/corpus/eval.sh ] && [ -d ../shared/corpus/dev ]; then
  timed_step "corpus evaluation (../shared/corpus/dev)"
  tests/corpus/eval.sh build
fi

timed_step "all tests passed in $((SECONDS - run_started)) s"
