#!/bin/bash
# Twelfth session, H200 (build of e26f384; OUT: where results go): do the H100's portable plans carry over (flashcl tune), and the KV-cache page checks.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache
F=${B:-build}/tools/flashcl   # B: the build directory
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
# decode first (short): per call and back to back, contiguous and paged
d() { echo "== $*" >> $OUT/decode.txt; timeout 100 $F bench --decode --repeat 50 --warmup 5 "$@" 2>&1 | grep -E "^ +[0-9]|rror|copy" >> $OUT/decode.txt; echo "decode $* t=$((SECONDS-t0))" >> $OUT/summary.txt; }
for r in 1 2; do
d --cache-lens 32768,131072
for p in 16 256; do d --cache-lens 32768,131072 --page-size $p; done
done
d --cache-lens 32768,131072 --page-size 16 --back-to-back
F64="64,32,8,8:64,32,16,4:64,32,16,8:64,32,4,16:64,16,16,8:64,16,8,8:64,32,32,2:64,32,8,16:128,32,16,8:128,32,32,4:64,64,16,8"
F128_32="32,16,8,8:32,16,4,16:32,16,8,16:32,16,16,4:32,8,8,8:64,8,16,8:64,32,8,16:64,32,16,8:128,32,16,16:64,64,8,16"
F128_16="32,16,8,8:64,8,16,8:32,16,8,16:32,16,16,4:32,16,4,16:64,8,32,4:128,32,32,8:128,32,16,16:64,32,16,8:128,16,32,8"
B128="8,32,8,16:8,64,8,16:8,64,8,32:16,64,8,16:16,64,16,16:16,64,16,8:16,32,8,16:8,128,8,32:16,128,16,16:32,64,16,16:16,64,8,32"
B64="32,32,16,8:32,64,16,8:32,64,16,16:32,64,8,16:16,64,8,16:16,64,16,8:32,128,16,16:32,128,16,8:64,64,16,16:16,128,16,16:64,32,16,8"
t() { pass=$1 dt=$2 d=$3 P=$4; n=${pass}_${dt}_d$d
  timeout 65 $F tune --pass $pass --head-dim $d --dtype $dt --seqlen 2048 --repeat 10 --warmup 2 --top 0 --plans $P --json $OUT/tune_$n.json > $OUT/tune_$n.txt 2>&1
  echo "tune $n rc=$? t=$((SECONDS-t0))" >> $OUT/summary.txt; }
t forward f32 64 $F64; t forward f16 64 $F64
t forward f32 128 $F128_32; t forward f16 128 $F128_16
t backward f32 64 $B64; t backward f16 64 $B64
t backward f32 128 $B128; t backward f16 128 $B128
echo total t=$((SECONDS-t0)) >> $OUT/summary.txt
