#!/bin/bash
# Second run: the portable kernel's fused merge with small batches (forced, --fused-merge), the default policy.
N=.gpu/build-decode; B=.gpu/build; export FLASHCL_DEVICE=nvidia
export FLASHCL_CACHE_DIR=/tmp/fc; mkdir -p /tmp/fc /tmp/r
: > $OUT/suites.txt
for t in forward/test_split_kv forward/test_decode forward/test_decode_mma forward/test_kv_cache features/test_bias; do
  ( timeout 200 $N/tests/$t > /tmp/r/$(basename $t).log 2>&1; echo "$t rc=$?" >> $OUT/suites.txt ) &
done
wait
tail -n 3 /tmp/r/*.log > $OUT/suites_tail.txt
row() { grep -E "^ +[0-9]"; }
bench() { local l=$1 f=$2; shift 2
  echo "== $l $*"; $f bench --decode --dtype f16 --head-dim 128 --heads 32 --heads-kv 8 --repeat 50 "$@" | row; }
{
for round in 1 2; do
  echo "#### round $round"
  for cfg in "--batch 1 --cache-lens 4096,32768,131072 --tensor-cores off" "--batch 8 --cache-lens 4096,8192 --tensor-cores off"; do
    bench base $B/tools/flashcl $cfg
    bench fused $N/tools/flashcl $cfg --fused-merge
    bench separate $N/tools/flashcl $cfg --separate-merge
  done
  for cfg in "--batch 1 --cache-lens 4096,32768,65536,131072" "--batch 1 --cache-lens 4096,32768,65536,131072 --back-to-back" \
             "--batch 8 --cache-lens 4096,8192" "--batch 16 --cache-lens 4096,8192" "--batch 1 --query-len 4 --cache-lens 4096,32768,131072"; do
    bench base $B/tools/flashcl $cfg
    bench default $N/tools/flashcl $cfg
    bench separate $N/tools/flashcl $cfg --separate-merge
  done
done
} > $OUT/bench.txt 2>&1
true
