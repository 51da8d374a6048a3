#!/usr/bin/env bash
# Open time of nvkv, RocksDB and LMDB side by side (issue 13): each engine's store of KEYS YCSB
# records of 1 KB, opened by a whole process that runs one read and closes (nvkv-ycsb -run with
# operationcount=1: start, Open, one Get, Close), the page cache dropped before each run; after
# a clean close, and after kill -9 of a process writing durably for SECONDS seconds. The engines
# take turns within each round, the order rotating; medians of ROUNDS.
#
# usage: bench/open_peers.sh DIR [KEYS] [ROUNDS] [SECONDS]
#   DIR  a directory on a real file system (not tmpfs) for the three stores
#   e.g. bench/open_peers.sh /var/tmp/nvkv-open-peers 1000000 5 3
# Environment: ENGINES ["nvkv rocksdb lmdb"], NVKV_YCSB [build/release/bench/ycsb/nvkv-ycsb]
set -euo pipefail

if [[ $# -lt 1 ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dir=$1
keys=${2:-1000000}
rounds=${3:-5}
seconds=${4:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
ycsb=${NVKV_YCSB:-$repo/build/release/bench/ycsb/nvkv-ycsb}
engines=(${ENGINES:-nvkv rocksdb lmdb})
workload=$repo/bench/ycsb/workloads/workloadc
mkdir -p "$dir"

store_of() { [[ $1 == nvkv ]] && echo "$dir/nvkv.db" || echo "$dir/$1"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || true; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Milliseconds of a whole process that opens ENGINE's store, reads one record and closes it.
open_ms() {
  drop_caches
  local start end
  start=$(date +%s%N)
  "$ycsb" --engine "$1" -P "$workload" -p recordcount="$keys" -p operationcount=1 -run \
      --db "$(store_of "$1")" --keep --quiet > /dev/null
  end=$(date +%s%N)
  echo $(( (end - start) / 1000000 ))
}

for e in "${engines[@]}"; do
  rm -rf "$(store_of "$e")"
  "$ycsb" --engine "$e" -P "$workload" -p recordcount="$keys" -load --db "$(store_of "$e")" \
      --quiet > /dev/null
done
echo "# $keys records of 1 KB; $(nproc) cpus, kernel $(uname -r), $(df -T "$dir" | awk 'NR == 2 { print $2 " on " $1 }'); medians of $rounds, milliseconds"

declare -A clean crash
for r in $(seq "$rounds"); do
  n=${#engines[@]}
  for i in $(seq 0 $((n - 1))); do
    e=${engines[$(( (i + r) % n ))]}
    clean[$e]+="$(open_ms "$e") "
    # A durable writer killed mid-run: the next open recovers (RocksDB replays its WAL; LMDB has
    # nothing to replay). Each open after it closes cleanly, so each crash is made anew.
    "$ycsb" --engine "$e" -P "$repo/bench/ycsb/workloads/workloada" -p recordcount="$keys" \
        -p operationcount=100000000 -p nvkv.durable=true -run --db "$(store_of "$e")" --keep \
        --quiet > /dev/null 2>&1 &
    writer=$!
    sleep "$seconds"
    kill -9 "$writer"
    wait "$writer" 2> /dev/null || true
    crash[$e]+="$(open_ms "$e") "
  done
done
printf '%-8s %12s %12s   %s\n' engine clean_close after_kill runs
for e in "${engines[@]}"; do
  printf '%-8s %12s %12s   clean: %s; after kill -9: %s\n' "$e" \
      "$(echo "${clean[$e]}" | tr ' ' '\n' | sed '/^$/d' | median)" \
      "$(echo "${crash[$e]}" | tr ' ' '\n' | sed '/^$/d' | median)" "${clean[$e]}" "${crash[$e]}"
done
for e in "${engines[@]}"; do rm -rf "$(store_of "$e")"; done
