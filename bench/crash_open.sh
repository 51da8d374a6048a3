#!/bin/bash
# Open after kill -9 of a durable writer (issue 13): loads KEYS YCSB records (1 KB values), then
# ROUNDS times: a durable YCSB workload A writer is killed after 3 s, and `nvkv-cli stats --json`
# opens the store with the page cache dropped. Prints per round: wall time and peak RSS of that
# process (/usr/bin/time), and what recovery did (seconds, whether it started from a checkpoint
# kept as the base, passes, pages read, index bytes, live keys, the largest table).
#
# Usage: bench/crash_open.sh BUILD_DIR DATA_DIR [KEYS] [ROUNDS]   (as root: drops the page cache)
set -eu
build=$1; dir=$2; keys=${3:-1000000}; rounds=${4:-3}
cli=$build/tools/nvkv-cli; ycsb=$build/bench/ycsb/nvkv-ycsb
workload=$(dirname "$0")/ycsb/workloads/workloada
mkdir -p "$dir"
db=$dir/records.db
rm -f "$db"
"$ycsb" -P "$workload" -p recordcount="$keys" -load --db "$db" --keep > /dev/null
for _ in $(seq "$rounds"); do
  "$ycsb" -P "$workload" -p recordcount="$keys" -p operationcount=100000000 \
      -p nvkv.durable=true -run --db "$db" --keep > /dev/null 2>&1 &
  writer=$!
  sleep 3
  kill -9 "$writer"
  wait "$writer" 2> /dev/null || true
  sync
  echo 3 > /proc/sys/vm/drop_caches
  /usr/bin/time -f '%e s, peak RSS %M KB' -o "$dir/time.txt" "$cli" --db "$db" stats --json \
      > "$dir/stats.json"
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
t = open(sys.argv[2]).read().strip()
print("%s; recovery %.3f s, from a base checkpoint %d, %d passes, %d pages (%.1f MiB), index "
      "%.1f MiB, %d live keys, largest table %d bytes" % (
    t, s["recovery_seconds"], s["recovery_from_base_checkpoint"], s["recovery_passes"],
    s["recovery_pages_scanned"], s["recovery_pages_scanned"] * s["page_bytes"] / 2**20,
    s["index_bytes"] / 2**20, s["live_keys"], s["recovery_table_bytes"]))' \
      "$dir/stats.json" "$dir/time.txt"
done
rm -f "$db"
