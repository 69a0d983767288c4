#!/bin/bash
# The A/B behind bench_ab_2026-11-27.txt: two builds' flashcl on the same machine, portable kernels
# (tensor cores off), forward and forward+backward, f32 and f16 storage, d 64 and 128.
# Usage: FLASHCL_DEVICE=nvidia bash bench_ab.sh BUILD_A BUILD_B OUTDIR
a=$1 b=$2 out=$3
mkdir -p "$out"
for build in "$a" "$b"; do
  for dt in f32 f16; do for d in 64 128; do
    name=$(basename "$build")_${dt}_d$d
    "$build/tools/flashcl" bench --impl flash --tensor-cores off --dtype $dt --head-dim $d --seqlens 2048,8192 \
      --backward --repeat 10 --warmup 2 --no-check --json "$out/$name.json" >"$out/$name.txt" 2>&1
  done; done
done
