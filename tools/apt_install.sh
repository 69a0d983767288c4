#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are not installed yet (apt, with sudo when not
# root). Run by tools/setup.sh and tools/ci_sanitize.sh: one copy of the logic.
# Usage: bash tools/apt_install.sh WHO PACKAGE...   (WHO names the caller in the log line)
set -euo pipefail
who=$1
shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "$who: installing ${missing[*]}" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
