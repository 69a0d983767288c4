#!/bin/bash
# Backward bias at d64 (issue 21), run 1: ptxas registers (dense / bias / staged, d64 and d128), then per-kernel
# times (LD_PRELOAD cl_kernel_times.so) of main's build, dense and full bias, and timing-only kernel variants.
export FLASHCL_DEVICE=nvidia
D=.gpu/biasbwd; F=.gpu/build/tools/flashcl; P=.gpu/ptx_buildlog
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv > $OUT/gpu.txt 2>&1
which ncu nsys >> $OUT/gpu.txt 2>&1
{
for d in 64 128; do for opt in "" "-DFLASHCL_BIAS=1" "-DFLASHCL_BIAS=1 -DFLASHCL_BIAS_STAGED=1"; do
  C=$D/cl_base
  echo "== d$d $opt"
  timeout 30 $P "-cl-nv-verbose -DFLASHCL_DTYPE=1 -DHEAD_DIM=$d -DWARPS=4 -DBLOCK_Q=32 -DBLOCK_K=32 -DFLASHCL_MMA_PTX=1 $opt" \
     $C/common.cl $C/mma.cl $C/mma_nvidia.cl $C/mma_operands.cl $C/backward_mma.cl 2>&1 | grep -E "Compiling|registers|spill|smem|^build"
done; done
} > $OUT/ptxas.txt 2>&1
b() { # name, then bench arguments
  local n=$1; shift
  echo "== $n $*"
  CL_KERNEL_TIMES=$OUT/times_$n.txt LD_PRELOAD=$PWD/$D/cl_kernel_times.so timeout 90 $F bench --impl flash --dtype f16 --backward --repeat 20 --warmup 3 "$@" | grep -E "^ +[0-9]"
}
{
b d64_none --head-dim 64 --seqlens 2048,8192
b d64_full --head-dim 64 --seqlens 2048,8192 --bias full
b d64_shared --head-dim 64 --seqlens 2048 --bias shared
b d128_none --head-dim 128 --seqlens 2048
b d128_full --head-dim 128 --seqlens 2048 --bias full
for v in zr nofetch nohide; do
  FLASHCL_KERNEL_DIR=$PWD/$D/cl_$v b d64_full_$v --head-dim 64 --seqlens 2048 --bias full --no-check
done
FLASHCL_BUILD_OPTIONS=-cl-nv-maxrregcount=168 b d64_full_rreg168 --head-dim 64 --seqlens 2048 --bias full
FLASHCL_BUILD_OPTIONS=-cl-nv-maxrregcount=168 b d64_none_rreg168 --head-dim 64 --seqlens 2048
} > $OUT/bench.txt 2>&1
