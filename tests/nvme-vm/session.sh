#!/bin/sh
# A store session driven from a shell, one process per step, as a user would:
#
#     session.sh TOOL STORE [OTHER]
#
# TOOL is nvkv-cli or c_api_session (tests/api/c_api_session.c, the same commands over the C
# API). Both are called as "TOOL COMMAND PATH [KEY [VALUE]]" with the commands format, put, get,
# delete and check; `get` prints the value. STORE is a file, a block device or an NVMe generic
# device; OTHER, if given, is another node of the same store (the block device of STORE's
# namespace) through which the session reopens it halfway, so a store written through one
# backend is read through the other. The session empties STORE's first 128 KiB before `format`
# (through OTHER when STORE is a character device), so `format` finds no store.
#
# With NVKV_TEST_ZONED=1 (tests/nvme-vm's zns configuration, 4 zones open at most) the session
# checks that `format` with the default 4 shards is refused saying how many the namespace takes;
# nvkv-cli then runs the session on the generic node with --shards 2 (the block node of a zoned
# namespace takes no store), and checks that `info` shows the zones.
#
# Runs under busybox sh in the tests/nvme-vm guest, and under any POSIX sh on a host (CTest runs
# it on a file). Prints each step; exits 1 at the first step that does not do what it should.
set -u

[ $# -ge 2 ] || { echo "usage: session.sh TOOL STORE [OTHER]" >&2; exit 2; }
tool=$1
store=$2
other=${3:-$2}
name=$(basename "$tool")

step() { echo "session($name): $*"; }
fail() {
  echo "session($name): FAILED: $*"
  exit 1
}

# The arguments, each cut to 40 characters.
show() {
  for arg in "$@"; do printf ' %.40s' "$arg"; done
}

# Calls TOOL as "COMMAND PATH [ARGS]"; nvkv-cli takes its store as --db PATH and calls delete
# `del`, so its calls are rewritten.
cli_options=""  # nvkv-cli's global options (the zoned session's --shards)
invoke() {
  if [ "$name" = nvkv-cli ]; then
    command=$1
    path=$2
    shift 2
    [ "$command" = delete ] && command=del
    # shellcheck disable=SC2086  # cli_options is split into words on purpose
    "$tool" $cli_options --db "$path" "$command" "$@"
  else
    "$tool" "$@"
  fi
}

# Runs TOOL with the arguments; its stdout goes to $out, its exit status to $rc.
run() {
  step "$name$(show "$@")"
  out=$(invoke "$@")
  rc=$?
}

expect_ok() {
  run "$@"
  [ "$rc" -eq 0 ] || fail "$name$(show "$@") exited $rc"
}

expect_value() {
  want=$1
  shift
  expect_ok "$@"
  [ "$out" = "$want" ] || fail "$name$(show "$@") printed '$(show "$out")', want '$(show "$want")'"
}

expect_absent() {
  run "$@"
  [ "$rc" -ne 0 ] || fail "$name$(show "$@") found '$(show "$out")' for a deleted key"
}

# Empties the first 128 KiB of the store, where its superblocks are.
wipe() {
  if [ -c "$store" ]; then
    [ -b "$other" ] || fail "$store is a character device: give its block device as OTHER to wipe it"
    target=$other
  elif [ -b "$store" ]; then
    target=$store
  else
    rm -f "$store"
    return
  fi
  step "wiping the first 128 KiB of $target"
  dd if=/dev/zero of="$target" bs=65536 count=2 conv=fsync 2> /dev/null || fail "dd to $target"
}

if [ "${NVKV_TEST_ZONED:-0}" = 1 ]; then
  for node in "$store" "$other"; do
    step "zoned namespace: format $node with the default 4 shards must be refused"
    invoke format "$node" > /dev/null 2> "${TMPDIR:-/tmp}/session.err"
    rc=$?
    cat "${TMPDIR:-/tmp}/session.err"
    [ "$rc" -ne 0 ] || fail "format succeeded on a zoned namespace ($node)"
    grep -qi zoned "${TMPDIR:-/tmp}/session.err" || fail "format's error does not say 'zoned'"
    if [ "$node" = "$store" ]; then
      grep -q "open with at most 2 shards" "${TMPDIR:-/tmp}/session.err" ||
        fail "the refusal does not say how many shards fit"
    fi
  done
  if [ "$name" = nvkv-cli ]; then
    # `info` reports the device and its zones although no store opens; the zone model and the
    # zones' states come through the generic node (STORE), and the block node names it.
    step "zoned namespace: info $store shows the zones"
    "$tool" --db "$store" info > "${TMPDIR:-/tmp}/session.out" 2> /dev/null
    cat "${TMPDIR:-/tmp}/session.out"
    grep -q '^zones .* zones of .* writable each; at most' "${TMPDIR:-/tmp}/session.out" ||
      fail "info shows no zone model"
    grep -q '^zone states .* empty, .* open, .* closed, .* full' \
      "${TMPDIR:-/tmp}/session.out" || fail "info shows no zone states"
    if [ "$other" != "$store" ]; then
      step "zoned namespace: info $other names the generic node"
      "$tool" --db "$other" info > "${TMPDIR:-/tmp}/session.out" 2> /dev/null
      cat "${TMPDIR:-/tmp}/session.out"
      grep -q "open its NVMe generic node $store instead" "${TMPDIR:-/tmp}/session.out" ||
        fail "info through the block node does not name $store"
    fi
  fi
  if [ "$name" != nvkv-cli ]; then
    step "OK (refused)"
    exit 0
  fi
  # The store itself, on the generic node only.
  cli_options="--shards 2"
  other=$store
  zoned_store=1
fi

# 6,000 bytes: a value larger than one 4 KiB page.
long=$(i=0; while [ $i -lt 100 ]; do printf '%s' 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX; i=$((i + 1)); done)

[ "${zoned_store:-0}" = 1 ] || wipe  # a zoned namespace is blank here; no block node to wipe
expect_ok format "$store"
expect_ok put "$store" alpha 1
expect_ok put "$store" beta two
expect_ok put "$store" gamma "$long"
expect_value 1 get "$store" alpha
expect_ok delete "$store" beta
expect_absent get "$store" beta
expect_ok check "$store"
# Reopened through the other node (the same one when OTHER was not given).
expect_value "$long" get "$other" gamma
expect_ok put "$other" delta 4
expect_ok put "$other" alpha one
expect_absent get "$other" beta
expect_value 4 get "$store" delta
expect_value one get "$store" alpha
expect_value "$long" get "$store" gamma
expect_ok check "$store"
if [ "${zoned_store:-0}" = 1 ]; then
  # The store's zones: how many hold it, how many it keeps active within its budget.
  step "zoned store: info $store shows the zones in use"
  invoke info "$store" > "${TMPDIR:-/tmp}/session.out" 2> /dev/null
  cat "${TMPDIR:-/tmp}/session.out"
  grep -q '^zones in use .* hold the store, .*active' \
    "${TMPDIR:-/tmp}/session.out" || fail "info on the store shows no zones in use"
fi
[ -f "$store" ] && rm -f "$store"
step "OK"
