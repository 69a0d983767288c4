#!/bin/bash
# The ALiBi suites with the wgmma backward's float steps (WG_BWD_ALIBI_STEPS=1: all but the d64 64-key dQ tiles),
# then A/B against 4b56135: d64 ALiBi (causal or not), d64 soft-capping + ALiBi, d128 ALiBi, fwd+bwd. Written in the
# fourteenth session (where it timed out before packing anything: the results are packed after each step now).
export FLASHCL_DEVICE=nvidia CK_FORK=no FLASHCL_CACHE_DIR=/tmp/flashcl-cache
export FLASHCL_BUILD_OPTIONS=-DWG_BWD_ALIBI_STEPS=1   # the base library's kernels ignore it
ROOT=$PWD; R=/tmp/res5; mkdir -p $R $OUT
export LD_LIBRARY_PATH=$ROOT/.gpu/build/src:$LD_LIBRARY_PATH
[ -e /work/main ] || { mkdir -p /work; ln -s $ROOT /work/main; }
for t in test_backward_wgmma test_bias test_score_mods; do p=$(find .gpu/build/tests -name $t -type f)
  (cd $(dirname $p) && timeout 125 ./$t > $R/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^[0-9]+%: Checks' $R/$t.txt)" >> $R/suites.txt) &
done
wait
tar czf $OUT/results.tar.gz -C $R .
new="$ROOT/.gpu/build/tools/flashcl"
base="env LD_LIBRARY_PATH=$ROOT/.gpu/base7:$LD_LIBRARY_PATH $ROOT/.gpu/base7/flashcl"
S=$R/ab.txt
b() { label=$1; fl=$2; shift 2; j=$R/${label}_$SECONDS.json
  timeout 30 $fl bench --impl flash --dtype f16 --seqlens 2048,8192 --repeat 10 --json $j "$@" > /dev/null 2>> $R/bench_err.log
  echo "$label [$*] rc=$?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f(%s)'%(x['direction'],x['seqlen'],x['tflops'],x['backend']) for x in r))" $j 2>&1)" >> $S; tar czf $OUT/results.tar.gz -C $R .; }
for cfg in "--head-dim 64 --alibi-max-bias 8" "--head-dim 64 --alibi-max-bias 8 --causal" "--head-dim 64 --alibi-max-bias 8 --softcap 30" "--head-dim 128 --alibi-max-bias 8"; do
  b base "$base" $cfg --backward; b new "$new" $cfg --backward
done
tar czf $OUT/results.tar.gz -C $R .; cat $R/suites.txt $S
