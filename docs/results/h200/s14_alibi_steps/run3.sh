#!/bin/bash
# Fourteenth session, run 3: every Check suite on HEAD (backward_wgmma.cl back to ALiBi in integers), A/B against
# 4b56135 for ALiBi fwd+bwd d64/d128, then HEAD's modifier and bias rows beside dense (README tables).
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache
ROOT=$PWD
mkdir -p $OUT
B=$ROOT/.gpu/build SRC=$ROOT/.gpu/s11/src DEADLINE=150 SUITES_END=140 R=/tmp/res3 OUT=$OUT \
  bash .gpu/s11/check.sh device suites > /tmp/check.log 2>&1
R=/tmp/res3
new="env LD_LIBRARY_PATH=$ROOT/.gpu/build/src:$LD_LIBRARY_PATH $ROOT/.gpu/build/tools/flashcl"
base="env LD_LIBRARY_PATH=$ROOT/.gpu/base7:$LD_LIBRARY_PATH $ROOT/.gpu/base7/flashcl"
mkdir -p $R/ab $R/rows; S=$R/ab/summary.txt
t0=$SECONDS; END=${AB_END:-380}
pack() { tar czf $OUT/results.tar.gz -C $R . ; cp $S $OUT/ab_summary.txt 2>/dev/null; cp $R/summary.txt $OUT/ 2>/dev/null; cp $R/suites_summary.txt $OUT/ 2>/dev/null; }
pack
b() { label=$1; fl=$2; dir=$3; shift 3; j=$R/$dir/${label}_$SECONDS.json
  [ $((SECONDS - t0 + 150)) -gt $END ] && { echo "skip $label [$*] (time)" >> $S; return; }
  timeout 60 $fl bench --impl flash --dtype f16 --seqlens 2048,8192 --repeat 10 --json $j "$@" > /dev/null 2>> $R/bench_err.log
  echo "$label [$*] rc=$?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f(%s)'%(x['direction'],x['seqlen'],x['tflops'],x['backend']) for x in r))" $j 2>&1) t=$((SECONDS-t0))" >> $S; }
for d in 64 128; do for c in "" --causal; do
  b base "$base" ab --head-dim $d --alibi-max-bias 8 --backward $c; b new "$new" ab --head-dim $d --alibi-max-bias 8 --backward $c
done; done
pack
for d in 64 128; do
  b dense "$new" rows --head-dim $d --backward
  b alibi "$new" rows --head-dim $d --backward --alibi-max-bias 8
  b softcap "$new" rows --head-dim $d --backward --softcap 30
  b shared "$new" rows --head-dim $d --backward --bias shared
  b full "$new" rows --head-dim $d --backward --bias full
  pack
done
echo "total t=$((SECONDS-t0))" >> $S
pack
