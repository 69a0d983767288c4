#!/bin/bash
# Eleventh session, H200: the matrix-unit decode's bias loaded a step ahead: suites, then bias rows beside dense.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache CK_FORK=no
B=.gpu/build; F=$B/tools/flashcl
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
suite() {
  local name=$1 path=$2 lim=$3
  ( cd $(dirname $path) && timeout $lim ./$(basename $path) ) > $OUT/suite_$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^[0-9]+%: Checks' $OUT/suite_$name.txt | tail -1) t=$((SECONDS-t0))" | tee -a $OUT/summary.txt
  grep -E ":[FE]:" $OUT/suite_$name.txt | head -5 | tee -a $OUT/summary.txt
}
suite bias $B/tests/features/test_bias 150 &
suite decode_mma $B/tests/forward/test_decode_mma 150 &
suite kv_cache $B/tests/forward/test_kv_cache 150 &
suite score_mods $B/tests/features/test_score_mods 150 &
wait
d() { echo "== $*" >> $OUT/dbias.txt; timeout 60 $F bench --decode --repeat 50 --warmup 5 "$@" 2>&1 | grep -E "^ +[0-9]|rror" >> $OUT/dbias.txt; }
for round in 1 2; do
  for m in "" "--bias shared" "--bias full"; do
    d --cache-lens 8192,32768,131072 --back-to-back $m
  done
  d --batch 8 --cache-lens 8192 --back-to-back
  d --batch 8 --cache-lens 8192 --back-to-back --bias full
done
echo total t=$((SECONDS-t0)) | tee -a $OUT/summary.txt
