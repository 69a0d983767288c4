#!/bin/bash
# Issue 21: softcap's exponential on the FMA pipes (branch softcap-fma) vs main, one H100 session.
export FLASHCL_DEVICE=nvidia
nvidia-smi -L > $OUT/device.txt 2>&1
N=.gpu/build-softcap; M=.gpu/build-main
for t in test_score_mods test_bias; do timeout 200 $N/tests/features/$t > $OUT/$t.log 2>&1; echo "$t rc=$?" >> $OUT/suites.txt; done
S="--impl flash --dtype f16 --seqlens 1024,2048,4096,8192 --repeat 20"
for d in 64 128; do for b in main softcap; do B=.gpu/build-$b
  for sc in "" "--softcap 30"; do echo "== $b d$d fwd ${sc:-dense}"; $B/tools/flashcl bench $S --head-dim $d $sc; done
done; done > $OUT/bench_fwd.txt 2>&1
for b in main softcap; do B=.gpu/build-$b
  for sc in "" "--softcap 30"; do echo "== $b d64 fwd+bwd ${sc:-dense}"; $B/tools/flashcl bench $S --head-dim 64 --backward $sc; done
done > $OUT/bench_bwd.txt 2>&1
