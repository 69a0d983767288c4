#!/bin/bash
# Eleventh session, H200: issue 19's goal shapes (f16, d128, Hq 32, Hkv 8) with the main build.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache
F=.gpu/build/tools/flashcl
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
d() { echo "== $*" >> $OUT/decode.txt; timeout 120 $F bench --decode --repeat 50 --warmup 5 "$@" 2>&1 | grep -E "^ +[0-9]|rror|copy" >> $OUT/decode.txt; echo "$* t=$((SECONDS-t0))" >> $OUT/summary.txt; }
d --cache-lens 4096,32768,65536,131072
d --cache-lens 4096,32768,65536,131072 --back-to-back
d --cache-lens 32768,131072 --query-len 4
d --batch 8 --cache-lens 4096,8192
d --batch 16 --cache-lens 4096,8192
d --batch 8 --cache-lens 4096,8192 --back-to-back
d --cache-lens 32768,131072 --tensor-cores off
d --batch 8 --cache-lens 4096,8192 --tensor-cores off
for p in 16 64 256; do d --cache-lens 32768,131072 --page-size $p; done
d --cache-lens 32768,131072 --bias shared
echo total t=$((SECONDS-t0)) | tee -a $OUT/summary.txt
