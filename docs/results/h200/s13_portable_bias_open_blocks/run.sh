#!/bin/bash
# Thirteenth session, run 4: the final check of main (device, every suite, by .gpu/s11/check.sh), then the portable
# forward's open blocks with a bias (new = main) against the build before them (base6), tensor cores off.
ROOT=$PWD
B=$ROOT/.gpu/build SRC=$ROOT/.gpu/s11/src DEADLINE=195 SUITES_END=185 R=/tmp/res4 bash .gpu/s11/check.sh device suites
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache
R=/tmp/res4; P=$R/portable; mkdir -p $P
base="env LD_LIBRARY_PATH=$ROOT/.gpu/base6:$LD_LIBRARY_PATH .gpu/base6/flashcl"
new="env LD_LIBRARY_PATH=$ROOT/.gpu/build/src:$LD_LIBRARY_PATH .gpu/build/tools/flashcl"
t0=$SECONDS
pack() { tar czf $OUT/results.tar.gz -C $R . ; cp $P/summary.txt $OUT/portable_summary.txt 2>/dev/null; cp $R/summary.txt $OUT/ 2>/dev/null; }
b() { v=$1; shift; j=$P/b_${v}_$SECONDS.json
  timeout 60 ${!v} bench --impl flash --dtype f16 --tensor-cores off --seqlens 2048,8192 --repeat 5 --json $j "$@" > /dev/null 2>> $P/bench_err.log
  echo "$v [$*] rc=$?: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f(%s)'%(x['direction'],x['seqlen'],x['tflops'],x['kernel']) for x in r))" $j 2>&1) t=$((SECONDS-t0))" >> $P/summary.txt; }
for d in 64 128; do
  for bias in shared full; do b base --head-dim $d --bias $bias; b new --head-dim $d --bias $bias; done
  b base --head-dim $d; b new --head-dim $d
  pack
done
echo "total t=$((SECONDS-t0))" >> $P/summary.txt
pack
