#!/usr/bin/env bash
# Builds the tokenizer libFuzzer target with clang in <build>/fuzz-tok and runs it for a bounded
# time; any crash, sanitizer report, round-trip mismatch or memory blow-up fails the test.
#   run_fuzz.sh SOURCE_DIR BUILD_DIR [SECONDS]
set -euo pipefail
src=$1 build=$2 seconds=${3:-25}
fz=$build/fuzz-tok
cmake -S "$src" -B "$fz" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DK3_FUZZ=ON -DK3_TESTS=OFF -DK3_BENCH=OFF >"$fz.configure.log" 2>&1 ||
  { cat "$fz.configure.log"; exit 1; }
cmake --build "$fz" --target tokenizer_fuzz -j2
mkdir -p "$fz/corpus"
"$fz/bin/tokenizer_fuzz" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$fz/crash-" -print_final_stats=1 "$fz/corpus"
