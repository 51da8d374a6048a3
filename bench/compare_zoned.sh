#!/bin/sh
# Zone Append against fio's zoned writes on one zoned namespace, interleaved: nvkv-iobench
# --rw=zoneappend (any number of appends in flight per zone; the device picks each one's place;
# the zones taken in turn) and fio's io_uring_cmd engine with --zonemode=zbd (Writes at the write
# pointer, which must reach each zone in order; fio fills the zones one after another). Both
# through passthrough on the same /dev/ngXnY, the same zones, block size, queue depth and submit
# batch (1), registered buffers and file. Prints each pair, the median IOPS of each tool and
# their ratio; a run that reports an error ends the script (exit 1). POSIX sh, so it runs in
# tests/nvme-vm's busybox guest:
#
#   tests/nvme-vm/run.sh --config zns --binary build/release/bench/nvkv-iobench \
#       --binary "$(command -v fio)" --binary bench/compare_zoned.sh \
#       -- 'compare_zoned.sh /dev/ng0n1 2 5 4k 16'
#
# usage: compare_zoned.sh DEV ZONES PAIRS BS DEPTH
#   DEV    the zoned namespace's generic device; its first ZONES zones are written over
#   ZONES  zones written at once (at most the device's open limit)
#   PAIRS  fio/nvkv pairs (the order inside a pair alternates)
#   BS     block size, fio syntax (4k)
#   DEPTH  requests in flight
# Each run resets its zones first and writes them once, to their capacity.
set -eu
[ $# -eq 5 ] || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
dev=$1 zones=$2 pairs=$3 bs=$4 depth=$5
iobench=${NVKV_IOBENCH:-nvkv-iobench}
fio=${FIO:-fio}

# Zone size in bytes, from sysfs (the generic node's block twin): chunk_sectors x 512.
name=$(basename "$dev" | sed 's/^ng/nvme/')
zone_bytes=$(($(cat "/sys/block/$name/queue/chunk_sectors") * 512))

fail() { echo "compare_zoned.sh: $*" >&2; exit 1; }

# IOPS of one run, after checking it ran without an error (its JSON's "errors": 0).
run_nvkv() {
  "$iobench" --filename="$dev" --rw=zoneappend --zones="$zones" --bs="$bs" \
    --iodepth="$depth" --runtime=600s --output-format=json > /tmp/nvkv.out ||
    fail "nvkv-iobench failed: $(cat /tmp/nvkv.out)"
  grep -q '"errors": 0' /tmp/nvkv.out || fail "nvkv-iobench reported errors: $(cat /tmp/nvkv.out)"
  sed -n 's/.*"iops": \([0-9.]*\).*/\1/p' /tmp/nvkv.out
}

# fio resets the zones of a write job's range first. Terse v3: field 5 is the job's error,
# field 49 write IOPS.
run_fio() {
  "$fio" --name=zoned --filename="$dev" --ioengine=io_uring_cmd --cmd_type=nvme \
    --zonemode=zbd --max_open_zones="$zones" --rw=write --bs="$bs" --iodepth="$depth" \
    --size=$((zones * zone_bytes)) --fixedbufs=1 --registerfiles=1 --output-format=terse \
    > /tmp/fio.out || fail "fio failed: $(cat /tmp/fio.out)"
  awk -F';' '$5 != 0 || $49 <= 0 { exit 1 } { printf "%.1f\n", $49 }' /tmp/fio.out ||
    fail "fio reported an error: $(cat /tmp/fio.out)"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

: > /tmp/fio.runs
: > /tmp/nvkv.runs
pair=1
while [ "$pair" -le "$pairs" ]; do
  if [ $((pair % 2)) -eq 1 ]; then
    f=$(run_fio)
    n=$(run_nvkv)
  else
    n=$(run_nvkv)
    f=$(run_fio)
  fi
  echo "# zoned $bs depth $depth zones $zones pair $pair/$pairs: fio $f nvkv $n" \
    "ratio $(awk -v n="$n" -v f="$f" 'BEGIN { printf "%.3f", n / f }')"
  echo "$f" >> /tmp/fio.runs
  echo "$n" >> /tmp/nvkv.runs
  pair=$((pair + 1))
done
fm=$(median < /tmp/fio.runs)
nm=$(median < /tmp/nvkv.runs)
echo "zoned writes $bs qd$depth zones $zones, $pairs pairs: fio (zbd writes) $fm IOPS," \
  "nvkv-iobench (zone append) $nm IOPS, ratio $(awk -v n="$nm" -v f="$fm" 'BEGIN { printf "%.3f", n / f }')"
