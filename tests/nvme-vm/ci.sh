#!/usr/bin/env bash
# The NVMe tests CI runs: every device test of an existing build, in one QEMU guest per NVMe
# configuration (run.sh), against Linux's own NVMe drivers. Builds nothing.
#
#     tests/nvme-vm/ci.sh BUILD_DIR [--config LIST]
#
# BUILD_DIR is a CMake build of nvkv with tests (tools/test.sh's build/release). In each of the
# configurations 4k, 512 and tcp the guest runs, in order:
#   session      tests/nvme-vm/session.sh with c_api_session (the C API, one process per step)
#                on /dev/ng0n1, reopening through /dev/nvme0n1; then with nvkv-cli when
#                BUILD_DIR/tools/nvkv-cli exists (it is built on another branch for now)
#   smoke        passthru_smoke: raw passthrough writes and reads, the harness's self-check
#   device       nvme_device_test: the passthrough backend
#   engine       engine_device_test: the engine through /dev/ng0n1 and /dev/nvme0n1, and a store
#                written through one node and read through the other
# and in zns, where NVKV_TEST_ZONED=1, the same binaries run only their zoned-namespace tests
# (the zone commands through passthrough; the engine's device behaviour tests and a store on the
# zones through the generic node, and the block node refused; the sessions with --shards 2 after
# the default 4 shards are refused), then
#   engine-512   engine_device_test's tests again on the second zoned namespace, /dev/ng0n2, of
#                512-byte LBAs
#   soak         nvkv-soak on /dev/ng0n1 with 2 shards for NVKV_VM_ZONED_SOAK_SECONDS (45):
#                a writer killed with SIGKILL again and again inside the guest, the store
#                reopened and checked against every acknowledged write each time
#   soak-512     the same on /dev/ng0n2 for NVKV_VM_ZONED_512_SOAK_SECONDS (20)
# and in fdp, where NVKV_TEST_FDP=1 (a namespace with flexible data placement, on the QEMU of
# bookworm-backports: run.sh), after the sessions:
#   device       nvme_device_test's passthrough tests and NvmeFdpTest (each write lands on the
#                placement handle it names, by the device's own count)
#   engine       EngineFdpTest (the log and the metadata fill their own handles) and a few of
#                the engine's behaviour tests through the generic node
# Prints one line per step and configuration, then "nvkv-vm: N passed, N failed"; exits 0 only
# when every step passed. First run: installs QEMU and busybox-static with apt-get (as root) and
# caches Debian's kernel (see README.md).
#
# Environment: NVKV_VM_TIMEOUT (seconds per VM, default 900), and run.sh's (NVKV_VM_CACHE, ...).
# The namespaces are 128 MiB here (run.sh's default is 256): every reopen reads the whole store
# and the compaction test fills it, so this halves the time under TCG.
set -euo pipefail
export NVKV_VM_IMAGE_SIZE="${NVKV_VM_IMAGE_SIZE:-128M}" NVKV_VM_TCP_SIZE_MB="${NVKV_VM_TCP_SIZE_MB:-128}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly here

usage() {
  echo "usage: tests/nvme-vm/ci.sh BUILD_DIR [--config LIST]   (LIST: 4k,512,tcp,zns,fdp or all)" >&2
  exit 2
}

(($# >= 1)) || usage
build="$(realpath "$1")"
shift
configs=4k,512,tcp,zns,fdp
while (($#)); do
  case "$1" in
    --config) configs="${2:?--config needs a value}"; shift 2 ;;
    *) usage ;;
  esac
done
[[ "$configs" == all ]] && configs=4k,512,tcp,zns,fdp

# The binaries the guest runs; all must exist (c_api_session needs libnvkv.so, copied along).
binaries=("$build/tests/nvme_device_test" "$build/tests/engine_device_test"
  "$build/tests/c_api_session" "$here/session.sh")
for b in "${binaries[@]}"; do
  [[ -f "$b" ]] || { echo "nvkv-vm: $b is missing: build $build first" >&2; exit 2; }
done
cli="$build/tools/nvkv-cli"
if [[ -x "$cli" ]]; then
  binaries+=("$cli")
else
  echo "nvkv-vm: no $cli: the CLI session is skipped" >&2
  cli=""
fi
soak="$build/tools/nvkv-soak"
if [[ -x "$soak" ]]; then
  binaries+=("$soak")
else
  echo "nvkv-vm: no $soak: the zoned kill -9 soak is skipped" >&2
  soak=""
fi

# The guest's payload: each step prints NVKV-STEP=<name>:<status> so that the host can tell
# which failed, and the payload goes on after a failure. Its exit status is the number of
# failed steps (capped), so run.sh's own verdict agrees.
payload() {
  cat <<'EOF'
failed=0
step() {
  name=$1
  shift
  echo "=== nvkv-vm step $name: $*"
  start=$(cut -d' ' -f1 /proc/uptime)
  "$@"
  rc=$?
  end=$(cut -d' ' -f1 /proc/uptime)
  echo "NVKV-STEP=$name:$rc:$start:$end"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
gtest() { "$@" --gtest_color=no; }
EOF
  echo 'step session sh /nvkv/bin/session.sh c_api_session "$NVKV_TEST_NVME" "$NVKV_TEST_BLOCK"'
  if [[ -n "$cli" ]]; then
    echo 'step cli-session sh /nvkv/bin/session.sh nvkv-cli "$NVKV_TEST_NVME" "$NVKV_TEST_BLOCK"'
  fi
  cat <<'EOF'
if [ "$NVKV_TEST_ZONED" = 1 ]; then
  step device gtest nvme_device_test --gtest_filter='NvmeZonedTest.*'
  step engine gtest engine_device_test --gtest_filter='*EngineZonedTest.*:*EngineDeviceTest.*'
  # The second zoned namespace, of 512-byte LBAs.
  step engine-512 env NVKV_TEST_NVME="$NVKV_TEST_NVME_ZONED_512" \
    NVKV_TEST_BLOCK="$NVKV_TEST_BLOCK_ZONED_512" \
    engine_device_test --gtest_filter='*EngineZonedTest.*:*EngineDeviceTest.*' --gtest_color=no
EOF
  if [[ -n "$soak" ]]; then
    # QEMU keeps no zone state across its own restarts: the writer is killed inside the guest,
    # and the store reopened there, through the real driver.
    echo "  step soak nvkv-soak --db \"\$NVKV_TEST_NVME\" --seconds ${NVKV_VM_ZONED_SOAK_SECONDS:-45}" \
      "--shards 2 --kill-every-ms 300..2000 --check-every 4 --report-seconds 15"
    echo "  step soak-512 nvkv-soak --db \"\$NVKV_TEST_NVME_ZONED_512\"" \
      "--seconds ${NVKV_VM_ZONED_512_SOAK_SECONDS:-20} --shards 2 --kill-every-ms 300..2000" \
      "--check-every 4 --report-seconds 10"
  fi
  cat <<'EOF'
elif [ "$NVKV_TEST_FDP" = 1 ]; then
  step device gtest nvme_device_test --gtest_filter='NvmeDeviceTest.*:NvmeFdpTest.*'
  step engine gtest engine_device_test --gtest_filter='EngineFdpTest.*:*EngineDeviceTest.PutGetDeleteAcrossReopen/Passthrough:*EngineDeviceTest.MatchesMapModelAcrossReopens/Passthrough:*EngineDeviceTest.CompactionReclaimsOverwrittenSegments/Passthrough:*EngineDeviceTest.LargeValuesAcrossReopen/Passthrough:*EngineDeviceTest.PathPicksTheBackend/Passthrough'
else
  step smoke passthru_smoke
  step device gtest nvme_device_test
  step engine gtest engine_device_test
fi
[ "$failed" -lt 100 ] || failed=99
exit "$failed"
EOF
}

log="$(mktemp "${TMPDIR:-/tmp}/nvkv-vm-ci.XXXXXX")"
trap 'rm -f "$log"' EXIT
args=()
for b in "${binaries[@]}"; do args+=(--binary "$b"); done

started=$SECONDS
declare -a lines=()
passed=0 failed=0
IFS=, read -r -a config_list <<< "$configs"
for config in "${config_list[@]}"; do
  config_started=$SECONDS
  status=0
  "$here/run.sh" --config "$config" --timeout "${NVKV_VM_TIMEOUT:-900}" "${args[@]}" \
    -- "$(payload)" 2>&1 | tee "$log" || status=${PIPESTATUS[0]}
  # One line per step the guest reported; a VM that died early reports fewer.
  steps=0
  while IFS=: read -r name rc start end; do
    steps=$((steps + 1))
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }')
    if [[ "$rc" == 0 ]]; then
      lines+=("$(printf '%-4s %-12s PASS %5ss' "$config" "$name" "$secs")")
      passed=$((passed + 1))
    else
      lines+=("$(printf '%-4s %-12s FAIL %5ss (exit %s)' "$config" "$name" "$secs" "$rc")")
      failed=$((failed + 1))
    fi
  done < <(sed -n 's/^NVKV-STEP=//p' "$log" | tr -d '\r')
  # The VM itself: timed out, crashed, or the payload failed without saying where.
  if ((steps == 0)) || { ((status != 0)) && ! grep -q '^NVKV-STEP=[^:]*:[1-9]' "$log"; }; then
    lines+=("$(printf '%-4s %-12s FAIL        (run.sh exit %s)' "$config" "vm" "$status")")
    failed=$((failed + 1))
  fi
  lines+=("$(printf '%-4s %-12s      %5ss wall' "$config" "(total)" "$((SECONDS - config_started))")")
done

echo
printf 'nvkv-vm: %s\n' "${lines[@]}"
echo "nvkv-vm: $passed passed, $failed failed ($((SECONDS - started))s)"
((failed == 0))
