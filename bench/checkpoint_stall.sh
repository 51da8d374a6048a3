#!/bin/bash
# What checkpoints while running cost the writes (issue 13): YCSB workload A (non-durable writes)
# on a store of KEYS records of 1 KB, OPS operations, with the engine's checkpoints while running
# (Options::checkpoint_log_ratio 8, the default) and without them (ratio 0), alternating, each run
# from a copy of the same loaded store with the page cache dropped. Prints per run the throughput,
# the update and read latency percentiles (microseconds), the checkpoints written, the time they
# took and the time writes waited for them (Stats::checkpoint_writes_held_seconds).
#
# Usage: bench/checkpoint_stall.sh BUILD_DIR DATA_DIR [KEYS] [OPS] [ROUNDS]  (as root)
set -eu
build=$1; dir=$2; keys=${3:-1000000}; ops=${4:-300000}; rounds=${5:-3}
ycsb=$build/bench/ycsb/nvkv-ycsb
workload=$(dirname "$0")/ycsb/workloads/workloada
mkdir -p "$dir"
rm -f "$dir/base.db" "$dir/run.db"
"$ycsb" -P "$workload" -p recordcount="$keys" -load --db "$dir/base.db" --keep > /dev/null
for round in $(seq "$rounds"); do
  for ratio in 8 0; do
    cp --sparse=always "$dir/base.db" "$dir/run.db"
    sync
    echo 3 > /proc/sys/vm/drop_caches
    "$ycsb" -P "$workload" -p recordcount="$keys" -p operationcount="$ops" -p nvkv.durable=false \
        -p nvkv.checkpoint_log_ratio="$ratio" -run --db "$dir/run.db" --keep --json 2> /dev/null |
      tail -1 | python3 -c '
import json, sys
d = json.load(sys.stdin); u = d["ops"]["UPDATE"]; r = d["ops"]["READ"]
print("round %s ratio %s: %.0f ops/s; update p99 %.0f p99.9 %.0f p99.99 %.0f max %.0f; "
      "read p99.9 %.0f p99.99 %.0f max %.0f; checkpoints %d taking %.1f ms, writes held %.1f ms" % (
          sys.argv[1], sys.argv[2], d["ops_per_s"], u["p99_us"], u["p99_9_us"], u["p99_99_us"],
          u["max_us"], r["p99_9_us"], r["p99_99_us"], r["max_us"],
          d["store"]["checkpoints_written"], d["store"].get("checkpoint_seconds", 0) * 1e3,
          d["store"].get("checkpoint_writes_held_seconds", 0) * 1e3))' "$round" "$ratio"
  done
done
rm -f "$dir/base.db" "$dir/run.db"
