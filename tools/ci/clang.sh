#!/usr/bin/env bash
# The clang build (issue 9, item 9): builds the libraries, the tools and the benchmarks with
# Debian's clang 14 and the project's -Wall -Wextra -Werror, plus -Wthread-safety, which checks
# the ABSL_GUARDED_BY and ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations at compile time (GCC ignores
# them). Then it runs the thread_safety_* tests, which show that the analysis is on and sees the
# engine's own annotations (tests/thread_safety/shard_access.cc). The test binaries are left out:
# they hold no annotation of their own, took two thirds of the build's time, and are built and
# run by the GCC release and ASan builds (tools/test.sh) and, those that race, by TSan's clang
# build (tools/ci/tsan.sh).
#   tools/ci/clang.sh [build-dir]     default build/clang
# Needs the Debian package clang (clang-14) besides tools/install-deps.sh's. A fresh build
# without ccache: CI checks the compile itself. Measured on the project's shared 2-core machine
# (next to tools/ci/tsan.sh's build, load 7): 13 min from scratch, 7 min 12 s of CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build/clang}
jobs=$(nproc)

CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$dir" -j "$jobs" api/all tools/all bench/all
(cd "$dir" && ctest --output-on-failure -R '^thread_safety_')
# Both checks must have run: a configure that lost them (not clang?) must not pass silently.
count=$(cd "$dir" && ctest -N -R '^thread_safety_' | sed -n 's/^Total Tests: //p')
if [ "$count" != 2 ]; then
  echo "clang.sh: expected 2 thread_safety_ tests, found ${count:-none}" >&2
  exit 1
fi
