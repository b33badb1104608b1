#!/usr/bin/env bash
# bench/router/instructions.sh [--bin-dir DIR] [--pdrouter BINARY]... [--rows LIST]
#
# User-space instructions per request of pdrouter, counted by valgrind's callgrind: a figure
# that does not move with the machine's load (CPU µs per request does, by ±15 % on a shared
# 2-core VM), so two builds can be compared in any conditions. Kernel time is not in it.
#
# For each row (decode delay, answer kind) pdrouter_bench runs twice with pdrouter under
# callgrind, with N1 and N2 requests; (instructions(N2) - instructions(N1)) / (served(N2) -
# served(N1)) cancels start-up, probes and shutdown. Needs valgrind (`apt-get install
# valgrind`; not installed by scripts/install-deps, nothing else needs it).
#
#   bench/router/instructions.sh                                   # build/release, all rows
#   bench/router/instructions.sh --pdrouter old/pdrouter --pdrouter build/release/router/pdrouter
#   bench/router/instructions.sh --rows 0:json,0:stream
#   bench/router/instructions.sh --nginx /usr/sbin/nginx --rows 10:json   # nginx's too, same runs
#
# With --nginx, the bench's one-nginx-hop reference runs under callgrind as well, and its
# instructions per request are printed beside pdrouter's (nginx serves n + n/10 per row: its
# warm-up and the timed run; pdrouter n + 2 n/10: its pool warm-up, its row's warm-up and the
# row).
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
binaries=()
nginx=""
rows="0:json,0:stream,10:json,10:stream"
n1=${N1:-400}
n2=${N2:-1600}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir=$(from_caller "$2"); shift 2 ;;
    --pdrouter) binaries+=("$(realpath "$(from_caller "$2")")"); shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --nginx) nginx=$(realpath "$(from_caller "$2")"); shift 2 ;;
    *) echo "instructions.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
[[ ${#binaries[@]} -gt 0 ]] || binaries=("$(realpath "$bin_dir/router/pdrouter")")
bench=$bin_dir/bench/router/pdrouter_bench
[[ -x $bench ]] || { echo "instructions.sh: $bench not built (scripts/build release)" >&2; exit 2; }

work=$(mktemp -d /tmp/pdr-instructions.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin/router" "$work/bin/sim" "$work/out"
ln -s "$(realpath "$bin_dir/sim/pdsim")" "$work/bin/sim/pdsim"
# pdrouter_bench starts "<bin-dir>/router/pdrouter": a wrapper that runs the chosen binary under
# callgrind (exec keeps the pid, so the bench's own bookkeeping still works).
cat > "$work/bin/router/pdrouter" <<EOF
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file=$work/out/cg.%p.out "\$PDR_UNDER_TEST" "\$@"
EOF
chmod +x "$work/bin/router/pdrouter"
if [[ -n $nginx ]]; then
  cat > "$work/nginx" <<EOF
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file=$work/out/ng.%p.out "$nginx" "\$@"
EOF
  chmod +x "$work/nginx"
fi

# Instructions of pdrouter (and of nginx, with --nginx) for one bench run of `count` requests per
# row: "PDROUTER NGINX".
instructions() {
  local delay=$1 answer=$2 count=$3 ng=0 reference=none
  [[ -z $nginx ]] || reference=$work/nginx
  rm -f "$work"/out/cg.*.out "$work"/out/ng.*.out
  "$bench" --bin-dir "$work/bin" --concurrency 32 --requests "$count" --max-tokens 16 \
    --delays "$delay" --answers "$answer" --nginx "$reference" \
    >"$work/bench.txt" 2>&1 || { cat "$work/bench.txt" >&2; return 1; }
  [[ -z $nginx ]] || ng=$(grep -h '^totals:' "$work"/out/ng.*.out | awk '{print $2}')
  echo "$(grep -h '^totals:' "$work"/out/cg.*.out | awk '{print $2}') $ng"
}

if [[ -n $nginx ]]; then
  printf '| pdrouter | decode delay | answer | instructions/request | nginx hop | ratio |\n'
  printf '|---|---|---|---|---|---|\n'
else
  printf '| pdrouter | decode delay | answer | instructions/request |\n|---|---|---|---|\n'
fi
for binary in "${binaries[@]}"; do
  export PDR_UNDER_TEST=$binary
  IFS=, read -ra list <<<"$rows"
  for row in "${list[@]}"; do
    delay=${row%%:*}
    answer=${row#*:}
    # (a failed run stops the script: the assignments carry the function's status)
    out1=$(instructions "$delay" "$answer" "$n1")
    out2=$(instructions "$delay" "$answer" "$n2")
    read -r i1 g1 <<<"$out1"
    read -r i2 g2 <<<"$out2"
    for v in "$i1" "$i2" "$g1" "$g2"; do
      [[ $v =~ ^[0-9]+$ ]] || { echo "instructions.sh: no callgrind total in a run" >&2; exit 1; }
    done
    # pdrouter serves its pool warm-up (10 %), the row's own warm-up (10 %) and the row; nginx
    # its warm-up (10 %) and the row.
    r1=$(row_requests "$delay" "$n1")
    r2=$(row_requests "$delay" "$n2")
    [[ $r2 -gt $r1 ]] || { echo "instructions.sh: N2 must give more requests than N1" >&2; exit 2; }
    p=$(((i2 - i1) / (r2 + 2 * (r2 / 10) - r1 - 2 * (r1 / 10))))
    if [[ -n $nginx ]]; then
      g=$(((g2 - g1) / (r2 + r2 / 10 - r1 - r1 / 10)))
      printf '| %s | %s ms | %s | %d | %d | %s |\n' "$binary" "$delay" "$answer" "$p" "$g" \
        "$(awk -v a="$p" -v b="$g" 'BEGIN { printf "%.2fx", a / b }')"
    else
      printf '| %s | %s ms | %s | %d |\n' "$binary" "$delay" "$answer" "$p"
    fi
  done
done
