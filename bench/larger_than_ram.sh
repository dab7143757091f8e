#!/usr/bin/env bash
# Streaming experts benchmark (docs/benchmarks.md, "Streaming experts"). Needs root and the cgroup-v1
# memory controller (/sys/fs/cgroup/memory). Usage:
#   bench/larger_than_ram.sh K3 MODEL CAP "CACHE1 CACHE2 CACHE3" [THREADS] [N_GEN] [LLAMA_CAPS]
# Prints: the drive's O_DIRECT rate, k3 bench in a CAP group at each cache size (freq policy, a
# routing trace recorded at the first), k3 cache-sim on that trace, llama.cpp in the CAP group and
# in the LLAMA_CAPS groups (the smallest where it runs), all with the load average.
set -u
K3=$1 MODEL=$2 CAP=$3 CACHES=$4 T=${5:-2} N=${6:-16} LLAMA_CAPS=${7:-}
CG=/sys/fs/cgroup/memory/k3bench.$$
OUT=${OUT:-/tmp/k3-ltr.$$}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")/.." && pwd)
trap 'rmdir "$CG" 2>/dev/null' EXIT
in_group() {  # in_group LIMIT CMD...: runs CMD in a fresh memory cgroup capped at LIMIT (page cache included)
  local lim=$1; shift
  # page cache is charged to the group that first reads it: evict the model's pages first
  python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$MODEL"
  rmdir "$CG" 2>/dev/null; mkdir "$CG" || exit 1
  echo "$lim" > "$CG/memory.limit_in_bytes"
  bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$CG" "$@"
  local rc=$?
  echo "  [group $lim: rc $rc, peak usage $(( $(cat "$CG/memory.max_usage_in_bytes") / 1048576 )) MiB, OOM kills $(grep -E '^oom_kill ' "$CG/memory.oom_control" | cut -d' ' -f2)]" >&2
  return $rc
}
echo "== $(date -u +%FT%TZ) model $MODEL ($(( $(stat -c %s "$MODEL") / 1048576 )) MiB), load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== drive: dd iflag=direct on the model file"
dd if="$MODEL" of=/dev/null bs=4M iflag=direct 2>&1 | tail -1
first=1
for c in $CACHES; do
  echo "== k3 bench in a $CAP group, --expert-cache $c (load $(cut -d' ' -f1-3 /proc/loadavg))"
  extra=""
  [ $first = 1 ] && extra="--routing-trace $OUT/trace.txt"
  in_group "$CAP" "$K3" bench -m "$MODEL" -p 0 -n "$N" -r 2 -t "$T" --membw-mib 0 --expert-cache "$c" $extra --json \
    > "$OUT/k3_$c.json"
  python3 - "$OUT/k3_$c.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); e = j["experts"]
print(f"  tg {j['tg_tokens_per_s']:.3f} ± {j['tg_stddev']:.3f} t/s; hit {100*e['hit_rate']:.1f}%, "
      f"{e['misses_per_token']:.1f} misses/token = {e['bytes_read_per_token']/1e6:.1f} MB/token read at {e['read_gbps']:.2f} GB/s, "
      f"stall {1e3*e['stall_s_per_token']:.1f} ms/token, reading {1e3*e['read_busy_s_per_token']:.1f} ms/token, "
      f"prediction {100*e['prediction_accuracy']:.1f}%, cache {e['capacity_experts']} experts "
      f"({e['allocated_bytes']/1048576:.0f} MiB of {e['budget_bytes']/1048576:.0f}), RSS anon {j['rss_anon_bytes']/1048576:.0f} MiB "
      f"file {j['rss_file_bytes']/1048576:.0f} MiB")
PY
  first=0
done
echo "== k3 cache-sim on the trace (capacities = the three caches in experts)"
slot=$(python3 -c "import json;print(json.load(open('$OUT/k3_$(echo $CACHES | cut -d' ' -f1).json'))['experts']['slot_bytes'])")
sizes=""
for c in $CACHES; do sizes="$sizes $(python3 -c "import json;print(json.load(open('$OUT/k3_$c.json'))['experts']['capacity_experts'])")"; done
"$K3" cache-sim "$OUT/trace.txt" --sizes $sizes
echo "== llama.cpp (node-llama-cpp 3.22.1) in a $CAP group"
in_group "$CAP" node "$here/tests/node/llama.mjs" bench --model "$MODEL" -p 0 -n "$N" --reps 2 --threads "$T" > "$OUT/llama_cap.json" 2> "$OUT/llama_cap.err"
tail -c 300 "$OUT/llama_cap.json" "$OUT/llama_cap.err"; echo
for lc in $LLAMA_CAPS; do
  echo "== llama.cpp in a $lc group (load $(cut -d' ' -f1-3 /proc/loadavg))"
  if in_group "$lc" node "$here/tests/node/llama.mjs" bench --model "$MODEL" -p 0 -n "$N" --reps 2 --threads "$T" > "$OUT/llama_$lc.json" 2> "$OUT/llama_$lc.err"; then
    python3 -c "import json;j=json.load(open('$OUT/llama_$lc.json'));print(f\"  llama.cpp tg {j['tg_tokens_per_s']:.3f} ± {j['tg_stddev']:.3f} t/s\")"
    echo "== k3 in the same $lc group, --expert-cache auto"
    in_group "$lc" "$K3" bench -m "$MODEL" -p 0 -n "$N" -r 2 -t "$T" --membw-mib 0 --expert-cache auto --json > "$OUT/k3_auto_$lc.json"
    python3 -c "import json;j=json.load(open('$OUT/k3_auto_$lc.json'));e=j['experts'];print(f\"  k3 tg {j['tg_tokens_per_s']:.3f} ± {j['tg_stddev']:.3f} t/s, hit {100*e['hit_rate']:.1f}%, cache {e['capacity_experts']} experts\")"
    break
  fi
  tail -c 200 "$OUT/llama_$lc.err"; echo
done
echo "== done $(date -u +%FT%TZ), load: $(cut -d' ' -f1-3 /proc/loadavg); files in $OUT"
