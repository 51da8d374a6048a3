#!/usr/bin/env bash
# nvkv against RocksDB and LMDB (Debian's packages) on the same YCSB request stream, side by side
# on one machine and one file system, and prints per workload and thread count the median run-
# phase throughput of each engine and the ratio nvkv / best peer.
#
# usage: bench/ycsb/compare_peers.sh DIR
#   DIR  a directory on a real file system (not tmpfs) for the three stores
#
# Environment (defaults in brackets):
#   RECORDS [1000000]  OPERATIONS [200000]  WORKLOADS ["a b c d f"]  THREADS ["1 2"]
#   ROUNDS [3]         runs of each engine per cell; the median is reported
#   MEMORY [384m]      memory limit of each run (a memory cgroup; "none": no limit)
#   CACHE [64m]        every engine's cache: nvkv's record cache, RocksDB's block cache (LMDB
#                      has none; its page cache is what MEMORY leaves it)
#   NVKV_CACHE [CACHE] nvkv's record cache alone. nvkv reads with O_DIRECT, so the page cache
#                      that MEMORY leaves RocksDB and LMDB beside their own caches is no use
#                      to it: NVKV_CACHE=256m gives it that memory as cache instead
#   WARMUP [0]         operations of the workload's mix each run does before its measured
#                      phase, in the same process and memory limit (warmupoperationcount): 0
#                      measures from a cold start, a large count the steady state
#   DURABLE [false]    run-phase writes durable (nvkv.durable; RocksDB sync; LMDB map sync)
#   EVICT [1]          drop the page cache before each run (needs root), so that no engine
#                      starts with data in memory that the others cannot use
#   WARM [0]           1: each run loads and runs in one process (no limit, no eviction), so
#                      that nvkv's write-through cache and the peers' memtables and page cache
#                      start with the data: the everything-in-memory comparison
#   ENGINES ["nvkv rocksdb lmdb"]   NVKV_YCSB [build/release/bench/ycsb/nvkv-ycsb]
#                      add "nvkv-async" for nvkv with ASYNC_DEPTH [32] operations in flight
#                      per client thread (its asynchronous API, which the peers lack): a row
#                      of its own store, shown beside the others but not counted as a peer
#   EXTRA_ARGS         appended to every nvkv-ycsb run (e.g. "-p nvkv.index=ordered")
#
# Method: each engine loads its store once per workload (unlimited memory, writes not durable,
# one Flush at the end). Then ROUNDS rounds: in each, every engine runs the run phase (-run
# --keep) in turn, the order rotating from round to round, after the page cache is dropped,
# inside a fresh memory cgroup (v1: memory.limit_in_bytes; v2: memory.max) created below this
# shell's own cgroup. All engines use one synchronous operation at a time per client thread
# (queue depth 1), as YCSB's bindings do. Raw JSON lines go to DIR/compare_peers.jsonl, the
# tables nvkv-ycsb prints to DIR/compare_peers.log.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dir=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
ycsb=${NVKV_YCSB:-$repo/build/release/bench/ycsb/nvkv-ycsb}
records=${RECORDS:-1000000}
operations=${OPERATIONS:-200000}
workloads=(${WORKLOADS:-a b c d f})
threads_list=(${THREADS:-1 2})
rounds=${ROUNDS:-3}
memory=${MEMORY:-384m}
cache=${CACHE:-64m}
nvkv_cache=${NVKV_CACHE:-$cache}
durable=${DURABLE:-false}
warmup=${WARMUP:-0}
evict=${EVICT:-1}
warm=${WARM:-0}
if [[ $warm == 1 ]]; then
  memory=none
  evict=0
fi
engines=(${ENGINES:-nvkv rocksdb lmdb})
extra=(${EXTRA_ARGS:-})
mkdir -p "$dir"
log=$dir/compare_peers.jsonl
tables=$dir/compare_peers.log
: > "$log"
: > "$tables"

. "$repo/bench/memory_cgroup.sh"
if [[ $memory != none ]] && ! memory_cgroup_find; then
  echo "compare_peers: set MEMORY=none to run without a memory limit" >&2
  exit 1
fi

# Runs "$@" inside a new memory cgroup of $memory (or as it is with MEMORY=none).
limited() {
  in_memory_cgroup "$memory" "$@"
}

evict_page_cache() {
  if [[ $evict == 1 ]]; then
    sync
    echo 1 > /proc/sys/vm/drop_caches
  fi
}

async_depth=${ASYNC_DEPTH:-32}

store_of() {  # engine workload -> path
  case $1 in
    nvkv | nvkv-async) echo "$dir/$1-$2.db" ;;
    *) echo "$dir/$1-$2" ;;
  esac
}

common() {  # engine workload threads -> arguments
  local c=$cache
  [[ $1 == nvkv* ]] && c=$nvkv_cache
  local engine=$1 depth=()
  if [[ $1 == nvkv-async ]]; then
    engine=nvkv
    depth=(-p nvkv.queuedepth="$async_depth")
  fi
  echo --engine "$engine" -P "$repo/bench/ycsb/workloads/workload$2" -p recordcount="$records" \
    -p operationcount="$operations" -p warmupoperationcount="$warmup" -p nvkv.cache="$c" \
    -p nvkv.durable="$durable" -p threadcount="$3" "${depth[@]}" --json --quiet "${extra[@]}"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# machine: $(nproc) cpus, kernel $(uname -r), $(df -T "$dir" | awk 'NR == 2 { print $2 " on " $1 }'); records $records x 1 KB, $operations operations after $warmup unmeasured, memory $memory, cache $cache (nvkv $nvkv_cache), durable $durable" >&2
printf '%-9s %-7s' workload threads
for e in "${engines[@]}"; do printf ' %12s' "$e"; done
printf ' %18s\n' "nvkv/best peer"
for w in "${workloads[@]}"; do
  for e in "${engines[@]}"; do
    [[ $warm == 1 ]] && break  # each warm run loads its own store
    # shellcheck disable=SC2046
    "$ycsb" -load --db "$(store_of "$e" "$w")" $(common "$e" "$w" 1) >> "$log" \
      2>> "$tables"
  done
  for t in "${threads_list[@]}"; do
    declare -A results=()
    for r in $(seq 1 "$rounds"); do
      n=${#engines[@]}
      for i in $(seq 0 $((n - 1))); do
        e=${engines[$(((i + r) % n))]}
        evict_page_cache
        phases=(-run --keep)
        [[ $warm == 1 ]] && phases=()  # load and run, one process
        # shellcheck disable=SC2046
        line=$(limited "$ycsb" "${phases[@]}" --db "$(store_of "$e" "$w")" \
          $(common "$e" "$w" "$t") 2>> "$tables" | grep '"phase": "run"')
        echo "$line" >> "$log"
        # The phase's own ops_per_s comes first; each operation type has one too, later.
        ops=$(echo "$line" | grep -o '"ops_per_s": [0-9.]*' | head -n 1 | awk '{ print $2 }')
        results[$e]="${results[$e]:-} $ops"
      done
    done
    printf '%-9s %-7s' "$w" "$t"
    best_peer=0
    nvkv_median=0
    for e in "${engines[@]}"; do
      m=$(echo "${results[$e]}" | tr ' ' '\n' | grep -v '^$' | median)
      printf ' %12.0f' "$m"
      if [[ $e == nvkv ]]; then
        nvkv_median=$m
      elif [[ $e == nvkv-async ]]; then
        :
      elif awk -v m="$m" -v b="$best_peer" 'BEGIN { exit !(m > b) }'; then
        best_peer=$m
      fi
    done
    awk -v n="$nvkv_median" -v b="$best_peer" 'BEGIN { if (b > 0) printf " %17.2fx\n", n / b; else print "                 -" }'
    unset results
  done
done
