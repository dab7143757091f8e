#!/usr/bin/env bash
# Reproduces the quality table of docs/quantization.md: every type and recipe on the same synthetic
# Kimi-K3, without and with an importance matrix collected on a different text, and after each
# +imatrix row the mix `--target-size` picks for that file's exact size.
# usage: tests/quantize/quality_table.sh BUILD_DIR WORK_DIR [TYPES...]
set -euo pipefail
B=$(cd "${1:?build dir}" && pwd); W=${2:?work dir}; shift 2
TYPES=${*:-"Q8_0 Q6_K Q5_K Q4_K IQ4_XS Q4_0 MXFP4 Q3_K Q2_K MXFP4_MOE Q4_K_K3 Q3_K_K3 Q2_K_K3"}
K3=$B/bin/k3
PPL="-c 128 --chunks 16 -t 2 -q"
mkdir -p "$W" && cd "$W"
"$B/bin/quantize_make_eval_model" ev.gguf --calib calib.txt --eval eval.txt >/dev/null
"$K3" imatrix -m ev.gguf -f calib.txt -o ev.imatrix -c 128 --chunks 16 -t 2 >/dev/null 2>&1
"$K3" perplexity -m ev.gguf -f eval.txt $PPL --save-kl-base ev.kl --json ev-ppl.json >/dev/null 2>&1
row() {  # name report.json ppl.json
  python3 - "$@" <<'EOF'
import json, sys
name, rep, ppl = sys.argv[1:4]
r = json.load(open(rep))["total"]; p = json.load(open(ppl)); k = p["kl"]
print("| %s | %.3f | %.4f | %.5f | %.4f | %.5f | %.1f %% | %.1f |" % (name, r["bpw"], r["rel_rmse"], r["cosine"],
      r.get("weighted_rel_rmse", 0), k["mean_kld"], 100 * k["top1_agreement"], p["perplexity"]["ppl"]))
EOF
}
echo "| type | bpw | rel. RMSE | cosine | weighted rel. RMSE | mean KLD | top-1 | PPL |"
echo "|---|---|---|---|---|---|---|---|"
python3 -c "import json; p=json.load(open('ev-ppl.json')); print('| F32 (reference) | 32.000 | 0 | 1 | 0 | 0 | 100 %% | %.1f |' % p['perplexity']['ppl'])"
for T in $TYPES; do
  for IM in "" "--imatrix ev.imatrix"; do
    tag=$T${IM:+ +imatrix}; f=ev-$T${IM:+-im}
    if ! "$K3" quantize ev.gguf $f.gguf $T $IM --stats-imatrix ev.imatrix --report $f.json -q >/dev/null 2>$f.err; then
      grep -q "needs an importance matrix" $f.err || { cat $f.err >&2; exit 1; }
      continue  # ggml quantizes this type only with an importance matrix
    fi
    "$K3" perplexity -m $f.gguf -f eval.txt $PPL --kl-base ev.kl --json $f-ppl.json >/dev/null 2>&1
    row "$tag" $f.json $f-ppl.json
    if [ -n "$IM" ]; then  # the sized mix with the same bytes and the same matrix
      bytes=$(stat -c %s $f.gguf); s=ev-$T-sized
      if "$K3" quantize ev.gguf $s.gguf --target-size $bytes $IM --stats-imatrix ev.imatrix --report $s.json -q >/dev/null 2>$s.err; then
        "$K3" perplexity -m $s.gguf -f eval.txt $PPL --kl-base ev.kl --json $s-ppl.json >/dev/null 2>&1
        row "--target-size (size of $tag)" $s.json $s-ppl.json
      else  # below the smallest mix (attn_k_b/attn_v_b stay BF16 in every mix)
        echo "| --target-size (size of $tag) | $(grep -o 'smaller than the smallest mix, [^(]*' $s.err) | | | | | | |"
      fi
      rm -f $s.gguf
    fi
    rm -f $f.gguf
    case $T in Q8_0|MXFP4|MXFP4_MOE) break;; esac  # no weighted search for these types
  done
done
