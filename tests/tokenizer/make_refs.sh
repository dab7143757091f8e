#!/bin/sh
# Builds the reference data of the tokenizer parity tests into OUT (ctest fixture tokenizer_refs):
# js-tiktoken's ranks and encodings of the corpus, k3-written GGUF vocabularies (pre=kimi-k2) of
# those ranks, and llama.cpp's (node-llama-cpp) encodings of the corpus with them. Each step is
# skipped when its inputs are unchanged since the last run (stamps hold hashes of the inputs).
# Usage: make_refs.sh TOK_TOOL OUT
set -eu
TOOL=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
NODE_DIR="$HERE/../node"
mkdir -p "$OUT"
hash() { cat "$@" | sha256sum | cut -c1-16; }
fresh() { [ -f "$OUT/$1.stamp" ] && [ "$(cat "$OUT/$1.stamp")" = "$2" ]; }

S=$(hash "$HERE/corpus.json" "$HERE/refs.mjs")
if ! fresh tiktoken "$S"; then
  node "$HERE/refs.mjs" export "$OUT"
  node "$HERE/refs.mjs" strings "$HERE/corpus.json" "$OUT/strings.json"
  node "$HERE/refs.mjs" tiktoken "$HERE/corpus.json" "$OUT"
  echo "$S" > "$OUT/tiktoken.stamp"
fi
for enc in cl100k o200k; do
  "$TOOL" make-gguf "$OUT/${enc}_base.tiktoken" "$OUT/${enc}_kimi.gguf.new" --pre kimi-k2 --k3-specials
  if cmp -s "$OUT/${enc}_kimi.gguf.new" "$OUT/${enc}_kimi.gguf"; then
    rm "$OUT/${enc}_kimi.gguf.new"
  else
    mv "$OUT/${enc}_kimi.gguf.new" "$OUT/${enc}_kimi.gguf"
  fi
  S=$(hash "$OUT/${enc}_kimi.gguf" "$OUT/strings.json" "$NODE_DIR/llama.mjs")
  if ! fresh "llama_$enc" "$S"; then
    node "$NODE_DIR/llama.mjs" tokenize --model "$OUT/${enc}_kimi.gguf" --in "$OUT/strings.json" --out "$OUT/llama_${enc}_plain.json"
    node "$NODE_DIR/llama.mjs" tokenize --model "$OUT/${enc}_kimi.gguf" --special --in "$OUT/strings.json" --out "$OUT/llama_${enc}_special.json"
    echo "$S" > "$OUT/llama_$enc.stamp"
  fi
done
echo "tokenizer refs ready in $OUT"
