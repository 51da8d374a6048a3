#!/usr/bin/env bash
# Compares nvkv-iobench with fio's io_uring engine on the same file, interleaved, and prints the
# median IOPS of each and their ratio.
#
# usage: bench/compare_fio.sh FILE SIZE RUNTIME_S PAIRS [WORKLOAD...]
#   FILE       file on a real file system (not tmpfs); created and written in full first
#   SIZE       bytes of FILE to use, fio syntax (1g, 512m)
#   RUNTIME_S  seconds per run
#   PAIRS      fio/nvkv pairs per workload (5 or more on a noisy machine)
#   WORKLOAD   RW:BS:DEPTH[:BATCH], e.g. randread:4k:32:8 (default: randread:4k:1
#              randread:4k:32 randread:4k:32:8). BATCH (default 1) is the submit batch and the
#              least completions reaped per wait of both tools: fio's iodepth_batch_submit and
#              iodepth_batch_complete_min, nvkv-iobench's --submit-batch and --reap-batch
#
# Environment: NVKV_IOBENCH (default: build/bench/nvkv-iobench next to this script's repo),
#   FIO (default: fio), SKIP_PRECONDITION=1 to reuse a file already written in full,
#   NVKV_EXTRA_ARGS (e.g. "--single-issuer=0") appended to every nvkv-iobench run,
#   PIN_CPU=N to run both tools under taskset -c N (at depth 1, which CPU the thread sleeps on
#   relative to the disk's interrupt moves IOPS by up to 2x; see bench/README.md).
#
# Method: for each workload, PAIRS pairs run back to back; the order inside a pair alternates
# (fio first in odd pairs, nvkv first in even pairs) so neither tool always follows the other.
# Both use O_DIRECT, registered buffers, a registered file, no SQPOLL and no polling, one job.
# Reported: median IOPS of each tool, the ratio of the medians, and the median of the per-pair
# ratios (less sensitive to drift of the machine between pairs). Nothing is downloaded.
set -euo pipefail

if [[ $# -lt 4 ]]; then
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
file=$1
size=$2
runtime=$3
pairs=$4
shift 4
workloads=("$@")
if [[ ${#workloads[@]} -eq 0 ]]; then workloads=(randread:4k:1 randread:4k:32 randread:4k:32:8); fi

repo=$(cd "$(dirname "$0")/.." && pwd)
pin=()
if [[ -n ${PIN_CPU:-} ]]; then pin=(taskset -c "$PIN_CPU"); fi
iobench=${NVKV_IOBENCH:-$repo/build/bench/nvkv-iobench}
fio=${FIO:-fio}
if ! command -v "$fio" >/dev/null; then
  echo "compare_fio.sh: fio not found (Debian: apt-get install fio)" >&2
  exit 1
fi
if [[ ! -x $iobench ]]; then
  echo "compare_fio.sh: $iobench not built (cmake -S . -B build -G Ninja && ninja -C build)" >&2
  exit 1
fi
if ! [[ $runtime =~ ^[0-9]+$ && $pairs =~ ^[0-9]+$ && $pairs -ge 1 ]]; then
  echo "compare_fio.sh: RUNTIME_S and PAIRS must be whole numbers, PAIRS >= 1" >&2
  exit 2
fi

# Precondition: write every block once so reads hit allocated, written extents (a fresh or
# fallocated file reads back zeros without touching the disk).
if [[ ${SKIP_PRECONDITION:-0} != 1 ]]; then
  echo "# preconditioning $file ($size, sequential 1 MiB direct writes)" >&2
  "$fio" --name=precondition --filename="$file" --size="$size" --rw=write --bs=1m \
    --direct=1 --ioengine=io_uring --iodepth=8 --output-format=terse >/dev/null
fi

# IOPS of one fio run: terse v3 field 8 is read IOPS, field 49 write IOPS.
run_fio() {
  local rw=$1 bs=$2 depth=$3 batch=$4
  "${pin[@]}" "$fio" --name=cmp --filename="$file" --ioengine=io_uring --direct=1 --fixedbufs=1 \
    --registerfiles=1 --hipri=0 --sqthread_poll=0 --bs="$bs" --iodepth="$depth" --rw="$rw" \
    --iodepth_batch_submit="$batch" --iodepth_batch_complete_min="$batch" --size="$size" --runtime="$runtime" --time_based --output-format=terse |
    awk -F';' '{ printf "%.1f\n", $8 + $49 }'
}

# IOPS of one nvkv-iobench run (its JSON has a top-level "iops").
run_nvkv() {
  local rw=$1 bs=$2 depth=$3 batch=$4
  "${pin[@]}" "$iobench" --filename="$file" --size="$size" --rw="$rw" --bs="$bs" --iodepth="$depth" \
    --submit-batch="$batch" --reap-batch="$batch" --runtime="$runtime" --fixedbufs=1 --register-files=1 --output-format=json \
    ${NVKV_EXTRA_ARGS:-} |
    sed -n 's/.*"iops": \([0-9.]*\).*/\1/p'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# pinned: ${PIN_CPU:-no}; machine: $(nproc) cpus, kernel $(uname -r), $(df -T "$file" | awk 'NR == 2 { print $2 }') on $(df "$file" | awk 'NR == 2 { print $1 }')" >&2
summary=()
for workload in "${workloads[@]}"; do
  IFS=: read -r rw bs depth batch <<<"$workload"
  batch=${batch:-1}
  fio_runs=()
  nvkv_runs=()
  pair_ratios=()
  for ((pair = 1; pair <= pairs; pair++)); do
    if ((pair % 2 == 1)); then
      f=$(run_fio "$rw" "$bs" "$depth" "$batch")
      n=$(run_nvkv "$rw" "$bs" "$depth" "$batch")
    else
      n=$(run_nvkv "$rw" "$bs" "$depth" "$batch")
      f=$(run_fio "$rw" "$bs" "$depth" "$batch")
    fi
    r=$(awk -v n="$n" -v f="$f" 'BEGIN { printf "%.3f", n / f }')
    echo "# $rw bs=$bs depth=$depth batch=$batch pair $pair/$pairs: fio $f nvkv $n ratio $r" >&2
    fio_runs+=("$f")
    nvkv_runs+=("$n")
    pair_ratios+=("$r")
  done
  fm=$(printf '%s\n' "${fio_runs[@]}" | median)
  nm=$(printf '%s\n' "${nvkv_runs[@]}" | median)
  pm=$(printf '%s\n' "${pair_ratios[@]}" | median)
  summary+=("$(awk -v w="$rw $bs qd$depth b$batch" -v p="$pairs" -v f="$fm" -v n="$nm" -v pm="$pm" \
    'BEGIN { printf "%-20s %5d %14.0f %14.0f %8.3f %10.3f", w, p, f, n, n / f, pm }')")
done

printf '%-20s %5s %14s %14s %8s %10s\n' workload pairs fio_iops_med nvkv_iops_med ratio pair_ratio
printf '%s\n' "${summary[@]}"
