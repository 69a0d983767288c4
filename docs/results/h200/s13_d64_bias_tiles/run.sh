#!/bin/bash
# Thirteenth session, run 5: the d64 forward with a bias after the open blocks, which kernel and tiles: the default
# (wgmma 2 x 64 pipelined), mma.sync (FLASHCL_WGMMA=0), wgmma 2 x 128 and 3 x 64 (pipelined), on the experiment
# build (-DFLASHCL_MMA_EXPERIMENT, the same main otherwise); then default against mma.sync again.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache
ROOT=$PWD; EXP=${EXP:-.gpu/build-exp}
fl="env LD_LIBRARY_PATH=$ROOT/$EXP/src:$LD_LIBRARY_PATH $EXP/tools/flashcl"
R=/tmp/res5; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
t0=$SECONDS
pack() { tar czf $OUT/results.tar.gz -C $R . ; cp $R/summary.txt $OUT/ 2>/dev/null; }
b() { label=$1; envs=$2; shift 2; j=$R/b_${label}_$SECONDS.json
  timeout 60 env $envs $fl bench --impl flash --dtype f16 --head-dim 64 --seqlens 2048,8192 --repeat 10 --json $j "$@" > /dev/null 2>> $R/bench_err.log
  echo "$label [$*] rc=$?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f(%s)'%(x['direction'],x['seqlen'],x['tflops'],x['backend']) for x in r))" $j 2>&1) t=$((SECONDS-t0))" >> $R/summary.txt; }
for bias in shared full; do
  for c in "" --causal; do
    b default "X=1" --bias $bias $c
    b mma "FLASHCL_WGMMA=0" --bias $bias $c
    b w2x128 "FLASHCL_WGMMA_TILES=2,128" --bias $bias $c
    b w3x64 "FLASHCL_WGMMA_TILES=3,64" --bias $bias $c
  done
  pack
done
for bias in shared full; do
  for c in "" --causal; do b default "X=1" --bias $bias $c; b mma "FLASHCL_WGMMA=0" --bias $bias $c; done
done
echo "total t=$((SECONDS-t0))" >> $R/summary.txt
pack
