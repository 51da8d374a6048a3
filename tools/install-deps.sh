#!/usr/bin/env bash
# Installs the Debian 12 packages nvkv builds and tests with; does nothing when all are present.
# Run as root (or with sudo available).
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config
  liburing-dev libabsl-dev libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev fio
  clang libclang-rt-14-dev  # clang: tools/ci/clang.sh, tsan.sh, fuzz.sh (TSan, libFuzzer)
  librocksdb-dev liblmdb-dev  # optional peers of nvkv-ycsb (--engine), built and tested when present
  python3 python3-venv python3-pip python3-setuptools python3-wheel  # api/python: tests, pip install
  help2man)  # the tools' man pages (man/CMakeLists.txt)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
