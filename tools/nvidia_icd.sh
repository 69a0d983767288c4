#!/usr/bin/env bash
# Points the OpenCL ICD loader at NVIDIA's OpenCL driver on machines that have the NVIDIA driver
# (libnvidia-opencl.so.1) but no ICD file for it in /etc/OpenCL/vendors (containers with the driver
# mounted in, hand-installed drivers). Prints the shell lines to apply, so use it as
#   eval "$(bash tools/nvidia_icd.sh)"
# and then run flashcl (e.g. `build/tools/flashcl devices`) in that shell. It prints nothing when an
# installed ICD file already names NVIDIA's library, and fails (status 1, reason on stderr) when no
# libnvidia-opencl.so.1 can be found.
#
# How: a private vendors directory (FLASHCL_ICD_DIR, default ${XDG_CACHE_HOME:-~/.cache}/flashcl/icd) with
# the system's .icd files linked in (so POCL, rusticl and others stay visible) plus nvidia.icd naming the
# library's absolute path, and OCL_ICD_VENDORS set to it: both the ocl-icd loader (Debian's) and
# Khronos' loader read a directory there. NVIDIA_OPENCL_LIB=path skips the search.
set -euo pipefail

vendors=/etc/OpenCL/vendors
if compgen -G "$vendors/*.icd" >/dev/null && grep -qs "libnvidia-opencl" "$vendors"/*.icd; then
  echo "nvidia_icd: $vendors already names NVIDIA's OpenCL library; nothing to do" >&2
  exit 0
fi

find_library() {
  [ -n "${NVIDIA_OPENCL_LIB:-}" ] && { echo "$NVIDIA_OPENCL_LIB"; return; }
  local found
  found=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 /{print $NF; exit}')
  [ -n "$found" ] && { echo "$found"; return; }
  for dir in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/nvidia/lib64 \
             /usr/local/nvidia/lib /usr/lib/wsl/lib; do
    [ -e "$dir/libnvidia-opencl.so.1" ] && { echo "$dir/libnvidia-opencl.so.1"; return; }
  done
  return 0 # not found: the caller says so
}
library=$(find_library)
if [ -z "$library" ] || [ ! -e "$library" ]; then
  echo "nvidia_icd: no libnvidia-opencl.so.1 found (is the NVIDIA driver installed? NVIDIA_OPENCL_LIB=path names it)" >&2
  exit 1
fi

dir=${FLASHCL_ICD_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flashcl/icd}
mkdir -p "$dir"
rm -f "$dir"/*.icd
for icd in "$vendors"/*.icd; do
  [ -e "$icd" ] && ln -s "$icd" "$dir/$(basename "$icd")"
done
echo "$library" >"$dir/nvidia.icd"
echo "nvidia_icd: $dir/nvidia.icd -> $library" >&2
printf 'export OCL_ICD_VENDORS=%q\n' "$dir"
