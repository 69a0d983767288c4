#!/usr/bin/env bash
# compile_check.sh: compiles every program flashcl would build on one GPU target, offline, with the -D options the
# dispatcher chooses for that target's limits (portability_write_plans writes them), and fails on a program that
# does not compile, or that the target would reject: local memory past its limit or past what the planner counted,
# registers spilled to memory (AMD: the code object's metadata; ocloc of Debian 12 reports neither, so Intel gets
# the compile alone).
# Usage: compile_check.sh WRITER TARGET KIND COMPILER WORKDIR [DEVICE_LIBS]   (KIND: amdgcn or ocloc)
# AMD: clang 15 with ROCm's device libraries (Debian 12's rocm-device-libs, built by LLVM 15, which clang 14 cannot
# read): without them (-nogpulib) every builtin, get_local_id included, is a call to an undefined function, and the
# register, spill and scratch figures describe call overhead, not the kernel.
# FLASHCL_PORTABILITY_JOBS: parallel compiles (default: the CPU count, at most 2).
set -uo pipefail
writer=$1 target=$2 kind=$3 compiler=$4 work=$5 device_libs=${6:-}

if [ ! -x "$compiler" ] && ! command -v "$compiler" >/dev/null; then
  echo "$compiler not found: tools/setup.sh installs it" >&2
  exit 77 # CTest's SKIP_RETURN_CODE
fi
if [ "$kind" = amdgcn ] && [ ! -f "$device_libs/opencl.bc" ]; then
  echo "ROCm device libraries (opencl.bc) not found in '$device_libs': tools/setup.sh installs rocm-device-libs" >&2
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
"$writer" "$target" "$work" || { echo "FAIL: no plans for $target (above)"; exit 1; }

# One program: writes $work/<id>.result as "ok <facts>" or "bad <why>", the compiler's output in <id>.log.
compile_one() {
  local id=$1 source=$2 planned=$3 limit=$4 options=$5
  local log=$work/$id.log out=$work/$id.result
  # Options split on spaces, as the OpenCL runtime splits them.
  read -r -a opts <<<"$options"
  if [ "$kind" = amdgcn ]; then
    # -O2 is OpenCL's default; the driver adds nothing the library relies on beyond the options.
    if ! "$compiler" -x cl -cl-std=CL1.2 -target amdgcn-amd-amdhsa -mcpu="$target" --rocm-device-lib-path="$device_libs" \
        -Xclang -finclude-default-header "${opts[@]}" -S -o "$work/$id.s" "$work/$source" >"$log" 2>&1; then
      echo "bad compile error: $(grep -m1 -E 'error' "$log")" >"$out"
      return
    fi
    # The code object's metadata, one entry per kernel: the largest local memory, spills summed.
    local facts
    facts=$(awk '
      /^[ \t]+\.group_segment_fixed_size:/ { if ($2 > lds) lds = $2 }
      /^[ \t]+\.private_segment_fixed_size:/ { if ($2 > scratch) scratch = $2 }
      /^[ \t]+\.vgpr_spill_count:/ { vspill += $2 }
      /^[ \t]+\.sgpr_spill_count:/ { sspill += $2 }
      /^[ \t]+\.vgpr_count:/ { if ($2 > vgpr) vgpr = $2 }
      END { printf "%d %d %d %d %d", lds, scratch, vspill, sspill, vgpr }' "$work/$id.s")
    local lds scratch vspill sspill vgpr
    read -r lds scratch vspill sspill vgpr <<<"$facts"
    local detail="lds=$lds planned=$planned vgpr=$vgpr vgpr_spills=$vspill sgpr_spills=$sspill scratch=$scratch"
    if [ "$lds" -gt "$limit" ]; then
      echo "bad local memory $lds > the target's $limit ($detail)" >"$out"
    elif [ "$planned" -gt 0 ] && [ "$lds" -gt "$planned" ]; then
      echo "bad local memory $lds > the planner's $planned: the planner undercounts ($detail)" >"$out"
    elif [ "$vspill" -gt 0 ]; then
      echo "bad $vspill VGPRs spilled to scratch memory ($detail)" >"$out"
    else
      echo "ok $detail" >"$out"
    fi
  else
    if ! "$compiler" compile -q -file "$work/$source" -device "$target" -out_dir "$work" -output "$id" \
        -options "-cl-std=CL1.2 $options" >"$log" 2>&1; then
      echo "bad compile error: $(grep -m1 -i -E 'error' "$log")" >"$out"
      return
    fi
    echo "ok compiled (planned local $planned of $limit)" >"$out"
  fi
}

jobs=${FLASHCL_PORTABILITY_JOBS:-$(nproc)}
[ "$jobs" -gt 2 ] && [ -z "${FLASHCL_PORTABILITY_JOBS:-}" ] && jobs=2
start=$SECONDS
running=0
while IFS=$'\t' read -r id source planned limit expect options; do
  compile_one "$id" "$source" "$planned" "$limit" "$options" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done <"$work/manifest.tsv"
wait

# The verdicts, in the manifest's order.
failed=0 passed=0 expected=0
while IFS=$'\t' read -r id source planned limit expect options; do
  result=$(cat "$work/$id.result" 2>/dev/null || echo "bad no result")
  status=${result%% *} detail=${result#* }
  if [ "$expect" = ok ]; then
    if [ "$status" = ok ]; then
      passed=$((passed + 1))
      [ -n "${FLASHCL_PORTABILITY_VERBOSE:-}" ] && echo "ok    $id: $detail"
    else
      failed=$((failed + 1))
      echo "FAIL  $id: $detail"
      echo "      options: $options"
      echo "      log: $work/$id.log"
    fi
  elif [ "$status" = ok ]; then
    failed=$((failed + 1))
    echo "XPASS $id: expected to fail ($expect) but passes: remove its line from write_plans.c ($detail)"
  else
    expected=$((expected + 1))
    echo "XFAIL $id: $detail [known: $expect]"
  fi
done <"$work/manifest.tsv"
echo "$target: $passed programs pass, $expected expected failures, $failed failures ($((SECONDS - start)) s, $jobs jobs)"
[ "$failed" -eq 0 ]
