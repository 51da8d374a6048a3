// A writer process killed mid-write (kill -9), for tests of what an Open finds afterwards.
#ifndef NVKV_TESTS_TESTUTIL_KILLED_WRITER_H_
#define NVKV_TESTS_TESTUTIL_KILLED_WRITER_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace nvkv::testing {

// Forks a child that runs `writer(ack_fd)`: it writes, and after each acknowledged write sends
// that write's index (a uint32_t, 0, 1, ...) to `ack_fd`; it never returns (on an error it
// _Exits). Once `wanted` writes are acknowledged the child is killed with SIGKILL and reaped.
// Returns the index of the last write acknowledged (those still in the pipe count: the kill may
// come after them), or an error when the child could not start or ended by itself.
absl::StatusOr<int64_t> KillWriterAfter(uint32_t wanted,
                                        absl::FunctionRef<void(int ack_fd)> writer);

}  // namespace nvkv::testing

#endif  // NVKV_TESTS_TESTUTIL_KILLED_WRITER_H_
