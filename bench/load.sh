#!/usr/bin/env bash
# Load test of POST /v1/enforce against a bare hyper JSON server of the same shape, in the same
# run (this machine is shared and noisy: compare ratios, not absolute numbers).
#
#   bash bench/load.sh [duration_seconds=10] [connections=32]
#
# Prints: idle RSS of toolgate, then for each server wrk's requests/s and latency percentiles,
# then the throughput ratio, RSS after the load and `toolgate ledger verify` of what it wrote.
# Needs wrk (installed from Debian's packages when missing).
#
# Environment (for comparisons; BENCHMARKS.md):
#   TOOLGATE_BIN=path      run another toolgate binary (e.g. a build of an older commit)
#   TOOLGATE_PRELOAD=lib   LD_PRELOAD for toolgate only (e.g. an allocator experiment)
#   BARE_FULL_RESPONSE=1   the baseline answers a decision of toolgate's size and structure
#                          (examples/bare_baseline.rs) instead of its default short one
set -euo pipefail
cd "$(dirname "$0")/.."
dur="${1:-10}"; conns="${2:-32}"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet --bin toolgate --example bare_baseline
bin="${TOOLGATE_BIN:-./target/release/toolgate}"
work=$(mktemp -d)
cleanup() { kill "${tg_pid:-}" "${bare_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# toolgate on the default pack; the rate limiter stays on with a limit the load cannot reach.
TOOLGATE_ADMIN_TOKEN=bench-admin TOOLGATE_RATE_LIMIT_PER_SECOND=100000000 TOOLGATE_RATE_LIMIT_BURST=100000000 \
TOOLGATE_LOG=warn LD_PRELOAD="${TOOLGATE_PRELOAD:-}" "$bin" up --data-dir "$work/data" --policy policy \
  --admin-listen 127.0.0.1:0 --control-plane-listen 127.0.0.1:0 --ready-file "$work/ready.json" 2>"$work/toolgate.log" &
tg_pid=$!
for _ in $(seq 1 100); do [ -s "$work/ready.json" ] && break; sleep 0.1; done
admin=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin_url"])' "$work/ready.json")
cp=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["control_plane_url"])' "$work/ready.json")
echo "idle RSS of toolgate: $(awk '/VmRSS/ {print $2 " " $3}' /proc/$tg_pid/status)"
KEY=$(curl -s -X POST "$cp/bench/service/api-keys" -H 'Authorization: Bearer bench-admin' \
  -H 'Content-Type: application/json' -d '{"scope_level":"organization","permissions":["execute"]}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
export KEY
curl -s -X POST "$admin/v1/enforce" -H "X-API-Key: $KEY" -H 'Content-Type: application/json' \
  -d "$(sed -n "s/^wrk.body = '\(.*\)' \.\.$/\1/p" bench/enforce.lua)" >/dev/null || true

./target/release/examples/bare_baseline >"$work/bare.out" &
bare_pid=$!
for _ in $(seq 1 100); do grep -q listening "$work/bare.out" 2>/dev/null && break; sleep 0.1; done
bare="http://$(awk '{print $3}' "$work/bare.out")"

run() { wrk -t2 -c"$conns" -d"${dur}s" --latency -s bench/enforce.lua "$1/v1/enforce"; }
echo "== warm-up"; wrk -t2 -c"$conns" -d2s -s bench/enforce.lua "$admin/v1/enforce" >/dev/null
echo "== bare hyper baseline ($conns connections, ${dur}s)"; base_out=$(run "$bare"); echo "$base_out"
echo "== toolgate /v1/enforce ($conns connections, ${dur}s)"; tg_out=$(run "$admin"); echo "$tg_out"
rps() { awk '/Requests\/sec/ {print $2}' <<<"$1"; }
non2xx=$(awk '/Non-2xx/ {print $4}' <<<"$tg_out"); [ -n "$non2xx" ] && echo "WARNING: $non2xx non-2xx responses from toolgate"
python3 - "$(rps "$base_out")" "$(rps "$tg_out")" <<'PY'
import sys
base, tg = float(sys.argv[1]), float(sys.argv[2])
print(f"throughput: baseline {base:,.0f} req/s, toolgate {tg:,.0f} req/s, ratio {tg / base:.1%}")
PY
echo "RSS of toolgate after load: $(awk '/VmRSS/ {print $2 " " $3}' /proc/$tg_pid/status)"
# Stop toolgate (SIGTERM: drain, flush) and verify what it wrote: receipts per signed checkpoint
# shows how much group commit amortised signing under this load.
kill -TERM "$tg_pid"; wait "$tg_pid" 2>/dev/null || true; tg_pid=
"$bin" ledger verify --data-dir "$work/data" | sed 's/^/ledger verify: /'
