#!/bin/sh
# shellcheck shell=dash
# PID 1 of the nvme-vm guest (busybox sh). run.sh copies it to /init in the
# initramfs, next to:
#   /nvkv/env           NVKV_VM_CONFIG, NVKV_VM_DEVICE_WAIT_S, ... (sourced)
#   /nvkv/modules.list  "file.ko [params]" lines, dependencies first
#   /nvkv/payload.sh    the command to run, as given to run.sh after --
#   /nvkv/bin/          the --binary files (their shared libraries sit at
#                       their host paths) and passthru_smoke
# It loads the NVMe modules, sets up the device for the configuration, runs
# the payload and prints NVKV-VM-EXIT=<status>, the line run.sh looks for.
# A setup failure prints NVKV-VM-SETUP-FAILED=<reason> instead. Then it powers
# off; QEMU runs with -no-reboot and the kernel with panic=-1, so any ending
# stops the VM.

/bin/busybox --install -s
export PATH=/nvkv/bin:/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=1777 tmpfs /tmp
# shellcheck source=/dev/null
. /nvkv/env

ng=/dev/ng0n1
blk=/dev/nvme0n1
work=/scratch

finish() {
  sync
  poweroff -f
  echo o > /proc/sysrq-trigger
  sleep 10
}

setup_failed() {
  echo "nvkv-vm: setup failed: $*"
  dmesg | tail -n 30
  echo "NVKV-VM-SETUP-FAILED=$*"
  finish
}

load_modules() {
  while read -r ko params; do
    # shellcheck disable=SC2086  # params is a word list on purpose
    insmod "/lib/modules/$ko" $params || setup_failed "insmod $ko $params"
  done < /nvkv/modules.list
}

# NVMe-oF TCP on loopback: null_blk (memory backed, so data round-trips) is
# the namespace of an nvmet subsystem on 127.0.0.1:4420, and the host side
# connects to it the way `nvme connect` does, by writing an options string to
# /dev/nvme-fabrics.
setup_tcp() {
  mount -t configfs configfs /sys/kernel/config || setup_failed "mount configfs"
  ip link set lo up || setup_failed "ip link set lo up"
  nullb=/sys/kernel/config/nullb/nullb0
  mkdir "$nullb" || setup_failed "mkdir $nullb"
  echo 1 > "$nullb/memory_backed"
  echo "$NVKV_VM_TCP_LBA_BYTES" > "$nullb/blocksize"
  echo "$NVKV_VM_TCP_SIZE_MB" > "$nullb/size"
  echo 1 > "$nullb/power" || setup_failed "null_blk power on"
  [ -b /dev/nullb0 ] || setup_failed "no /dev/nullb0"

  subsys=/sys/kernel/config/nvmet/subsystems/nvkv-vm
  mkdir "$subsys" || setup_failed "mkdir $subsys"
  echo 1 > "$subsys/attr_allow_any_host"
  mkdir "$subsys/namespaces/1"
  echo -n /dev/nullb0 > "$subsys/namespaces/1/device_path"
  echo 1 > "$subsys/namespaces/1/enable" || setup_failed "enable nvmet namespace"
  port=/sys/kernel/config/nvmet/ports/1
  mkdir "$port"
  echo tcp > "$port/addr_trtype"
  echo ipv4 > "$port/addr_adrfam"
  echo 127.0.0.1 > "$port/addr_traddr"
  echo 4420 > "$port/addr_trsvcid"
  ln -s "$subsys" "$port/subsystems/nvkv-vm" || setup_failed "enable nvmet tcp port"
  echo "nqn=nvkv-vm,transport=tcp,traddr=127.0.0.1,trsvcid=4420" > /dev/nvme-fabrics \
    || setup_failed "connect to nvmet over tcp"
}

# The payload's cwd and TMPDIR are on ext4 on /dev/vda (made by run.sh), not
# tmpfs: tmpfs in Linux 6.1 rejects O_DIRECT, which nvkv's file devices need.
setup_scratch() {
  tries=$((NVKV_VM_DEVICE_WAIT_S * 10))
  while [ ! -b /dev/vda ]; do
    tries=$((tries - 1))
    [ "$tries" -gt 0 ] || setup_failed "no scratch disk /dev/vda"
    sleep 0.1
  done
  mkdir -p "$work"
  mount -t ext4 /dev/vda "$work" || setup_failed "mount scratch ext4 /dev/vda"
  mkdir -p "$work/tmp"
  chmod 1777 "$work" "$work/tmp"
}

wait_for_devices() {
  tries=$((NVKV_VM_DEVICE_WAIT_S * 10))
  while [ ! -c "$ng" ] || [ ! -b "$blk" ] ||
    { [ -n "$second_ng" ] && { [ ! -c "$second_ng" ] || [ ! -b "$second_blk" ]; }; } ||
    { [ -n "$conv_ng" ] && { [ ! -c "$conv_ng" ] || [ ! -b "$conv_blk" ]; }; }; do
    tries=$((tries - 1))
    [ "$tries" -gt 0 ] || setup_failed "no $ng and $blk after ${NVKV_VM_DEVICE_WAIT_S}s"
    sleep 0.1
  done
}

uptime_s() { cut -d' ' -f1 /proc/uptime; }
t_init=$(uptime_s)
load_modules
t_modules=$(uptime_s)
setup_scratch
t_scratch=$(uptime_s)
[ "$NVKV_VM_CONFIG" = tcp ] && setup_tcp
# 4k's second namespace sits on a read-only image: every write to it fails (run.sh).
# zns's second namespace is zoned too, with 512-byte LBAs (run.sh).
ro_ng="" ro_blk="" zoned512_ng="" zoned512_blk=""
[ "$NVKV_VM_CONFIG" = 4k ] && ro_ng=/dev/ng0n2 ro_blk=/dev/nvme0n2
[ "$NVKV_VM_CONFIG" = zns ] && zoned512_ng=/dev/ng0n2 zoned512_blk=/dev/nvme0n2
second_ng="$ro_ng$zoned512_ng" second_blk="$ro_blk$zoned512_blk"
# NVKV_VM_ZNS_CONVENTIONAL=1 gives zns a third namespace, conventional (run.sh).
conv_ng="" conv_blk=""
[ "$NVKV_VM_CONFIG" = zns ] && [ "${NVKV_VM_ZNS_CONVENTIONAL:-0}" = 1 ] &&
  conv_ng=/dev/ng0n3 conv_blk=/dev/nvme0n3
wait_for_devices

# Device tests run their zoned-namespace suites instead of the others when this is 1.
zoned=0
[ "$NVKV_VM_CONFIG" = zns ] && zoned=1
# And their flexible-data-placement tests when this is 1.
fdp=0
[ "$NVKV_VM_CONFIG" = fdp ] && fdp=1

cd "$work" || setup_failed "cd $work"
echo "nvkv-vm: config $NVKV_VM_CONFIG ready at ${t_init}s /init, ${t_modules}s modules," \
  "${t_scratch}s scratch fs, $(uptime_s)s device; running payload"
env NVKV_TEST_NVME="$ng" NVKV_TEST_BLOCK="$blk" NVKV_TEST_ZONED="$zoned" NVKV_TEST_FDP="$fdp" \
  NVKV_TEST_NVME_READONLY="$ro_ng" NVKV_TEST_BLOCK_READONLY="$ro_blk" \
  NVKV_TEST_NVME_ZONED_512="$zoned512_ng" NVKV_TEST_BLOCK_ZONED_512="$zoned512_blk" \
  NVKV_TEST_NVME_CONVENTIONAL="$conv_ng" NVKV_TEST_BLOCK_CONVENTIONAL="$conv_blk" \
  NVKV_VM_CONFIG="$NVKV_VM_CONFIG" \
  NVKV_TEST_DIR="$work" TMPDIR="$work/tmp" HOME="$work" TERM=dumb sh /nvkv/payload.sh < /dev/null
rc=$?
echo
echo "NVKV-VM-EXIT=$rc"
finish
