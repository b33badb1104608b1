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
set -euo pipefail
cd "$(dirname "$0")/../.."

bin_dir=build/release
binaries=()
rows="0:json,0:stream,10:json,10:stream"
n1=${N1:-400}
n2=${N2:-1600}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --pdrouter) binaries+=("$(realpath "$2")"); shift 2 ;;
    --rows) rows=$2; shift 2 ;;
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

# Instructions of pdrouter for one bench run of `count` requests per row.
instructions() {
  local delay=$1 answer=$2 count=$3
  rm -f "$work"/out/cg.*.out
  "$bench" --bin-dir "$work/bin" --concurrency 32 --requests "$count" --max-tokens 16 \
    --delays "$delay" --answers "$answer" --nginx none >"$work/bench.txt" 2>&1 \
    || { cat "$work/bench.txt" >&2; return 1; }
  grep -h '^totals:' "$work"/out/cg.*.out | awk '{print $2}'
}

printf '| pdrouter | decode delay | answer | instructions/request |\n|---|---|---|---|\n'
for binary in "${binaries[@]}"; do
  export PDR_UNDER_TEST=$binary
  IFS=, read -ra list <<<"$rows"
  for row in "${list[@]}"; do
    delay=${row%%:*}
    answer=${row#*:}
    i1=$(instructions "$delay" "$answer" "$n1")
    i2=$(instructions "$delay" "$answer" "$n2")
    # Rows at a decode delay run --requests / 2; each row adds a 10 % warm-up.
    s1=$n1; s2=$n2
    if [[ $delay -gt 0 ]]; then s1=$((n1 / 2)); s2=$((n2 / 2)); fi
    s1=$((s1 + s1 / 10)); s2=$((s2 + s2 / 10))
    printf '| %s | %s ms | %s | %d |\n' "$binary" "$delay" "$answer" $(((i2 - i1) / (s2 - s1)))
  done
done
