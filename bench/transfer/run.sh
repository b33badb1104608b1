#!/usr/bin/env bash
# Runs pdx_transfer_bench beside ucx_perftest (ucp_put_bw) on the same transport in the same run
# and prints ours / ucx_perftest per message size, then the merge and post-overhead targets.
#   bench/transfer/run.sh [--bench PATH] [--tls tcp,shm] [--sizes 64K,1M,16M] [--depth 4]
#                         [--time-ms 1000] [--rounds 3] [--modes poll,thread,poll-nostats]
#                         [--extra "--inline-kib 64 ..."]
# Each measurement is repeated --rounds times, ours (in every mode) and ucx_perftest interleaved
# (perftest sized to run as long as our cell), and the best round of each is kept (best-of-N
# filters interference from other processes on a shared box).
#
# Modes of ours (one column each; the verdict uses the first one):
#   poll          both ends busy-poll progress() on their main thread (EventFd mode, never
#                 sleeping): what ucx_perftest does -- its client busy-polls ucp_worker_progress,
#                 and in a 64 KiB tcp run (strace -ff) its server's main thread busy-polled it
#                 too between the barriers (perftest's -o turns that off; the 4 MiB note below
#                 saw the server asleep instead). Default agent configuration otherwise.
#   thread        the default deployment: a progress thread per agent, asleep on the UCX event
#                 fd between events; the caller sleeps in wait().
#   poll-nostats  poll, with Config::latency_stats = false (no clock reads per transfer).
#   thread-spin   thread, with Config::progress_spin = 100 us on both ends (--progress-spin-us).
# perftest figure: the "overall" bandwidth of its Final line (total bytes / total time, as ours);
# its "average" column there is only the last report interval (under 1 s of a 1 s run).
# Both tools use memory allocated through UCX (UCP_MEM_MAP_ALLOCATE), both ends on 127.0.0.1,
# the same UCX environment (UCX_TLS / UCX_NET_DEVICES below, plus whatever the caller exports).
# Bounded: each perftest client runs under `timeout`, each bench run is time-limited per cell.
# Over tcp ours writes with active messages (Config::write_protocol Auto; UCX 1.13 has no
# one-sided put there), so a tcp run also measures `ucx_perftest -t ucp_am_bw` and prints ours
# against it for information; the verdict stays against ucp_put_bw, as the target is stated.
#
# tcp reference ("ref" column): UCX 1.13 has no RMA lane over tcp, so a put is emulated with
# active messages that the TARGET must process. ucx_perftest 1.13's ucp_put_bw does not progress
# its target during the measured loop (measured: the server process used 0.14 s of CPU in a
# 3.5 s 4 MiB run, asleep in poll() in its barrier); UCX's async thread then handles the target's
# socket, UCX_TCP_MAX_POLL (16) events per wake-up, and once puts outgrow the socket buffers
# (>= 4 MiB here) perftest collapses to 0.03-0.07 GB/s (4 MiB recovers with UCX_TCP_MAX_POLL=1024,
# 8-16 MiB do not). That figure measures perftest's harness, not the transport, so over tcp the
# reference for a size is the best perftest figure at that size OR ANY SMALLER SIZE of the same
# run (never lower than the same-size figure, so the ratio can only get stricter); both figures
# are printed. Over shm puts are true one-sided memcpys and the same-size figure is used as is
# (there the bandwidth legitimately falls with size: 64 KiB stays in cache, 16 MiB does not).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bench=""
tls_list="tcp,shm"
sizes="64K,1M,16M"
depth=4
time_ms=1000
rounds=3
modes="poll,thread,poll-nostats"
extra=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --tls) tls_list=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --time-ms) time_ms=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$bench" ]]; then
  for d in "$root"/build-*rel* "$root"/build*; do
    if [[ -x "$d/bench/transfer/pdx_transfer_bench" ]]; then bench="$d/bench/transfer/pdx_transfer_bench"; break; fi
  done
fi
[[ -x "$bench" ]] || { echo "pdx_transfer_bench not found; pass --bench PATH" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt install ucx-utils)" >&2; exit 2; }

to_bytes() {  # 64K -> 65536
  local v=${1%[KkMmGg]} u=${1: -1}
  case "$u" in K|k) echo $((v * 1024)) ;; M|m) echo $((v * 1048576)) ;; G|g) echo $((v * 1073741824)) ;; *) echo "$1" ;; esac
}

tls_env() {  # prints the UCX environment for a transport name
  case "$1" in
    tcp) echo "UCX_TLS=tcp UCX_NET_DEVICES=lo" ;;
    shm) echo "UCX_TLS=posix,self" ;;
    *) echo "unknown transport $1" >&2; exit 2 ;;
  esac
}

# ucx_perftest ucp_put_bw: prints bytes/s (perftest "MB/s" is MiB/s), or 0 on failure.
# The iteration count makes perftest run about as long as our cell (--time-ms at the rate ours
# just measured), so both face the same share of the machine's load: a 5 ms perftest run can
# fit in one scheduling quantum that a 1 s run never gets on a loaded box.
perftest_bw() {  # TLS SIZE OURS_GBPS [TEST (default ucp_put_bw)]
  local tls=$1 size=$2 ours_gbps=$3 test=${4:-ucp_put_bw} iters port srv out mbs
  iters=$(awk -v g="$ours_gbps" -v s="$size" -v t="$time_ms" 'BEGIN {
    n = int(g * 1e9 * t / 1000 / s); if (n < 10) n = 10; if (n > 2000000) n = 2000000; print n }')
  port=$(( 20000 + RANDOM % 20000 ))
  env $(tls_env "$tls") timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  out=$(env $(tls_env "$tls") timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
        -s "$size" -n "$iters" -w $((iters / 10 + 1)) 2>&1 || true)
  wait "$srv" 2>/dev/null || true
  mbs=$(awk '/^Final:/ {print $7}' <<<"$out")  # overall MiB/s (see the top)
  if [[ -z "$mbs" ]]; then echo 0; return; fi
  awk -v m="$mbs" 'BEGIN { printf "%.0f", m * 1048576 }'
}

echo "# pdx transfer core vs ucx_perftest -t ucp_put_bw, $(date -u +%FT%TZ), $(nproc) cores"
mode_args() {  # bench arguments of a mode of ours
  case "$1" in
    poll) echo "--progress poll --target-progress poll" ;;
    thread) echo "" ;;  # the defaults (also what binaries without --progress run)
    poll-nostats) echo "--progress poll --target-progress poll --no-latency-stats" ;;
    thread-spin) echo "--progress-spin-us 100" ;;  # progress threads that poll 100 us after an event
    *) echo "unknown mode $1" >&2; exit 2 ;;
  esac
}
mode_list=${modes//,/ }
for m in $mode_list; do mode_args "$m" >/dev/null; done

echo "# bench: $bench (depth $depth, ${time_ms} ms per cell, best of $rounds rounds, modes: $modes, extra: ${extra:-none})"
echo "# load at start:$(uptime | sed 's/.*load average//')"
for tls in ${tls_list//,/ }; do
  echo
  echo "## transport $tls ($(tls_env "$tls"))"
  rows=""
  am_rows=""
  for s in ${sizes//,/ }; do  # interleaved per size so both see the same machine load
    b=$(to_bytes "$s")
    pt=0
    am=0
    declare -A best=()
    for ((r = 0; r < rounds; ++r)); do
      first=""
      for m in $mode_list; do
        csv=$("$bench" --tls "$tls" --sizes "$s" --blocks 1 --patterns contig --ops write \
              --depth "$depth" --time-ms "$time_ms" --min-iters 5 --max-iters 1000000 --no-post \
              --no-verify --csv $(mode_args "$m") $extra)
        o=$(awk -F, -v b="$b" '$1=="write" && $3==b && $4==1 {print $8}' <<<"$csv")
        first=${first:-${o:-0}}
        best[$m]=$(awk -v a="${best[$m]:-0}" -v b="${o:-0}" 'BEGIN { print (b > a) ? b : a }')
      done
      p=$(perftest_bw "$tls" "$b" "$first")
      pt=$(awk -v a="$pt" -v b="$p" 'BEGIN { print (b > a) ? b : a }')
      if [[ "$tls" == tcp ]]; then  # ours writes with active messages there (see below)
        p=$(perftest_bw "$tls" "$b" "$first" ucp_am_bw)
        am=$(awk -v a="$am" -v b="$p" 'BEGIN { print (b > a) ? b : a }')
      fi
    done
    [[ "$tls" == tcp ]] && am_rows+="$b $s $am ${best[${mode_list%% *}]}"$'\n'
    line="$b $s $pt"
    for m in $mode_list; do line+=" ${best[$m]}"; done
    rows+="$line"$'\n'
    unset best
  done
  # ascending size; tcp: ref = best perftest figure at this size or a smaller one (see top)
  printf "%-6s %9s %9s" size "perftest" "ref"
  for m in $mode_list; do printf " %13s %7s" "$m" ratio; done
  printf "   (GB/s; verdict: %s)\n" "${mode_list%% *}"
  sort -n <<<"$rows" | awk -v tls="$tls" 'NF >= 4 {
      pg = $3 / 1e9; ref = pg
      if (tls == "tcp" && best > ref) ref = best
      if (pg > best) best = pg
      printf "%-6s %9.3f %9.3f", $2, pg, ref
      for (i = 4; i <= NF; ++i) {
        r = (ref > 0) ? $i / ref : 0
        if (i == 4) v = r
        printf " %13.3f %6.1f%%", $i, r * 100
      }
      printf "   %s%s\n", (v >= 0.9 ? "met (>=90%)" : "NOT met (<90%)"),
             (ref > pg ? "  [ref: a smaller size; perftest at this size is below it]" : "") }'
  if [[ -n "$am_rows" ]]; then
    # Over tcp WriteProtocol::Auto sends writes as active messages (UCX 1.13 acknowledges every
    # put fragment there), so ucp_am_bw is the like-for-like figure; printed for information
    # (the verdict above is against ucp_put_bw, as the target is stated).
    echo "# tcp writes go as active messages (WriteProtocol::Auto): ucx_perftest -t ucp_am_bw for comparison"
    sort -n <<<"$am_rows" | awk -v m="${mode_list%% *}" 'NF >= 4 {
        a = $3 / 1e9; printf "%-6s ucp_am_bw %7.3f GB/s   ours (%s) %7.3f GB/s = %5.1f%%\n", $2, a, m, $4,
        (a > 0 ? $4 / a * 100 : 0) }'
  fi
  echo "### merging and post overhead ($tls)"
  csv=""
  for ((r = 0; r < rounds; ++r)); do
    csv+=$("$bench" --tls "$tls" --sizes 16K,16M --blocks 1,1024 --patterns contig,scatter \
           --ops write --depth "$depth" --time-ms "$time_ms" --min-iters 5 --max-iters 1000000 \
           --csv --region-mib 32 $extra)$'\n'
  done
  # best round per cell (max GB/s, min post overhead)
  csv=$(awk -F, '
    /^op,/ || /^#/ || NF == 0 {next}
    NF == 2 { if (!($1 in v) || $2 < v[$1]) v[$1] = $2; next }
    { k = $1 "," $2 "," $3 "," $4; if (!(k in best) || $8 > g[k]) { best[k] = $0; g[k] = $8 } }
    END { print "op,pattern,block_bytes,blocks,bytes_per_xfer,descriptors,iters,gbps,us_per_xfer,post_us,error"
          for (k in best) print best[k]; for (x in v) print x "," v[x] }' <<<"$csv" | sort)
  echo "$csv" | grep -v '^#'
  awk -F, '
    $1=="write" && $2=="contig" && $3==16384 && $4==1024 {m = $8}
    $1=="write" && $2=="contig" && $3==16777216 && $4==1 {big = $8}
    $1=="post_overhead_ns_per_id" {post = $2}
    $1=="post_overhead_contig_ns_per_id" {postc = $2}
    END {
      r = big > 0 ? m / big : 0
      printf "merge: 1024 x 16 KiB contiguous %.3f GB/s vs 1 x 16 MiB %.3f GB/s = %.0f%% %s\n",
             m, big, r * 100, (r >= 0.8 ? "met (>=80%)" : "NOT met (<80%)")
      printf "post overhead: %.1f ns per block id (1024 scattered 4 KiB ids) %s\n",
             post, ((post > 0 && post <= 1000) ? "met (<=1 us)" : "NOT met (>1 us)")
      printf "post overhead, 1024 contiguous ids (1 descriptor): %.1f ns per block id\n", postc
    }' <<<"$csv"
done
echo
echo "# load at end:$(uptime | sed 's/.*load average//')"
