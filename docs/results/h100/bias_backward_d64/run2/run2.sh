#!/bin/bash
# Backward bias at d64 (issue 21), run 2: the bias tile copied one block ahead (cl_new, build-biasbwd) against
# main (.gpu/build), same machine, per-kernel times; ptxas; the suites on the H100 with the branch's build.
export FLASHCL_DEVICE=nvidia
D=.gpu/biasbwd; P=.gpu/ptx_buildlog; R=$OUT
BASE=.gpu/build/tools/flashcl; NEW=.gpu/build-biasbwd/tools/flashcl
{
nvidia-smi --query-gpu=name --format=csv,noheader
for C in cl_base cl_new; do for d in 64 128; do for extra in "" "-cl-nv-maxrregcount=168"; do
  [ $d = 128 ] && [ -n "$extra" ] && continue
  echo "== $C d$d staged $extra"
  timeout 30 $P "-cl-nv-verbose -DFLASHCL_DTYPE=1 -DHEAD_DIM=$d -DWARPS=4 -DBLOCK_Q=32 -DBLOCK_K=32 -DFLASHCL_MMA_PTX=1 -DFLASHCL_BIAS=1 -DFLASHCL_BIAS_STAGED=1 $extra" \
     $D/$C/common.cl $D/$C/mma.cl $D/$C/mma_nvidia.cl $D/$C/mma_operands.cl $D/$C/backward_mma.cl 2>&1 | grep -E "Compiling|registers|spill|smem|^build"
done; done; done
} > $R/ptxas.txt 2>&1
b() { # name binary, then bench arguments
  local n=$1 f=$2; shift 2
  echo "== $n $*"; echo "## $n" >> $R/times.txt
  CL_KERNEL_TIMES=$R/times.txt LD_PRELOAD=$PWD/$D/cl_kernel_times.so timeout 100 $f bench --impl flash --dtype f16 --backward --repeat 20 --warmup 3 "$@" | grep -E "^ +[0-9]"
}
{
S=1024,2048,4096,8192
for mode in none full; do for v in base new; do
  f=$BASE; [ $v = new ] && f=$NEW
  o=""; [ $mode != none ] && o="--bias $mode"
  b d64_${mode}_$v $f --head-dim 64 --seqlens $S $o
done; done
for v in base new; do f=$BASE; [ $v = new ] && f=$NEW; b d64_shared_$v $f --head-dim 64 --seqlens 2048 --bias shared; done
for mode in none full; do for v in base new; do
  f=$BASE; [ $v = new ] && f=$NEW
  o=""; [ $mode != none ] && o="--bias $mode"
  b d128_${mode}_$v $f --head-dim 128 --seqlens 2048,8192 $o
done; done
FLASHCL_BUILD_OPTIONS=-cl-nv-maxrregcount=168 b d64_full_new_rreg168 $NEW --head-dim 64 --seqlens 2048 --bias full
FLASHCL_KERNEL_DIR=$PWD/$D/cl_new_nofetch b d64_full_new_nofetch $NEW --head-dim 64 --seqlens 2048 --bias full --no-check
} > $R/bench.txt 2>&1
for t in features/test_bias backward/test_backward_mma features/test_score_mods; do
  ( timeout 150 .gpu/build-biasbwd/tests/$t > $R/$(basename $t).log 2>&1; echo "$t rc=$?" >> $R/suites.txt ) &
done
wait
cat $R/suites.txt; tail -n 2 $R/test_*.log
