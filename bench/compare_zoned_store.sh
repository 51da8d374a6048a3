#!/bin/sh
# nvkv's store on a zoned namespace against nvkv's store on a conventional namespace of the same
# size, interleaved: nvkv-ycsb loads RECORDS records and runs workload A (50/50 read/update,
# compaction at work once the store is full enough) and then workload C (reads only) on each, the
# order inside a pair alternating. Both through passthrough (the namespaces' generic nodes), with
# the same nvkv-ycsb properties. Each run starts on a blank namespace (every zone reset with
# util-linux's blkzone, or zeros written over the conventional one, through the block node) and
# formats its store there (nvkv-cli format).
# Prints each run, then the median ops/s and write amplification of each side and the ratio
# zoned/conventional; a run that fails ends the script (exit 1). POSIX sh, so it runs in
# tests/nvme-vm's busybox guest, where NVKV_VM_ZNS_CONVENTIONAL=1 puts a conventional namespace
# (/dev/ng0n3) beside the zoned one (/dev/ng0n1) on the same controller:
#
#   NVKV_VM_ZNS_CONVENTIONAL=1 NVKV_VM_IMAGE_SIZE=256M tests/nvme-vm/run.sh --config zns \
#       --timeout 2400 --binary build/release/bench/ycsb/nvkv-ycsb \
#       --binary build/release/tools/nvkv-cli --binary "$(command -v blkzone)" \
#       --binary bench/compare_zoned_store.sh \
#       --binary bench/ycsb/workloads/workloada --binary bench/ycsb/workloads/workloadc \
#       -- 'compare_zoned_store.sh /dev/ng0n1 /dev/ng0n3 3 100000 200000'
#
# usage: compare_zoned_store.sh ZONED CONVENTIONAL PAIRS RECORDS OPERATIONS
#   ZONED         a zoned namespace's generic device (/dev/ngXnY); wiped and formatted over
#   CONVENTIONAL  a conventional namespace's generic device; wiped and formatted over
#                 (a store file in place of either is formatted with format --force)
#   PAIRS         zoned/conventional pairs (the order inside a pair alternates)
#   RECORDS       records loaded (about 1.37 KB of the log each: 3 to a 4 KiB page)
#   OPERATIONS    operations of workload A, and of workload C, per run
# environment: SHARDS (2), QUEUE_DEPTH (nvkv.queuedepth, 32), CACHE (nvkv.cache, 0: every read
#   goes to the device), THREADS (1), CHECK (1: nvkv-cli check after each run), VERBOSE (0; 1
#   prints nvkv-ycsb's whole output), YCSB_WORKLOADS (where workloada and workloadc are: this
#   script's ycsb/workloads, else its own directory), NVKV_YCSB, NVKV_CLI, BLKZONE.
set -eu
[ $# -eq 5 ] || { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
zoned=$1 conv=$2 pairs=$3 records=$4 operations=$5
ycsb=${NVKV_YCSB:-nvkv-ycsb}
cli=${NVKV_CLI:-nvkv-cli}
blkzone=${BLKZONE:-blkzone}
shards=${SHARDS:-2} qd=${QUEUE_DEPTH:-32} cache=${CACHE:-0} threads=${THREADS:-1}
check=${CHECK:-1} verbose=${VERBOSE:-0}
here=$(dirname "$0")
if [ -z "${YCSB_WORKLOADS:-}" ]; then
  YCSB_WORKLOADS=$here
  [ -f "$here/ycsb/workloads/workloada" ] && YCSB_WORKLOADS=$here/ycsb/workloads
fi
out=${TMPDIR:-/tmp}/compare_zoned_store.$$
mkdir -p "$out"

fail() { echo "compare_zoned_store.sh: $*" >&2; exit 1; }

# Ops/s, write_amp, zones reset and zones holding the store of the phase PHASE ("LOAD", "RUN") in
# the nvkv-ycsb output FILE: "ops wa resets zones" (resets and zones "-" on a conventional store).
phase() {
  awk -v ph="[$2]" '
    index($0, ph) == 1 && match($0, / s: [0-9.]+ ops\/s/) { on = 1
      ops = substr($0, RSTART + 4, RLENGTH - 10) + 0; next }
    on && /^store: / { for (i = 1; i <= NF; ++i) if (index($i, "write_amp=") == 1)
      wa = substr($i, 11) }
    on && /^zones: / { resets = $2; zones = $6 }
    on && /^queues: / { on = 0 }
    END { if (ops == "") exit 1; printf "%s %s %s %s\n", ops, wa, resets == "" ? "-" : resets,
      zones == "" ? "-" : zones }' "$1"
}

# Makes DEV blank and formats a store of $shards shards on it. nvkv-cli does not format over a
# store on a generic node, so a namespace is wiped through its block node first: every zone reset
# (a zoned one), or zeros written over it whole (QEMU ignores a discard by default).
format() {
  if [ ! -c "$1" ]; then
    "$cli" --shards "$shards" --db "$1" format --force > "$out/format" 2>&1 ||
      fail "$cli --shards $shards --db $1 format --force: $(cat "$out/format")"
    return 0
  fi
  name=$(basename "$1" | sed 's/^ng/nvme/')
  if [ "$(cat "/sys/block/$name/queue/zoned")" = none ]; then
    dd if=/dev/zero of="/dev/$name" bs=1M count=$(($(cat "/sys/block/$name/size") / 2048)) \
      conv=fsync > "$out/format" 2>&1 || fail "zeroing /dev/$name: $(cat "$out/format")"
  else
    "$blkzone" reset "/dev/$name" > "$out/format" 2>&1 ||
      fail "$blkzone reset /dev/$name: $(cat "$out/format")"
  fi
  "$cli" --shards "$shards" --db "$1" format > "$out/format" 2>&1 ||
    fail "$cli --shards $shards --db $1 format: $(cat "$out/format")"
}

# Formats DEV afresh, loads it and runs A, then C; appends "side load_ops load_wa a_ops a_wa
# a_resets a_zones c_ops" to $out/runs and prints the run.
run_side() {
  side=$1 dev=$2 tag=$3
  format "$dev"
  set -- -p recordcount="$records" -p operationcount="$operations" -p nvkv.shards="$shards" \
    -p nvkv.queuedepth="$qd" -p nvkv.cache="$cache" -threads "$threads" --db "$dev" --keep --quiet
  "$ycsb" -P "$YCSB_WORKLOADS/workloada" "$@" > "$out/$tag.a" 2>&1 ||
    fail "nvkv-ycsb workload A (load and run) on $dev failed (exit $?): $(cat "$out/$tag.a")"
  "$ycsb" -run -P "$YCSB_WORKLOADS/workloadc" "$@" > "$out/$tag.c" 2>&1 ||
    fail "nvkv-ycsb workload C on $dev failed (exit $?): $(cat "$out/$tag.c")"
  if [ "$verbose" = 1 ]; then cat "$out/$tag.a" "$out/$tag.c"; fi
  load=$(phase "$out/$tag.a" LOAD) || fail "no load phase in: $(cat "$out/$tag.a")"
  a=$(phase "$out/$tag.a" RUN) || fail "no run phase in: $(cat "$out/$tag.a")"
  c=$(phase "$out/$tag.c" RUN) || fail "no run phase in: $(cat "$out/$tag.c")"
  # shellcheck disable=SC2086  # word lists on purpose
  set -- $load $a $c
  echo "$side $1 $2 $5 $6 $7 $8 $9" >> "$out/runs"
  echo "# $side pair $pair/$pairs: load $1 ops/s (write_amp $2); A $5 ops/s (write_amp $6," \
    "zones reset $7, holding $8); C $9 ops/s"
  if [ "$check" = 1 ]; then
    "$cli" --shards "$shards" --db "$dev" check > "$out/$tag.check" 2>&1 ||
      fail "$cli --shards $shards --db $dev check (exit $?): $(cat "$out/$tag.check")"
    sed "s/^/#   check: /" "$out/$tag.check"
  fi
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# Median of column COL of the runs of SIDE.
med() { awk -v s="$1" -v c="$2" '$1 == s { print $c }' "$out/runs" | median; }
ratio() { awk -v z="$1" -v c="$2" 'BEGIN { printf "%.3f", z / c }'; }

echo "# compare_zoned_store.sh: zoned $zoned, conventional $conv, $pairs pairs, $records records," \
  "$operations operations; shards $shards, queuedepth $qd, cache $cache, threads $threads"
for dev in "$zoned" "$conv"; do
  format "$dev"
  "$cli" --shards "$shards" --db "$dev" info > "$out/info" 2>&1 ||
    fail "$cli --shards $shards --db $dev info: $(cat "$out/info")"
  grep -E '^(path|device|zones|layout|capacity) ' "$out/info" | sed 's/^/# /'
done
: > "$out/runs"
pair=1
while [ "$pair" -le "$pairs" ]; do
  if [ $((pair % 2)) -eq 1 ]; then
    run_side zoned "$zoned" "z$pair"
    run_side conventional "$conv" "c$pair"
  else
    run_side conventional "$conv" "c$pair"
    run_side zoned "$zoned" "z$pair"
  fi
  pair=$((pair + 1))
done
echo "medians of $pairs runs each (ops/s, write_amp): zoned / conventional, ratio zoned/conventional"
for w in "load 2 3" "A 4 5" "C 8 -"; do
  # shellcheck disable=SC2086
  set -- $w
  zo=$(med zoned "$2") co=$(med conventional "$2")
  line="$1: $zo / $co ops/s, ratio $(ratio "$zo" "$co")"
  [ "$3" = - ] || line="$line; write_amp $(med zoned "$3") / $(med conventional "$3")"
  [ "$1" = A ] && line="$line; zones reset $(med zoned 6), holding $(med zoned 7)"
  echo "$line"
done
rm -rf "$out"
