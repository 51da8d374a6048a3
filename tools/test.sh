#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test twice, as a
# release build and with AddressSanitizer + UndefinedBehaviorSanitizer. After the release build's
# tests, a two-minute kill -9 soak (tools/ci/soak.sh) and the NVMe tests in QEMU guests against
# Linux's NVMe drivers (tests/nvme-vm/ci.sh, about 10 minutes on 2 cores; it installs QEMU and
# fetches a kernel the first time). Then the clang build (-Werror -Wthread-safety,
# tools/ci/clang.sh), ThreadSanitizer over the concurrent tests (tools/ci/tsan.sh) and every
# libFuzzer target for 40 s (tools/ci/fuzz.sh).
#   tools/test.sh            all of it
#   NVKV_TEST_BUILDS=release tools/test.sh    some steps only (release asan clang tsan fuzz)
#   NVKV_SKIP_VM=1 tools/test.sh              without the NVMe VMs
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh

jobs=$(nproc)
builds=${NVKV_TEST_BUILDS:-"release asan clang tsan fuzz"}
for b in $builds; do
  case "$b" in
    clang | tsan | fuzz)
      echo "=== $b (tools/ci/$b.sh)"
      "tools/ci/$b.sh"
      continue
      ;;
    release) dir=build/release; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
    # Line tables only (-g1): all a sanitizer's report needs, and much cheaper to compile.
    asan) dir=build/asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNVKV_SANITIZE=ON
                                 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
                                 "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG") ;;
    *) echo "test.sh: unknown build '$b'" >&2; exit 2 ;;
  esac
  echo "=== $b build ($dir)"
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
  ninja -C "$dir" -j "$jobs"
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j "$jobs")
  if [ "$b" = release ]; then
    echo "=== kill -9 soak, ${NVKV_SOAK_SECONDS:-120} s (tools/ci/soak.sh $dir)"
    NVKV_SOAK_SECONDS=${NVKV_SOAK_SECONDS:-120} tools/ci/soak.sh "$dir"
  fi
  if [ "$b" = release ] && [ "${NVKV_SKIP_VM:-0}" != 1 ]; then
    echo "=== NVMe tests in QEMU (tests/nvme-vm/ci.sh $dir; NVKV_SKIP_VM=1 skips them)"
    tests/nvme-vm/ci.sh "$dir"
  fi
done
