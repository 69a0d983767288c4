#!/bin/bash
# Fourteenth session, run 2: why the d64 ALiBi backward lost with ALiBi in float steps: per-kernel times (LD_PRELOAD
# shim) base vs new, and ptxas's registers/spills of the backward program with the old and the new kernel sources.
export FLASHCL_DEVICE=nvidia FLASHCL_CACHE_DIR=/tmp/flashcl-cache
ROOT=$PWD; R=/tmp/res2; rm -rf $R; mkdir -p $R $OUT
new="env LD_LIBRARY_PATH=$ROOT/.gpu/build/src:$LD_LIBRARY_PATH $ROOT/.gpu/build/tools/flashcl"
base="env LD_LIBRARY_PATH=$ROOT/.gpu/base7:$LD_LIBRARY_PATH $ROOT/.gpu/base7/flashcl"
pack() { tar czf $OUT/results.tar.gz -C $R . ; }
for round in 1 2; do for v in base new; do for c in "" --causal; do
  fl=$base; [ $v = new ] && fl=$new
  timeout 60 env CL_KERNEL_TIMES=$R/t_${v}${c}_$round.txt LD_PRELOAD=$ROOT/.gpu/probe/cl_kernel_times.so $fl bench --impl flash --dtype f16 --head-dim 64 --alibi-max-bias 8 --backward $c --seqlens 2048,8192 --repeat 10 > $R/b_${v}${c}_$round.txt 2>&1
done; done; done
for f in $R/t_*.txt; do echo "== $f"; python3 .gpu/probe/cl_kernel_times.py $f; done > $R/kernel_times.txt 2>&1
pack
O="-cl-nv-verbose -DFLASHCL_DTYPE=1 -DHEAD_DIM=64 -DWARPS=4 -DBLOCK_Q=64 -DBLOCK_K=64 -DFLASHCL_MMA_PTX=1 -DBW_WARPGROUPS=2 -DBW_BLOCK_Q=128 -DBWQ_WARPGROUPS=2 -DBWQ_BLOCK_K=64 -DFLASHCL_ALIBI=1"
for src in oldcl:.gpu/oldcl newcl:cl; do n=${src%%:*}; d=${src#*:}
  for c in 0 1; do
  timeout 60 .gpu/probe/sm90a_buildlog "$O" $d/common.cl $d/mma.cl $d/mma_nvidia.cl $d/mma_operands.cl $d/wgmma.cl $d/backward_mma.cl $d/backward_wgmma.cl > $R/log_bwd_$n.txt 2>&1
  done
  timeout 60 .gpu/probe/sm90a_buildlog "-cl-nv-verbose -DFLASHCL_DTYPE=1 -DHEAD_DIM=64 -DBLOCK_N=64 -DWARPGROUPS=2 -DFLASHCL_MMA_PTX=1 -DWG_PIPELINE=1 -DFLASHCL_ALIBI=1" $d/common.cl $d/mma.cl $d/mma_nvidia.cl $d/mma_operands.cl $d/wgmma.cl $d/forward_wgmma.cl > $R/log_fwd_$n.txt 2>&1
done
grep -hE "registers|spill|Compiling|Function properties" $R/log_*.txt | head -0
for f in $R/log_*.txt; do echo "== $f"; grep -E "Compiling entry|Used [0-9]+ registers|bytes spill" $f; done > $R/regs.txt
pack
S=$R/mix.txt
for round in 1 2; do for c in "" --causal; do for k in cl .gpu/mix1 .gpu/mix2 .gpu/oldcl; do
  j=$R/mix_$(basename $k)${c}_$round.json
  timeout 60 env FLASHCL_KERNEL_DIR=$ROOT/$k $new bench --impl flash --dtype f16 --head-dim 64 --alibi-max-bias 8 --backward $c --seqlens 2048,8192 --repeat 10 --json $j > /dev/null 2>>$R/mix_err.txt
  echo "$k [$c] round $round: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f(%s)'%(x['direction'],x['seqlen'],x['tflops'],x['backend']) for x in r))" $j 2>&1)" >> $S
done; done; done
for v in base new base new; do fl=$base; [ $v = new ] && fl=$new; j=$R/sc128_$v_$RANDOM.json
  timeout 60 $fl bench --impl flash --dtype f16 --head-dim 128 --alibi-max-bias 8 --softcap 30 --backward --seqlens 2048,8192 --repeat 10 --json $j > /dev/null 2>>$R/mix_err.txt
  echo "$v d128 softcap+alibi: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join('%s/N%d=%.1f(%s)'%(x['direction'],x['seqlen'],x['tflops'],x['backend']) for x in r))" $j 2>&1)" >> $S
done
pack; cat $R/regs.txt $S; cat $R/kernel_times.txt
