#!/bin/bash
# H200 check of flashcl at HEAD (session 11): device, every Check suite, the f16 baseline bench, PyTorch comparisons.
# Run on the GPU machine from the project root, with the OpenCL loader pointed at NVIDIA's driver (docs/nvidia.md;
# `eval "$(bash tools/nvidia_icd.sh)"` where no ICD file names it):  bash check.sh [STEPS...]
# STEPS: any of device suites bench pytorch (default: all four, in that order).
# B=... names the build (default: build/ of the project root), SRC=... the source tree whose tools/ it runs and
# whose HEAD.txt names the commit (default: the project root). summary.txt says which build and commit ran.
# Results go to /tmp/res (suites/, bench/, pytorch/, summary.txt, ...), which is packed into
# $OUT/results.tar.gz after every step (the device tool brings back at most 8 files), with summary.txt beside it.
# Every step's timeout is capped by what is left of DEADLINE seconds (default 555), so the script ends in time.
set -u
export FLASHCL_DEVICE=nvidia CK_FORK=no FLASHCL_CACHE_DIR=/tmp/flashcl-cache PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=${B:-$PWD/build}/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}   # in case the rpath (/work/main/...) does not resolve
ROOT=$PWD
SRC=${SRC:-$ROOT}
B=${B:-$ROOT/build}
FL=$B/tools/flashcl
R=${R:-/tmp/res}
DEADLINE=${DEADLINE:-555}
SUITE_LIMIT=${SUITE_LIMIT:-240}
SUITES_END=${SUITES_END:-300}   # seconds after the start by which every suite has ended
PAR=${PAR:-6}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$R"
t0=$SECONDS
T0=$(date +%s)   # the suites run in child shells, whose SECONDS start at 0
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(device suites bench pytorch)

# Seconds left before the deadline, and a step's timeout: at most $1, at most what is left (at least 1).
left() { echo $(( DEADLINE - (SECONDS - t0) )); }
cap() { local want=$1 l; l=$(left); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 1 ] && want=1; echo "$want"; }
pack() {
  cp "$R/summary.txt" "$OUT/summary.txt" 2>/dev/null
  [ -f "$R/suites_summary.txt" ] && cp "$R/suites_summary.txt" "$OUT/suites_summary.txt"
  tar -czf "$OUT/results.tar.gz.part" -C "$R" . && mv "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"
}
mark() { # step-name step-start extra
  echo "$1 done: elapsed t=$((SECONDS - t0))s, step $((SECONDS - $2))s ${3:-}" | tee -a "$R/summary.txt"
  pack
}

# The tests were compiled with absolute paths of the build machine's checkout (/work/main: the kernel directory
# of tests/forward, the PTX test data): give this checkout that name here too when the name is free.
if [ "$ROOT" != /work/main ] && [ ! -e /work/main ]; then mkdir -p /work && ln -s "$ROOT" /work/main; fi
{
  echo "check.sh start $(date -u +%FT%TZ) root=$ROOT (/work/main -> $(readlink -f /work/main)) build=$B"
  echo "source commit: $(cat "$SRC/HEAD.txt" 2>/dev/null || echo unknown)  steps: ${steps[*]}"
} | tee -a "$R/summary.txt"

step_device() {
  local s=$SECONDS
  {
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
    echo
    timeout 60 "$FL" devices
    echo "(flashcl devices rc=$?)"
    echo
    timeout 30 clinfo -l
    echo
    nvidia-smi
  } > "$R/device.txt" 2>&1
  mark device $s "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
}

# One suite: name = the executable's name; run from its own directory, output in suites/<name>.txt.
run_suite() {
  local path=$1 name dir lim now args=()
  name=$(basename "$path"); dir=$(dirname "$path")
  now=$(( $(date +%s) - T0 )); lim=$SUITE_LIMIT
  [ $((SUITES_END - now)) -lt "$lim" ] && lim=$((SUITES_END - now))
  [ "$lim" -lt 5 ] && lim=5
  # The tool suites take a work directory and the program (as CTest gives them).
  case $name in
    test_bench) mkdir -p /tmp/suite_work/bench; args=(/tmp/suite_work/bench "$FL" bench) ;;
    test_bench_decode) mkdir -p /tmp/suite_work/decode; args=(/tmp/suite_work/decode "$FL" bench) ;;
    test_tune) mkdir -p /tmp/suite_work/tune; args=(/tmp/suite_work/tune "$FL" tune) ;;
  esac
  local s=$SECONDS
  ( cd "$dir" && timeout "$lim" "./$name" "${args[@]}" ) > "$R/suites/$name.txt" 2>&1
  local rc=$?
  local line
  line=$(grep -E '^[0-9]+%: Checks' "$R/suites/$name.txt" | tail -1)
  printf '%-30s rc=%-3s %s  (%ss, limit %ss)\n' "$name" "$rc" "${line:-NO CHECK SUMMARY}" $((SECONDS - s)) "$lim" \
    >> "$R/suites_summary.unsorted"
}
export -f run_suite
export R FL SUITE_LIMIT SUITES_END T0

step_suites() {
  local s=$SECONDS
  mkdir -p "$R/suites"
  : > "$R/suites_summary.unsorted"
  # The long suites first (H100: forward_wgmma about 100 s alone), then the rest in name order.
  local first="test_forward_wgmma test_backward_wgmma test_bench test_tune test_forward_mma test_backward_mma
               test_bias test_decode test_forward test_kv_cache test_varlen test_forward_plans"
  {
    for n in $first; do find "$B/tests" -name "$n" -type f -executable; done
    find "$B/tests" -name 'test_*' -type f -executable -not -path '*/sanitize/*' -not -path '*/fuzz/*' | sort |
      while read -r p; do case " $(echo $first) " in *" $(basename "$p") "*) ;; *) echo "$p" ;; esac; done
  } > "$R/suites_list.txt"
  echo "suites: $(wc -l < "$R/suites_list.txt") (skipped: $(find "$B/tests" -name 'test_*' -type f -executable \( -path '*/sanitize/*' -o -path '*/fuzz/*' \) | xargs -r -n1 basename | tr '\n' ' '))" \
    | tee -a "$R/summary.txt"
  xargs -a "$R/suites_list.txt" -P "$PAR" -I{} bash -c 'run_suite "$1"' _ {}
  sort "$R/suites_summary.unsorted" > "$R/suites_summary.txt"
  rm -f "$R/suites_summary.unsorted"
  grep -HE ':[FE]:' "$R"/suites/*.txt | sed "s|^$R/suites/||" > "$R/suites_failures.txt"
  local bad
  bad=$(grep -vcE 'rc=0 +100%: Checks: [0-9]+, Failures: 0, Errors: 0' "$R/suites_summary.txt")
  mark suites $s "($(wc -l < "$R/suites_summary.txt") suites, $bad not clean, $(wc -l < "$R/suites_failures.txt") :F:/:E: lines)"
}

step_bench() {
  local s=$SECONDS lim
  mkdir -p "$R/bench"
  lim=$(cap 200)
  FLASHCL_BIN=$FL timeout "$lim" bash "$SRC/tools/gpu_results.sh" "$R/bench/f16" 2048,8192,16384 --dtype f16 \
    > "$R/bench/f16_tables.txt" 2>&1
  mark bench $s "(rc=$?, limit ${lim}s)"
}

step_pytorch() {
  local s=$SECONDS
  mkdir -p "$R/pytorch"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))' \
    > "$R/pytorch/torch_version.txt" 2>&1
  local d c name lim ss
  for d in 64 128; do
    for c in 0 1; do
      name=f16_d${d}_c${c}; ss=$SECONDS; lim=$(cap 110)
      local extra=(); [ $c = 1 ] && extra=(--causal)
      timeout "$lim" python3 "$SRC/tools/compare_pytorch.py" --flashcl "$FL" --seqlens 2048,8192 --head-dim $d \
        --dtype f16 --backward "${extra[@]}" > "$R/pytorch/$name.txt" 2>&1
      echo "  pytorch $name rc=$? $((SECONDS - ss))s (limit ${lim}s)" | tee -a "$R/summary.txt"
    done
  done
  ss=$SECONDS; lim=$(cap 110)
  timeout "$lim" python3 "$SRC/tools/compare_pytorch.py" --decode --flashcl "$FL" --cache-lens 4096,32768,131072 \
    --dtype f16 --head-dim 128 > "$R/pytorch/decode_f16_d128.txt" 2>&1
  echo "  pytorch decode_f16_d128 rc=$? $((SECONDS - ss))s (limit ${lim}s)" | tee -a "$R/summary.txt"
  mark pytorch $s
}

for st in "${steps[@]}"; do
  if [ "$(left)" -lt 15 ]; then echo "$st skipped: deadline (t=$((SECONDS - t0))s)" | tee -a "$R/summary.txt"; continue; fi
  "step_$st"
done
echo "total t=$((SECONDS - t0))s" | tee -a "$R/summary.txt"
pack
