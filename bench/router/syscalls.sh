#!/usr/bin/env bash
# bench/router/syscalls.sh [--bin-dir DIR] [--rows LIST] [--nginx PATH]
#
# System calls and context switches per request of pdrouter and of the one-nginx-hop reference,
# counted by the kernel's tracepoints (`perf stat -e 'syscalls:sys_enter_*'`, attached to each
# process): counts, not times, so they do not move with the machine's load. For each row
# (decode delay, answer kind) pdrouter_bench runs twice, with N1 and N2 requests, and the
# difference of the counts is divided by the difference of the requests each process served
# (pdrouter: its pool warm-up, the row's warm-up and the row, 1.2 n; nginx: its warm-up and the
# row, 1.1 n), which cancels start-up, health probes and shutdown. Needs perf (Debian
# `linux-perf`; not installed by scripts/install-deps, nothing else needs it) and the rights to
# trace (root, or kernel.perf_event_paranoid <= -1).
#
#   bench/router/syscalls.sh                          # build/release, rows 10:json,10:stream
#   N1=800 N2=2400 bench/router/syscalls.sh --rows 10:json
set -euo pipefail
caller=$PWD  # relative paths in the arguments are the caller's
cd "$(dirname "$0")/../.."
from_caller() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
# Requests in a row, as pdrouter_bench counts them: rows at a decode delay run half the count,
# and at least 100.
row_requests() { # DELAY COUNT
  if [[ $1 -gt 0 ]]; then echo $(($2 / 2 > 100 ? $2 / 2 : 100)); else echo "$2"; fi
}

bin_dir=build/release
rows="10:json,10:stream"
nginx=/usr/sbin/nginx
n1=${N1:-800}
n2=${N2:-2400}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir=$(from_caller "$2"); shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --nginx) nginx=$(from_caller "$2"); shift 2 ;;
    *) echo "syscalls.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "syscalls.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
[[ -x $nginx ]] || { echo "syscalls.sh: no nginx at $nginx (--nginx PATH)" >&2; exit 2; }
bench=$bin_dir/bench/router/pdrouter_bench
[[ -x $bench ]] || { echo "syscalls.sh: $bench not built (scripts/build release)" >&2; exit 2; }

events=context-switches
for s in recvfrom recvmsg read readv sendmsg sendto write writev epoll_wait epoll_pwait \
  epoll_ctl accept4 futex timerfd_settime; do
  events+=",syscalls:sys_enter_$s"
done

work=$(mktemp -d /tmp/pdr-syscalls.XXXXXX)
trap 'pkill -P $$ perf 2>/dev/null || true; rm -rf "$work"' EXIT

# One bench run; perf attached to pdrouter and to nginx as each appears (the bench starts both
# before its first row). Leaves $work/<run>/{pdrouter,nginx}.perf.
measure() {
  local delay=$1 answer=$2 count=$3 dir=$work/$4
  mkdir -p "$dir"
  "$bench" --bin-dir "$bin_dir" --concurrency 32 --requests "$count" --max-tokens 16 \
    --delays "$delay" --answers "$answer" --nginx "$nginx" >"$dir/bench.txt" 2>&1 &
  local bench_pid=$! attached="" pid name
  for _ in $(seq 1 600); do  # 30 s to find both
    for name in pdrouter nginx; do
      [[ " $attached " == *" $name "* ]] && continue
      pid=$(pgrep -P "$bench_pid" -x "$name" | head -1 || true)
      [[ -n $pid ]] || continue
      perf stat -x, -e "$events" -p "$pid" -o "$dir/$name.perf" &
      attached+=" $name"
    done
    [[ $attached == *pdrouter*nginx* || $attached == *nginx*pdrouter* ]] && break
    kill -0 "$bench_pid" 2>/dev/null || break
    sleep 0.05
  done
  wait "$bench_pid" || { cat "$dir/bench.txt" >&2; return 1; }
  wait  # the perf processes end with the processes they watch
  grep -q ',context-switches,' "$dir/pdrouter.perf" 2>/dev/null &&
    grep -q ',context-switches,' "$dir/nginx.perf" 2>/dev/null || {
    echo "syscalls.sh: perf did not count both processes (see $dir/*.perf)" >&2; return 1; }
}

# count FILE EVENT: the event's count in a `perf stat -x,` file (0 when absent).
count() { awk -F, -v e="$2" '$3 == e || $3 == "syscalls:sys_enter_" e { print $1; f = 1 } END { if (!f) print 0 }' "$1"; }

printf '| row | process | recvfrom | sendmsg+sendto | writev | epoll_wait | epoll_ctl | all calls | context switches |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
IFS=, read -ra list <<<"$rows"
for row in "${list[@]}"; do
  delay=${row%%:*}
  answer=${row#*:}
  measure "$delay" "$answer" "$n1" a
  measure "$delay" "$answer" "$n2" b
  r1=$(row_requests "$delay" "$n1")
  r2=$(row_requests "$delay" "$n2")
  [[ $r2 -gt $r1 ]] || { echo "syscalls.sh: N2 must give more requests than N1" >&2; exit 2; }
  for name in pdrouter nginx; do
    if [[ $name == pdrouter ]]; then served=$((r2 + 2 * (r2 / 10) - r1 - 2 * (r1 / 10)));
    else served=$((r2 + r2 / 10 - r1 - r1 / 10)); fi
    per() { awk -v a="$(count "$work/a/$name.perf" "$1")" -v b="$(count "$work/b/$name.perf" "$1")" \
      -v n="$served" 'BEGIN { printf "%.2f", (b - a) / n }'; }
    all=0
    for s in recvfrom recvmsg read readv sendmsg sendto write writev epoll_wait epoll_pwait \
      epoll_ctl accept4 futex timerfd_settime; do
      all=$(awk -v x="$all" -v y="$(per "$s")" 'BEGIN { printf "%.2f", x + y }')
    done
    sends=$(awk -v x="$(per sendmsg)" -v y="$(per sendto)" 'BEGIN { printf "%.2f", x + y }')
    printf '| %s ms %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$delay" "$answer" "$name" \
      "$(per recvfrom)" "$sends" "$(per writev)" "$(per epoll_wait)" "$(per epoll_ctl)" "$all" \
      "$(per context-switches)"
  done
done
