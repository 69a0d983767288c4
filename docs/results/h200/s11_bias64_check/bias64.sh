#!/bin/bash
# Eleventh session, H200: d64 bias forwards on wgmma 2x64 pipelined by default: suites, then the bench rows against
# FLASHCL_WGMMA=0 (mma.sync) and dense, forward and forward+backward.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache CK_FORK=no
B=.gpu/build
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
suite() { # name path timeout
  local name=$1 path=$2 lim=$3
  ( cd $(dirname $path) && timeout $lim ./$(basename $path) ) > $OUT/suite_$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^[0-9]+%: Checks' $OUT/suite_$name.txt | tail -1) t=$((SECONDS-t0))" | tee -a $OUT/summary.txt
  grep -E ":[FE]:" $OUT/suite_$name.txt | head -5 | tee -a $OUT/summary.txt
}
suite dispatch $B/tests/dispatch/test_dispatch 20
suite forward_wgmma $B/tests/forward/test_forward_wgmma 200
suite bias $B/tests/features/test_bias 200
suite score_mods $B/tests/features/test_score_mods 120
bench() { timeout 90 $B/tools/flashcl bench --impl flash --dtype f16 --head-dim 64 --seqlens 2048,8192 --repeat 20 --warmup 3 --no-check "$@" 2>&1 | grep -E "^ +[0-9]|rror"; }
for c in "" "--causal"; do
  for bias in shared full; do
    echo "== d64 bias $bias $c default (wgmma 2x64 pipelined)" >> $OUT/bias64.txt
    bench --bias $bias $c --backward >> $OUT/bias64.txt
    echo "== d64 bias $bias $c FLASHCL_WGMMA=0 (mma.sync)" >> $OUT/bias64.txt
    FLASHCL_WGMMA=0 bench --bias $bias $c --backward >> $OUT/bias64.txt
  done
  echo "== d64 dense $c default" >> $OUT/bias64.txt
  bench $c --backward >> $OUT/bias64.txt
done
echo total t=$((SECONDS-t0)) | tee -a $OUT/summary.txt
