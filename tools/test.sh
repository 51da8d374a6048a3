#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test twice, as a
# release build and with AddressSanitizer + UndefinedBehaviorSanitizer. After the release build's
# tests, a two-minute kill -9 soak (tools/ci/soak.sh) beside the NVMe tests in QEMU guests against
# Linux's NVMe drivers (tests/nvme-vm/ci.sh, about 4 minutes on 2 cores; it installs QEMU and
# fetches a kernel the first time). Then the clang build (-Werror -Wthread-safety,
# tools/ci/clang.sh), ThreadSanitizer over the concurrent tests (tools/ci/tsan.sh) and every
# libFuzzer target for 25 s (tools/ci/fuzz.sh). The NVMe tests leave a core idle much of the
# time, and the sanitizer tests wait for the disk part of theirs: the sanitizer build begins
# beside the first and the clang build beside the second, at the lowest priority, so that they
# take only what the stages in the foreground leave. Each stage's time is printed at the end.
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
# Stages run in the background, beside another: by name, their process, log and start.
declare -A beside_pid=() beside_log=() beside_start=()
# A failed stage ends the run, and what runs in the background with it.
on_exit() {
  local pid
  for pid in "${beside_pid[@]}"; do kill "$pid" 2>/dev/null || true; done
  print_timings
}
trap on_exit EXIT
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
# The build directory and CMake flags of build `$1` (release or asan) in `dir`, `flags` and
# `test_env` (the tests' environment).
build_settings() {
  test_env=()
  case "$1" in
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
    *) echo "test.sh: unknown build '$1'" >&2; exit 2 ;;
  esac
}
# begin_beside NAME NICENESS COMMAND...: starts stage NAME in the background at that niceness
# (19: it takes only the CPU the stages in the foreground leave), its output kept for later.
begin_beside() {
  local name=$1 niceness=$2
  shift 2
  echo "=== $name, in the background (nice $niceness)"
  beside_log[$name]=$(mktemp)
  beside_start[$name]=$SECONDS
  nice -n "$niceness" "$@" >"${beside_log[$name]}" 2>&1 &
  beside_pid[$name]=$!
}
# end_beside NAME: waits for stage NAME, prints its output (its last 30 lines if it passed) and
# notes its time from its start; its status is the function's.
end_beside() {
  local name=$1 status=0
  echo "=== $name (begun in the background): waiting for it"
  wait "${beside_pid[$name]}" || status=$?
  unset "beside_pid[$name]"
  if [ "$status" = 0 ]; then tail -n 30 "${beside_log[$name]}"; else cat "${beside_log[$name]}"; fi
  rm -f "${beside_log[$name]}"
  local note=""
  [ "$status" = 0 ] || note=", failed"
  timings+=("$name (in the background): $((SECONDS - ${beside_start[$name]})) s$note")
  return "$status"
}
declare -A ran=()  # the stages of $builds begun so far
# later STAGE: whether this run has STAGE and has not begun it yet.
later() { [[ " $builds " == *" $1 "* ]] && [ -z "${ran[$1]:-}" ]; }
# The NVMe tests leave a core idle much of the time: the asan build begins beside them.
begin_asan_build_beside() {
  local dir flags test_env  # the release build's stay as they are
  build_settings asan
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
  begin_beside "asan build" 19 ninja -C "$dir" -j "$jobs"
}
for b in $builds; do
  ran[$b]=1
  case "$b" in
    clang | tsan | fuzz)
      if [ -n "${beside_pid[$b]:-}" ]; then
        end_beside "$b"
      else
        echo "=== $b (tools/ci/$b.sh)"
        timed "$b" "tools/ci/$b.sh"
      fi
      continue
      ;;
  esac
  build_settings "$b"
  if [ -n "${beside_pid[$b build]:-}" ]; then
    end_beside "$b build"
  else
    echo "=== $b build ($dir)"
    cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
    timed "$b build" ninja -C "$dir" -j "$jobs"
  fi
  # The sanitizer tests wait for the disk part of their time: the clang build begins beside them.
  if [ "$b" = asan ] && later clang; then begin_beside clang 19 tools/ci/clang.sh; fi
  timed "$b tests" run_tests "$dir" "${test_env[@]}"
  if [ "$b" = release ]; then
    # The soak (about one core) runs beside the NVMe VMs (about one more); its report follows
    # theirs.
    begin_beside "kill -9 soak" 0 \
      env NVKV_SOAK_SECONDS="${NVKV_SOAK_SECONDS:-120}" tools/ci/soak.sh "$dir"
    vm_status=0
    if [ "${NVKV_SKIP_VM:-0}" != 1 ]; then
      if later asan; then begin_asan_build_beside; fi
      echo "=== NVMe tests in QEMU (tests/nvme-vm/ci.sh $dir; NVKV_SKIP_VM=1 skips them)"
      timed "NVMe tests in QEMU" tests/nvme-vm/ci.sh "$dir" || vm_status=$?
    fi
    end_beside "kill -9 soak"
    [ "$vm_status" = 0 ] || exit "$vm_status"
  fi
done
