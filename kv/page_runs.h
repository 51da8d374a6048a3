// Page runs: writing many pages through one pool buffer, consecutive pages in one command.
// The one mechanism for every writer of pages outside the log writer: a checkpoint, the segment
// map while the writer is not running, a store's growth and a large record.
#ifndef NVKV_KV_PAGE_RUNS_H_
#define NVKV_KV_PAGE_RUNS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

// Gathers pages in `buffer` (a chunk, or as little as one page buffer) and writes them through
// `device`, synchronously: consecutive pages as one write command of up to the buffer's size. A
// page that does not follow the ones gathered, or a full buffer, sends them first. Every write
// has FUA when `fua`. After a failure nothing more is written, and Finish returns it.
class PageRunWriter {
 public:
  // `buffer` must outlive the writer.
  PageRunWriter(storage::Device& device, const StoreShape& shape, const storage::Buffer& buffer,
                bool fua)
      : device_(device),
        shape_(shape),
        buffer_(buffer),
        capacity_(buffer.bytes / shape.geometry.page_bytes),
        fua_(fua) {}
  PageRunWriter(const PageRunWriter&) = delete;
  PageRunWriter& operator=(const PageRunWriter&) = delete;

  // Where the bytes of page `page_number` go: the caller fills them before the next call.
  uint8_t* Room(uint64_t page_number) {
    if (pages_ == capacity_ || (pages_ > 0 && page_number != first_ + pages_)) WriteRun();
    if (pages_ == 0) first_ = page_number;
    return buffer_.data + size_t{pages_++} * shape_.geometry.page_bytes;
  }

  // False once a write failed (nothing more is written).
  bool ok() const { return status_.ok(); }
  // Writes the pages gathered; the first failure of any write.
  absl::Status Finish() {
    WriteRun();
    return status_;
  }

 private:
  void WriteRun() {
    if (pages_ > 0 && status_.ok()) {
      status_ = storage::WriteBlocks(device_, shape_.LbaOf(first_), pages_ * shape_.blocks_per_page,
                                     buffer_, fua_);
    }
    pages_ = 0;
  }

  storage::Device& device_;
  const StoreShape& shape_;
  const storage::Buffer& buffer_;
  const uint32_t capacity_;  // pages the buffer holds
  const bool fua_;
  uint64_t first_ = 0;   // page number of the buffer's first page
  uint32_t pages_ = 0;   // pages gathered, not yet written
  absl::Status status_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_PAGE_RUNS_H_
