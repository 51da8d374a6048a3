#!/usr/bin/env bash
# Installs what is missing, builds a release build, and runs the main job in the current
# directory: the storage benchmark, 4 KiB random reads at depth 32 on ./nvkv-bench.dat.
set -euo pipefail
here=$(pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
"$src/tools/install-deps.sh"
cmake -S "$src" -B "$src/build/release" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$src/build/release" nvkv-iobench
cd "$here"
exec "$src/build/release/bench/nvkv-iobench" --filename=nvkv-bench.dat --size=256m \
  --rw=randread --bs=4k --iodepth=32 --runtime=10
