#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test twice, as a
# release build and with AddressSanitizer + UndefinedBehaviorSanitizer. After the release build's
# tests, a two-minute kill -9 soak (tools/ci/soak.sh) beside the NVMe tests in QEMU guests against
# Linux's NVMe drivers (tests/nvme-vm/ci.sh, about 4 minutes on 2 cores; it installs QEMU and
# fetches a kernel the first time). Then the clang build (-Werror -Wthread-safety,
# tools/ci/clang.sh), ThreadSanitizer over the concurrent tests (tools/ci/tsan.sh) and every
# libFuzzer target for 25 s (tools/ci/fuzz.sh). Each stage's time is printed at the end.
#   tools/test.sh            all of it
#   NVKV_TEST_BUILDS=release tools/test.sh    some steps only (release asan clang tsan fuzz)
#   NVKV_SKIP_VM=1 tools/test.sh              without the NVMe VMs
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's time, printed at the end whether the run passes or fails.
started=$SECONDS
timings=()
print_timings() {
  echo "=== stage times"
  for t in "${timings[@]}"; do echo "  $t"; done
  echo "  total: $((SECONDS - started)) s"
}
trap print_timings EXIT
timed() {  # timed NAME COMMAND...: runs the command and notes how long it took
  local name=$1 start=$SECONDS
  shift
  "$@" || {
    local rc=$?
    timings+=("$name: $((SECONDS - start)) s, failed")
    return $rc
  }
  timings+=("$name: $((SECONDS - start)) s")
}
# One test more than there are cores: the tests wait for the disk a third of their time (a
# release run kept 1.3 of 2 cores busy at -j2).
run_tests() {  # run_tests DIR [VAR=VALUE...]: the build's ctest, with that environment
  local dir=$1
  shift
  (cd "$dir" && env "$@" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j "$((jobs + 1))")
}

timed "install dependencies" tools/install-deps.sh

jobs=$(nproc)
builds=${NVKV_TEST_BUILDS:-"release asan clang tsan fuzz"}
for b in $builds; do
  test_env=()
  case "$b" in
    clang | tsan | fuzz)
      echo "=== $b (tools/ci/$b.sh)"
      timed "$b" "tools/ci/$b.sh"
      continue
      ;;
    release) dir=build/release; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
    # Line tables only (-g1): all a sanitizer's report needs, and much cheaper to compile. The
    # tests' own code at -O0: it compiles in half the time of -O1, and the engine it calls is
    # built at -O2. The crash test's first 50 seeds of each index mode, 100 of the release
    # build's 250: memory errors on the cut-and-recover paths, in 90 s of CPU rather than 230.
    asan) dir=build/asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNVKV_SANITIZE=ON
                                 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
                                 "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
                                 -DNVKV_TEST_OPTIMIZATION=-O0)
          test_env=(NVKV_CRASH_SEEDS=50) ;;
    *) echo "test.sh: unknown build '$b'" >&2; exit 2 ;;
  esac
  echo "=== $b build ($dir)"
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
  timed "$b build" ninja -C "$dir" -j "$jobs"
  timed "$b tests" run_tests "$dir" "${test_env[@]}"
  if [ "$b" = release ]; then
    # The soak (about one core) runs beside the NVMe VMs (about one more); its report follows
    # theirs.
    echo "=== kill -9 soak, ${NVKV_SOAK_SECONDS:-120} s (tools/ci/soak.sh $dir), in the background"
    soak_log=$(mktemp)
    soak_start=$SECONDS
    env NVKV_SOAK_SECONDS="${NVKV_SOAK_SECONDS:-120}" tools/ci/soak.sh "$dir" >"$soak_log" 2>&1 &
    soak_pid=$!
    vm_status=0
    soak_label="kill -9 soak"
    if [ "${NVKV_SKIP_VM:-0}" != 1 ]; then
      soak_label="kill -9 soak (beside the NVMe tests)"
      echo "=== NVMe tests in QEMU (tests/nvme-vm/ci.sh $dir; NVKV_SKIP_VM=1 skips them)"
      timed "NVMe tests in QEMU" tests/nvme-vm/ci.sh "$dir" || vm_status=$?
    fi
    soak_status=0
    wait "$soak_pid" || soak_status=$?
    echo "=== kill -9 soak's report"
    cat "$soak_log"
    rm -f "$soak_log"
    soak_note=""
    [ "$soak_status" = 0 ] || soak_note=", failed"
    timings+=("$soak_label: $((SECONDS - soak_start)) s$soak_note")
    [ "$soak_status" = 0 ] || exit "$soak_status"
    [ "$vm_status" = 0 ] || exit "$vm_status"
  fi
done
