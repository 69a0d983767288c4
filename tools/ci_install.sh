#!/usr/bin/env bash
# The packaging stage of CI (.ci/run runs it after the normal tests; needs build/ from tools/setup.sh):
#   1. install: build/ (configured with the default prefix) installed with `cmake --install --prefix`
#      into a temporary directory, then moved, so nothing may depend on where it was installed; the
#      library's soname follows the ABI policy (README);
#   2. examples/embed.c built against that installed copy through find_package(flashcl CONFIG) and
#      through plain `cc $(pkg-config --cflags --libs flashcl)`, each run on POCL;
#   3. the installed bin/flashcl run with no LD_LIBRARY_PATH (its RPATH $ORIGIN/../lib);
#   4. static library (FLASHCL_SHARED=OFF, default options otherwise) built, installed and linked through
#      `pkg-config --static` into the example;
#   5. a build without CLBlast (FLASHCL_WITH_CLBLAST=OFF, build-noblast/): no C++ or CLBlast in
#      libflashcl.so, the forward error suite (which checks the standard path's refusal), the CLI's
#      "unavailable" messages and the example, on POCL and rusticl.
# About 1 minute on 2 cores (build/ already built). Any failure ends it with a non-zero status.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
jobs=$(nproc)
stage_start=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flashcl-ci-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export POCL_CACHE_DIR=$root/build/pocl-cache
export FLASHCL_CACHE_DIR=$root/build/flashcl-cache # the installed CLI and examples: not the user's ~/.cache

step() { echo "=== ci_install: $1"; }
fail() {
  echo "ci_install: $1" >&2
  exit 1
}
# The example's own success line, on POCL unless the caller says otherwise.
run_example() {
  local what=$1
  shift
  local out
  out=$(FLASHCL_DEVICE=${FLASHCL_DEVICE:-pocl} "$@") || fail "$what: exit status $?: $out"
  grep -q ': ok$' <<<"$out" || fail "$what: no success line: $out"
  echo "$what: $out"
}

# ---- 1. relocatable install ------------------------------------------------------------------------
step "install build/ into a temporary prefix, then move it"
[ -f build/CMakeCache.txt ] || fail "build/ is not configured: run tools/setup.sh first"
cmake --install build --prefix "$tmp/installed" >/dev/null
mv "$tmp/installed" "$tmp/prefix"
prefix=$tmp/prefix
for f in include/flashcl.h include/flashcl_version.h lib/cmake/flashcl/flashclConfig.cmake \
  lib/cmake/flashcl/flashclConfigVersion.cmake lib/pkgconfig/flashcl.pc bin/flashcl; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
# No installed file may name the directory it was installed into.
if grep -rlF "$tmp/installed" "$prefix" >/dev/null; then
  fail "installed files name the install directory: $(grep -rlF "$tmp/installed" "$prefix" | tr '\n' ' ')"
fi

# The soname rule (README, "ABI policy"): libflashcl.so.MAJOR.MINOR during 0.x, libflashcl.so.MAJOR from 1.0.
version_macro() { sed -n "s/^#define FLASHCL_VERSION_$1 \([0-9]*\)$/\1/p" "$prefix/include/flashcl_version.h"; }
major=$(version_macro MAJOR)
minor=$(version_macro MINOR)
if [ "$major" = 0 ]; then want_soname=libflashcl.so.0.$minor; else want_soname=libflashcl.so.$major; fi
soname=$(readelf -d "$prefix/lib/libflashcl.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "$want_soname" ] || fail "soname is '$soname', the ABI policy says $want_soname"
[ -e "$prefix/lib/$soname" ] || fail "the soname's link $soname is not installed"
echo "soname: $soname"

# ---- 2. the example against the installed package ----------------------------------------------------
step "examples/ through find_package(flashcl CONFIG)"
cmake -S examples -B "$tmp/examples-cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$tmp/examples-cmake" -j"$jobs" >/dev/null
run_example "find_package example" "$tmp/examples-cmake/embed"
run_example "find_package decode example" "$tmp/examples-cmake/decode"

step "examples/embed.c through pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046 # word splitting of pkg-config's flags is the point
cc -std=c11 -Wall -Wextra -Werror examples/embed.c -o "$tmp/embed-pkgconfig" $(pkg-config --cflags --libs flashcl) -lm
LD_LIBRARY_PATH=$prefix/lib run_example "pkg-config example" "$tmp/embed-pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror examples/decode.c -o "$tmp/decode-pkgconfig" $(pkg-config --cflags --libs flashcl) -lm
LD_LIBRARY_PATH=$prefix/lib run_example "pkg-config decode example" "$tmp/decode-pkgconfig"
unset PKG_CONFIG_PATH

# ---- 3. the installed program finds its library through its RPATH ------------------------------------
step "installed bin/flashcl devices (RPATH, no LD_LIBRARY_PATH)"
env -u LD_LIBRARY_PATH FLASHCL_DEVICE=pocl "$prefix/bin/flashcl" devices >"$tmp/devices.txt" ||
  fail "installed flashcl devices: exit status $?"
grep -q "(default)" "$tmp/devices.txt" || fail "installed flashcl devices listed no default device"
head -n 2 "$tmp/devices.txt"

# ---- 4. static library -----------------------------------------------------------------------------
step "static library (FLASHCL_SHARED=OFF): build, install, link through pkg-config --static"
cmake -S . -B build-static -DFLASHCL_SHARED=OFF -DFLASHCL_BUILD_TESTS=OFF -DFLASHCL_BUILD_TOOLS=OFF \
  -DFLASHCL_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-static -j"$jobs" >/dev/null
cmake --install build-static --prefix "$tmp/static" >/dev/null
export PKG_CONFIG_PATH=$tmp/static/lib/pkgconfig
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror examples/embed.c -o "$tmp/embed-static" $(pkg-config --static --cflags --libs flashcl) -lm
unset PKG_CONFIG_PATH
readelf -d "$tmp/embed-static" | grep -q "libflashcl" && fail "the static example still needs libflashcl.so"
run_example "static example" "$tmp/embed-static"
cmake -S examples -B "$tmp/examples-static" -DCMAKE_PREFIX_PATH="$tmp/static" >/dev/null
cmake --build "$tmp/examples-static" -j"$jobs" >/dev/null
run_example "static find_package example" "$tmp/examples-static/embed"

# ---- 5. without CLBlast ----------------------------------------------------------------------------
step "build without CLBlast (FLASHCL_WITH_CLBLAST=OFF, build-noblast/)"
cmake -S . -B build-noblast -DFLASHCL_WITH_CLBLAST=OFF -DFLASHCL_TEST_AREAS="forward;cli" >/dev/null
cmake --build build-noblast -j"$jobs" --target flashcl_cli test_forward_errors embed >/dev/null
needed=$(readelf -d build-noblast/src/libflashcl.so | grep NEEDED || true)
if grep -Eq "clblast|stdc\+\+" <<<"$needed"; then fail "libflashcl.so without CLBlast still needs: $needed"; fi
# The error suite (its test_standard_unavailable case checks the refusal), the CLI's messages and the
# example; --no-tests=error and the count: a renamed test must not shrink the selection silently.
selection='^(forward_errors_(pocl|rusticl)|cli_usage_(run|bench|version)_standard_unavailable|cli_version|example_embed_(pocl|rusticl))$'
count=$(ctest --test-dir build-noblast -N -R "$selection" | sed -n 's/^Total Tests: //p')
[ "$count" = 8 ] || fail "build-noblast: expected 8 tests in the selection, found $count"
ctest --test-dir build-noblast -j"$jobs" --output-on-failure --no-tests=error -R "$selection"

echo "=== ci_install: all steps passed in $((SECONDS - stage_start)) s"
