// Device I/O shorthands for tests: blocking pattern writes and read-backs, requests for zone
// commands, and a request with its own pool buffer that a test can keep in flight across Submit,
// Reap or a power cut.
#ifndef NVKV_TESTS_TESTUTIL_DEVICE_IO_H_
#define NVKV_TESTS_TESTUTIL_DEVICE_IO_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/device.h"

namespace nvkv::testing {

// Writes pattern `seed` (block_pattern.h) to `lba_count` blocks at `lba` and waits for it.
absl::Status WritePattern(storage::Device& device, uint64_t lba, uint32_t lba_count,
                          uint64_t seed, bool fua = false);

// Reads `lba_count` blocks at `lba` and waits for them.
absl::StatusOr<std::vector<uint8_t>> ReadBack(storage::Device& device, uint64_t lba,
                                              uint32_t lba_count);

// A request of `op` at `lba` (for a zone op, the zone's first block), not yet enqueued.
storage::IoRequest MakeRequest(storage::IoOp op, uint64_t lba, uint32_t lba_count = 0,
                               const storage::Buffer& buffer = {});

// One asynchronous request and the pool buffer it uses (a page when the blocks fit one, else a
// chunk). Writes and zone appends carry pattern `seed`; reads start filled with 0xAB. `device`
// is borrowed and must outlive this object; the buffer goes back to its pool on destruction, so
// destroy this only after its callback ran (or the device is about to be destroyed anyway).
class AsyncIo {
 public:
  AsyncIo(storage::Device& device, storage::IoOp op, uint64_t lba, uint32_t lba_count,
          uint64_t seed = 0, bool fua = false);
  ~AsyncIo();
  AsyncIo(const AsyncIo&) = delete;
  AsyncIo& operator=(const AsyncIo&) = delete;

  absl::Status Enqueue() { return device_->Enqueue(&request_); }
  bool done() const { return done_; }
  const absl::Status& status() const { return request_.status; }
  uint64_t appended_lba() const { return request_.appended_lba; }  // a zone append's
  // The buffer's first `bytes` bytes (for reads: what the device delivered).
  std::vector<uint8_t> Data(size_t bytes) const;

 private:
  static void OnDone(storage::IoRequest* request);

  storage::Device* device_;
  storage::IoRequest request_;
  bool chunk_ = false;
  bool done_ = false;
};

}  // namespace nvkv::testing

#endif  // NVKV_TESTS_TESTUTIL_DEVICE_IO_H_
