#!/usr/bin/env bash
# Ledger shipping throughput (BENCHMARKS.md, "Ledger shipping"): a `toolgate serve` with N
# ledger entries waiting ships them to a `toolgate control-plane` (release builds, every
# listener on 127.0.0.1:0, separate data dirs); examples/ship_load times it and prints one
# `result …` line per run.
#
#   bash bench/ship.sh [events=500000] [runs=3] [extra ship_load flags, e.g. --batch 5000]
#
# Environment: TOOLGATE_BIN=path to time another toolgate build (only the harness is built).
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-500000}"; runs="${2:-3}"; shift $(( $# > 2 ? 2 : $# ))
if [ -n "${TOOLGATE_BIN:-}" ]; then
  cargo build --release --quiet --example ship_load
  bin="$TOOLGATE_BIN"
else
  cargo build --release --quiet --bin toolgate --example ship_load
  bin=target/release/toolgate
fi
echo "machine: $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq 1 "$runs"); do
  target/release/examples/ship_load --events "$events" --bin "$bin" --policy policy "$@"
done
