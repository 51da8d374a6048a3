#!/usr/bin/env bash
# Installs what is missing, builds a release build, and runs the main job in the current
# directory: the YCSB core workloads A-F on a default file store (./nvkv-ycsb.db), printing the
# result table of each. Scale with RECORDS and OPERATIONS (default 100000 each).
set -euo pipefail
here=$(pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
"$src/tools/install-deps.sh"
cmake -S "$src" -B "$src/build/release" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$src/build/release" nvkv-ycsb
cd "$here"
ycsb="$src/build/release/bench/ycsb/nvkv-ycsb"
records=${RECORDS:-100000}
operations=${OPERATIONS:-100000}
for w in a b c d e f; do
  echo "=== YCSB workload $w: $records records, $operations operations, 1 thread, depth 32"
  "$ycsb" -P "$src/bench/ycsb/workloads/workload$w" -p recordcount="$records" \
    -p operationcount="$operations" -p nvkv.queuedepth=32 -threads 1 --db nvkv-ycsb.db
done
