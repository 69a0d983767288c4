#!/usr/bin/env bash
# wgmma_ws_check.sh: the warp-specialized wgmma forward's first checks on an H100-class GPU (docs/perf.md,
# "Warp-specialized wgmma forward, first cut"). A development probe, not part of the build. Needs an experiment
# build (configure with -DCMAKE_C_FLAGS=-DFLASHCL_MMA_EXPERIMENT) and NVIDIA's OpenCL driver (docs/nvidia.md):
#   FLASHCL_DEVICE=nvidia bash tools/probe/wgmma_ws_check.sh BUILD_DIR OUT_DIR
# Every run is under `timeout` (a wrong mbarrier parity or count hangs the kernel); each line of OUT_DIR/summary.txt
# names the variant, the shape and the exit status (0: --check passed; 1: past the tolerance; 124: timed out).
set -u
build=${1:?usage: wgmma_ws_check.sh BUILD_DIR OUT_DIR}
out=${2:?usage: wgmma_ws_check.sh BUILD_DIR OUT_DIR}
fl=$build/tools/flashcl
make_inputs=$build/tests/cli/cli_make_inputs
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
# variant name, then the environment that selects it
variants=("default|X=1"
          "ws_2x128|FLASHCL_WGMMA_WS=1 FLASHCL_WGMMA_TILES=2,128"
          "ws_2x64_pipelined|FLASHCL_WGMMA_WS=1 FLASHCL_WGMMA_TILES=2,64 FLASHCL_BUILD_OPTIONS=-DWG_PIPELINE=1"
          "ws_regs_2x128|FLASHCL_WGMMA_WS=1 FLASHCL_WGMMA_WS_REGS=1 FLASHCL_WGMMA_TILES=2,128"
          "ws_pingpong_2x128|FLASHCL_WGMMA_WS=1 FLASHCL_WGMMA_WS_PINGPONG=1 FLASHCL_WGMMA_TILES=2,128"
          "ws_regs_pingpong_2x64|FLASHCL_WGMMA_WS=1 FLASHCL_WGMMA_WS_REGS=1 FLASHCL_WGMMA_WS_PINGPONG=1 FLASHCL_WGMMA_TILES=2,64")
for d in 64 128; do
  for shape in "1,4,2,1000,1000,$d" "2,2,1,333,517,$d"; do
    dir=$out/in_${shape//,/_}
    [ -d "$dir" ] || "$make_inputs" "$dir" bhsd f16 "$shape" 7 >/dev/null
    for causal in "" --causal; do
      for v in "${variants[@]}"; do
        name=${v%%|*} envs=${v#*|}
        # shellcheck disable=SC2086  # $envs holds several assignments
        timeout 60 env $envs "$fl" run --q "$dir/q.npy" --k "$dir/k.npy" --v "$dir/v.npy" --out "$out/o.npy" \
          --check $causal >"$out/${name}_${shape//,/_}${causal}.log" 2>&1
        echo "$name d$d [$shape] ${causal:-noncausal} rc=$? $(grep -m1 'forward:' "$out/${name}_${shape//,/_}${causal}.log")" >>"$summary"
      done
    done
  done
done
# Timing, only meaningful where every check above passed.
for d in 64 128; do
  for v in "${variants[@]}"; do
    name=${v%%|*} envs=${v#*|}
    # shellcheck disable=SC2086
    timeout 60 env $envs "$fl" bench --impl flash --dtype f16 --head-dim "$d" --seqlens 2048,8192 --repeat 10 \
      --json "$out/bench_${name}_d$d.json" >/dev/null 2>>"$out/bench_err.log"
    echo "bench $name d$d rc=$?" >>"$summary"
  done
done
cat "$summary"
