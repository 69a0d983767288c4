#!/usr/bin/env bash
# gpu_results.sh: the benchmark tables of README.md and docs/perf.md, on the GPU machine.
# Usage (from the project root, after tools/setup.sh built build/; docs/nvidia.md for the NVIDIA driver):
#   FLASHCL_DEVICE=nvidia bash tools/gpu_results.sh OUTDIR [SEQLENS] [EXTRA bench options...]
# FLASHCL_BIN names another flashcl program (default build/tools/flashcl).
# Writes OUTDIR/d<d>_c<causal>.{json,txt,log}; prints the tables. The GPU machine has no
# gnuplot: draw the plots afterwards with tools/plot_bench.py OUTDIR/*.json.
set -uo pipefail
out=${1:?usage: gpu_results.sh OUTDIR [SEQLENS] [bench options...]}
seqlens=${2:-512,1024,2048,4096,8192,16384}
shift $(( $# >= 2 ? 2 : $# ))
bin=${FLASHCL_BIN:-build/tools/flashcl}
mkdir -p "$out"
status=0
for d in 64 128; do
  for causal in 0 1; do
    name="d${d}_c${causal}"
    flags=(--seqlens "$seqlens" --head-dim "$d" --repeat 10 --warmup 2 --backward
           --json "$out/$name.json" "$@")
    [ "$causal" = 1 ] && flags+=(--causal)
    echo "== $bin bench ${flags[*]}"
    "$bin" bench "${flags[@]}" 2>"$out/$name.log" | tee "$out/$name.txt" || status=1
  done
done
exit $status
