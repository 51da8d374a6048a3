#!/usr/bin/env bash
# Runs nvkv-soak (tools/nvkv_soak.cc) for NVKV_SOAK_SECONDS (default 120) on a fresh store in a
# temporary directory, and fails when it reports a violation. The directory is deleted after a
# pass and kept after a failure (its path is printed): it holds the store and `trace`, every
# operation since the last clean verification (NVKV_SOAK_TRACE), for a post-mortem.
#   tools/ci/soak.sh [BUILD_DIR]            BUILD_DIR defaults to build/release, else build
#   NVKV_SOAK_SECONDS=28800 tools/ci/soak.sh build/release     eight hours
# Also: NVKV_SOAK_DIR (where the temporary directory goes; default $NVKV_TEST_DIR, else
# BUILD_DIR: it must support O_DIRECT, so not tmpfs on old kernels), NVKV_SOAK_SEED, and
# NVKV_SOAK_ARGS (more nvkv-soak options, e.g. "--capacity-mib 256 --kill-every-ms 50..500").
# Where BUILD_DIR has tools/libnvkv_fail_pread.so, it runs under it (LD_PRELOAD) with
# --transient-read-faults: half the reopens are tried first while a page fails to read.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-}
if [[ -z "$build" ]]; then
  if [[ -x "$root/build/release/tools/nvkv-soak" ]]; then build=$root/build/release
  else build=$root/build; fi
fi
soak=$build/tools/nvkv-soak
if [[ ! -x "$soak" ]]; then
  echo "soak.sh: $soak is not built (ninja -C $build nvkv-soak)" >&2
  exit 2
fi
seconds=${NVKV_SOAK_SECONDS:-120}
parent=${NVKV_SOAK_DIR:-${NVKV_TEST_DIR:-$build}}
mkdir -p "$parent"
dir=$(mktemp -d "$parent/nvkv-soak.XXXXXX")
seed_args=()
[[ -n "${NVKV_SOAK_SEED:-}" ]] && seed_args=(--seed "$NVKV_SOAK_SEED")
# shellcheck disable=SC2206  # NVKV_SOAK_ARGS is split into words on purpose
extra=(${NVKV_SOAK_ARGS:-})
preload=()
shim=$build/tools/libnvkv_fail_pread.so
if [[ -f "$shim" ]]; then
  # A sanitizer's runtime must come first among the preloaded libraries (the ASan build's
  # nvkv-soak links libasan, and the library is built with it too).
  # (awk reads to the end: leaving early could end ldd by SIGPIPE, a failure under pipefail.)
  runtime=$(ldd "$soak" | awk '/libasan\.so/ && !found { print $3; found = 1 }')
  preload=(env "LD_PRELOAD=${runtime:+$runtime:}$shim${LD_PRELOAD:+:$LD_PRELOAD}")
  extra+=(--transient-read-faults)
fi
status=0
NVKV_SOAK_TRACE=$dir/trace "${preload[@]}" "$soak" --db "$dir/store" --seconds "$seconds" \
  "${seed_args[@]}" "${extra[@]}" || status=$?
if [[ $status -eq 0 ]]; then
  rm -rf "$dir"
else
  echo "soak.sh: nvkv-soak failed (exit status $status); the store and trace are in $dir" >&2
fi
exit $status
