#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every test twice, as a
# release build and with AddressSanitizer + UndefinedBehaviorSanitizer.
#   tools/test.sh            both builds
#   NVKV_TEST_BUILDS=release tools/test.sh    one build only (release | asan)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh

jobs=$(nproc)
builds=${NVKV_TEST_BUILDS:-"release asan"}
for b in $builds; do
  case "$b" in
    release) dir=build/release; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
    asan) dir=build/asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNVKV_SANITIZE=ON) ;;
    *) echo "test.sh: unknown build '$b'" >&2; exit 2 ;;
  esac
  echo "=== $b build ($dir)"
  cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
  ninja -C "$dir" -j "$jobs"
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j "$jobs")
done
