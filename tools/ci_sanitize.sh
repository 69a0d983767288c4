#!/usr/bin/env bash
# The sanitizer stage of CI (.ci/run runs it after the normal tests; a fresh Debian 12 machine is enough):
#   1. ASan + UBSan + LSan (build-asan/): the error and API suites, the .npy and half-float suites, the
#      threads test, `flashcl run` forward+backward (--check, gradients, features, malformed files) and
#      the PTX rewrite's suites on POCL, through ctest -R;
#   2. TSan (build-tsan/): tests/sanitize/test_threads.c on POCL, two threads at once;
#   3. libFuzzer (build-fuzz/): tests/fuzz/fuzz_npy on the .npy reader for FLASHCL_FUZZ_SECONDS (60), then
#      tests/fuzz/fuzz_ptx_rewrite on the PTX rewrite (src/ptx_rewrite.c) for half as long.
# Any sanitizer report, leak or fuzzer crash fails the stage (exit status 1). 2 to 3.5 minutes on 2 cores
# from scratch. The compiler is clang-15, the one POCL depends on (its sanitizer runtimes and libFuzzer
# come in libclang-common-15-dev); llvm-15 brings llvm-symbolizer for readable reports.
#
# Environment:
#   FLASHCL_SANITIZE_STEPS  which steps, default "asan tsan fuzz"
#   FLASHCL_FUZZ_SECONDS    length of the fuzzing run, default 60
# A longer fuzzing run for release checks (1 hour, new inputs kept in build-fuzz/npy_corpus_work):
#   FLASHCL_SANITIZE_STEPS=fuzz FLASHCL_FUZZ_SECONDS=3600 bash tools/ci_sanitize.sh
# or, once build-fuzz/ is built, with one fuzzing process per core:
#   build-fuzz/tests/fuzz/fuzz_npy -max_total_time=3600 -timeout=10 -rss_limit_mb=2048 -jobs="$(nproc)" \
#     -workers="$(nproc)" -artifact_prefix=build-fuzz/ build-fuzz/npy_corpus_work tests/fuzz/npy_corpus
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
steps=${FLASHCL_SANITIZE_STEPS:-asan tsan fuzz}
fuzz_seconds=${FLASHCL_FUZZ_SECONDS:-60}
jobs=$(nproc)
stage_start=$SECONDS

# ---- packages: what the builds need, installed only where missing (apt, Debian archive) ----
packages=(build-essential cmake pkg-config ocl-icd-opencl-dev opencl-headers libclblast-dev check pocl-opencl-icd
          mesa-opencl-icd clang-15 libclang-common-15-dev llvm-15)
bash tools/apt_install.sh ci_sanitize "${packages[@]}"
cc=clang-15
symbolizer=/usr/lib/llvm-15/bin/llvm-symbolizer

# The ICD loader is shown every installed ICD file but Intel's: intel-opencl-icd (installed for the
# portability checks' ocloc; no Intel GPU here) dlopens libdxcore with RTLD_DEEPBIND as it loads, which the
# sanitizer runtimes refuse, failing every test before it starts. The steps run on POCL.
icd_dir=$(mktemp -d)
trap 'rm -rf "$icd_dir"' EXIT
for icd in /etc/OpenCL/vendors/*.icd; do
  grep -q "igdrcl" "$icd" || ln -s "$icd" "$icd_dir/$(basename "$icd")"
done
export OCL_ICD_VENDORS=$icd_dir

step_start=0
begin() {
  step_start=$SECONDS
  echo "=== ci_sanitize: $1"
}
end() { echo "=== ci_sanitize: $1 done in $((SECONDS - step_start)) s"; }

# One sanitizer build tree: clang-15, the given flags everywhere (library, tools, tests), -O1 -g with
# assertions on. FLASHCL_WERROR=OFF: the normal build holds the warnings to -Werror with its own
# compiler; clang's extra warnings are not this stage's business.
configure() {
  local dir=$1 flags=$2
  shift 2
  cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DFLASHCL_WERROR=OFF -DFLASHCL_TEST_JEMALLOC=OFF \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" "$@" >/dev/null
}

# Fails unless every name is a test of the tree: a renamed suite must not silently leave the selection.
require_tests() {
  local dir=$1
  shift
  local listed
  listed=$(ctest --test-dir "$dir" -N | sed -n 's/^ *Test *#[0-9]*: //p')
  for t in "$@"; do
    grep -qxF "$t" <<<"$listed" || { echo "ci_sanitize: $dir has no test '$t'" >&2; exit 1; }
  done
}

# ---- 1. ASan + UBSan + LSan ---------------------------------------------------------------------
if [[ " $steps " == *" asan "* ]]; then
  begin "ASan+UBSan build"
  configure build-asan "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    -DFLASHCL_TEST_AREAS="forward;backward;cli;abi;ptx"
  cmake --build build-asan -j"$jobs" --target flashcl_cli cli_make_inputs cli_test_npy cli_test_half_float \
    test_forward_errors test_backward_api test_threads test_struct_sizes test_struct_sizes_device test_ptx_rewrite \
    test_ptx_sm90a
  end "ASan+UBSan build"

  # On POCL: the error and API suites, the struct_size protocol's suites (they read and write callers'
  # structs bytewise), the threads test, the .npy and half-float suites, and the
  # flashcl program: forward + backward with --check on f32 and f16, window + block mask, dropout,
  # varlen, and its refusals (malformed files, wrong mask shapes, usage errors). ctest adds the
  # fixtures that write their input files.
  named=(forward_errors_pocl backward_api_pocl abi_struct_sizes abi_struct_sizes_device_pocl threads_pocl cli_test_npy cli_test_half_float
         cli_backward_flash_gqa_f32_bshd_causal_pocl cli_backward_flash_gqa_f16_bhsd_causal_pocl
         cli_window_block_mask_pocl cli_dropout_pocl cli_varlen_pocl cli_varlen_block_mask_pocl
         cli_block_mask_wrong_shape_pocl cli_varlen_block_mask_wrong_shape_pocl cli_device_not_found_pocl
         cli_check_reports_both_passes_pocl cli_version ptx_rewrite ptx_sm90a_pocl)
  require_tests build-asan "${named[@]}"
  asan_tests="^($(IFS='|'; echo "${named[*]}")|cli_malformed_.*_pocl|cli_usage_.*)\$"

  export ASAN_SYMBOLIZER_PATH=$symbolizer
  # UBSan: every finding is fatal (-fno-sanitize-recover=undefined), with its stack.
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # Leaks: driver allocations only are suppressed (tests/sanitize/lsan.supp says which and why).
  export LSAN_OPTIONS=suppressions=$root/tests/sanitize/lsan.supp:print_suppressions=0
  # ASan options, each for a driver:
  #   use_sigaltstack=0  LLVM (in POCL's kernel compiler and in Mesa's ICDs) replaces a thread's
  #                      alternate signal stack with a malloc'ed one when it installs its crash
  #                      handlers; when that thread exits ASan munmaps what it takes for its own stack
  #                      and dies with "AddressSanitizer failed to deallocate ... unable to unmap"
  #                      (seen in test_threads). ASan then only loses its stack-overflow report.
  #   detect_leaks=0, fast_unwind_on_malloc=1 (pass 1), fast_unwind_on_malloc=0 (pass 2): the drivers
  #                      are built without frame pointers, so only the slow unwinder gives the whole
  #                      stack of an allocation made inside them, which the suppressions need; but
  #                      it costs POCL's cold kernel builds (LLVM allocates a lot) 5 to 7 times their
  #                      time (backward_api: 2 min 10 s instead of 17 s). Pass 1 therefore runs the
  #                      selection with every ASan and UBSan check but leaks and builds POCL's kernel
  #                      cache (POCL_CACHE_DIR, shared, inside build-asan/); pass 2 runs it again
  #                      on the warm cache with leak checking and full allocation stacks.
  # The tests' environment turns Check's forking off (CK_FORK=no): LSan checks a suite's process once
  # at its exit and a leak makes it exit 1, which CTest reports as the suite failing; in the suites
  # that still fork each case (they set environment variables) a leak fails that case.
  #   detect_stack_use_after_return=1  not a driver matter: also catch flashcl's use of a returned
  #                      function's locals (off by default in clang 15).
  asan_common=use_sigaltstack=0:detect_stack_use_after_return=1
  begin "ASan+UBSan tests, pass 1 (no leak checking; builds POCL's kernel cache)"
  ASAN_OPTIONS=$asan_common:detect_leaks=0:fast_unwind_on_malloc=1 \
    ctest --test-dir build-asan -j"$jobs" --output-on-failure --no-tests=error -R "$asan_tests"
  end "ASan+UBSan pass 1"
  begin "ASan+UBSan+LSan tests, pass 2 (leaks, full allocation stacks)"
  ASAN_OPTIONS=$asan_common:detect_leaks=1:fast_unwind_on_malloc=0 \
    ctest --test-dir build-asan -j"$jobs" --output-on-failure --no-tests=error -R "$asan_tests"
  end "ASan+UBSan+LSan pass 2"
fi

# ---- 2. TSan --------------------------------------------------------------------------------------
if [[ " $steps " == *" tsan "* ]]; then
  begin "TSan build and threads test"
  configure build-tsan "-fsanitize=thread -fno-omit-frame-pointer" -DFLASHCL_BUILD_TOOLS=OFF -DFLASHCL_TEST_AREAS=
  cmake --build build-tsan -j"$jobs" --target test_threads
  require_tests build-tsan threads_pocl
  # No suppressions: on POCL the run is clean (POCL synchronises its worker threads with pthread
  # mutexes and condition variables, which TSan intercepts). setarch -R turns address randomisation
  # off for the run: LLVM 15's TSan dies with "unexpected memory mapping" on kernels that randomise
  # mmap with more than 28 bits (vm.mmap_rnd_bits = 32 on newer distributions); it changes nothing
  # else. Only POCL: rusticl synchronises its queue threads through Rust's std (futexes and atomics,
  # not instrumented), so TSan reports false races between its threads and the caller's buffers.
  TSAN_OPTIONS="second_deadlock_stack=1:external_symbolizer_path=$symbolizer" \
    setarch "$(uname -m)" -R ctest --test-dir build-tsan --output-on-failure --no-tests=error -R '^threads_pocl$'
  end "TSan"
fi

# ---- 3. libFuzzer on the .npy reader -------------------------------------------------------------
if [[ " $steps " == *" fuzz "* ]]; then
  begin "libFuzzer build and ${fuzz_seconds} s run of fuzz_npy"
  cmake -S . -B build-fuzz -DCMAKE_C_COMPILER="$cc" -DFLASHCL_FUZZ=ON -DFLASHCL_WERROR=OFF -DFLASHCL_BUILD_TOOLS=OFF \
    -DFLASHCL_TEST_AREAS= >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_npy fuzz_ptx_rewrite
  # New inputs go into npy_corpus_work (kept between runs on one machine); the seeds in the
  # repository are only read. A crash, leak, sanitizer report, broken npy.h promise (abort), an
  # input slower than -timeout seconds or a process above -rss_limit_mb fails the run and leaves
  # the input as build-fuzz/crash-* (or timeout-*, oom-*, leak-*).
  mkdir -p build-fuzz/npy_corpus_work
  log=build-fuzz/fuzz_npy.log
  status=0
  ASAN_SYMBOLIZER_PATH=$symbolizer UBSAN_OPTIONS=print_stacktrace=1 \
    build-fuzz/tests/fuzz/fuzz_npy -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix=build-fuzz/ build-fuzz/npy_corpus_work tests/fuzz/npy_corpus \
    >"$log" 2>&1 || status=$?
  grep -E "^(INFO: seed corpus|#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added)" "$log" || true
  if ((status != 0)); then
    tail -n 80 "$log"
    echo "ci_sanitize: fuzz_npy failed (exit $status); the input is in build-fuzz/ (crash-*, leak-*, timeout-*, oom-*)" >&2
    exit 1
  fi
  # The PTX rewrite takes text from a driver: the same rules, half the time, its own seeds and corpus.
  mkdir -p build-fuzz/ptx_corpus_work
  log=build-fuzz/fuzz_ptx_rewrite.log
  ASAN_SYMBOLIZER_PATH=$symbolizer UBSAN_OPTIONS=print_stacktrace=1 \
    build-fuzz/tests/fuzz/fuzz_ptx_rewrite -max_total_time="$(((fuzz_seconds + 1) / 2))" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/ptx- build-fuzz/ptx_corpus_work \
    tests/fuzz/ptx_corpus >"$log" 2>&1 || status=$?
  grep -E "^(INFO: seed corpus|#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added)" "$log" || true
  if ((status != 0)); then
    tail -n 80 "$log"
    echo "ci_sanitize: fuzz_ptx_rewrite failed (exit $status); the input is in build-fuzz/ (ptx-crash-*, ...)" >&2
    exit 1
  fi
  end "libFuzzer"
fi

echo "=== ci_sanitize: all steps passed in $((SECONDS - stage_start)) s"
