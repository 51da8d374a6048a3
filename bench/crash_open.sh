#!/bin/bash
# Open after kill -9 of a durable writer (issue 13): loads KEYS YCSB records (1 KB values), then
# ROUNDS times: a durable YCSB workload A writer is killed after 3 s, and `nvkv-cli stats --json`
# opens the store with the page cache dropped. Prints per round: wall time and peak RSS of that
# process (/usr/bin/time), and what recovery did (seconds, whether it started from a checkpoint
# kept as the base, passes, pages read, index bytes, live keys, the largest table).
#
# NO_CHECKPOINT=1 (issue 37): the store never gets a checkpoint to start from instead. The load
# writes with checkpoints while running off (nvkv.checkpoint_log_ratio=0) and is killed -9 once
# its status line has counted KEYS records (it was to load half as many more); each round opens
# a copy of that crashed store, so every Open recovers from the whole log. VALUE_BYTES=100: one
# field of 100 bytes a record (the default: ten of 100). KEEP=1 leaves DATA_DIR/crashed.db, and
# REUSE=1 opens copies of the one there instead of loading again.
#
# MEMORY=LIMIT (bytes, or with k, m or g): each Open runs in a fresh memory cgroup of that limit
# (bench/memory_cgroup.sh), as a process limited so finds it (recovery keeps its tables, the index
# and the key filters within the room it leaves); an Open that fails or is killed prints its exit
# status.
#
# Usage: [NO_CHECKPOINT=1 [KEEP=1] [REUSE=1]] [VALUE_BYTES=100] [MEMORY=LIMIT]
#        bench/crash_open.sh BUILD_DIR DATA_DIR [KEYS] [ROUNDS]
# (as root: drops the page cache)
set -eu
. "$(dirname "$0")/memory_cgroup.sh"
build=$1; dir=$2; keys=${3:-1000000}; rounds=${4:-3}
cli=$build/tools/nvkv-cli; ycsb=$build/bench/ycsb/nvkv-ycsb
workload=$(dirname "$0")/ycsb/workloads/workloada
fields=()
if [ "${VALUE_BYTES:-1000}" = 100 ]; then fields=(-p fieldcount=1 -p fieldlength=100); fi
mkdir -p "$dir"
db=$dir/records.db
crashed=$dir/crashed.db
rm -f "$db"
if [ "${REUSE:-0}" = 1 ]; then
  [ "${NO_CHECKPOINT:-0}" = 1 ] && [ -f "$crashed" ] ||
      { echo "REUSE=1 needs NO_CHECKPOINT=1 and $crashed" >&2; exit 1; }
elif [ "${NO_CHECKPOINT:-0}" = 1 ]; then
  rm -f "$crashed"
  "$ycsb" -P "$workload" "${fields[@]}" -p recordcount=$((keys + keys / 2)) \
      -p nvkv.checkpoint_log_ratio=0 -load --db "$crashed" --keep > /dev/null 2> "$dir/load.txt" &
  loader=$!
  # Status lines: "[load]   12 s: 4613071 ops, ...".
  until awk -v keys="$keys" '$4 + 0 >= keys { found = 1 } END { exit !found }' "$dir/load.txt"; do
    kill -0 "$loader" 2> /dev/null || { echo "the load ended before $keys records" >&2; exit 1; }
    sleep 0.2
  done
  kill -9 "$loader"
  wait "$loader" 2> /dev/null || true
else
  "$ycsb" -P "$workload" "${fields[@]}" -p recordcount="$keys" -load --db "$db" --keep > /dev/null
fi
for _ in $(seq "$rounds"); do
  if [ "${NO_CHECKPOINT:-0}" = 1 ]; then
    cp --sparse=always "$crashed" "$db"
  else
    "$ycsb" -P "$workload" "${fields[@]}" -p recordcount="$keys" -p operationcount=100000000 \
        -p nvkv.durable=true -run --db "$db" --keep > /dev/null 2>&1 &
    writer=$!
    sleep 3
    kill -9 "$writer"
    wait "$writer" 2> /dev/null || true
  fi
  sync
  echo 3 > /proc/sys/vm/drop_caches
  status=0
  in_memory_cgroup "${MEMORY:-none}" /usr/bin/time -f '%e s, peak RSS %M KB' -o "$dir/time.txt" \
      "$cli" --db "$db" stats --json > "$dir/stats.json" || status=$?
  if [ "$status" != 0 ]; then
    echo "the Open failed (exit status $status; 137: killed): $(tail -1 "$dir/time.txt")"
    continue
  fi
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
t = open(sys.argv[2]).read().strip()
used = (s["segments_total"] - s["segments_free"]) * s["pages_per_segment"]
print("%s; recovery %.3f s, from %s, %d passes (%d restarts), %d pages (%.1f MiB; %.2f per "
      "page of the segments in use), index %.1f MiB, %d live keys, largest table %d bytes" % (
    t, s["recovery_seconds"], s["recovery_start"], s["recovery_passes"],
    s["recovery_restarts"],
    s["recovery_pages_scanned"], s["recovery_pages_scanned"] * s["page_bytes"] / 2**20,
    s["recovery_pages_scanned"] / max(used, 1), s["index_bytes"] / 2**20, s["live_keys"],
    s["recovery_table_bytes"]))' \
      "$dir/stats.json" "$dir/time.txt"
done
rm -f "$db"
[ "${KEEP:-0}" = 1 ] || rm -f "$crashed"
