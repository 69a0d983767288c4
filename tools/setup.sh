#!/usr/bin/env bash
# Installs what flashcl needs (Debian 12 / Ubuntu packages) and builds it into build/.
# Safe to run again: apt skips what is installed, CMake rebuilds what changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# clang-15 + rocm-device-libs and intel-opencl-icd (its ocloc): the offline AMD and Intel kernel compiles of
# tests/portability. clang 15, not Debian's default 14: the device libraries are LLVM 15 bitcode. The Intel ICD
# finds no GPU on a machine without one and adds no platform there. libjemalloc2: the device tests run with it
# preloaded (FLASHCL_TEST_JEMALLOC in CMakeLists.txt), which makes the drivers' kernel builds faster.
packages=(build-essential cmake pkg-config ocl-icd-opencl-dev opencl-headers libclblast-dev
          check pocl-opencl-icd mesa-opencl-icd clinfo gnuplot-nox
          clang-15 rocm-device-libs intel-opencl-icd libjemalloc2)
bash tools/apt_install.sh setup "${packages[@]}"

build_type=${FLASHCL_BUILD_TYPE:-Release}
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
cmake --build build -j"$(nproc)"
