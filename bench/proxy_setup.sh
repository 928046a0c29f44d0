# Shared set-up of bench/proxy.sh and bench/proxy_ab.sh (sourced, not run): a work dir cleaned
# up on exit, the echo upstreams (plain and TLS, with a throwaway CA), the bench pack (the
# default pack + the `bench-agent` whose calls are in scope, REST routes for /tool and /hold, a
# step_up rule for /hold, `localhost` passed through) and start_toolgate.
# Expects: $ex (the examples' directory), $bin (the default toolgate binary), $hold_n.
work=$(mktemp -d)
chmod 755 "$work"   # squid, started as root, runs as its own user and must reach its files
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP_WORK:-}" = 1 ]; then echo "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
wait_for() {  # wait_for SECONDS CMD...: until CMD succeeds
  local tries=$(( $1 * 10 )); shift
  for _ in $(seq 1 "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "timed out waiting for: $*" >&2; return 1
}

# ---- upstreams: plain and TLS (a throwaway CA made here)
"$ex/echo_upstream" --gen-ca "$work/upstream-ca"
start_upstream() {  # start_upstream NAME [ARGS...]: sets up_addr
  local name=$1; shift
  "$ex/echo_upstream" "$@" >"$work/$name.out" 2>&1 &
  pids+=($!)
  wait_for 10 grep -q listening "$work/$name.out"
  up_addr=$(awk '/listening/ {print $2}' "$work/$name.out")
}
start_upstream up-plain; up_plain=$up_addr
start_upstream up-tls --cert "$work/upstream-ca/cert.pem" --key "$work/upstream-ca/key.pem"; up_tls=$up_addr
upstream_ca="$work/upstream-ca/ca.pem"
echo "upstreams: http://$up_plain https://$up_tls"

# ---- the bench pack: the default pack + an agent whose calls are in scope + two REST routes
cp -r policy "$work/pack"
cat >>"$work/pack/pack.toml" <<'EOF'

# bench/proxy.sh: the load's agent; everything is in scope, so calls are decided ALLOW.
[agents.bench-agent]
approved_scope = ["*"]
enforcement_mode = "block"
EOF
# CONNECT to localhost is tunnelled untouched (the like-for-like row against squid's tunnel);
# 127.0.0.1 is intercepted (the default pack intercepts every host).
python3 - "$work/pack/pack.toml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
if re.search(r"(?m)^\[proxy\]\s*$", text):
    if re.search(r"(?m)^pass_through\s*=.*$", text):
        text = re.sub(r"(?m)^pass_through\s*=.*$", 'pass_through = ["localhost"]', text, count=1)
    else:
        text = re.sub(r"(?m)^\[proxy\]\s*$", '[proxy]\npass_through = ["localhost"]', text, count=1)
else:
    text += '\n[proxy]\npass_through = ["localhost"]\n'
open(path, "w").write(text)
PY
mkdir -p "$work/pack/routes"
cat >"$work/pack/routes/bench.toml" <<'EOF'
[[route]]
id = "bench"
host = "127.0.0.1"
method = "POST"
path = "/tool"
tool = "bench.echo"

[[route]]
id = "bench-hold"
host = "127.0.0.1"
method = "POST"
path = "/hold"
tool = "bench.hold"
EOF
cat >"$work/pack/rules/bench.toml" <<'EOF'
[[rule]]
id = "bench-hold"
description = "bench/proxy.sh memory test: held for approval"
when = 'tool_name == "bench.hold"'
effect = "step_up"
step_up_timeout_seconds = 3600
EOF

# ---- toolgate
start_toolgate() {  # start_toolgate NAME [BIN [VAR=VALUE...]]: sets tg_pid tg_admin tg_proxy tg_ca tg_auth tg_cred
  local d="$work/$1" b="${2:-$bin}"; mkdir -p "$d"
  # The caller's VAR=VALUE come last, so they override these defaults.
  env TOOLGATE_ADMIN_TOKEN=bench-admin TOOLGATE_LOG=warn \
  TOOLGATE_RATE_LIMIT_PER_SECOND=1000000000 TOOLGATE_RATE_LIMIT_BURST=1000000000 \
  TOOLGATE_MAX_HELD_REQUESTS=$(( hold_n + 1024 )) TOOLGATE_MAX_PENDING_HOLDS=$(( hold_n + 10000 )) \
  "${@:3}" "$b" up --policy "$work/pack" --data-dir "$d/data" --ca-dir "$d/certs" --upstream-ca "$upstream_ca" \
    --admin-listen 127.0.0.1:0 --proxy-listen 127.0.0.1:0 --control-plane-listen 127.0.0.1:0 \
    --ready-file "$d/ready.json" 2>"$d/toolgate.log" &
  tg_pid=$!; pids+=("$tg_pid")
  wait_for 30 test -s "$d/ready.json" || { cat "$d/toolgate.log" >&2; exit 1; }
  tg_admin=$(json_field "$d/ready.json" admin_url)
  tg_proxy=$(json_field "$d/ready.json" proxy_url)
  local cp; cp=$(json_field "$d/ready.json" control_plane_url)
  tg_ca="$d/certs/ca.pem"
  local key
  key=$(curl -sf -X POST "$cp/bench/service/api-keys" -H 'Authorization: Bearer bench-admin' \
    -H 'Content-Type: application/json' -d '{"scope_level":"organization","permissions":["execute"]}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
  tg_cred="bench-agent:$key"
  tg_auth="Basic $(printf %s "$tg_cred" | base64 -w0)"
}
stop_toolgate() { kill -TERM "$tg_pid" 2>/dev/null || true; wait "$tg_pid" 2>/dev/null || true; }
