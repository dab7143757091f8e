#!/usr/bin/env bash
# The weight prefetches are in the machine code: every decode entry (decode_rows<Block32Tile<W>>,
# decode_parts<ElemTile<W>, 2>, x8_rows512, decode_rows<LanesTile<W>>, with the tiles inlined) of
# every build, and the vec_dot kernels, hold prefetcht0 and prefetcht1 (the two levels of
# prefetch_line). GCC 12 once deleted them all without a warning (kernels.h); only a benchmark
# showed it, so this looks at the code itself.
#   prefetch_emitted.sh LIBK3_TENSOR.a
set -euo pipefail
lib=$1
command -v objdump >/dev/null || { echo "prefetch_emitted: objdump not found (binutils)"; exit 1; }
dis=$(objdump -d -C --no-show-raw-insn "$lib")
fail=0
# Counts of prefetcht0 / prefetcht1 per function whose name matches $1, one line per function.
per_function() {
  awk -v pat="$1" '
    /^[0-9a-f]+ <.*>:$/ { if (name != "") print t0, t1, name; name = ($0 ~ pat) ? $0 : ""; t0 = t1 = 0; next }
    name != "" && /prefetcht0/ { t0++ }
    name != "" && /prefetcht1/ { t1++ }
    END { if (name != "") print t0, t1, name }' <<<"$dis"
}
rows=$(per_function 'decode_(rows|parts)<|x8_rows512<')
n=$(grep -c . <<<"$rows" || true)
# 7 block types (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4, MXFP4_LANES, Q8_0_X8) in 3 builds (avx2, avxvnni,
# avx512)
if ((n < 21)); then echo "prefetch_emitted: found $n decode rows, expected at least 21"; fail=1; fi
# Every function of a per_function list holds prefetcht0 and prefetcht1.
all_prefetch() {
  while read -r t0 t1 name; do
    [[ -n $name ]] || continue
    if ((t0 == 0 || t1 == 0)); then echo "prefetch_emitted: no prefetcht0/t1 ($t0/$t1) in $name"; fail=1; fi
  done <<<"$1"
}
all_prefetch "$rows"
# The AVX-512 build's own forms are built (a macro once left them out without a sign): the decode
# rows of Q8_0_X8 at 512 bits, and the tiles of a few tokens (GemmKernel::few) prefetch.
if ! grep -q 'x8_rows512<' <<<"$rows"; then echo "prefetch_emitted: no x8_rows512"; fail=1; fi
few=$(per_function '(Bf16Gemm<true>|LanesTile512<.*, true>)::tile<')
if (($(grep -c . <<<"$few" || true) < 16)); then echo "prefetch_emitted: the prefetching few-token tiles are missing"; fail=1; fi
all_prefetch "$few"
dots=$(per_function 'vec_dot' | awk '$1 > 0 && $2 > 0' | grep -c . || true)
if ((dots < 20)); then echo "prefetch_emitted: only $dots vec_dot functions prefetch (expected >= 20)"; fail=1; fi
((fail == 0)) && echo "prefetch_emitted: $n decode rows and $dots vec_dot kernels prefetch"
exit $fail
