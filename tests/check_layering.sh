#!/bin/bash
# The layering of STYLE.md section 1, checked on #include lines: dependencies point down only,
#   api -> kv -> storage;  tools/ and bench/ see the public headers (api/include/nvkv) only;
#   the public headers include no kv/, storage/ or liburing header;
#   util/ (JSON text, size parsing, the latency histogram) is below every layer and includes
#   nothing of ours, so that any layer, tool or benchmark may include it.
# Exceptions, documented where they live:
#   bench/iobench.cc   a storage benchmark (it measures storage/ devices, below the engine);
#   bench/micro/       micro-benchmarks of kv modules (bench/CMakeLists.txt builds them against
#                      nvkv_kv), which include kv/ headers by design.
#
#   tests/check_layering.sh <source root>     exit 0 when clean; 1 and one line per violation
#   tests/check_layering.sh --self-test       checks that this script catches each violation
set -u

# check <root>: prints "file:line: rule: the include" for each upward include.
check() {
  local root=$1
  local failed=0
  # rule <description> <directory or file under root> <include regex> [path regex to exempt]
  rule() {
    local what=$1 where=$2 pattern=$3 exempt=${4:-}
    [[ -e "$root/$where" ]] || return 0
    local hits
    hits=$(grep -rnE --include='*.h' --include='*.hpp' --include='*.c' --include='*.cc' \
             --include='*.cpp' "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" \
             "$root/$where" 2>/dev/null)
    [[ -n "$exempt" && -n "$hits" ]] && hits=$(grep -vE "^$root/($exempt)" <<<"$hits")
    if [[ -n "$hits" ]]; then
      failed=1
      local hit file rest number text
      while IFS= read -r hit; do
        file=${hit%%:*}
        rest=${hit#*:}
        number=${rest%%:*}
        text=${rest#*:}
        echo "${file#"$root"/}:$number: $what: ${text#"${text%%[![:space:]]*}"}"
      done <<<"$hits"
    fi
  }
  rule "util/ includes a layer above it" util 'storage/|kv/|api/|nvkv/|tools/|bench/'
  rule "storage/ includes a layer above it" storage 'kv/|api/|nvkv/'
  rule "kv/ includes a layer above it" kv 'api/|nvkv/'
  rule "a public header includes an internal or liburing header" api/include \
       'kv/|storage/|api/|liburing'
  rule "tools/ reaches below the public API" tools 'kv/|storage/|api/'
  rule "bench/ reaches below the public API" bench 'kv/|storage/|api/' \
       'bench/iobench\.cc:|bench/micro/'
  return $failed
}

self_test() {
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp"/{util,storage,kv,api/include/nvkv,tools,bench/micro}
  echo '#include "storage/device.h"' > "$tmp/kv/fine.cc"
  echo '#include "util/json_writer.h"' > "$tmp/storage/fine_util.cc"
  echo '#include "util/size_parse.h"' > "$tmp/tools/fine.cc"
  echo '#include "util/latency_histogram.h"' > "$tmp/bench/fine.cc"
  echo '#include "absl/strings/str_cat.h"' > "$tmp/util/fine.cc"
  echo '#include "kv/engine.h"' > "$tmp/bench/micro/fine_bench.cc"
  echo '#include "storage/ring.h"' > "$tmp/bench/iobench.cc"
  echo '// #include "kv/engine.h" in a comment is not an include' > "$tmp/storage/fine.cc"
  if ! check "$tmp" >/dev/null; then
    echo "self-test: a clean tree was reported"; check "$tmp"; exit 1
  fi
  local cases=(
    'util/bad.cc|#include "storage/base/check.h"'
    'util/bad.h|#include "nvkv/stats.h"'
    'util/bad.cc|#include "tools/cli/codec.h"'
    'util/bad.cc|#include "bench/ycsb/report.h"'
    'storage/bad.cc|#include "kv/engine.h"'
    'storage/bad.h|  #  include <api/db.cc>'
    'kv/bad.cc|#include "nvkv/db.h"'
    'api/include/nvkv/bad.h|#include "kv/engine.h"'
    'api/include/nvkv/bad.h|#include "storage/device.h"'
    'api/include/nvkv/bad.h|#include <liburing.h>'
    'tools/bad.cc|#include "storage/device.h"'
    'tools/cli/bad.cc|#include "kv/engine.h"'
    'bench/ycsb/bad.cc|#include "kv/engine.h"'
  )
  local entry file line
  for entry in "${cases[@]}"; do
    file=${entry%%|*}
    line=${entry#*|}
    mkdir -p "$(dirname "$tmp/$file")"
    echo "$line" > "$tmp/$file"
    if check "$tmp" >/dev/null; then
      echo "self-test: missed '$line' in $file"; exit 1
    fi
    rm "$tmp/$file"
  done
  echo "self-test: ${#cases[@]} violations caught, clean tree passes"
}

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <source root> | --self-test" >&2
  exit 2
fi
if [[ $1 == --self-test ]]; then
  self_test
  exit 0
fi
check "$1"
