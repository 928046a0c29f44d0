#!/usr/bin/env bash
# A/B of toolgate builds or settings at one connection: the latency a forward proxy adds to a
# plain-HTTP POST tool call (the issue's "+100 µs at 1 connection" measure), in alternated
# short rounds so that the machine's drift hits every variant alike. BENCHMARKS.md, "Measuring
# one connection".
#
#   bash bench/proxy_ab.sh NAME=BIN[:VAR=VALUE...] ...
#   bash bench/proxy_ab.sh head=./target/release/toolgate base=/tmp/toolgate-main
#   bash bench/proxy_ab.sh default=./target/release/toolgate log=./target/release/toolgate:TOOLGATE_LOG=info
#
# Each variant is its own toolgate (`up`, the bench pack of bench/proxy.sh), started with the
# extra environment given after the binary. Every round runs examples/proxy_load for SECS
# seconds at one connection directly, through examples/bare_proxy (a hyper forward proxy with
# nothing in it: the floor) and through each variant, in that order; the summary is the median
# over the rounds of (p50 through the proxy − p50 direct) in µs.
#
# Environment:
#   ROUNDS=10    rounds
#   SECS=1       seconds per measurement
#   COUNTS=1     also print, per variant, CPU time per request for each thread (from
#                /proc/<pid>/task/*/stat) and, when `perf` is installed, futex calls, write(2)
#                calls (in toolgate at the default log level: tokio's eventfd wake-ups) and
#                context switches per request (one 3-s run each)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { sed -n 2,23p "$0"; exit 64; }
rounds="${ROUNDS:-10}"; secs="${SECS:-1}"; hold_n=0
cargo build --release --quiet --example echo_upstream --example proxy_load --example bare_proxy
ex=./target/release/examples
bin=./target/release/toolgate
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
source bench/proxy_setup.sh

names=(); declare -A PROXY CRED PID
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}
  IFS=: read -r -a parts <<<"$rest"
  [ -x "${parts[0]}" ] || { echo "$name: ${parts[0]} is not an executable" >&2; exit 64; }
  start_toolgate "$name" "${parts[@]}"
  names+=("$name"); PROXY[$name]=$tg_proxy; CRED[$name]=$tg_cred; PID[$name]=$tg_pid
done
"$ex/bare_proxy" >"$work/bare.out" 2>&1 & pids+=($!); bare_pid=$!
wait_for 10 grep -q listening "$work/bare.out"
PROXY[bare]=http://$(awk '/listening/ {print $3}' "$work/bare.out"); PID[bare]=$bare_pid; CRED[bare]=""

url="http://$up_plain/tool"
load() {  # load NAME SECONDS: one proxy_load run at one connection through NAME
  local auth=(); [ -n "${CRED[$1]}" ] && auth=(--proxy-auth "${CRED[$1]}")
  "$ex/proxy_load" -c 1 -d "$2" --label "$1" --url "$url" --proxy "${PROXY[$1]}" "${auth[@]}"
}
field() { sed "s/.*$1=\([0-9]*\).*/\1/"; }
for n in "${names[@]}"; do load "$n" 1 >/dev/null; done   # warm-up (connections, caches)

if [ "${COUNTS:-}" = 1 ]; then
  threads() { for t in /proc/$1/task/*; do echo "${t##*/} $(tr ' ' _ <"$t/comm") $(awk '{print $14, $15}' "$t/stat")"; done; }
  tick_us=$(( 1000000 / $(getconf CLK_TCK) ))
  for n in bare "${names[@]}"; do
    pid=${PID[$n]}
    threads "$pid" >"$work/t0"
    out=$(load "$n" 3); reqs=$(field requests <<<"$out")
    threads "$pid" >"$work/t1"
    echo "$n: $reqs requests, CPU µs per request by thread (user/system):"
    join <(sort "$work/t0") <(sort "$work/t1") 2>/dev/null |
      awk -v n="$reqs" -v t="$tick_us" '{u=($6-$3)*t/n; s=($7-$4)*t/n; if (u+s >= 1) printf "  %-18s %5.0f / %-5.0f\n", $2, u, s}'
    if command -v perf >/dev/null; then
      perf stat -e syscalls:sys_enter_futex,syscalls:sys_enter_write,context-switches \
        -p "$pid" -o "$work/stat" -- sleep 3.3 >/dev/null 2>&1 & sp=$!
      out=$(load "$n" 3); reqs=$(field requests <<<"$out"); wait "$sp" || true
      awk -v n="$reqs" '/sys_enter_futex|sys_enter_write|context-switches/ {gsub(",","",$1); printf "  %s per request: %.2f\n", $2, $1/n}' "$work/stat"
    fi
  done
fi

: >"$work/rounds.txt"
for r in $(seq 1 "$rounds"); do
  direct=$("$ex/proxy_load" -c 1 -d "$secs" --label direct --url "$url" --direct | field p50_us)
  line="round $r: direct p50 $direct µs; added"
  for n in bare "${names[@]}"; do
    line="$line $n=$(( $(load "$n" "$secs" | field p50_us) - direct ))"
  done
  echo "$line" | tee -a "$work/rounds.txt"
done
python3 - "$work/rounds.txt" <<'PY'
import re, statistics, sys
rows = [dict(re.findall(r"(\S+)=(-?\d+)", line)) for line in open(sys.argv[1])]
print("median added p50 at 1 connection (µs):",
      " ".join(f"{k}={statistics.median(int(r[k]) for r in rows):g}" for k in rows[0]))
PY
