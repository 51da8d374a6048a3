#!/bin/bash
# The layering of STYLE.md section 1, checked on #include lines: dependencies point down only,
#   api -> kv -> storage;  tools/ and bench/ see the public headers (api/include/nvkv) only;
#   the public headers include no kv/, storage/ or liburing header;
#   util/ (JSON text, size parsing, the latency histogram) is below every layer and includes
#   nothing of ours, so that any layer, tool or benchmark may include it;
#   the public value types are defined once, in the public headers, and the engine uses them:
#   kv/ may include nvkv/options.h, nvkv/stats.h and nvkv/check_report.h (plain enums and
#   structs that include nothing of ours but each other), and no other public header (as
#   leveldb's db/ includes include/leveldb/options.h).
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
  # The public value headers kv/ may include (see the head of this file).
  local value_headers='nvkv/options\.h|nvkv/stats\.h|nvkv/check_report\.h'
  # rule <description> <directory or file under root> <include regex> [path regex to exempt]
  #      [regex of included files allowed after all]
  rule() {
    local what=$1 where=$2 pattern=$3 exempt=${4:-} allowed=${5:-}
    [[ -e "$root/$where" ]] || return 0
    local hits
    hits=$(grep -rnE --include='*.h' --include='*.hpp' --include='*.c' --include='*.cc' \
             --include='*.cpp' "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" \
             "$root/$where" 2>/dev/null)
    [[ -n "$exempt" && -n "$hits" ]] && hits=$(grep -vE "^$root/($exempt)" <<<"$hits")
    [[ -n "$allowed" && -n "$hits" ]] &&
      hits=$(grep -vE "#[[:space:]]*include[[:space:]]*[<\"]($allowed)[>\"]" <<<"$hits")
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
  rule "kv/ includes a layer above it" kv 'api/|nvkv/' '' "$value_headers"
  for value_header in options.h stats.h check_report.h; do
    rule "a public value header kv/ uses includes a header of ours" \
         "api/include/nvkv/$value_header" 'nvkv/|kv/|storage/|api/|util/' '' "$value_headers"
  done
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
  printf '#include "nvkv/options.h"\n#include "nvkv/stats.h"\n#include "nvkv/check_report.h"\n' \
    > "$tmp/kv/fine_public.h"
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
    'kv/bad.h|#include "nvkv/write_batch.h"'
    'kv/bad.h|#include "nvkv/options.h.in"'
    'api/include/nvkv/options.h|#include "nvkv/db.h"'
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
