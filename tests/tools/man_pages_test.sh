#!/usr/bin/env bash
# The generated man pages (man/CMakeLists.txt) say what they should: each has its tool's name,
# version and one-line description, its options, and nvkv-cli's a section for every command its
# --help lists; where man(1) is installed, each renders without warnings.
#
#   tests/tools/man_pages_test.sh VERSION NVKV_CLI PAGE...
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 VERSION NVKV_CLI PAGE..." >&2; exit 2; }
version=$1
cli=$2
shift 2
fail() { echo "man_pages_test: FAILED: $*" >&2; exit 1; }

for page in "$@"; do
  tool=$(basename "$page" .1)
  [ -s "$page" ] || fail "$page is missing or empty"
  upper=$(echo "$tool" | tr '[:lower:]' '[:upper:]')
  grep -q "^\.TH $upper \"1\" .* \"$tool $version\"" "$page" \
    || fail "$page: no .TH line naming $tool $version"
  grep -A1 -q '^\.SH NAME' "$page" || fail "$page: no NAME section"
  grep -q "^$tool \\\\- [a-z]" "$page" || fail "$page: the NAME line has no description"
  grep -q 'fB\\-\\-version' "$page" || fail "$page: --version is not among the options"
  if command -v man >/dev/null; then
    warnings=$(MANWIDTH=100 man --warnings -l "$page" 2>&1 >/dev/null || true)
    [ -z "$warnings" ] || fail "$page renders with warnings: $warnings"
  fi
  echo "ok: $page"
done

# nvkv-cli's page holds every command's own help.
cli_page=""
for page in "$@"; do [ "$(basename "$page")" = nvkv-cli.1 ] && cli_page=$page; done
[ -n "$cli_page" ] || fail "no nvkv-cli.1 among the pages"
commands=$("$cli" --help | awk '/^Commands:/ { in_list = 1; next }
                                in_list && NF == 0 { exit }
                                in_list && $1 != "help" { print $1 }')
[ "$(echo "$commands" | wc -l)" -ge 10 ] || fail "nvkv-cli --help lists too few commands: $commands"
for command in $commands; do
  grep -q "^\.SS \"$command\"$" "$cli_page" || fail "$cli_page: no section for $command"
  grep -q "^Usage: nvkv-cli \[OPTIONS\] $command" "$cli_page" \
    || fail "$cli_page: $command's section lacks its usage line"
done
echo "ok: $cli_page has a section for each of: $(echo $commands)"
