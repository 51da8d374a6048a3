# Sourced by the benchmark scripts: runs a command inside a fresh memory cgroup, created below
# the calling shell's own (v1 memory controller: memory.limit_in_bytes; v2: memory.max).
#
#   memory_cgroup_find   sets memory_cgroup_base and memory_cgroup_limit_file; returns 1, with
#                        a message, when there is no memory cgroup to create one under
#   in_memory_cgroup LIMIT COMMAND...
#                        runs COMMAND limited to LIMIT (bytes, or with a k, m or g suffix) and
#                        returns its status; LIMIT "none" runs it as it is

memory_cgroup_base=""
memory_cgroup_limit_file=""

to_bytes() {
  awk -v s="$1" 'BEGIN { n = s + 0; u = tolower(substr(s, length(s)));
    if (u == "k") n *= 1024; else if (u == "m") n *= 1048576; else if (u == "g") n *= 1073741824;
    printf "%d\n", n }'
}

memory_cgroup_find() {
  local v1 v2
  if v1=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup) && [[ -n $v1 ]] &&
     [[ -d /sys/fs/cgroup/memory$v1 ]]; then
    memory_cgroup_base=/sys/fs/cgroup/memory$v1
    memory_cgroup_limit_file=memory.limit_in_bytes
  elif v2=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup) &&
       [[ -f /sys/fs/cgroup$v2/cgroup.controllers ]]; then
    memory_cgroup_base=/sys/fs/cgroup$v2
    memory_cgroup_limit_file=memory.max
  else
    echo "no memory cgroup to limit runs with" >&2
    return 1
  fi
}

in_memory_cgroup() {
  local limit=$1
  shift
  if [[ $limit == none ]]; then
    "$@"
    return
  fi
  if [[ -z $memory_cgroup_base ]]; then memory_cgroup_find || return 1; fi
  local cg=$memory_cgroup_base/nvkv-bench-$$
  mkdir -p "$cg"
  to_bytes "$limit" > "$cg/$memory_cgroup_limit_file"
  local status=0
  sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$cg" "$@" || status=$?
  rmdir "$cg" 2>/dev/null || true
  return $status
}
