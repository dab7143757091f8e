#!/usr/bin/env bash
# Builds the GGUF libFuzzer target with clang in <build>/fuzz and runs it for a bounded time,
# seeded with the valid and hostile test files; any crash, sanitizer report, leak, per-input
# timeout or memory blow-up fails the test.
#   run_fuzz.sh SOURCE_DIR BUILD_DIR CORPUS_TOOL [SECONDS]
set -euo pipefail
src=$1 build=$2 corpus_tool=$3 seconds=${4:-30}
fz=$build/fuzz
cmake -S "$src" -B "$fz" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DK3_FUZZ=ON -DK3_TESTS=OFF -DK3_BENCH=OFF >"$fz.configure.log" 2>&1 ||
  { cat "$fz.configure.log"; exit 1; }
cmake --build "$fz" --target gguf_fuzz -j2
rm -rf "$fz/seeds" "$fz/corpus"
mkdir -p "$fz/corpus"
"$corpus_tool" "$fz/seeds"
i=0
while IFS= read -r f; do cp "$f" "$fz/corpus/seed_$i.gguf"; i=$((i + 1)); done < <(find "$fz/seeds" -name '*.gguf' | sort)
echo "run_fuzz: $i seeds, ${seconds}s"
"$fz/bin/gguf_fuzz" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -timeout=10 -artifact_prefix="$fz/crash-" -print_final_stats=1 "$fz/corpus"
