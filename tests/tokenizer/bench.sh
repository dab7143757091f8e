#!/bin/sh
# Tokenizer throughput, k3 vs llama.cpp (node-llama-cpp 3.22.1), side by side on the same GGUF
# vocabularies (cl100k_base / o200k_base ranks imported by k3 with pre = kimi-k2, K3 specials)
# and the same ~MB MiB mixed text (corpus lines in a fixed pseudo-random order; no special tokens).
# Usage: tests/tokenizer/bench.sh BUILD_DIR [MB]   (needs BUILD_DIR/bin/tok_tool)
set -eu
B=$1
MB=${2:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
D=$B/tokdata
mkdir -p "$D"
[ -f "$D/cl100k_base.tiktoken" ] || node "$HERE/refs.mjs" export "$D"
node "$HERE/refs.mjs" bench-text $((MB * 1048576)) "$D/bench.txt"
for enc in cl100k o200k; do
  [ -f "$D/${enc}_kimi.gguf" ] || "$B/bin/tok_tool" make-gguf "$D/${enc}_base.tiktoken" "$D/${enc}_kimi.gguf" --pre kimi-k2 --k3-specials
  K=$("$B/bin/tok_tool" bench "$D/${enc}_kimi.gguf" "$D/bench.txt" --reps 5)
  L=$(node "$HERE/bench_llama.mjs" "$D/${enc}_kimi.gguf" "$D/bench.txt" --reps 3)
  echo "$enc k3:        $K"
  echo "$enc llama.cpp: $L"
  node -e "const k=JSON.parse(process.argv[1]), l=JSON.parse(process.argv[2]);
    if (k.tokens !== l.tokens) { console.error('token counts differ'); process.exit(1); }
    console.log('$enc: k3 / llama.cpp throughput = ' + (k.mb_per_s / l.mb_per_s).toFixed(2) + 'x (median of runs)');" "$K" "$L"
done
"$B/bin/tok_tool" bench-split "$D/bench.txt" --reps 3
