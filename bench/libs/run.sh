#!/usr/bin/env bash
# Builds and runs the library comparisons behind docs/libraries.md, each with the machine load
# (uptime) before it. Standalone g++ -O2 programs (the project's optimisation level, no -march),
# not CMake targets: two of them need Debian packages pdrouter does not depend on
# (libsimdjson-dev, libcli11-dev); a missing one is skipped with a note.
#   bench/libs/run.sh [OUT_DIR]     (default /tmp/pdr-libs)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/pdr-libs}
mkdir -p "$out"
cxx=(g++ -std=c++20 -O2 -Wall -Wextra -I.)

echo "== uuid: hand-written xoshiro256** vs Boost.Uuid"
"${cxx[@]}" bench/libs/uuid_bench.cpp -o "$out/uuid_bench"
uptime
"$out/uuid_bench"

echo "== json: net/common/json_scan vs simdjson On-Demand"
if [[ -f /usr/include/simdjson.h ]]; then
  "${cxx[@]}" bench/libs/json_scan_vs_simdjson.cpp net/common/json_scan.cpp \
    net/common/json_value.cpp -lsimdjson -o "$out/json_vs_simdjson"
  uptime
  "$out/json_vs_simdjson"
else
  echo "skipped: apt-get install libsimdjson-dev"
fi

echo "== flags: config/ messages vs CLI11"
if [[ -f /usr/include/CLI/CLI.hpp ]]; then
  "${cxx[@]}" bench/libs/cli11_messages.cpp -o "$out/cli11_messages"
  "$out/cli11_messages"
else
  echo "skipped: apt-get install libcli11-dev"
fi
