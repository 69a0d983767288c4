#!/bin/bash
# Fused split merge (branch decode-fused-combine): GPU suites, then A/B benches (baseline main build, new build
# fused, new build --separate-merge) interleaved, two rounds.
N=.gpu/build-decode; B=.gpu/build; export FLASHCL_DEVICE=nvidia
export FLASHCL_CACHE_DIR=/tmp/fc; mkdir -p /tmp/fc /tmp/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/suites.txt 2>&1
for t in forward/test_split_kv forward/test_decode forward/test_decode_mma forward/test_kv_cache forward/test_nonfinite; do
  ( timeout 200 $N/tests/$t > /tmp/r/$(basename $t).log 2>&1; echo "$t rc=$?" >> $OUT/suites.txt ) &
done
wait
tail -n 3 /tmp/r/*.log > $OUT/suites_tail.txt
grep -h -B2 -A8 "F:\|E:" /tmp/r/*.log | head -100 >> $OUT/suites_tail.txt
row() { grep -E "^ +[0-9]"; }
bench() { # label, binary, extra args
  local l=$1 f=$2; shift 2
  echo "== $l $*"; $f bench --decode --dtype f16 --head-dim 128 --heads 32 --heads-kv 8 --repeat 50 "$@" | row
}
{
for round in 1 2; do
  echo "#### round $round"
  for cfg in "--batch 1 --cache-lens 4096,32768,65536,131072" \
             "--batch 1 --cache-lens 4096,32768,65536,131072 --back-to-back" \
             "--batch 8 --cache-lens 4096,8192" "--batch 16 --cache-lens 4096,8192" \
             "--batch 1 --query-len 4 --cache-lens 4096,32768,131072" \
             "--batch 1 --cache-lens 4096,32768,131072 --tensor-cores off"; do
    bench base $B/tools/flashcl $cfg
    bench fused $N/tools/flashcl $cfg
    bench separate $N/tools/flashcl $cfg --separate-merge
  done
done
} > $OUT/bench.txt 2>&1
f=$(grep -l "membar.gl" -r /tmp/fc 2>/dev/null | head -3); echo "$f" > $OUT/ptx_files.txt
for x in $f; do grep -c "membar.gl\|membar.cta\|atom.global\|ld.global.nc" $x >> $OUT/ptx_files.txt; grep -o "membar\.[a-z]*\|atom\.[a-z.0-9]*\|ld\.global\.nc[a-z.0-9]*\|ld\.volatile[a-z.0-9]*" $x | sort | uniq -c >> $OUT/ptx_files.txt; done
cp $(echo "$f" | head -1) $OUT/fused.ptx.txt 2>/dev/null
true
