#!/usr/bin/env bash
# Installs what flashcl needs (Debian 12 / Ubuntu packages) and builds it into build/.
# Safe to run again: apt skips what is installed, CMake rebuilds what changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(build-essential cmake pkg-config ocl-icd-opencl-dev opencl-headers libclblast-dev
          check pocl-opencl-icd mesa-opencl-icd clinfo gnuplot-nox)
bash tools/apt_install.sh setup "${packages[@]}"

build_type=${FLASHCL_BUILD_TYPE:-Release}
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
cmake --build build -j"$(nproc)"
