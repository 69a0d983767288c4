#!/bin/bash
# The merged main (wgmma backward) on the H100: the forward wgmma suite first (not rerun after the dispatcher
# change), then the dispatcher and the wgmma backward suite. Each suite's output is written under $OUT as it ends.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache CK_FORK=no
B=.gpu/build
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
suite() { # name path timeout
  local name=$1 path=$2 lim=$3
  ( cd $(dirname $path) && timeout $lim ./$(basename $path) ) > $OUT/suite_$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^[0-9]+%: Checks' $OUT/suite_$name.txt | tail -1) t=$((SECONDS-t0))" | tee -a $OUT/summary.txt
  grep -E ":[FE]:" $OUT/suite_$name.txt | head -5
}
suite forward_wgmma $B/tests/forward/test_forward_wgmma 170
suite dispatch $B/tests/dispatch/test_dispatch 20
suite backward_wgmma $B/tests/backward/test_backward_wgmma 80
echo total t=$((SECONDS-t0))
