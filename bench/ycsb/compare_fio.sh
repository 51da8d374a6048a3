#!/usr/bin/env bash
# Holds nvkv-ycsb against fio on the same file system, interleaved, and prints medians and
# ratios for the two targets of bench/README.md ("YCSB"):
#
#   read:  workload C with requestdistribution=uniform, ONE client thread, nvkv.queuedepth=32,
#          against fio 4 KiB random reads at iodepth=32 (io_uring, direct=1, fixedbufs,
#          registerfiles) on a preconditioned file of the same size as the store.
#   load:  the load phase's user bytes per second (key + value bytes of the records, Flush
#          included) against fio sequential 4 KiB writes (io_uring, direct=1, fixedbufs,
#          registerfiles) at the depth the engine effectively reaches during the load: page
#          writes in flight = the block device's average queue depth over the load phase
#          (iostat's aqu-sz, from /proc/diskstats) times its average write request size in
#          4 KiB pages (the block layer merges adjacent page writes), measured by calibration
#          loads (median of three) and rounded to a whole number; LOAD_DEPTH overrides it
#          (e.g. LOAD_DEPTH=32 to compare with what the device can do).
#
# usage: bench/ycsb/compare_fio.sh DIR PAIRS [RECORDS] [READS]
#   DIR      directory on the file system to measure (not tmpfs); the script creates
#            DIR/ycsb-c.db, DIR/ycsb-load.db and DIR/fio.dat there (and leaves them)
#   PAIRS    nvkv/fio pairs per comparison (5 or more on a noisy machine)
#   RECORDS  records loaded (default 200000: a 737 MB store with 1140-byte records)
#   READS    at most this many reads per workload C run (default: no limit); each run lasts
#            RUNTIME seconds (maxexecutiontime), as long as fio's, so both sample the machine's
#            noise over windows of the same length
#
# Environment: NVKV_YCSB (default build-rel/bench/ycsb/nvkv-ycsb of this repo), FIO (fio),
#   RUNTIME (seconds per fio read run, default 10), ONLY=read|load, LOAD_DEPTH (fio iodepth
#   for the write comparison; default measured), NVKV_YCSB_ARGS (appended to every nvkv-ycsb
#   run, e.g. "-p nvkv.submitbatch=0").
#
# Method (as bench/compare_fio.sh): pairs run back to back and alternate their order (fio
# first in odd pairs, nvkv first in even pairs). Reported: each tool's median, the ratio of
# the medians, and the median of the per-pair ratios (robust to drift between pairs).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dir=$1
pairs=$2
records=${3:-200000}
reads=${4:-1000000000}
runtime=${RUNTIME:-10}
only=${ONLY:-}

repo=$(cd "$(dirname "$0")/../.." && pwd)
ycsb=${NVKV_YCSB:-$repo/build-rel/bench/ycsb/nvkv-ycsb}
workloads=$repo/bench/ycsb/workloads
fio=${FIO:-fio}
command -v "$fio" >/dev/null || { echo "compare_fio.sh: fio not found (apt-get install fio)" >&2; exit 1; }
[[ -x $ycsb ]] || { echo "compare_fio.sh: $ycsb not built (cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build-rel nvkv-ycsb)" >&2; exit 1; }
[[ $pairs =~ ^[0-9]+$ && $pairs -ge 1 ]] || { echo "compare_fio.sh: PAIRS must be >= 1" >&2; exit 2; }
mkdir -p "$dir"

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
json_field() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p" | head -1; }
# The run phase's ops_per_s / the load phase's user_bytes_per_s and disk queue depth.
json_phase() { grep "\"phase\": \"$1\"" | head -1; }

fio_common=(--ioengine=io_uring --direct=1 --fixedbufs=1 --registerfiles=1 --hipri=0
            --sqthread_poll=0 --bs=4k --output-format=terse)

echo "# machine: $(nproc) cpus, kernel $(uname -r), $(df -T "$dir" | awk 'NR == 2 { print $2 " on " $1 }'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
summary=()

compare() {  # name fio_cmd nvkv_cmd: fills fio_med nvkv_med ratio pair_ratio
  local name=$1 fio_fn=$2 nvkv_fn=$3
  local f n r fio_runs=() nvkv_runs=() ratios=()
  for ((pair = 1; pair <= pairs; pair++)); do
    if ((pair % 2 == 1)); then f=$($fio_fn); n=$($nvkv_fn); else n=$($nvkv_fn); f=$($fio_fn); fi
    r=$(awk -v n="$n" -v f="$f" 'BEGIN { printf "%.3f", n / f }')
    echo "# $name pair $pair/$pairs: fio $f nvkv $n ratio $r" >&2
    fio_runs+=("$f"); nvkv_runs+=("$n"); ratios+=("$r")
  done
  local fm nm pm
  fm=$(printf '%s\n' "${fio_runs[@]}" | median)
  nm=$(printf '%s\n' "${nvkv_runs[@]}" | median)
  pm=$(printf '%s\n' "${ratios[@]}" | median)
  summary+=("$(awk -v w="$name" -v p="$pairs" -v f="$fm" -v n="$nm" -v pm="$pm" \
    'BEGIN { printf "%-34s %5d %14.0f %14.0f %8.3f %10.3f", w, p, f, n, n / f, pm }')")
}

# ---- read: workload C uniform, 1 thread, queue depth 32, vs fio randread 4k qd32 ----
if [[ -z $only || $only == read ]]; then
  store=$dir/ycsb-c.db
  echo "# loading $store ($records records)" >&2
  "$ycsb" -load -P "$workloads/workloadc" -p recordcount="$records" --db "$store" --quiet >/dev/null
  size=$(stat -c %s "$store")
  echo "# preconditioning $dir/fio.dat ($size bytes, sequential 1 MiB direct writes)" >&2
  "$fio" --name=precondition --filename="$dir/fio.dat" --size="$size" --rw=write --bs=1m \
    --direct=1 --ioengine=io_uring --iodepth=8 --output-format=terse >/dev/null
  fio_read() {
    "$fio" --name=randread --filename="$dir/fio.dat" --size="$size" --rw=randread --iodepth=32 \
      --runtime="$runtime" --time_based "${fio_common[@]}" | awk -F';' '{ printf "%.1f\n", $8 }'
  }
  nvkv_read() {
    "$ycsb" -run -P "$workloads/workloadc" -p recordcount="$records" -p operationcount="$reads" \
      -p maxexecutiontime="$runtime" -p requestdistribution=uniform -p nvkv.queuedepth=32 -threads 1 --db "$store" --json \
      --quiet ${NVKV_YCSB_ARGS:-} 2>/dev/null | json_phase run | json_field ops_per_s
  }
  compare "C uniform qd32 1 thread (ops/s)" fio_read nvkv_read
fi

# ---- load: user bytes/s of the load phase vs fio sequential 4k writes at the engine's depth ----
if [[ -z $only || $only == load ]]; then
  store=$dir/ycsb-load.db
  nvkv_load_json() {
    "$ycsb" -load -P "$workloads/workloadc" -p recordcount="$records" --db "$store" --json \
      --quiet ${NVKV_YCSB_ARGS:-} 2>/dev/null | json_phase load
  }
  # Page writes in flight: the block layer merges adjacent page writes into larger requests,
  # so its average queue depth counts requests, not pages; times the average request size in
  # pages it gives the page writes in flight (Little's law per request, sizes uncorrelated
  # with latency), which is what fio's iodepth of 4 KiB writes is.
  page_depth() {
    awk -v q="$(json_field avg_queue_depth <<<"$1")" -v b="$(json_field write_bytes <<<"$1")" \
        -v w="$(json_field writes <<<"$1")" 'BEGIN { printf "%.2f", (w > 0 ? q * b / w / 4096 : q) }'
  }
  depth=${LOAD_DEPTH:-}
  if [[ -z $depth ]]; then
    # The counters are the whole device's: another process's I/O inflates one sample, so take
    # the median of three calibration loads.
    depths=()
    for i in 1 2 3; do
      calibration=$(nvkv_load_json)
      depths+=("$(page_depth "$calibration")")
      echo "# calibration load $i: $(json_field avg_queue_depth <<<"$calibration") requests of $(awk -v b="$(json_field write_bytes <<<"$calibration")" -v w="$(json_field writes <<<"$calibration")" 'BEGIN { printf "%.1f", (w > 0 ? b / w / 1024 : 0) }') KiB in flight = ${depths[-1]} page writes" >&2
    done
    pd=$(printf '%s\n' "${depths[@]}" | median)
    depth=$(awk -v q="$pd" 'BEGIN { d = int(q + 0.5); print (d < 1 ? 1 : d) }')
    echo "# median $pd page writes in flight -> fio iodepth=$depth" >&2
  fi
  size=$(stat -c %s "$store")
  [[ -f $dir/fio.dat && $(stat -c %s "$dir/fio.dat") -ge $size ]] ||
    "$fio" --name=precondition --filename="$dir/fio.dat" --size="$size" --rw=write --bs=1m \
      --direct=1 --ioengine=io_uring --iodepth=8 --output-format=terse >/dev/null
  # fio runs as long as the last load did (the pairs run in subshells: kept in a file).
  seconds_file=$dir/.load_seconds
  echo 3 >"$seconds_file"
  fio_write() {
    "$fio" --name=write --filename="$dir/fio.dat" --size="$size" --rw=write --iodepth="$depth" \
      --runtime="$(cat "$seconds_file")" --time_based "${fio_common[@]}" |
      awk -F';' '{ printf "%.0f\n", $48 * 1024 }'  # terse v3 field 48: write KiB/s
  }
  nvkv_write() {
    local out
    out=$(nvkv_load_json)
    echo "$out" | json_field elapsed_s | awk '{ s = int($1 + 0.5); print s < 1 ? 1 : s }' >"$seconds_file"
    echo "# nvkv load: $(echo "$out" | json_field ops_per_s) records/s, $(page_depth "$out") page writes in flight" >&2
    echo "$out" | json_field user_bytes_per_s
  }
  compare "load user B/s vs fio write qd$depth" fio_write nvkv_write
fi

printf '%-34s %5s %14s %14s %8s %10s\n' comparison pairs fio_median nvkv_median ratio pair_ratio
printf '%s\n' "${summary[@]}"
