#!/bin/bash
# wgmma_ptxas_offline.sh: what ptxas makes of the wgmma forward, without a GPU. clang compiles the same OpenCL C
# (cl/common.cl, the prelude, cl/forward_wgmma.cl) for nvptx64 (sm_80, PTX 7.5; clang 15 knows no sm_90), with a few
# OpenCL built-ins mapped to NVVM's (clang's nvcl target has no OpenCL library); sed then does what
# src/ptx_rewrite.c does (markers to instructions, target sm_90a, PTX 8.0), and ptxas -arch=sm_90a -v reports
# registers, spills and its wgmma advisories (C7510-C7520: when and why it serialises the wgmma pipeline). Not the
# driver's compiler: registers differ, but the wgmma analysis is ptxas's own. A development probe, not part of the
# build: needs clang and a CUDA ptxas (PTXAS, default /usr/local/cuda/bin/ptxas).
#   bash tools/probe/wgmma_ptxas_offline.sh "-DHEAD_DIM=64 -DBLOCK_N=128 -DWARPGROUPS=2 [-DWG_PIPELINE=1]" [ptxas options]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ptxas=${PTXAS:-/usr/local/cuda/bin/ptxas}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/shim.cl" <<'SHIM'
#define get_local_id(d) ((size_t)__nvvm_read_ptx_sreg_tid_x())
#define get_group_id(d) ((size_t)((d) == 0 ? __nvvm_read_ptx_sreg_ctaid_x() : __nvvm_read_ptx_sreg_ctaid_y()))
#define get_num_groups(d) ((size_t)((d) == 0 ? __nvvm_read_ptx_sreg_nctaid_x() : __nvvm_read_ptx_sreg_nctaid_y()))
#define barrier(x) __nvvm_bar_sync(0)
#define native_exp2(x) __nvvm_ex2_approx_f(x)
#define fmax(a, b) __builtin_fmaxf((a), (b))
#define fma(a, b, c) __builtin_fmaf((a), (b), (c))
#define fabs(a) __builtin_fabsf(a)
#define log2(a) __nvvm_lg2_approx_f(a)
#define clamp(x, a, b) ((x) < (a) ? (a) : (x) > (b) ? (b) : (x))
SHIM
cat "$work/shim.cl" "$root"/cl/{common,mma,mma_nvidia,mma_operands,wgmma,forward_wgmma}.cl > "$work/all.cl"
# shellcheck disable=SC2086
clang -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -target-cpu -Xclang sm_80 -Xclang -target-feature \
    -Xclang +ptx75 -Xclang -finclude-default-header -fgnu-keywords -O3 -S -o "$work/sm80.ptx" \
    -DFLASHCL_DTYPE=1 -DFLASHCL_MMA_PTX=1 $1 "$work/all.cl"
sed -e 's/^\.version .*/.version 8.0/' -e 's/^\.target .*/.target sm_90a, texmode_independent/' \
    -e 's|^\([[:space:]]*\)// FLASHCL_SM90A |\1|' "$work/sm80.ptx" > "$work/sm90a.ptx"
# shellcheck disable=SC2086
"$ptxas" -arch=sm_90a -v -O3 ${2:-} "$work/sm90a.ptx" -o "$work/out.cubin" 2>&1 | grep -E "C75|spill|registers"
