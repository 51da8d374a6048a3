#!/usr/bin/env bash
# Writes a help2man include file for nvkv-cli's man page: a section with every command's own
# help ("nvkv-cli COMMAND --help", without the options of every command, which the page lists
# once), for the commands the tool's --help lists, and SEE ALSO.
#
#   man/cli_commands.sh NVKV_CLI OUT
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 NVKV_CLI OUT" >&2; exit 2; }
cli=$1
out=$2

# roff: a backslash is \e; a line starting with '.' or an apostrophe would be a request.
escape() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }

commands=$("$cli" --help | awk '/^Commands:/ { in_list = 1; next }
                                 in_list && NF == 0 { exit }
                                 in_list && $1 != "help" { print $1 }')
[ -n "$commands" ] || { echo "$0: no commands in '$cli --help'" >&2; exit 1; }

{
  echo "[COMMANDS IN DETAIL]"
  for command in $commands; do
    echo ".SS \"$command\""
    echo ".nf"
    "$cli" "$command" --help | awk '/^Options of every command:/ { exit } { print }' | escape
    echo ".fi"
  done
  echo "[SEE ALSO]"
  echo ".BR nvkv-ycsb (1),"
  echo ".BR nvkv-iobench (1)."
  echo "The library's API is described in its headers, <nvkv/db.h> and <nvkv/nvkv_c.h>."
} > "$out.tmp"
mv "$out.tmp" "$out"
