#!/usr/bin/env bash
# promtool on deploy/prometheus: the rules parse, their unit tests pass (fleet-rules.test.yml),
# and the example scrape config (with the rules it names) is valid. Exit 77 (skipped) without
# promtool (Debian's `prometheus` package; deploy/install-deps.sh installs it).
#
#   tests/prometheus/promtool_test.sh [SOURCE_DIR]
set -euo pipefail

src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
dir=$src/deploy/prometheus

if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool_test: skipped: promtool is not on PATH (install the prometheus package)"
  exit 77
fi

promtool check rules "$dir/fleet-rules.yml"
# Both resolve the files they name (rule_files) relative to their own directory.
promtool test rules "$dir/fleet-rules.test.yml"
promtool check config "$dir/prometheus.yml"
