#!/bin/bash
# Twelfth session, H200 run 3: the decode bias in pairs. base = the build before it (BASE_DIR: flashcl and
# libflashcl.so), new = NEW_BUILD; suites on the new build first.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache CK_FORK=no
ROOT=$PWD
if [ "$ROOT" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$ROOT" /work/main; fi
NEW_BUILD=${NEW_BUILD:-build}; BASE_DIR=${BASE_DIR:-base}   # base: 9630746's flashcl and libflashcl.so
base="env LD_LIBRARY_PATH=$ROOT/$BASE_DIR:$LD_LIBRARY_PATH $BASE_DIR/flashcl"
new="env LD_LIBRARY_PATH=$ROOT/$NEW_BUILD/src:$LD_LIBRARY_PATH $NEW_BUILD/tools/flashcl"
R=/tmp/res; mkdir -p $R/suites
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
pack() { tar czf $OUT/results.tar.gz -C $R . ; cp $R/summary.txt $OUT/ 2>/dev/null; }
for n in test_bias test_decode_mma test_kv_cache test_score_mods test_decode test_split_kv; do
  ( p=$(find $NEW_BUILD/tests -name $n -type f -executable | head -1); s=$SECONDS
    ( cd $(dirname $p) && LD_LIBRARY_PATH=$ROOT/$NEW_BUILD/src:$LD_LIBRARY_PATH timeout 150 ./$n ) > $R/suites/$n.txt 2>&1
    echo "$n rc=$? $(grep -E '^[0-9]+%: Checks' $R/suites/$n.txt | tail -1) $((SECONDS-s))s" >> $R/summary.txt ) &
done
wait
pack
d() { v=$1; shift; echo "== $v $*" >> $R/decode.txt
  timeout 60 ${!v} bench --decode --repeat 50 --warmup 5 "$@" 2>&1 | grep -E "^ +[0-9]|rror" >> $R/decode.txt; }
for r in 1 2; do
  for v in base new; do
    d $v --cache-lens 8192,32768,131072 --back-to-back
    d $v --cache-lens 8192,32768,131072 --back-to-back --bias shared
    d $v --cache-lens 8192,32768,131072 --back-to-back --bias full
    d $v --batch 8 --cache-lens 8192 --back-to-back
    d $v --batch 8 --cache-lens 8192 --back-to-back --bias full
    d $v --cache-lens 32768,131072 --bias shared
    d $v --cache-lens 32768,131072 --page-size 16 --back-to-back --bias full
  done
  echo "round $r t=$((SECONDS-t0))" >> $R/summary.txt; pack
done
echo "total t=$((SECONDS-t0))" >> $R/summary.txt
pack
