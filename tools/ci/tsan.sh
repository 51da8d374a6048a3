#!/usr/bin/env bash
# ThreadSanitizer over the concurrent tests (issue 9, item 10; tests/tsan/README.md says how
# TSan is made to see Debian's uninstrumented Abseil, and what it cannot see).
#   tools/ci/tsan.sh [build-dir]     default build/tsan
# clang 14 (GCC 12's TSan would do as well today): CI installs clang for tools/ci/clang.sh
# anyway, and GCC under -Werror refuses any std::atomic_thread_fence with -fsanitize=thread
# (-Wtsan), e.g. liburing's io_uring_smp_mb, should nvkv ever call it. Needs the Debian packages
# clang and libclang-rt-14-dev (the TSan runtime).
# Builds only the test binaries below (RelWithDebInfo: -O2 for speed, -g1 for the reports), runs
# each with halt_on_error=1, as many at once as there are cores, and fails on any report. In CI
# on 2 cores the build took 2.2 min and the binaries one after another 5.8 min (344 s, of which
# checkpoint_test 98 and segment_summary_test 89 before they were cut to their concurrent tests).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build/tsan}
root=$PWD

# Each binary and the gtest filter it runs with ('*': all of it).
tests=(
  "tsan_annotations_test *"       # the Abseil wrappers order what they must
  "stress_test *"                 # mixed writers, readers, deletes, flush races
  "compaction_test *"             # compaction under concurrent overwrites and reads
  "read_queue_test *"             # per-thread read queues, threads exiting, async reads
  "close_test *"                  # Close racing compaction and slow reads
  "capacity_test *"               # writers waiting for page buffers and free segments
  "data_safety_test *"            # compaction and readers around damaged pages
  "segment_table_test *"          # WaitForFree across threads
  "fault_device_power_cut_test *" # power cut while other threads write
  "mem_device_test *"             # MemDevice from several threads
  "limits_test *"                 # a reader thread under a low locked-memory limit
  # The public API from several threads. Not SegmentsAreSizedToTheStoreUnlessSet: it opens
  # stores of many sizes one after another, one thread; 25 s of the file's 50 under TSan.
  "db_test -DBTest.SegmentsAreSizedToTheStoreUnlessSet"
  # The engine with its writer and compaction threads behind every call. Not
  # MatchesMapModelAcrossReopens: a long single-threaded model check, 146 s of the file's
  # 238 under TSan on the project's shared machine. Not the runs without a record cache
  # either: the cache is where reads and writes now meet (the default and a tiny one run).
  "engine_test -*MatchesMapModelAcrossReopens*:*NoCache*"
  "cache_test *"                  # readers racing writers of the same keys through the cache
  "async_write_test *"            # asynchronous writes: the writer thread signals the pollers
  "event_fd_test *"               # a signal from another thread ends a blocking reap
  "segment_map_test *"            # the writer thread announcing segments to waiting heads
  # Heads queueing summaries, the writer writing and mapping them. Not the recovery passes nor
  # the summary format's own tests: one thread reads the log there (54 s of the file's 89).
  "segment_summary_test -SegmentSummaryTest.*:*InPasses*:*EachPass*:*PassesEarly*:*FirstOfThem*:*StartsAgain*:*ReadsOtherwise*:*OtherMode*"
  # Checkpoints taken while the writer, compaction and clients run, and Close writing one after
  # they stop. Not the ones that only read a checkpoint at Open (one thread).
  "checkpoint_test *CleanCloseLeaves*:*WhileRunning*:*WritesGoOn*:*CloseRightAfter*:*AsTheLogGrows*:*HeadsGoOn*:*VictimFreed*:*SealsTheHeads*:*CutWhileWritesGoOn*"
)

# Line tables only (-g1): all TSan's reports need, and cheaper to compile than -g.
CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DNVKV_TSAN=ON -DNVKV_BUILD_BENCH=OFF >/dev/null
targets=(tsan_race_reporter)
for t in "${tests[@]}"; do targets+=("${t%% *}"); done
ninja -C "$dir" -j "$(nproc)" "${targets[@]}"

# Test files go where the other builds' tests put them (NVKV_TEST_DIR, else the build
# directory): they need O_DIRECT, which tmpfs refuses on older kernels (/tmp may be tmpfs).
parent=$(realpath -m "${NVKV_TEST_DIR:-$dir}")
mkdir -p "$parent"
data=$(mktemp -d "$parent/tsan-data.XXXXXX")
trap 'rm -rf "$data"' EXIT
chmod 755 "$data"  # limits_test's child process runs as nobody and opens a store in here
export NVKV_TEST_DIR=$data
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan/suppressions.txt"

# The wrappers must not hide a real race: this program has one, and TSan must say so.
if "$dir/tests/tsan_race_reporter" >"$data/race.log" 2>&1 ||
   ! grep -q "WARNING: ThreadSanitizer: data race" "$data/race.log"; then
  cat "$data/race.log" >&2
  echo "tsan.sh: TSan missed the race in tests/tsan/race_reporter.cc" >&2
  exit 1
fi

# As many binaries at once as there are cores, the longest first (the list's order otherwise).
# A failure's log is printed once every binary started has ended.
longest_first=("checkpoint_test" "segment_summary_test" "compaction_test" "engine_test")
ordered=()
for name in "${longest_first[@]}"; do
  for t in "${tests[@]}"; do [[ ${t%% *} == "$name" ]] && ordered+=("$t"); done
done
for t in "${tests[@]}"; do
  [[ " ${longest_first[*]} " == *" ${t%% *} "* ]] || ordered+=("$t")
done
run_one() {
  local binary=${1%% *} filter=${1#* } start=$SECONDS
  if "$dir/tests/$binary" --gtest_filter="$filter" >"$data/$binary.log" 2>&1; then
    echo "tsan.sh: $binary passed ($((SECONDS - start)) s)"
  else
    touch "$data/$binary.failed"
    echo "tsan.sh: $binary failed ($((SECONDS - start)) s)"
  fi
}
for t in "${ordered[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
  run_one "$t" &
done
wait
failed=0
for t in "${ordered[@]}"; do
  binary=${t%% *}
  if [[ -e $data/$binary.failed ]]; then
    cat "$data/$binary.log" >&2
    echo "tsan.sh: $binary failed (a ThreadSanitizer report, or a test failure, above)" >&2
    failed=1
  fi
done
exit $failed
