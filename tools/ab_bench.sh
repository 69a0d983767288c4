#!/usr/bin/env bash
# A/B timing of two builds in one run, alternating base/new twice per configuration (forward and
# forward+backward, N = 2048 and 8192 unless given, median of 10 after warm-up, fresh random inputs per bench run).
# Usage: tools/ab_bench.sh BASE_BUILD_DIR NEW_BUILD_DIR OUT_DIR [SEQLENS]   (SEQLENS default 2048,8192)
# e.g. on the GPU machine: tools/ab_bench.sh build-base build "$OUT"  (docs/perf.md: how to build them)
set -u
base=$1 new=$2 out=$3 seqlens=${4:-2048,8192}
mkdir -p "$out"
cfgs=("--dtype f16 --head-dim 64" "--dtype f16 --head-dim 128" "--dtype f16 --head-dim 128 --causal"
      "--dtype f32 --f32-precision 3xtf32 --head-dim 64" "--dtype f32 --f32-precision 3xtf32 --head-dim 128"
      "--dtype f32 --head-dim 64" "--dtype f32 --head-dim 128")
i=0
for c in "${cfgs[@]}"; do
  for v in base new base new; do
    dir=$base
    [ "$v" = new ] && dir=$new
    json="$out/ab_${i}_${v}_$RANDOM.json"
    # shellcheck disable=SC2086  # $c holds several options
    "$dir/tools/flashcl" bench $c --impl flash --backward --seqlens "$seqlens" --repeat 10 --json "$json" >/dev/null 2>>"$out/ab_err.log"
    echo "cfg $i [$c] $v: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f'%(x['direction'],x['seqlen'],x['tflops']) for x in r))" "$json")"
  done
  i=$((i+1))
done
