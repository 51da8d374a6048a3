#!/bin/sh
# How long Open takes and how much it reads (issue 13), measured through `nvkv-cli get`, a whole
# process that opens the store, reads one key and closes it:
#   1. sparse store files of 1, 16 and 64 GiB holding one key (formatted by nvkv on a file made
#      with `truncate`: only the pages written take space), after a clean close, and after
#      kill -9 of a process updating one record durably;
#   2. a store of KEYS YCSB records (1 KB values) after a clean close, and after kill -9 of a
#      process writing to it.
# Each figure is the median of ROUNDS runs, the page cache dropped before each. Open's own time
# and what it read come from `nvkv-cli stats --json` of the same state (recovery_seconds,
# recovery_pages_scanned, recovery_segments_skipped, recovery_segments_summarized); bytes read =
# pages scanned plus the map.
#
# Usage: bench/open_time.sh BUILD_DIR DATA_DIR [KEYS] [ROUNDS]
#   e.g. bench/open_time.sh build/release /var/tmp/nvkv-open 1000000 5
set -eu
build=$1
dir=$2
keys=${3:-1000000}
rounds=${4:-5}
cli=$build/tools/nvkv-cli
ycsb=$build/bench/ycsb/nvkv-ycsb
mkdir -p "$dir"

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# Median wall time in milliseconds of `nvkv-cli get KEY` on DB.
median_get_ms() {
  db=$1 key=$2
  for _ in $(seq "$rounds"); do
    drop_caches
    start=$(date +%s%N)
    "$cli" --db "$db" get "$key" > /dev/null
    end=$(date +%s%N)
    echo $(( (end - start) / 1000000 ))
  done | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# recovery_seconds, pages scanned, segments skipped, segments, page bytes of DB's next open.
recovery_of() {
  drop_caches
  "$cli" --db "$1" stats --json | describe_recovery
}

# The recovery that a `nvkv-cli stats --json` on stdin reports, in one line.
describe_recovery() {
  python3 -c '
import json, sys
s = json.load(sys.stdin)
map_pages = (s["segments_total"] + 251) // 252 if s["page_bytes"] == 4096 else 0
read = (s["recovery_pages_scanned"] + map_pages) * s["page_bytes"]
source = {"clean_close": "checkpoint", "base_checkpoint": "last checkpoint and the log after it",
          "log": "log", "new_store": "new store"}[s["recovery_start"]]
print("open %.1f ms from the %s, %d pages read (%.1f MiB with the map), %d of %d segments not read, %d read by their summaries" % (
    1000 * s["recovery_seconds"], source, s["recovery_pages_scanned"], read / 2**20,
    s["recovery_segments_skipped"], s["segments_total"], s["recovery_segments_summarized"]))'
}

# A process writing durably to DB (YCSB workload A over RECORDS records) is killed after 3 s:
# the heads' segments and the announced ones are open at the crash. Then the wall time of the
# `nvkv-cli stats` that opens it first, median of ROUNDS crashes (each made anew: an open after
# it closes cleanly), and the recovery of the last.
after_crash() {
  db=$1 records=$2
  crash_ms=""
  for _ in $(seq "$rounds"); do
    "$ycsb" -P "$(dirname "$0")/ycsb/workloads/workloada" -p recordcount="$records" \
        -p operationcount=100000000 -p nvkv.durable=true -run --db "$db" --keep > /dev/null 2>&1 &
    writer=$!
    sleep 3
    kill -9 "$writer"
    wait "$writer" 2> /dev/null || true
    drop_caches
    start=$(date +%s%N)
    "$cli" --db "$db" stats --json > "$dir/crash-stats.json"
    end=$(date +%s%N)
    crash_ms="$crash_ms $(( (end - start) / 1000000 ))"
  done
  median=$(echo "$crash_ms" | tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  printf 'after kill -9: nvkv-cli stats %s ms (median of%s); last: ' "$median" "$crash_ms"
  describe_recovery < "$dir/crash-stats.json"
}

echo "== sparse store files holding one key"
for gib in 1 16 64; do
  db=$dir/sparse-$gib.db
  rm -f "$db"
  truncate -s "${gib}G" "$db"
  "$cli" --db "$db" format > /dev/null
  "$cli" --db "$db" put key value > /dev/null
  printf '%3d GiB: nvkv-cli get %s ms; ' "$gib" "$(median_get_ms "$db" key)"
  recovery_of "$db"
  # Then updates of one record (YCSB's first key) until the kill.
  printf '%3d GiB ' "$gib"
  after_crash "$db" 1
  rm -f "$db"
done

echo "== $keys records of 1 KB (YCSB load)"
db=$dir/records.db
rm -f "$db"
"$ycsb" -P "$(dirname "$0")/ycsb/workloads/workloada" -p recordcount="$keys" -load --db "$db" \
    --keep > /dev/null
# A key every such store holds (one of the first ten records YCSB inserts), found in a store of
# ten records: dumping the big one would take minutes.
"$ycsb" -P "$(dirname "$0")/ycsb/workloads/workloada" -p recordcount=10 -load --db "$dir/ten.db" \
    > /dev/null
key=$("$cli" --db "$dir/ten.db" dump | sed -n 2p | cut -f1)
rm -f "$dir/ten.db"
printf 'after a clean close: nvkv-cli get %s ms; ' "$(median_get_ms "$db" "$key")"
recovery_of "$db"
after_crash "$db" "$keys"
rm -f "$db"
