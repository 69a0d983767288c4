#!/bin/bash
# Thirteenth session, run 3: the mma.sync forward's open blocks with a bias (new) against main before it (base5), FLASHCL_WGMMA=0;
# suites on the new build first (in parallel), then forward(+backward) A/B with a bias, causal and not.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache CK_FORK=no
ROOT=$PWD
NEW_BUILD=${NEW_BUILD:-.gpu/build}; BASE_DIR=${BASE_DIR:-.gpu/base5}
base="env LD_LIBRARY_PATH=$ROOT/$BASE_DIR:$LD_LIBRARY_PATH $BASE_DIR/flashcl"
new="env LD_LIBRARY_PATH=$ROOT/$NEW_BUILD/src:$LD_LIBRARY_PATH $NEW_BUILD/tools/flashcl"
R=/tmp/res3; rm -rf $R; mkdir -p $R/suites
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
pack() { tar czf $OUT/results.tar.gz -C $R . ; cp $R/summary.txt $OUT/ 2>/dev/null; }
for n in test_bias test_forward_mma test_nonfinite test_forward_wgmma test_score_mods; do
  ( p=$(find $NEW_BUILD/tests -name $n -type f -executable | head -1); s=$SECONDS
    ( cd $(dirname $p) && LD_LIBRARY_PATH=$ROOT/$NEW_BUILD/src:$LD_LIBRARY_PATH timeout 200 ./$n ) > $R/suites/$n.txt 2>&1
    echo "$n rc=$? $(grep -E '^[0-9]+%: Checks' $R/suites/$n.txt | tail -1) $((SECONDS-s))s" >> $R/summary.txt ) &
done
wait
grep -h ":F:\|:E:" $R/suites/*.txt | head -20 >> $R/summary.txt
pack
b() { v=$1; shift; j=$R/b_${v}_$SECONDS.json
  timeout 100 env FLASHCL_WGMMA=0 ${!v} bench --impl flash --dtype f16 --seqlens 2048,8192 --repeat 10 --json $j "$@" > /dev/null 2>> $R/bench_err.log
  echo "$v [$*] rc=$?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f'%(x['direction'],x['seqlen'],x['tflops']) for x in r))" $j 2>&1) t=$((SECONDS-t0))" >> $R/summary.txt; }
for d in 64 128; do
  for bias in shared full; do
    for c in "" --causal; do b base --head-dim $d --bias $bias $c; b new --head-dim $d --bias $bias $c; done
  done
  b base --head-dim $d; b new --head-dim $d
  pack
done
echo "total t=$((SECONDS-t0))" >> $R/summary.txt
pack
