#!/bin/bash
# Eleventh session, H200: paged and biased decode back to back (without the per-call host cost), beside contiguous.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache
F=.gpu/build/tools/flashcl
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
d() { echo "== $*" >> $OUT/decode2.txt; timeout 120 $F bench --decode --repeat 50 --warmup 5 "$@" 2>&1 | grep -E "^ +[0-9]|rror|copy" >> $OUT/decode2.txt; echo "$* t=$((SECONDS-t0))" >> $OUT/summary.txt; }
for round in 1 2; do
  d --cache-lens 32768,131072 --back-to-back
  for p in 16 64 256; do d --cache-lens 32768,131072 --page-size $p --back-to-back; done
  d --cache-lens 32768,131072 --bias shared --back-to-back
  d --cache-lens 32768,131072
  d --cache-lens 32768,131072 --page-size 16
done
d --cache-lens 32768,131072 --tensor-cores off --back-to-back
echo total t=$((SECONDS-t0)) | tee -a $OUT/summary.txt
