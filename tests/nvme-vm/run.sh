#!/usr/bin/env bash
# Boots Debian 12's kernel in QEMU (TCG) with an emulated NVMe namespace and
# runs a command in the guest with NVKV_TEST_NVME=/dev/ng0n1 and
# NVKV_TEST_BLOCK=/dev/nvme0n1. Exits with the command's exit status.
# See README.md beside this file.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly here
readonly cache_root="${NVKV_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/nvkv-vm}"
readonly cache_layout=v2  # Bump when the cached kernel directory's layout changes.

usage() {
  cat <<'EOF'
usage: tests/nvme-vm/run.sh [options] [--] COMMAND

Runs COMMAND (a busybox sh command line) in a QEMU guest that has an NVMe
namespace at /dev/ng0n1 (char) and /dev/nvme0n1 (block), and exits with its
exit status. The guest's PATH starts with /nvkv/bin, which holds the --binary
files and passthru_smoke.

options:
  --config LIST   one or more of these, comma-separated, or "all"; each boots
                  its own VM, one after the other:
                  4k (default): PCIe NVMe, 4096-byte LBAs
                  512: PCIe NVMe, 512-byte LBAs
                  tcp: NVMe-oF TCP over loopback inside the guest, null_blk
                       backed, 4096-byte LBAs
                  zns: PCIe NVMe zoned namespace, 4096-byte LBAs, 4 MiB zones of 3 MiB
                       capacity, 4 open and 5 active at most (NVKV_VM_ZONE_*)
                  fdp: PCIe NVMe namespace with flexible data placement, 4096-byte
                       LBAs, 8 placement handles; QEMU 7.2 has no FDP, so this one
                       runs bookworm-backports' QEMU, fetched once into the cache
                       beside the kernel (not installed; see fdp_qemu)
  --timeout S     kill the VM after S seconds (default 600)
  --binary PATH   copy PATH into the guest's /nvkv/bin, with its shared
                  libraries; repeatable
  --keep          keep the work directory (initramfs, image, console log)
                  instead of deleting it
  --verbose       show the kernel's boot messages
  -h, --help      this text

environment:
  NVKV_VM_CACHE       kernel cache (default ~/.cache/nvkv-vm)
  NVKV_VM_KERNEL_PKG  kernel package (default: what linux-image-amd64 depends on)
  NVKV_VM_MEM         guest memory (default 2G)
  NVKV_VM_SCRATCH_MB  size of the guest's ext4 scratch disk, its cwd (default 512)
  NVKV_VM_IMAGE_SIZE  backing image size for the PCIe configs (default 256M)
  NVKV_VM_ZONE_SIZE, NVKV_VM_ZONE_CAPACITY
                      the zns config's zone size and capacity (default 4M and 3M)
  NVKV_VM_ZONE_MAX_OPEN, NVKV_VM_ZONE_MAX_ACTIVE
                      its open and active limits (default 4 and 5)
  NVKV_VM_ZNS_CONVENTIONAL
                      1: the zns config gets a third namespace, nsid 3
                      (/dev/ng0n3, /dev/nvme0n3), conventional (not zoned),
                      4096-byte LBAs, NVKV_VM_IMAGE_SIZE like nsid 1, on the
                      same controller (default 0: none; other configs ignore it)
  NVKV_VM_TCP_SIZE_MB size of the tcp config's null_blk namespace in MiB (default 256)
  NVKV_VM_ACCEL       QEMU accelerator (default tcg; kvm where KVM works)
EOF
}

: "${NVKV_VM_ZONE_SIZE:=4M}" "${NVKV_VM_ZONE_CAPACITY:=3M}"
: "${NVKV_VM_ZONE_MAX_OPEN:=4}" "${NVKV_VM_ZONE_MAX_ACTIVE:=5}"
: "${NVKV_VM_ZNS_CONVENTIONAL:=0}"

log() { echo "nvkv-vm: $*" >&2; }
die() { log "error: $*"; exit 2; }

# --- packages ---------------------------------------------------------------

# Installs what is missing when root; otherwise names the packages to install.
ensure_packages() {
  local -a missing=()
  command -v qemu-system-x86_64 > /dev/null || missing+=(qemu-system-x86)
  # The initramfs needs a static busybox; Debian's "busybox" package is dynamic.
  if [[ ! -x /bin/busybox ]] || ldd /bin/busybox > /dev/null 2>&1; then
    missing+=(busybox-static)
  fi
  command -v xz > /dev/null || missing+=(xz-utils)
  command -v gcc > /dev/null || missing+=(gcc)
  command -v mkfs.ext4 > /dev/null || missing+=(e2fsprogs)
  [[ -f /usr/include/liburing.h ]] || missing+=(liburing-dev)
  ((${#missing[@]} == 0)) && return 0
  if ((EUID != 0)); then
    die "missing packages; run: sudo apt-get install -y --no-install-recommends ${missing[*]}"
  fi
  log "installing ${missing[*]}"
  local -a apt=(apt-get -o DPkg::Lock::Timeout=600 -qq)
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y --no-install-recommends \
      "${missing[@]}" > /dev/null; then
    "${apt[@]}" update
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y --no-install-recommends \
      "${missing[@]}" > /dev/null
  fi
}

# --- QEMU with FDP (the fdp config) ---------------------------------------------

# Debian 12's QEMU 7.2 predates flexible data placement (8.0). bookworm-backports, part of
# Debian's archive, has a newer one whose binary needs no library bookworm lacks: its packages
# are downloaded once, with a private apt configuration that reads only backports (the host's
# sources and installed QEMU stay as they are), and unpacked into the cache. Sets fdp_qemu to
# the command that runs it.
fdp_qemu=()
prepare_fdp_qemu() {
  local qdir="$cache_root/$cache_layout/qemu-backports"
  local root="$qdir/root"
  fdp_qemu=(env "QEMU_MODULE_DIR=$root/usr/lib/x86_64-linux-gnu/qemu"
    "$root/usr/bin/qemu-system-x86_64" -L "$root/usr/share/qemu" -L "$root/usr/share/seabios"
    -L /usr/lib/ipxe/qemu)
  [[ -f "$qdir/.complete" ]] && return 0
  mkdir -p "$qdir"
  exec {qemu_lock_fd}> "$qdir/.lock"
  flock "$qemu_lock_fd"
  if [[ ! -f "$qdir/.complete" ]]; then
    local started=$SECONDS dl apt_dir
    dl="$(mktemp -d "$qdir/.download.XXXXXX")"
    download_dir="$dl"
    apt_dir="$dl/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dl/debs"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
      "http://deb.debian.org/debian bookworm-backports main" > "$apt_dir/sources.list"
    local -a apt=(apt-get -qq -o "Dir::Etc::SourceList=$apt_dir/sources.list"
      -o Dir::Etc::SourceParts=/nonexistent -o "Dir::State::Lists=$apt_dir/lists"
      -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
    log "fetching QEMU from bookworm-backports into $qdir (once, for the fdp config)"
    "${apt[@]}" update || die "apt-get update of bookworm-backports failed"
    (cd "$dl/debs" && "${apt[@]}" download qemu-system-x86/bookworm-backports \
      qemu-system-common/bookworm-backports qemu-system-data/bookworm-backports \
      seabios/bookworm-backports) || die "apt-get download of QEMU from bookworm-backports failed"
    local deb
    for deb in "$dl"/debs/*.deb; do dpkg-deb -x "$deb" "$dl/root"; done
    rm -rf "$root"
    mv "$dl/root" "$root"
    rm -rf "$dl"
    download_dir=""
    "${fdp_qemu[@]}" -device nvme-subsys,help 2> /dev/null | grep -q 'fdp=' ||
      die "the QEMU from bookworm-backports in $root has no FDP (nvme-subsys fdp=)"
    touch "$qdir/.complete"
    log "$("${fdp_qemu[@]}" --version | head -n 1) cached in $((SECONDS - started))s"
  fi
  flock -u "$qemu_lock_fd"
}

# --- kernel -----------------------------------------------------------------

# Prints the concrete kernel image package, e.g. linux-image-6.1.0-57-amd64.
kernel_package() {
  if [[ -n "${NVKV_VM_KERNEL_PKG:-}" ]]; then
    echo "$NVKV_VM_KERNEL_PKG"
    return
  fi
  local pkg
  pkg="$(apt-cache depends linux-image-amd64 2> /dev/null \
    | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ && !found { print $2; found = 1 }')"
  if [[ -z "$pkg" && $EUID -eq 0 ]]; then
    apt-get -o DPkg::Lock::Timeout=600 -qq update > /dev/null
    pkg="$(apt-cache depends linux-image-amd64 2> /dev/null \
      | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ && !found { print $2; found = 1 }')"
  fi
  if [[ -z "$pkg" ]]; then  # No package lists: fall back to the newest cached kernel.
    pkg="$(find "$cache_root/$cache_layout" -mindepth 2 -maxdepth 2 -name .complete \
      2> /dev/null | sort -V | tail -n 1 | xargs -r dirname | xargs -r basename)"
  fi
  [[ -n "$pkg" ]] || die "cannot tell which kernel to use: apt-cache depends linux-image-amd64 found none"
  echo "$pkg"
}

# Decompresses the vmlinux ELF inside a bzImage, as the kernel's
# scripts/extract-vmlinux does: find a compression magic, decompress from
# there, keep the first result that is an ELF file.
extract_vmlinux() {
  local bzimage="$1" out="$2" magic cmd offset
  for magic in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08'; do
    case "${magic%%:*}" in
      xz) cmd=(xz -dc --single-stream) ;;
      zstd) cmd=(zstd -dcq) ;;
      gzip) cmd=(gzip -dcq) ;;
    esac
    command -v "${cmd[0]}" > /dev/null || continue  # Debian 12's kernel is xz.
    for offset in $(LC_ALL=C grep -obUaP "${magic#*:}" "$bzimage" | cut -d: -f1 | head -n 5); do
      tail -c "+$((offset + 1))" "$bzimage" | "${cmd[@]}" > "$out" 2> /dev/null || true
      if [[ "$(head -c 4 "$out" | od -An -tx1 | tr -d ' ')" == 7f454c46 ]]; then
        return 0
      fi
    done
  done
  die "no compressed ELF found in $bzimage (is xz-utils, zstd or gzip missing?)"
}

# Downloads, unpacks and caches the kernel once: $kdir/vmlinux and the module
# directories the configurations use. Concurrent runs wait on a lock.
prepare_kernel() {
  local pkg="$1"
  kdir="$cache_root/$cache_layout/$pkg"
  [[ -f "$kdir/.complete" ]] && return 0
  mkdir -p "$cache_root/$cache_layout"
  exec {lock_fd}> "$cache_root/$cache_layout/.lock"
  flock "$lock_fd"
  if [[ ! -f "$kdir/.complete" ]]; then
    local started=$SECONDS dl
    dl="$(mktemp -d "$cache_root/$cache_layout/.download.XXXXXX")"
    download_dir="$dl"
    log "fetching $pkg into $kdir (once)"
    # apt-get download runs as user _apt when it can write the directory.
    chmod 755 "$dl"
    if id _apt > /dev/null 2>&1 && ((EUID == 0)); then chown _apt "$dl"; fi
    # Stale package lists name a superseded .deb: update once and retry.
    if ! (cd "$dl" && apt-get -qq download "$pkg"); then
      ((EUID == 0)) && apt-get -o DPkg::Lock::Timeout=600 -qq update
      (cd "$dl" && apt-get -qq download "$pkg") || die "apt-get download $pkg failed"
    fi
    dpkg-deb -x "$dl"/"$pkg"_*.deb "$dl/root"
    local mdir
    mdir="$(echo "$dl"/root/lib/modules/*)"
    mkdir -p "$dl/kernel/modules"
    # Only what the guest loads: block, crc, crypto, configfs, nvme(t),
    # null_blk, and virtio-blk + ext4 for the scratch disk. About 14 MB of 380.
    (cd "$mdir/kernel" && cp -r --parents block lib crypto fs/configfs fs/ext4 fs/jbd2 \
      fs/mbcache.ko drivers/nvme drivers/block/null_blk drivers/virtio \
      drivers/block/virtio_blk.ko "$dl/kernel/modules/")
    extract_vmlinux "$dl"/root/boot/vmlinuz-* "$dl/kernel/vmlinux"
    cp "$dl"/root/boot/config-* "$dl/kernel/config"
    basename "$mdir" > "$dl/kernel/release"
    rm -rf "$kdir"
    mv "$dl/kernel" "$kdir"
    rm -rf "$dl"
    download_dir=""
    touch "$kdir/.complete"
    log "kernel $(cat "$kdir/release") cached in $((SECONDS - started))s"
  fi
  flock -u "$lock_fd"
}

# --- initramfs --------------------------------------------------------------

# resolve_module NAME prints the module names NAME needs and then NAME,
# dependencies first, each once (mod_done). It reads depends= and softdep pre:
# from each module's .modinfo, since the package has no modules.dep and kmod
# may be absent. mod_path maps a module name (with _) to its cached .ko.
declare -A mod_path=() mod_done=()
index_modules() {
  local f name
  while IFS= read -r -d '' f; do
    name="$(basename "$f" .ko)"
    mod_path[${name//-/_}]="$f"
  done < <(find "$kdir/modules" -name '*.ko' -print0)
}
resolve_module() {
  local name="${1//-/_}" dep info
  if [[ -z "${mod_path[$name]:-}" ]]; then  # A softdep may name an alias (crct10dif).
    dep="$(find "$kdir/modules" -name '*.ko' -exec grep -lazx "alias=$1" {} + | head -n 1)"
    [[ -n "$dep" ]] || die "module $1 is not in the kernel cache $kdir/modules"
    name="$(basename "$dep" .ko)"
    name="${name//-/_}"
  fi
  [[ -n "${mod_done[$name]:-}" ]] && return 0
  mod_done[$name]=1
  info="$(tr '\0' '\n' < "${mod_path[$name]}" | grep -aE '^(depends|softdep)=' || true)"
  for dep in $(sed -n 's/^depends=//p' <<< "$info" | tr ',' ' ') \
      $(sed -n 's/^softdep=.*pre: *\([^:]*\).*/\1/p' <<< "$info" | sed 's/ post$//'); do
    resolve_module "$dep"
  done
  echo "$name"
}

# Copies a host file to the same absolute path under the initramfs root.
copy_to_root() {
  local src="$1" dst="$root$1"
  [[ -e "$dst" ]] && return 0
  mkdir -p "$(dirname "$dst")"
  cp -L "$src" "$dst"
}

# Copies a binary into /nvkv/bin and, if it is dynamically linked, its
# libraries and loader at their host paths (as ldd resolves them).
add_binary() {
  local src="$1" lib
  [[ -f "$src" ]] || die "--binary $src: no such file"
  [[ -e "$root/nvkv/bin/$(basename "$src")" ]] && die "--binary $src: a file of that name is already in /nvkv/bin"
  cp -L "$src" "$root/nvkv/bin/"
  chmod +x "$root/nvkv/bin/$(basename "$src")"
  ldd "$src" > "$work/ldd.txt" 2>&1 || return 0  # Static, or not ELF: nothing more.
  if grep -q 'not found' "$work/ldd.txt"; then
    die "--binary $src: $(grep 'not found' "$work/ldd.txt" | tr -s '\t\n' '  ')"
  fi
  while read -r lib; do
    copy_to_root "$lib"
  done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' "$work/ldd.txt")
}

build_initramfs() {
  local -a want
  root="$work/root"
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,lib/modules,nvkv/bin}
  cp /bin/busybox "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
  cp "$here/guest-init.sh" "$root/init"
  chmod 755 "$root/init"

  # crc64_rocksoft_generic provides the crypto algorithm t10-pi's crc64-rocksoft
  # asks for by name; without kmod in the guest nothing would load it on demand.
  # virtio_blk and ext4 mount the scratch disk (see guest-init.sh).
  want=(crc64_rocksoft_generic virtio_pci virtio_blk ext4)
  case "$config" in
    tcp) want+=(null_blk nvme_tcp nvmet_tcp) ;;
    *) want+=(nvme) ;;
  esac
  local name m
  mod_done=()
  for m in "${want[@]}"; do resolve_module "$m"; done > "$work/modules.order"
  while read -r name; do
    cp "${mod_path[$name]}" "$root/lib/modules/$name.ko"
    case "$name" in
      null_blk) echo "$name.ko nr_devices=0" ;;  # Devices are made through configfs.
      *) echo "$name.ko" ;;
    esac
  done < "$work/modules.order" > "$root/nvkv/modules.list"

  gcc -static -O2 -Wall -Wextra -Werror -o "$root/nvkv/bin/passthru_smoke" \
    "$here/passthru_smoke.c" -luring
  local b
  for b in "${binaries[@]}"; do add_binary "$b"; done

  cat > "$root/nvkv/env" <<EOF
NVKV_VM_CONFIG=$config
NVKV_VM_DEVICE_WAIT_S=60
NVKV_VM_TCP_LBA_BYTES=4096
NVKV_VM_TCP_SIZE_MB=${NVKV_VM_TCP_SIZE_MB:-256}
NVKV_VM_ZNS_CONVENTIONAL=$NVKV_VM_ZNS_CONVENTIONAL
EOF
  printf '%s\n' "$payload" > "$root/nvkv/payload.sh"
  # Uncompressed: the TCG guest would spend longer unpacking than we save.
  (cd "$root" && find . | busybox cpio -o -H newc -R 0:0 2> /dev/null) > "$work/initramfs.cpio"
}

# --- QEMU -------------------------------------------------------------------

# Makes the disk images, blank and sparse. The scratch disk is ext4 made here
# (a host mkfs takes milliseconds, a TCG guest's much longer): not tmpfs,
# which in Linux 6.1 rejects O_DIRECT; not ext2, which has no fallocate. No
# journal (nothing to recover) and inode tables zeroed now, so the guest
# kernel has no lazy-init writes to do.
make_disks() {
  truncate -s "${scratch_mb}M" "$work/scratch.img"
  mkfs.ext4 -q -F -b 4096 -O ^has_journal -E nodiscard,lazy_itable_init=0 "$work/scratch.img"
  [[ "$config" == tcp ]] || truncate -s "${NVKV_VM_IMAGE_SIZE:-256M}" "$work/nvme.img"
  [[ "$config" == 4k ]] && truncate -s 16M "$work/readonly.img"
  [[ "$config" == zns ]] && truncate -s "${NVKV_VM_IMAGE_SIZE:-256M}" "$work/zoned512.img"
  [[ "$config" == zns && "$NVKV_VM_ZNS_CONVENTIONAL" == 1 ]] &&
    truncate -s "${NVKV_VM_IMAGE_SIZE:-256M}" "$work/conventional.img"
  return 0
}

# Prints the QEMU arguments for the disks: scratch as virtio-blk /dev/vda,
# and the configuration's NVMe controller and namespace.
disk_args() {
  printf '%s\n' \
    -drive "file=$work/scratch.img,if=none,id=scratch,format=raw,cache=unsafe" \
    -device "virtio-blk-pci,drive=scratch"
  local lba=4096 namespace_options="" controller=""
  case "$config" in
    tcp) return 0 ;;  # The guest makes its own NVMe-oF device.
    512) lba=512 ;;
    # Zones with a capacity below their size, open and active limits far below the zone count
    # (32 zones in ci.sh's 128 MiB namespace, 64 in 256 MiB: a store needs two metadata zones
    # and room for segments), and a Zone Append limit (ZASL 5: 128 KiB) below MDTS, as real
    # drives have them. The open limit is below the active one, so the device closes zones
    # itself; 4 open zones hold a store of 2 shards (kv/FORMAT.md "Open and active zones").
    zns)
      namespace_options=",zoned=true,zoned.zone_size=$NVKV_VM_ZONE_SIZE"
      namespace_options+=",zoned.zone_capacity=$NVKV_VM_ZONE_CAPACITY"
      namespace_options+=",zoned.max_open=$NVKV_VM_ZONE_MAX_OPEN"
      namespace_options+=",zoned.max_active=$NVKV_VM_ZONE_MAX_ACTIVE"
      controller=",zoned.zasl=5"
      ;;
    # One reclaim group of 8 handles, each reclaim unit 4 GiB: more than any run writes, so a
    # handle's count of the writes its unit may still take only goes down (tests compare it).
    fdp)
      printf '%s\n' -device "nvme-subsys,id=subsys0,fdp=on,fdp.runs=4G,fdp.nrg=1,fdp.nruh=8"
      controller=",subsys=subsys0"
      namespace_options=",fdp.ruhs=0-7"
      ;;
  esac
  printf '%s\n' \
    -drive "file=$work/nvme.img,if=none,id=nvm,format=raw,cache=unsafe" \
    -device "nvme,id=nvme0,serial=nvkv0001$controller" \
    -device "nvme-ns,drive=nvm,bus=nvme0,nsid=1,logical_block_size=$lba,physical_block_size=$lba$namespace_options"
  # zns has a second zoned namespace, alike but for its 512-byte LBAs (a page is 8 blocks, a
  # Zone Append limit of 256).
  if [[ "$config" == zns ]]; then
    printf '%s\n' \
      -drive "file=$work/zoned512.img,if=none,id=z512,format=raw,cache=unsafe" \
      -device "nvme-ns,drive=z512,bus=nvme0,nsid=2,logical_block_size=512,physical_block_size=512$namespace_options"
    # NVKV_VM_ZNS_CONVENTIONAL=1: a third namespace, conventional, of nsid 1's size and LBA, on
    # the same controller, to hold a store beside the zoned one (bench/compare_zoned_store.sh).
    [[ "$NVKV_VM_ZNS_CONVENTIONAL" == 1 ]] && printf '%s\n' \
      -drive "file=$work/conventional.img,if=none,id=conv,format=raw,cache=unsafe" \
      -device "nvme-ns,drive=conv,bus=nvme0,nsid=3,logical_block_size=4096,physical_block_size=4096"
    return 0
  fi
  # 4k also has a second namespace on a read-only image: QEMU fails every write to it with an
  # NVMe status, as a write-protected or failing drive would (NVKV_TEST_NVME_READONLY).
  [[ "$config" == 4k ]] || return 0
  printf '%s\n' \
    -drive "file=$work/readonly.img,if=none,id=ro,format=raw,readonly=on" \
    -device "nvme-ns,drive=ro,bus=nvme0,nsid=2,logical_block_size=4096,physical_block_size=4096"
}

run_vm() {
  local -a qemu_args
  make_disks
  mapfile -t qemu_args < <(disk_args)
  local append="console=ttyS0 panic=-1 mitigations=off"
  ((verbose)) || append+=" quiet"
  local started=$SECONDS rc=0
  # TCG by default: on the project's machines /dev/kvm exists but a KVM guest
  # hangs before its first console line. NVKV_VM_ACCEL=kvm where KVM works.
  local -a qemu=(qemu-system-x86_64)
  [[ "$config" == fdp ]] && qemu=("${fdp_qemu[@]}")
  timeout --foreground -k 10 "$timeout_s" "${qemu[@]}" \
    -machine q35 -accel "${NVKV_VM_ACCEL:-tcg}" -cpu max -smp 2 -m "${NVKV_VM_MEM:-2G}" \
    -nodefaults -display none -no-reboot -serial stdio -monitor none \
    -kernel "$kdir/vmlinux" -initrd "$work/initramfs.cpio" -append "$append" \
    "${qemu_args[@]}" < /dev/null 2>&1 | sed -u 's/\r$//' | tee "$work/console.log" \
    || rc=${PIPESTATUS[0]}
  log "VM ran $((SECONDS - started))s (config $config)"
  if ((rc == 124 || rc == 137)); then
    log "error: timed out after ${timeout_s}s (--timeout)"
    return 124
  fi
  local reason status
  reason="$(sed -n 's/^NVKV-VM-SETUP-FAILED=//p' "$work/console.log" | tail -n 1)"
  if [[ -n "$reason" ]]; then
    log "error: guest setup failed: $reason"
    return 125
  fi
  status="$(grep -E '^NVKV-VM-EXIT=[0-9]+$' "$work/console.log" | tail -n 1 | cut -d= -f2 || true)"
  if [[ -z "$status" ]]; then
    log "error: no NVKV-VM-EXIT line: the guest crashed or QEMU failed (exit $rc); see above"
    return 125
  fi
  log "payload exited $status"
  return "$status"
}

work_root="" download_dir=""
cleanup() {
  [[ -n "$download_dir" ]] && rm -rf "$download_dir"
  [[ -z "$work_root" ]] && return 0
  if ((keep)); then
    log "kept $work_root"
  else
    rm -rf "$work_root"
  fi
}

# Runs the payload under each configuration in turn. With one configuration
# the exit status is the payload's; with several it is 0 when all passed, else
# 1, after a summary line.
run_configs() {
  local -a results=()
  local passed=0 failed=0 status started
  for config in "${configs[@]}"; do
    work="$work_root/$config"
    mkdir -p "$work"
    started=$SECONDS
    build_initramfs
    status=0
    run_vm || status=$?
    results+=("$config: $( ((status == 0)) && echo PASS || echo "FAIL (exit $status)"), $((SECONDS - started))s")
    if ((status == 0)); then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
  ((${#configs[@]} == 1)) && return "$status"
  printf 'nvkv-vm: %s\n' "${results[@]}"
  echo "nvkv-vm: $passed passed, $failed failed"
  ((failed == 0))
}

main() {
  local config_list=4k
  timeout_s=600 keep=0 verbose=0
  scratch_mb="${NVKV_VM_SCRATCH_MB:-512}"
  [[ "$scratch_mb" =~ ^[0-9]+$ ]] || die "NVKV_VM_SCRATCH_MB takes whole MiB"
  binaries=()
  while (($#)); do
    case "$1" in
      --config) config_list="${2:?--config needs a value}"; shift 2 ;;
      --timeout) timeout_s="${2:?--timeout needs a value}"; shift 2 ;;
      --binary) binaries+=("$(realpath "${2:?--binary needs a path}")"); shift 2 ;;
      --keep) keep=1; shift ;;
      --verbose) verbose=1; shift ;;
      -h | --help) usage; exit 0 ;;
      --) shift; break ;;
      -*) usage >&2; die "unknown option $1" ;;
      *) break ;;
    esac
  done
  (($#)) || { usage >&2; die "no command given"; }
  payload="$*"
  [[ "$config_list" == all ]] && config_list=4k,512,tcp,zns,fdp
  IFS=, read -r -a configs <<< "$config_list"
  for config in "${configs[@]}"; do
    case "$config" in 4k | 512 | tcp | zns | fdp) ;; *) die "unknown --config $config" ;; esac
  done
  [[ "$timeout_s" =~ ^[0-9]+$ ]] || die "--timeout takes whole seconds"
  [[ "$NVKV_VM_ZNS_CONVENTIONAL" == [01] ]] || die "NVKV_VM_ZNS_CONVENTIONAL takes 0 or 1"

  trap cleanup EXIT
  trap 'log "interrupted"; exit 130' INT TERM  # Do not go on to the next config.
  ensure_packages
  local pkg
  pkg="$(kernel_package)"
  prepare_kernel "$pkg"
  [[ ",$config_list," == *,fdp,* ]] && prepare_fdp_qemu
  work_root="$(mktemp -d "${TMPDIR:-/tmp}/nvkv-vm.XXXXXX")"
  index_modules
  run_configs
}

main "$@"
