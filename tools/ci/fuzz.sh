#!/bin/bash
# CI: builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan) and runs each one for a bounded
# time on a copy of its seed corpus, so that the tree is never written, as many at once as there
# are cores. A crash (or a failed property, a leak, a timeout) fails the run: the reproducer's
# path is printed, and it belongs in fuzz/corpus/<target>/ together with the fix.
# fuzz/README.md says more.
#
#   tools/ci/fuzz.sh [target...]        default: every target
# Environment:
#   NVKV_FUZZ_SECONDS     seconds per target (default 25)
#   NVKV_FUZZ_BUILD       build directory (default build/fuzz)
#   NVKV_FUZZ_WORK        where corpus copies, logs and crash artifacts go (default: a new
#                         directory under $TMPDIR, printed)
#   NVKV_FUZZ_CMAKE_ARGS  extra arguments for cmake (e.g. a compiler launcher locally)
# Needs: clang, libclang-rt-dev (libFuzzer and the sanitizer runtimes), cmake, ninja, and the
# libraries nvkv builds with.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${NVKV_FUZZ_BUILD:-$root/build/fuzz}
seconds=${NVKV_FUZZ_SECONDS:-25}
all=(superblock page_records segment_scan recovery cli_dump ycsb_properties)
if [[ $# -gt 0 ]]; then targets=("$@"); else targets=("${all[@]}"); fi

# Largest input each target reads (it ignores longer ones): see each fuzz/<target>_fuzz.cc.
max_len() {
  case $1 in
    segment_scan) echo 4098 ;;
    recovery) echo 257 ;;
    *) echo 4096 ;;
  esac
}

# shellcheck disable=SC2086  # NVKV_FUZZ_CMAKE_ARGS is a list of arguments
if ! CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNVKV_FUZZ=ON -DNVKV_BUILD_TESTS=OFF \
      -DNVKV_BUILD_BENCH=OFF ${NVKV_FUZZ_CMAKE_ARGS:-} >/dev/null; then
  echo "fuzz: cmake failed" >&2
  exit 1
fi
if ! ninja -C "$build" "${targets[@]/#/fuzz_}"; then
  echo "fuzz: build failed" >&2
  exit 1
fi

work=${NVKV_FUZZ_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/nvkv-fuzz.XXXXXX")}
echo "fuzz: ${seconds}s per target; corpus copies, logs and crash artifacts in $work"
# Runs one target; its report waits in $work/<target>/report, and a failure leaves "failed".
fuzz_one() {
  local target=$1
  local dir=$work/$target
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  if [[ -d $root/fuzz/corpus/$target ]]; then
    cp -r "$root/fuzz/corpus/$target/." "$dir/corpus/"
  fi
  "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=20 \
    -max_len="$(max_len "$target")" -artifact_prefix="$dir/artifacts/" -print_final_stats=1 \
    "$dir/corpus" >"$dir/log" 2>&1
  local status=$?
  local runs rate artifacts
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
  artifacts=("$dir"/artifacts/*)
  if [[ $status -ne 0 || -e ${artifacts[0]} ]]; then
    touch "$dir/failed"
    {
      echo "FAIL fuzz_$target (exit $status); log: $dir/log"
      grep -m1 -E 'ERROR: |fuzz property failed|NVKV_CHECK failed|runtime error' "$dir/log" |
        sed 's/^/  /'
      for artifact in "${artifacts[@]}"; do
        [[ -e $artifact ]] || continue
        echo "  reproducer: $artifact"
        echo "    run it:   $build/fuzz/fuzz_$target $artifact"
        echo "    then add it to fuzz/corpus/$target/ with the fix"
      done
      tail -n 40 "$dir/log" | sed 's/^/  | /'
    } >"$dir/report"
  else
    echo "ok   fuzz_$target: ${runs:-?} runs, ${rate:-?} execs/s" >"$dir/report"
  fi
}
# As many targets at once as there are cores (each fuzzer is one thread), reported in order.
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
  fuzz_one "$target" &
done
wait
failed=()
for target in "${targets[@]}"; do
  cat "$work/$target/report"
  [[ -e $work/$target/failed ]] && failed+=("$target")
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s without a crash"
