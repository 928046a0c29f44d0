#!/usr/bin/env bash
# Forward-proxy load test: the same tool calls made directly, through toolgate's proxy (policy
# on: every request is classified, decided and receipted), through squid and tinyproxy
# (Debian's packages) as plain forward proxies, and through a second squid intercepting HTTPS
# (ssl-bump), in one run (this machine is shared and noisy: compare ratios within a run, not
# absolute numbers). BENCHMARKS.md, "Forward proxy".
#
#   bash bench/proxy.sh [duration_seconds=8] [connections=32]
#
# Cases, each against examples/echo_upstream (POST /tool → small JSON):
#   plain HTTP  — wrk at $connections (absolute-form requests to the proxies, bench/proxy.lua)
#                 and examples/proxy_load at 1 connection (median latency); the same as GET
#                 for direct, squid and toolgate (squid opens a new upstream connection for
#                 every POST: it reuses idle upstream connections only for idempotent requests);
#   HTTPS       — examples/proxy_load at $connections and at 1: direct TLS; squid and tinyproxy
#                 as CONNECT tunnels (TLS end to end, nothing inspected); toolgate intercepting
#                 (TLS terminated with a leaf of its CA, request decided, new TLS upstream);
#                 squid-bump, squid intercepting the same way with ssl-bump (peek, stare, bump:
#                 a leaf of a throwaway CA mimicking the upstream's, the upstream verified), the
#                 like-for-like comparison with toolgate's interception;
#   memory      — a fresh toolgate holds HOLD_N requests (a step_up rule) over plain HTTP, then
#                 another fresh one HOLD_N intercepted HTTPS requests; (RSS after − before) / N.
# The plain rows also include examples/bare_proxy, a hyper forward proxy with nothing in it (no
# authentication, policy or events; the same pooled upstream client as toolgate): the floor of
# what a Rust forward proxy costs on this machine, so toolgate's own work is the difference.
# toolgate also runs the HTTPS cases as a pass-through CONNECT tunnel (the bench pack tunnels
# `localhost` untouched and intercepts `127.0.0.1`), the like-for-like comparison with squid.
#
# Environment:
#   TOOLGATE_BIN=path   another toolgate binary (then only the two examples are built here)
#   HOLD_N=500          held connections in the memory test (0 skips it)
#   HOLD_RATE=50        held requests started per second (0: all at once; concurrent hold
#                       creation can wedge sled's flush_async, see BENCHMARKS.md)
#   KEEP_WORK=1         keep the temp dir (logs, configs) and print its path
# Needs wrk, squid-openssl (Debian's squid built with ssl-bump; it replaces the `squid` package),
# tinyproxy and openssl (installed from Debian's packages when missing), python3, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
dur="${1:-8}"; conns="${2:-32}"; hold_n="${HOLD_N:-500}"; hold_rate="${HOLD_RATE:-50}"

export PATH="$PATH:/usr/sbin"
missing=()
command -v wrk >/dev/null || missing+=(wrk)
# Debian's `squid` (GnuTLS) has no ssl-bump; `squid-openssl` (the same squid with OpenSSL and
# security_file_certgen) replaces it and also serves the forward-proxy and tunnel rows.
[[ "$(squid -v 2>/dev/null)" == *--enable-ssl-crtd* ]] || missing+=(squid-openssl)
command -v tinyproxy >/dev/null || [ -x /usr/bin/tinyproxy ] || missing+=(tinyproxy)
command -v openssl >/dev/null || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ -n "${TOOLGATE_BIN:-}" ]; then
  cargo build --release --quiet --example echo_upstream --example proxy_load --example bare_proxy
else
  cargo build --release --quiet --bin toolgate --example echo_upstream --example proxy_load --example bare_proxy
fi
bin="${TOOLGATE_BIN:-./target/release/toolgate}"
ex=./target/release/examples

echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(git status --porcelain -- src 2>/dev/null | wc -l) uncommitted paths under src/; toolgate binary $bin; load average $(cut -d' ' -f1-3 /proc/loadavg)"
source bench/proxy_setup.sh
results="$work/results.txt"; : >"$results"
start_toolgate tg
echo "toolgate: proxy $tg_proxy, idle RSS $(rss_kib "$tg_pid") KiB"

# ---- squid (one worker, the Debian default) and tinyproxy, plain forward proxies
squid_hygiene() {  # squid_hygiene DIR CACHE_LOG: the settings both squids share (no cache, no logs)
  cat <<EOF
acl local src 127.0.0.0/8
http_access allow local
http_access deny all
cache deny all
cache_mem 0 MB
access_log none
cache_store_log none
cache_log $2
pid_filename $1/squid.pid
coredump_dir $1
netdb_filename none
pinger_enable off
forwarded_for delete
shutdown_lifetime 0 seconds
max_filedescriptors 8192
EOF
}
squid_port=$(free_port)
mkdir -p "$work/squid"; chmod 777 "$work/squid"
{ echo "http_port 127.0.0.1:$squid_port"; squid_hygiene "$work/squid" /dev/null; } >"$work/squid/squid.conf"
squid -N -f "$work/squid/squid.conf" >"$work/squid/out" 2>&1 &
pids+=($!)
tiny_port=$(free_port)
cat >"$work/tinyproxy.conf" <<EOF
Port $tiny_port
Listen 127.0.0.1
Timeout 600
MaxClients 512
Allow 127.0.0.1
LogLevel Critical
LogFile "$work/tinyproxy.log"
PidFile "$work/tinyproxy.pid"
DisableViaHeader Yes
XTinyproxy No
EOF
tinyproxy -d -c "$work/tinyproxy.conf" >"$work/tinyproxy.out" 2>&1 &
pids+=($!)
squid_url="http://127.0.0.1:$squid_port"; tiny_url="http://127.0.0.1:$tiny_port"

# ---- the floor: a bare hyper forward proxy (examples/bare_proxy)
"$ex/bare_proxy" >"$work/bare.out" 2>&1 &
pids+=($!)
wait_for 10 grep -q listening "$work/bare.out"
bare_url="http://$(awk '/listening/ {print $3}' "$work/bare.out")"

# ---- squid-bump: a second squid (same hygiene) intercepting HTTPS with ssl-bump. Its CA is a
# throwaway made here; peek (step 1), stare (step 2), bump (step 3, server-first) so the leaf it
# mints mimics the upstream's certificate (the IP SAN included: a client-first bump would lack
# it); it verifies the upstream against the upstream CA, as toolgate does. cache_log is kept
# (errors only) because TLS failures show nowhere else.
bump_port=$(free_port); bump_dir="$work/squid-bump"
mkdir -p "$bump_dir"; chmod 777 "$bump_dir"
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -days 2 \
  -subj "/CN=toolgate bench squid-bump CA" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout "$bump_dir/ca-key.pem" -out "$bump_dir/ca.pem" 2>/dev/null
bump_ca="$bump_dir/ca.pem"
/usr/lib/squid/security_file_certgen -c -s "$bump_dir/ssl_db" -M 4MB >/dev/null
chmod -R a+rwX "$bump_dir/ssl_db"   # the cert helper runs as squid's user
cat >"$bump_dir/squid.conf" <<EOF
http_port 127.0.0.1:$bump_port ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=4MB tls-cert=$bump_ca tls-key=$bump_dir/ca-key.pem
sslcrtd_program /usr/lib/squid/security_file_certgen -s $bump_dir/ssl_db -M 4MB
sslcrtd_children 4 startup=1 idle=1
acl step1 at_step SslBump1
acl step2 at_step SslBump2
ssl_bump peek step1
ssl_bump stare step2
ssl_bump bump all
tls_outgoing_options cafile=$upstream_ca
EOF
squid_hygiene "$bump_dir" "$bump_dir/cache.log" >>"$bump_dir/squid.conf"
squid -N -f "$bump_dir/squid.conf" >"$bump_dir/out" 2>&1 &
pids+=($!)
bump_url="http://127.0.0.1:$bump_port"

# ---- sanity: every path answers the echo (and toolgate decides: its ALLOW forwards)
probe() { curl -sf -X POST -H 'Content-Type: application/json' -d '{"customer_id":"C-1042"}' "$@" | grep -q bench.echo; }
wait_for 20 probe -x "$squid_url" "http://$up_plain/tool" || { cat "$work/squid/out" >&2; exit 1; }
wait_for 20 probe -x "$tiny_url" "http://$up_plain/tool" || { cat "$work/tinyproxy.out" >&2; exit 1; }
for px in "$squid_url" "$tiny_url"; do probe -x "$px" --cacert "$upstream_ca" "https://$up_tls/tool"; done
wait_for 20 probe -x "$bump_url" --cacert "$bump_ca" "https://$up_tls/tool" || { echo "squid-bump HTTPS probe failed" >&2; cat "$bump_dir/out" "$bump_dir/cache.log" >&2; exit 1; }
probe -x "$tg_proxy" --proxy-user "$tg_cred" "http://$up_plain/tool" || { echo "toolgate plain HTTP probe failed" >&2; cat "$work/tg/toolgate.log" >&2; exit 1; }
curl -sf -x "$tg_proxy" --proxy-user "$tg_cred" "http://$up_plain/tool" | grep -q bench.echo || { echo "toolgate GET probe failed" >&2; exit 1; }
probe -x "$tg_proxy" --proxy-user "$tg_cred" --cacert "$tg_ca" "https://$up_tls/tool" || { echo "toolgate HTTPS probe failed" >&2; cat "$work/tg/toolgate.log" >&2; exit 1; }
echo "squid $squid_url, tinyproxy $tiny_url, squid-bump $bump_url: all paths answer"

# ---- runners; each appends "case proto conns rps p50_us p99_us errors" to $results
to_us() { awk '{v=$1; u=v; sub(/[0-9.]+/,"",u); sub(/[a-z]+$/,"",v); m=(u=="us")?1:(u=="ms")?1000:(u=="s")?1000000:1; printf "%.0f", v*m}' <<<"$1"; }
wrk_case() {  # wrk_case NAME PROTO URL [env...]
  local name=$1 proto=$2 url=$3; shift 3
  local out
  out=$(env UPSTREAM="$up_plain" "$@" wrk -t2 -c"$conns" -d"${dur}s" --latency -s bench/proxy.lua "$url")
  echo "$out" | sed 's/^/  /' | grep -E 'Latency|Req/Sec|50%|90%|99%|requests in|Requests/sec|Non-2xx|Socket errors'
  local rps p50 p99 errs
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(to_us "$(awk '$1=="50%" {print $2}' <<<"$out")")
  p99=$(to_us "$(awk '$1=="99%" {print $2}' <<<"$out")")
  errs=$(awk '/Non-2xx/ {print $4}' <<<"$out"); errs=${errs:-0}
  echo "$name $proto $conns $rps $p50 $p99 $errs" >>"$results"
}
pl_case() {  # pl_case NAME PROTO CONNS proxy_load-args...
  local name=$1 proto=$2 c=$3; shift 3
  local out
  out=$("$ex/proxy_load" -c "$c" -d "$dur" --label "$name" "$@")
  echo "  $out"
  python3 - "$out" "$name" "$proto" "$c" >>"$results" <<'PY'
import sys
kv = dict(p.split("=", 1) for p in sys.argv[1].split()[1:])
print(sys.argv[2], sys.argv[3], sys.argv[4], kv["rps"], kv["p50_us"], kv["p99_us"], kv["errors"])
PY
}
tg_plain=(--proxy "$tg_proxy" --proxy-auth "$tg_cred")

echo "== warm-up (toolgate, 2 s each)"
env UPSTREAM="$up_plain" PROXY_AUTH="$tg_auth" wrk -t2 -c"$conns" -d2s -s bench/proxy.lua "$tg_proxy" >/dev/null
"$ex/proxy_load" --url "https://$up_tls/tool" "${tg_plain[@]}" --ca "$tg_ca" -c "$conns" -d 2 --warmup 0 >/dev/null

echo "== plain HTTP, $conns connections, ${dur}s (wrk)"
echo "-- direct";    wrk_case direct http "http://$up_plain" DIRECT=1
echo "-- squid";     wrk_case squid http "$squid_url"
echo "-- tinyproxy"; wrk_case tinyproxy http "$tiny_url"
echo "-- bare";      wrk_case bare http "$bare_url"
echo "-- toolgate";  wrk_case toolgate http "$tg_proxy" PROXY_AUTH="$tg_auth"

echo "== plain HTTP, 1 connection, ${dur}s (proxy_load)"
pl_case direct http 1 --url "http://$up_plain/tool" --direct
pl_case squid http 1 --url "http://$up_plain/tool" --proxy "$squid_url"
pl_case tinyproxy http 1 --url "http://$up_plain/tool" --proxy "$tiny_url"
pl_case bare http 1 --url "http://$up_plain/tool" --proxy "$bare_url"
pl_case toolgate http 1 --url "http://$up_plain/tool" "${tg_plain[@]}"

echo "== plain HTTP GET, $conns connections (wrk) and 1 (proxy_load), ${dur}s"
echo "-- direct";    wrk_case direct http-get "http://$up_plain" DIRECT=1 METHOD=GET
echo "-- squid";     wrk_case squid http-get "$squid_url" METHOD=GET
echo "-- bare";      wrk_case bare http-get "$bare_url" METHOD=GET
echo "-- toolgate";  wrk_case toolgate http-get "$tg_proxy" PROXY_AUTH="$tg_auth" METHOD=GET
pl_case direct http-get 1 --url "http://$up_plain/tool" --direct --method GET
pl_case squid http-get 1 --url "http://$up_plain/tool" --proxy "$squid_url" --method GET
pl_case bare http-get 1 --url "http://$up_plain/tool" --proxy "$bare_url" --method GET
pl_case toolgate http-get 1 --url "http://$up_plain/tool" "${tg_plain[@]}" --method GET

echo "== HTTPS, $conns connections, ${dur}s (proxy_load; squid/tinyproxy tunnel, toolgate and squid-bump intercept)"
pl_case direct https "$conns" --url "https://$up_tls/tool" --direct --ca "$upstream_ca"
pl_case squid https "$conns" --url "https://$up_tls/tool" --proxy "$squid_url" --ca "$upstream_ca"
pl_case tinyproxy https "$conns" --url "https://$up_tls/tool" --proxy "$tiny_url" --ca "$upstream_ca"
pl_case toolgate https "$conns" --url "https://$up_tls/tool" "${tg_plain[@]}" --ca "$tg_ca"
pl_case squid-bump https "$conns" --url "https://$up_tls/tool" --proxy "$bump_url" --ca "$bump_ca"
pl_case toolgate-tunnel https "$conns" --url "https://localhost:${up_tls##*:}/tool" "${tg_plain[@]}" --ca "$upstream_ca"

echo "== HTTPS, 1 connection, ${dur}s (proxy_load)"
pl_case direct https 1 --url "https://$up_tls/tool" --direct --ca "$upstream_ca"
pl_case squid https 1 --url "https://$up_tls/tool" --proxy "$squid_url" --ca "$upstream_ca"
pl_case tinyproxy https 1 --url "https://$up_tls/tool" --proxy "$tiny_url" --ca "$upstream_ca"
pl_case toolgate https 1 --url "https://$up_tls/tool" "${tg_plain[@]}" --ca "$tg_ca"
pl_case squid-bump https 1 --url "https://$up_tls/tool" --proxy "$bump_url" --ca "$bump_ca"
pl_case toolgate-tunnel https 1 --url "https://localhost:${up_tls##*:}/tool" "${tg_plain[@]}" --ca "$upstream_ca"

echo "toolgate RSS after the loads: $(rss_kib "$tg_pid") KiB"
stop_toolgate

# ---- memory per held connection: a fresh toolgate per protocol
pending() { curl -sf "$tg_admin/v1/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pending_holds"])'; }
hold_case() {  # hold_case PROTO URL proxy_load-args...
  local proto=$1 url=$2; shift 2
  start_toolgate "hold-$proto"
  # Touch the paths a held request takes (connection, TLS leaf, decide, upstream) with a few
  # requests on one connection: more load first would leave freed memory that the holds reuse.
  "$ex/proxy_load" --url "$url/tool" --proxy "$tg_proxy" --proxy-auth "$tg_cred" "$@" -c 1 -d 0.2 --warmup 0 >/dev/null
  sleep 1
  local before; before=$(rss_kib "$tg_pid")
  "$ex/proxy_load" --url "$url/hold" --proxy "$tg_proxy" --proxy-auth "$tg_cred" "$@" --hold "$hold_n" --hold-rate "$hold_rate" --hold-secs 600 \
    >"$work/hold-$proto.out" 2>&1 &
  local client=$!; pids+=("$client")
  local n=0 deadline=$(( SECONDS + 30 + (hold_rate > 0 ? hold_n / hold_rate : 0) ))
  while [ "$SECONDS" -lt "$deadline" ]; do n=$(pending || echo 0); [ "$n" -ge "$hold_n" ] && break; sleep 0.2; done
  [ "$n" -ge "$hold_n" ] || echo "  WARNING: only $n of $hold_n requests became pending holds"
  sleep 1
  local after; after=$(rss_kib "$tg_pid")
  local fds; fds=$(ls "/proc/$tg_pid/fd" | wc -l)
  echo "  $proto: pending holds $n, RSS $before → $after KiB, open fds $fds; client: $(head -1 "$work/hold-$proto.out")"
  echo "hold-$proto $proto $n $before $after" >>"$results"
  kill "$client" 2>/dev/null || true; wait "$client" 2>/dev/null || true
  stop_toolgate
}
if [ "$hold_n" -gt 0 ]; then
  echo "== memory: $hold_n held requests, each on its own connection"
  hold_case http "http://$up_plain"
  hold_case https "https://$up_tls" --ca "$work/hold-https/certs/ca.pem"
fi

echo "== summary"
python3 - "$results" "$conns" <<'PY'
import sys
rows, holds = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0].startswith("hold-"):
        holds[f[1]] = (int(f[2]), int(f[3]), int(f[4]))
        continue
    name, proto, c, rps, p50, p99, errs = f
    rows[(name, proto, int(c))] = (float(rps), int(p50), int(p99), int(errs))
conns = int(sys.argv[2])
names = ["direct", "squid", "tinyproxy", "bare", "toolgate", "squid-bump", "toolgate-tunnel"]
floor = "bare hyper forward proxy, the floor"
note = {"http": {"squid": "forward proxy", "tinyproxy": "forward proxy", "bare": floor, "toolgate": "policy on"},
        "http-get": {"squid": "forward proxy, pooled upstream", "bare": floor, "toolgate": "policy on"},
        "https": {"squid": "CONNECT tunnel", "tinyproxy": "CONNECT tunnel", "toolgate": "intercepted, policy on",
                  "squid-bump": "ssl-bump, TLS intercepted", "toolgate-tunnel": "CONNECT tunnel, pass_through"}}
print(f"| proto | path | req/s @{conns} | p50 @{conns} | p99 @{conns} | p50 @1 | added p50 @1 | errors |")
print("|---|---|---|---|---|---|---|---|")
for proto in ["http", "http-get", "https"]:
    d1 = rows.get(("direct", proto, 1))
    for n in names:
        big, one = rows.get((n, proto, conns)), rows.get((n, proto, 1))
        if not big or not one:
            continue
        added = "—" if n == "direct" else f"{one[1] - d1[1]:+d} µs"
        label = n + (f" ({note[proto][n]})" if n in note[proto] else "")
        print(f"| {proto} | {label} | {big[0]:,.0f} | {big[1]} µs | {big[2]} µs | {one[1]} µs | {added} | {big[3] + one[3]} |")
print()
ok = lambda b: "met" if b else "NOT met"
for proto, lim in [("http", 100), ("http-get", 100), ("https", 200)]:
    tg, sq = rows.get(("toolgate", proto, conns)), rows.get(("squid", proto, conns))
    tg1, d1 = rows.get(("toolgate", proto, 1)), rows.get(("direct", proto, 1))
    if tg and sq:
        r = tg[0] / sq[0]
        print(f"{proto}: toolgate/squid throughput {r:.2f}x (target >= 2x: {ok(r >= 2)})")
    if tg1 and d1:
        a = tg1[1] - d1[1]
        print(f"{proto}: toolgate added median latency at 1 connection {a} µs (target <= {lim} µs: {ok(a <= lim)})")
for proto in ["http", "http-get"]:
    tg, bp = rows.get(("toolgate", proto, conns)), rows.get(("bare", proto, conns))
    tg1, bp1, d1 = rows.get(("toolgate", proto, 1)), rows.get(("bare", proto, 1)), rows.get(("direct", proto, 1))
    if tg and bp and tg1 and bp1 and d1:
        print(f"{proto}: against the bare proxy: throughput {tg[0] / bp[0]:.2f}x, added median latency at 1 connection {bp1[1] - d1[1]} µs bare, {tg1[1] - bp1[1]} µs more through toolgate")
tt, sq = rows.get(("toolgate-tunnel", "https", conns)), rows.get(("squid", "https", conns))
tt1, d1 = rows.get(("toolgate-tunnel", "https", 1)), rows.get(("direct", "https", 1))
if tt and sq and tt1 and d1:
    print(f"https tunnel (no interception): toolgate/squid throughput {tt[0] / sq[0]:.2f}x, toolgate added median latency at 1 connection {tt1[1] - d1[1]} µs")
tg, sb = rows.get(("toolgate", "https", conns)), rows.get(("squid-bump", "https", conns))
sb1, d1 = rows.get(("squid-bump", "https", 1)), rows.get(("direct", "https", 1))
if tg and sb and sb1 and d1:
    print(f"https intercepted vs intercepted: toolgate/squid-bump throughput {tg[0] / sb[0]:.2f}x, squid-bump added median latency at 1 connection {sb1[1] - d1[1]} µs")
for proto, (n, before, after) in holds.items():
    per = (after - before) / n if n else float("nan")
    print(f"memory ({proto}): {n} held, RSS {before} -> {after} KiB, {per:.1f} KiB per held connection (target <= 64 KiB: {ok(per <= 64)})")
PY
