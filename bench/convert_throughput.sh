#!/bin/bash
# k3 convert throughput on a synthetic checkpoint of 8.68 GB (docs/benchmarks.md "Converter"):
# disk references (dd), then conversions with warm and cold input, to disk and to tmpfs.
#   bench/convert_throughput.sh WORKDIR [BUILD_DIR]     (WORKDIR needs ~35 GB free)
set -euo pipefail
work=${1:?usage: bench/convert_throughput.sh WORKDIR [BUILD_DIR]}
build=$(realpath "${2:-build}")
K3=$build/bin/k3 GEN=$build/bin/convert_bench_gen
mkdir -p "$work" && cd "$work"
[[ -f src/bench.gguf ]] || "$GEN" gen src --layers 18 --experts 256
[[ -f /dev/shm/k3-rnd ]] || head -c 2000000000 /dev/urandom > /dev/shm/k3-rnd
uptime
echo "== dd references (2 GB of random bytes)"
dd if=/dev/shm/k3-rnd of=dd.tmp bs=4M oflag=direct 2>&1 | tail -1 | sed 's/^/O_DIRECT write: /'
dd if=/dev/shm/k3-rnd of=dd.tmp bs=4M conv=fdatasync 2>&1 | tail -1 | sed 's/^/buffered write + fdatasync: /'
"$GEN" evict dd.tmp
dd if=dd.tmp of=/dev/null bs=4M iflag=direct 2>&1 | tail -1 | sed 's/^/O_DIRECT read: /'
rm -f dd.tmp
openssl speed -evp sha256 -bytes 4194304 -seconds 2 2>/dev/null | tail -1 | sed 's/^/openssl /'
run() {  # LABEL warm|cold ARGS...
  local label=$1 state=$2; shift 2
  rm -rf out /dev/shm/k3conv-out; sync
  if [[ $state == cold ]]; then "$GEN" evict src; else cat src/hf/* > /dev/null; fi
  /usr/bin/time -f "$label ($state input): %e s wall, %U user + %S sys, %P CPU, max RSS %M KB" \
    "$K3" convert --src src/hf --quiet "$@"
}
run "jobs 2 -> disk" warm --out-dir out --jobs 2
"$K3" verify --manifest out/MANIFEST.json src/bench.gguf -q && echo "bench.gguf: every tensor matches the converted manifest"
run "jobs 2 -> disk" warm --out-dir out --jobs 2
run "jobs 2 -> disk, --verify-writes" warm --out-dir out --jobs 2 --verify-writes
run "jobs 1 -> disk" warm --out-dir out --jobs 1
run "jobs 3 -> disk" warm --out-dir out --jobs 3
run "jobs 2 -> disk" cold --out-dir out --jobs 2
run "jobs 2 -> disk" cold --out-dir out --jobs 2
run "jobs 2 -> tmpfs" warm --out-dir /dev/shm/k3conv-out --jobs 2
rm -rf out /dev/shm/k3conv-out
uptime
