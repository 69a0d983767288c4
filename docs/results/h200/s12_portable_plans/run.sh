#!/bin/bash
# Twelfth session, H200: A/B of the portable plans (BASE_DIR: flashcl and libflashcl.so of e26f384; NEW_BUILD: a build of 9630746's parent f84ef53), portable decode
# split counts at 32K, and the suites that run the portable plans.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache CK_FORK=no
ROOT=$PWD
if [ "$ROOT" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$ROOT" /work/main; fi
NEW_BUILD=${NEW_BUILD:-build}; BASE_DIR=${BASE_DIR:-base}; NEW=$NEW_BUILD/tools/flashcl
base="env LD_LIBRARY_PATH=$ROOT/$BASE_DIR:$LD_LIBRARY_PATH $BASE_DIR/flashcl"
new="env LD_LIBRARY_PATH=$ROOT/$NEW_BUILD/src:$LD_LIBRARY_PATH $NEW"
R=/tmp/res; mkdir -p $R/suites
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
pack() { tar czf $OUT/results.tar.gz -C $R . ; cp $R/summary.txt $OUT/ 2>/dev/null; }
# 1. suites on the new build (portable plans on the H200)
for n in test_forward_plans test_forward test_backward_accuracy test_backward_determinism test_split_kv test_decode; do
  ( p=$(find $NEW_BUILD/tests -name $n -type f -executable | head -1); s=$SECONDS
    ( cd $(dirname $p) && LD_LIBRARY_PATH=$ROOT/$NEW_BUILD/src:$LD_LIBRARY_PATH timeout 120 ./$n ) > $R/suites/$n.txt 2>&1
    echo "$n rc=$? $(grep -E '^[0-9]+%: Checks' $R/suites/$n.txt | tail -1) $((SECONDS-s))s" >> $R/summary.txt ) &
done
wait
pack
# 2. A/B protocol shapes, tensor cores off, forward + forward+backward, base new base new
i=0
for c in "--dtype f32 --head-dim 64" "--dtype f16 --head-dim 64" "--dtype f32 --head-dim 128" "--dtype f16 --head-dim 128"; do
  for v in base new base new; do
    j=$R/ab_${i}_${v}_$SECONDS.json
    timeout 100 ${!v} bench $c --impl flash --tensor-cores off --backward --seqlens 2048,8192 --repeat 10 --json $j > /dev/null 2>> $R/ab_err.log
    echo "cfg $i [$c] $v rc=$?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.2f'%(x['direction'],x['seqlen'],x['tflops']) for x in r))" $j 2>&1) t=$((SECONDS-t0))" >> $R/summary.txt
  done
  i=$((i+1)); pack
done
# 3. portable decode: split counts at 32K (B 1) and 4K (B 8), per call and back to back
for sp in 0 16 32 48 64 96 128 192 256; do
  for b2b in "" "--back-to-back"; do
    echo "== splits $sp $b2b" >> $R/decode_splits.txt
    timeout 60 $new bench --decode --tensor-cores off --cache-lens 32768 --splits $sp $b2b --repeat 50 --warmup 5 2>&1 | grep -E "^ +[0-9]|rror" >> $R/decode_splits.txt
  done
done
for sp in 0 8 16 32 64; do
  echo "== B8 splits $sp" >> $R/decode_splits.txt
  timeout 60 $new bench --decode --tensor-cores off --batch 8 --cache-lens 4096 --splits $sp --repeat 50 --warmup 5 2>&1 | grep -E "^ +[0-9]|rror" >> $R/decode_splits.txt
done
echo "total t=$((SECONDS-t0))" >> $R/summary.txt
pack
