#!/usr/bin/env bash
# Does the control-plane link cost /v1/enforce anything? One run, alternating: a sidecar
# (`toolgate serve`) on its own, and the same sidecar linked to a `toolgate control-plane`
# (check-ins and policy/key sync every second — 30x and 5x more often than the defaults — the
# hold relay and the shipper, which ships every decision's events while the load runs).
#
#   bash bench/link_overhead.sh [duration_seconds=8] [connections=32] [rounds=2]
#
# Prints wrk's requests/s and latency percentiles for each case and round.
set -euo pipefail
cd "$(dirname "$0")/.."
dur="${1:-8}"; conns="${2:-32}"; rounds="${3:-2}"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet --bin toolgate
bin=./target/release/toolgate
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

wait_ready() { for _ in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.05; done; echo "no ready file $1" >&2; exit 1; }
url() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
post() { curl -s -X POST "$1" -H 'Authorization: Bearer bench-admin' -H 'Content-Type: application/json' -d "$2"; }
key_of() { python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])'; }

common_env=(TOOLGATE_ADMIN_TOKEN=bench-admin TOOLGATE_LOG=warn TOOLGATE_RATE_LIMIT_PER_SECOND=100000000 TOOLGATE_RATE_LIMIT_BURST=100000000)
listen=(--admin-listen 127.0.0.1:0 --proxy-listen 127.0.0.1:0 --control-plane-listen 127.0.0.1:0)

# The control plane, with the tenant's keys.
env "${common_env[@]}" "$bin" control-plane "${listen[@]}" --data-dir "$work/cp" --policy policy \
  --ready-file "$work/cp.json" 2>"$work/cp.log" & pids+=($!)
wait_ready "$work/cp.json"; cp=$(url "$work/cp.json" control_plane_url)
token=$(post "$cp/bench/service/api-keys" '{"scope_level":"organization","permissions":["read","write"]}' | key_of)
KEY=$(post "$cp/bench/service/api-keys" '{"scope_level":"organization","permissions":["execute"]}' | key_of)
export KEY

# The linked sidecar (gets the policy and the execute key from the control plane).
env "${common_env[@]}" TOOLGATE_CONTROL_PLANE_TOKEN="$token" TOOLGATE_SYNC_INTERVAL_SECONDS=1 \
  TOOLGATE_CHECKIN_INTERVAL_SECONDS=1 "$bin" serve "${listen[@]}" --data-dir "$work/linked" \
  --ca-dir "$work/linked-ca" --control-plane "$cp" --tenant bench --endpoint-id bench-1 \
  --ready-file "$work/linked.json" 2>"$work/linked.log" & pids+=($!)
wait_ready "$work/linked.json"; linked=$(url "$work/linked.json" admin_url)
for _ in $(seq 1 200); do
  curl -s "$linked/v1/health" -H "X-API-Key: $KEY" | grep -q '"policy_ready":true' && break; sleep 0.05
done

# The standalone sidecar: the same policy, the same key (its data dir gets a copy of the
# control plane's keys by sharing nothing: it is started on a copy of the linked data after
# the first sync).
kill -TERM "${pids[1]}"; wait "${pids[1]}" 2>/dev/null || true
cp -r "$work/linked" "$work/alone"
env "${common_env[@]}" TOOLGATE_CONTROL_PLANE_TOKEN="$token" TOOLGATE_SYNC_INTERVAL_SECONDS=1 \
  TOOLGATE_CHECKIN_INTERVAL_SECONDS=1 "$bin" serve "${listen[@]}" --data-dir "$work/linked" \
  --ca-dir "$work/linked-ca" --control-plane "$cp" --tenant bench --endpoint-id bench-1 \
  --ready-file "$work/linked2.json" 2>>"$work/linked.log" & pids+=($!)
wait_ready "$work/linked2.json"; linked=$(url "$work/linked2.json" admin_url)
env "${common_env[@]}" "$bin" serve "${listen[@]}" --data-dir "$work/alone" --ca-dir "$work/alone-ca" \
  --policy "$work/alone/policy-bundle" --ready-file "$work/alone.json" 2>"$work/alone.log" & pids+=($!)
wait_ready "$work/alone.json"; alone=$(url "$work/alone.json" admin_url)

run() { wrk -t2 -c"$conns" -d"${dur}s" --latency -s bench/enforce.lua "$1/v1/enforce" \
  | awk -v name="$2" '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} /Non-2xx/ {bad=$4}
      END {printf "%-10s req/s %9s  p50 %8s  p99 %8s  non-2xx %s\n", name, rps, p50, p99, (bad ? bad : 0)}'; }
wrk -t2 -c"$conns" -d2s -s bench/enforce.lua "$alone/v1/enforce" >/dev/null
wrk -t2 -c"$conns" -d2s -s bench/enforce.lua "$linked/v1/enforce" >/dev/null
for r in $(seq 1 "$rounds"); do
  echo "== round $r ($conns connections, ${dur}s)"
  run "$alone" standalone
  run "$linked" linked
done
echo "== linked sidecar health after the load"
curl -s "$linked/v1/health" | python3 -c 'import json,sys; h=json.load(sys.stdin); print(json.dumps({k: h.get(k) for k in ("status","policy_ready","shipping","control_plane")}))'
