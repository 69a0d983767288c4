#!/bin/bash
# Fourteenth session, run 1: every Check suite on HEAD (d64 bias forward on 3 x 64, ALiBi in float steps), then
# A/B base (4b56135, before both) against HEAD: d64 bias forward+backward, ALiBi d64/d128 (+ soft-capping).
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache
ROOT=$PWD
mkdir -p $OUT
B=$ROOT/.gpu/build SRC=$ROOT/.gpu/s11/src DEADLINE=${SUITE_DEADLINE:-195} SUITES_END=185 R=/tmp/res1 OUT=$OUT \
  bash .gpu/s11/check.sh device suites > /tmp/check.log 2>&1
R=/tmp/res1
new="env LD_LIBRARY_PATH=$ROOT/.gpu/build/src:$LD_LIBRARY_PATH $ROOT/.gpu/build/tools/flashcl"
base="env LD_LIBRARY_PATH=$ROOT/.gpu/base7:$LD_LIBRARY_PATH $ROOT/.gpu/base7/flashcl"
mkdir -p $R/ab; S=$R/ab/summary.txt
t0=$SECONDS; END=${AB_END:-560}
pack() { tar czf $OUT/results.tar.gz -C $R . ; cp $S $OUT/ab_summary.txt 2>/dev/null; cp $R/summary.txt $OUT/ 2>/dev/null; cp $R/suites_summary.txt $OUT/ 2>/dev/null; }
pack
b() { label=$1; fl=$2; shift 2; j=$R/ab/${label}_$SECONDS.json
  [ $((SECONDS - t0 + 195)) -gt $END ] && { echo "skip $label [$*] (time)" >> $S; return; }
  timeout 60 $fl bench --impl flash --dtype f16 --seqlens 2048,8192 --repeat 10 --json $j "$@" > /dev/null 2>> $R/ab/bench_err.log
  echo "$label [$*] rc=$?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f(%s)'%(x['direction'],x['seqlen'],x['tflops'],x['backend']) for x in r))" $j 2>&1) t=$((SECONDS-t0))" >> $S; }
ab() { b base "$base" "$@"; b new "$new" "$@"; b base "$base" "$@"; b new "$new" "$@"; pack; }
for c in "" --causal; do ab --head-dim 64 --alibi-max-bias 8 --backward $c; done
for c in "" --causal; do ab --head-dim 128 --alibi-max-bias 8 --backward $c; done
for bias in shared full; do for c in "" --causal; do ab --head-dim 64 --bias $bias --backward $c; done; done
ab --head-dim 64 --alibi-max-bias 8 --softcap 30 --backward
ab --head-dim 128 --alibi-max-bias 8 --softcap 30 --backward
echo "total t=$((SECONDS-t0))" >> $S
pack
