#!/bin/bash
# Eleventh session, H200: the d64 ALiBi-only dQ tiles (suites + A/B), and the d64 bias forward on wgmma 2x64 pipelined.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache CK_FORK=no
B=.gpu/build; X=.gpu/build-exp
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
suite() { # name path timeout
  local name=$1 path=$2 lim=$3
  ( cd $(dirname $path) && timeout $lim ./$(basename $path) ) > $OUT/suite_$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^[0-9]+%: Checks' $OUT/suite_$name.txt | tail -1) t=$((SECONDS-t0))" | tee -a $OUT/summary.txt
  grep -E ":[FE]:" $OUT/suite_$name.txt | head -5 | tee -a $OUT/summary.txt
}
suite dispatch $B/tests/dispatch/test_dispatch 20
suite backward_wgmma $B/tests/backward/test_backward_wgmma 150
bench() { timeout 90 $X/tools/flashcl bench --impl flash --dtype f16 --head-dim 64 --seqlens 2048,8192 --repeat 20 --warmup 3 --no-check "$@" 2>&1 | grep -E "^ +[0-9]|rror"; }
for round in 1 2; do
  for m in "--alibi-max-bias 8" "--alibi-max-bias 8 --causal"; do
    echo "== round $round d64 $m dq default (2x64 for alibi-only)" >> $OUT/dq.txt
    bench --backward $m >> $OUT/dq.txt
    echo "== round $round d64 $m dq forced 2,128" >> $OUT/dq.txt
    FLASHCL_WGMMA_BWD_DQ=2,128 bench --backward $m >> $OUT/dq.txt
  done
  echo "round $round t=$((SECONDS-t0))" >> $OUT/summary.txt
done
for bias in shared full; do
  for c in "" "--causal"; do
    echo "== d64 bias $bias $c default (mma.sync)" >> $OUT/bias64.txt
    bench --bias $bias $c >> $OUT/bias64.txt
    echo "== d64 bias $bias $c wgmma 2x64 pipelined" >> $OUT/bias64.txt
    FLASHCL_WGMMA=1 FLASHCL_WGMMA_TILES=2,64 FLASHCL_BUILD_OPTIONS=-DWG_PIPELINE=1 bench --bias $bias $c >> $OUT/bias64.txt
    echo "== d64 dense $c default" >> $OUT/bias64.txt
    bench $c >> $OUT/bias64.txt
  done
done
echo total t=$((SECONDS-t0)) | tee -a $OUT/summary.txt
