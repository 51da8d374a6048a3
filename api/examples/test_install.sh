#!/usr/bin/env bash
# Installs nvkv into a temporary prefix and builds api/examples/hello.cc against the installed
# files only, as a user would: through the CMake package (find_package(nvkv), shared and static
# library) and through pkg-config (shared, then static), with no flag but what each gives (C++20
# comes with them). Runs every build on a fresh store file and checks what it prints. Then the
# C API's test program (tests/api/c_api_test.c), compiled and linked by the C compiler through
# pkg-config, shared and static. Every installed tool runs from the prefix (not a system path).
# Exits non-zero, saying what failed, on the first failure.
#
#   api/examples/test_install.sh                  configure and build nvkv afresh (Release), then
#                                                 install it
#   api/examples/test_install.sh --build-dir DIR  install from an existing build directory (and
#                                                 configure, without building, one with the
#                                                 tests and benchmarks left out)
#
# Work files go to a temporary directory under $NVKV_TEST_DIR, else the current directory (the
# store needs a file system with O_DIRECT, which tmpfs lacks on older kernels); it is removed on
# exit. CC and CXX pick the compilers. CTest runs this as the test install_example.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=""
case "${1:-}" in
  "") ;;
  --build-dir)
    [ $# -eq 2 ] || { echo "usage: $0 [--build-dir DIR]" >&2; exit 2; }
    build_dir=$(cd "$2" && pwd)
    ;;
  *) echo "usage: $0 [--build-dir DIR]" >&2; exit 2 ;;
esac

work=$(mktemp -d "${NVKV_TEST_DIR:-$PWD}/nvkv-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cxx=${CXX:-c++}
cc=${CC:-cc}
jobs=$(nproc)

step() { echo "=== test_install: $*"; }
fail() { echo "test_install: FAILED: $*" >&2; exit 1; }

# Runs the example `$2` on a new store named after `$1` and checks its output.
expected=$'apple = red\nbanana = yellow'
run_example() {
  local name=$1 exe=$2 out
  out=$("$exe" "$work/$name.db") || fail "$name: $exe exited with status $?"
  [ "$out" = "$expected" ] || fail "$name: printed '$out', expected '$expected'"
  echo "ok: $name"
}

if [ -z "$build_dir" ]; then
  build_dir=$work/nvkv-build
  step "configure and build nvkv (Release) in $build_dir"
  cmake -S "$src" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DNVKV_BUILD_TESTS=OFF -DNVKV_BUILD_BENCH=OFF >/dev/null
  cmake --build "$build_dir" -j "$jobs"
else
  step "configure nvkv without tests and benchmarks (what they need left out)"
  cmake -S "$src" -B "$work/minimal-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DNVKV_BUILD_TESTS=OFF -DNVKV_BUILD_BENCH=OFF >/dev/null || fail "configure without tests"
fi

step "install into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
[ -f "$prefix/include/nvkv/db.h" ] || fail "include/nvkv/db.h not installed"
# The man pages the build made (with help2man) are installed beside the tools.
for page in "$build_dir"/man/*.1; do
  [ -e "$page" ] || continue
  [ -s "$prefix/share/man/man1/$(basename "$page")" ] || fail "$(basename "$page") not installed"
  echo "ok: man page $(basename "$page") installed"
done
# Each installed tool runs from a prefix that is no system path, with no LD_LIBRARY_PATH: one
# that links libnvkv.so.0 finds the one installed beside it.
for tool in "$prefix"/bin/*; do
  [ -x "$tool" ] || continue
  out=$(env -u LD_LIBRARY_PATH "$tool" --version 2>&1) || fail "$(basename "$tool") --version: $out"
  echo "ok: $(basename "$tool") runs from the prefix"
done
for dir in kv storage util; do
  [ ! -e "$prefix/include/$dir" ] || fail "internal headers installed: include/$dir"
done
if grep -nE '#include [<"](kv/|storage/|util/|liburing)' "$prefix"/include/nvkv/*.h; then
  fail "a public header includes an internal or liburing header (above)"
fi

step "CMake package: find_package(nvkv) with CMAKE_PREFIX_PATH=$prefix"
cmake -S "$src/api/examples" -B "$work/example-cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  >/dev/null
cmake --build "$work/example-cmake"
[ -x "$work/example-cmake/hello_static" ] || fail "the package did not offer nvkv::nvkv_static"
run_example cmake-shared "$work/example-cmake/hello"
run_example cmake-static "$work/example-cmake/hello_static"
if ldd "$work/example-cmake/hello_static" | grep -q libnvkv; then
  fail "hello_static depends on libnvkv.so"
fi

step "pkg-config"
pc_file=$(find "$prefix" -name nvkv.pc -print -quit)
[ -n "$pc_file" ] || fail "nvkv.pc not installed"
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc_file")
libdir=$(pkg-config --variable=libdir nvkv)
# Word splitting of the pkg-config output is intended.
# shellcheck disable=SC2046
"$cxx" "$src/api/examples/hello.cc" -o "$work/hello-pc" \
  $(pkg-config --cflags --libs nvkv) -Wl,-rpath,"$libdir"
run_example pkg-config-shared "$work/hello-pc"
# --static adds Requires.private and Libs.private; -l:libnvkv.a makes the linker take the
# archive although libnvkv.so sits next to it.
static_libs=$(pkg-config --static --libs nvkv)
static_libs=${static_libs/-lnvkv/-l:libnvkv.a}
# shellcheck disable=SC2046,SC2086
"$cxx" "$src/api/examples/hello.cc" -o "$work/hello-pc-static" \
  $(pkg-config --cflags nvkv) $static_libs
run_example pkg-config-static "$work/hello-pc-static"
if ldd "$work/hello-pc-static" | grep -q libnvkv; then
  fail "hello-pc-static depends on libnvkv.so"
fi

step "pkg-config from C: the C API's test, linked by $cc"
# shellcheck disable=SC2046
"$cc" "$src/tests/api/c_api_test.c" -o "$work/c-api-pc" $(pkg-config --cflags --libs nvkv) \
  -Wl,-rpath,"$libdir" 2> "$work/c-api-pc.err" || { cat "$work/c-api-pc.err" >&2; fail "C, shared"; }
# shellcheck disable=SC2046,SC2086
"$cc" "$src/tests/api/c_api_test.c" -o "$work/c-api-pc-static" $(pkg-config --cflags nvkv) \
  $static_libs 2> "$work/c-api-pc-static.err" || { cat "$work/c-api-pc-static.err" >&2; fail "C, static"; }
for exe in c-api-pc c-api-pc-static; do
  (cd "$work" && "./$exe" > /dev/null 2>&1) || fail "$exe failed (run it in $work to see why)"
  echo "ok: $exe"
done
if ldd "$work/c-api-pc-static" | grep -q libnvkv; then
  fail "c-api-pc-static depends on libnvkv.so"
fi

step "Python: pip install of api/python into a venv, then its tests against the installed library"
# Debian's interpreter, whose system site holds Debian's setuptools and wheel (a python3 of
# pyenv or /usr/local first on PATH has neither).
py=$(command -v /usr/bin/python3 || command -v python3 || true)
if [ -n "$py" ] && "$py" -c 'import venv, ensurepip, setuptools, wheel' 2>/dev/null; then
  "$py" -m venv --system-site-packages "$work/venv"
  # From a copy: setuptools builds in the source directory (build/, nvkv.egg-info/).
  cp -r "$src/api/python" "$work/python-src"
  "$work/venv/bin/pip" install --quiet --no-build-isolation --no-index "$work/python-src" \
    > "$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; fail "pip install api/python"; }
  # The installed package, not the source tree's: run from elsewhere, the library found by the
  # system's loader path (no NVKV_LIBRARY).
  cp -r "$src/api/python/tests" "$work/python-tests"
  (cd "$work" && env -u NVKV_LIBRARY -u PYTHONPATH LD_LIBRARY_PATH="$libdir" \
     "$work/venv/bin/python" -m unittest discover -s python-tests > "$work/python.log" 2>&1) ||
    { cat "$work/python.log" >&2; fail "the Python tests against the installed package"; }
  (cd "$work" && LD_LIBRARY_PATH="$libdir" "$work/venv/bin/python" -c \
     'import nvkv, sys; sys.exit(0 if "site-packages" in nvkv.__file__ else 1)') ||
    fail "the venv's nvkv is not the installed one"
  echo "ok: python"
else
  echo "skipped: no python3 with venv, setuptools and wheel (python3-venv, python3-wheel)"
fi
step "all passed"
